"""Judging a peer's numbers against the float64 truth: how far they are (``metrics``: errors in eps, ULPs), how
far they may be (``conditioning``: the problem's own sensitivity; ``tolerances``: the policy, a budget per
dtype and quantity, each override with its reason; ``known_divergences``: the ledger of expected failures;
``peer_exceptions``: a peer's own overrides and divergences, their types and their one check), the comparison
that applies them (``compare``), the checksums cuDNN published for its RNN sample (``published``), and the
budgets measured on a machine's peers (``calibration``)."""
