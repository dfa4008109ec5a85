"""One comparison: a peer's forward or backward pass of a config against the float64 truth, judged by
the tolerance policy."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import numpy as np

from . import tolerances
from .conditioning import TF32_EPS, sensitivity
from ..config import Case, GradOutputs, Outputs, RNNConfig, make_case
from ..run import ground_truth, ground_truth_backward, ground_truth_both
from .metrics import error_stats, tf32_share
from reference import precision, tf32
from reference.spec.cell import tf32_variant
from ..peers import Peer
from ..peers.plugins import SPECS


@dataclass(frozen=True)
class Comparison:
    peer: str
    cfg: RNNConfig
    verdicts: dict[str, tolerances.Verdict]
    backward: bool = False

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts.values())

    def explain(self) -> str:
        what = "gradients" if self.backward else "forward"
        lines = [f"{self.peer} vs float64 reference ({what}) on {self.cfg.short()}",
                 f"  reproduce: {reproduce_command(self.peer, self.cfg, self.backward)}"]
        lines += ["  " + v.explain(q) for q, v in self.verdicts.items()]
        return "\n".join(lines)


def reproduce_command(peer: str, cfg: RNNConfig, backward: bool = False) -> str:
    """The one-line shell command that re-runs this comparison (loading the peer's plugin, if any)."""
    plugin = f" --plugin {shlex.quote(SPECS[peer])}" if peer in SPECS else ""
    return (f"rnn-compat check{plugin} --peer {shlex.quote(peer)}{' --backward' if backward else ''} "
            f"--config {shlex.quote(cfg.to_json())}")


def judge_results(peer, cfg: RNNConfig, actual: NamedTuple, truth: NamedTuple, kappa: dict[str, float],
                  backward: bool = False, forward_overflows: bool = False, *,
                  available_only: bool = False, tf32_fit: FirstStepFit | None = None) -> Comparison:
    """Judge every quantity of ``truth`` (``Outputs`` or ``GradOutputs``) against ``actual``'s, by the budgets
    of ``peer`` (a peer, whose own overrides count, or a peer's name). ``available_only``: the quantities
    ``actual`` lacks (``None``: a model file's framework may not give every state) are left out, not refused.
    ``tf32_fit``: a TF32 result's first step against the TF32 truths (:func:`first_step_fit`), judged with its
    output."""
    peer_name = peer if isinstance(peer, str) else peer.name
    verdicts = {}
    for name, expected in truth._asdict().items():
        if expected is None:
            continue
        got = getattr(actual, name)
        if got is None and available_only:
            continue
        if got is None or got.shape != expected.shape or got.dtype != np.dtype(cfg.dtype):
            raise AssertionError(f"{peer_name} returned {name} of {None if got is None else (got.shape, got.dtype)}, "
                                 f"expected {expected.shape} {cfg.dtype} for {cfg.short()}")
        stats = error_stats(got, expected, time_axis=_time_axis(cfg, name))
        verdicts[name] = tolerances.judge(peer, cfg.dtype, name, stats, kappa.get(name, 1.0),
                                          steps=cfg.seq_len * cfg.batch, forward_overflows=forward_overflows,
                                          tf32_fit=tf32_fit if name == "output" else None)
    return Comparison(peer_name, cfg, verdicts, backward)


SEQUENCES = ("output", "d_input")  # quantities with a time axis; the others are states or parameters


def _time_axis(cfg: RNNConfig, quantity: str) -> int | None:
    return (0 if cfg.time_major else 1) if quantity in SEQUENCES else None


# The sets of a first step's GEMMs a TF32 result may have run on TF32 operands: cuDNN's default math and PyTorch's
# allow_tf32 permit TF32 without forcing it, and the input GEMM (one for every step) and the recurrent ones (one a
# step) may run on different kernels. A peer with ``tf32_in_every_gemm`` (the reference's TF32 math) has the first.
TF32_GEMM_SETS = (("input", "recurrent"), ("input",), ("recurrent",), ())


class FirstStepFit(NamedTuple):
    """A TF32 result's first step against the TF32 truths: its smallest ``share`` of TF32's cost from the truth of
    TF32 in the ``gemms`` (a set of :data:`TF32_GEMM_SETS`) by ``rule`` (one of ``reference.tf32.RULES``; ``None``
    where no GEMM is in TF32)."""

    share: float
    gemms: tuple[str, ...]
    rule: str | None


def first_step_fit(peer, cfg: RNNConfig, case: Case, output: np.ndarray | None) -> FirstStepFit | None:
    """How far the first time step of a TF32 result's ``output`` (``cfg``'s layout, float32) is from the truth of
    TF32 as ``peer`` may compute it, as a share of what TF32 costs there (``metrics.tf32_share``;
    ``tolerances.TF32_FIRST_STEP_SHARE``), the truth that fits best. ``peer`` with ``Peer.tf32_in_every_gemm``
    (the reference's TF32 math): every GEMM by the decided rule (``precision.TF32_ROUNDING``); otherwise (a GPU's
    default math, which permits TF32 without forcing it) each set of :data:`TF32_GEMM_SETS`, by the decided rule
    or, until a GPU has settled it (``precision.TF32_ROUNDING_SETTLED``), by any candidate rule.

    The first step is the forward direction's step 0, whose GEMMs read only given values (the input, the initial
    state, the weights), so its TF32 operands are the truth's bit for bit. ``None`` for a result that is no TF32
    result (a peer that does not read TF32 (:func:`reads_tf32`), another dtype than float32, no output), where
    TF32 costs too little there to tell, and where an operand of that step is computed inside the pass (a stack:
    the layers above the first read the lower layers' outputs; a projection reads ``o * tanh(c)``; the textbook
    GRU's candidate ``r * h``), since a computed operand near a TF32 boundary may round the other way than in the truth
    (``tolerances``, ``TF32_FIRST_STEP_SHARE``)."""
    if output is None or not _tf32_applies(peer, cfg):
        return None
    if cfg.num_layers > 1 or cfg.num_proj is not None or (cfg.mode == "classic_gru" and case.h0 is not None):
        return None
    from ..peers import registered

    step_cfg = cfg.with_(seq_len=1, lengths=None, packed=False, padding_fill=0.0)

    def first(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else (a[:1] if cfg.time_major else a[:, :1])

    step_case = case._replace(x=first(case.x), dy=first(case.dy), lengths=None)

    truths: dict[tuple, np.ndarray] = {}

    def truth(gemms: tuple[str, ...], rule: str | None) -> np.ndarray:
        if (gemms, rule) not in truths:
            with tf32_variant(gemms, rule):
                y = ground_truth(step_cfg, step_case, math_type="tf32").output
            truths[gemms, rule] = (y[0] if cfg.time_major else y[:, 0])[:, :cfg.state_width]
        return truths[gemms, rule]

    decided = precision.TF32_ROUNDING
    if getattr(registered(peer), "tf32_in_every_gemm", False):
        candidates = [(TF32_GEMM_SETS[0], decided)]
    else:
        rules = [decided] if precision.TF32_ROUNDING_SETTLED else [decided, *(r for r in tf32.RULES if r != decided)]
        candidates = [(gemms, rule) for gemms in TF32_GEMM_SETS if gemms for rule in rules] + [((), None)]
    fma, full = truth((), None), truth(TF32_GEMM_SETS[0], decided)
    got = (output[0] if cfg.time_major else output[:, 0])[:, :cfg.state_width]
    if tf32_share(got, fma, full, tolerances.TF32_LEAST_COST) is None:
        return None
    fits = [FirstStepFit(tf32_share(got, fma, full, tolerances.TF32_LEAST_COST, fitted=truth(gemms, rule)), gemms, rule)
            for gemms, rule in candidates]
    return min(fits, key=lambda fit: fit.share)  # (the first of equals: the decided rule, the most GEMMs)


def compare_peer(peer: Peer, cfg: RNNConfig, case: Case | None = None, backward: bool = False, *,
                 dropout: float = 0.0, masks: tuple = ()) -> Comparison:
    """Run ``peer`` on ``cfg`` (its forward pass, or with ``backward`` its gradients) and judge every
    quantity against the float64 truth; ``dropout`` and ``masks`` (the keep-masks the peer's training pass
    drew, in ``cfg``'s layout) make it the truth of that training pass."""
    case = case if case is not None else make_case(cfg)
    plain = cfg.with_(padding_fill=0.0)  # the numbers judged; the peer's fill is checked exactly (unfilled)
    evaluate = partial(ground_truth_backward if backward else ground_truth, dropout=dropout, masks=masks)
    if backward:  # the gradients and the outputs of the one forward pass they need (the outputs: for overflow)
        forward_truth, truth = ground_truth_both(plain, case, dropout=dropout, masks=masks)
    else:
        truth = evaluate(plain, case)
    with np.errstate(all="ignore"):
        actual = peer.backward(cfg, case) if backward else unfilled(peer, cfg, peer.forward(cfg, case))
    overflows = backward and _overflows(forward_truth, np.dtype(cfg.dtype))
    fit = None if backward or actual is None else first_step_fit(peer, plain, case, actual.output)
    return judge_results(peer, cfg, actual, truth, conditioning(peer, plain, case, truth, evaluate), backward,
                         overflows, tf32_fit=fit)


def conditioning(peer, cfg: RNNConfig, case: Case, truth: NamedTuple, evaluate=ground_truth) -> dict[str, float]:
    """The condition estimates ``peer``'s results of ``cfg`` are judged by (``conditioning.sensitivity`` of
    ``evaluate``, whose result on ``case`` is ``truth``): at TF32's rounding size for a peer that reads TF32
    (:func:`reads_tf32`) in float32, at the dtype's otherwise."""
    rounding = TF32_EPS if _tf32_applies(peer, cfg) else None
    return sensitivity(cfg, case, truth, evaluate=evaluate, rounding=rounding)


def _tf32_applies(peer, cfg: RNNConfig) -> bool:
    """Whether ``peer``'s results of ``cfg`` may be TF32 results: it reads TF32, and the data is float32."""
    return cfg.dtype == "float32" and reads_tf32(peer)


def reads_tf32(peer) -> bool:
    """Whether ``peer`` (a peer, or results recorded under a peer's name) computes its float32 GEMMs on TF32
    operands (``Peer.tf32``; a name: the registered peer's), so that it is conditioned at TF32's rounding size."""
    from ..peers import registered

    found = registered(peer)
    return bool(found is not None and found.tf32)


def unfilled(peer, cfg: RNNConfig, outputs: Outputs | None) -> Outputs | None:
    """``outputs`` with zeros past each length where ``cfg.padding_fill`` is another value, once every such
    element is seen to hold that value exactly (NaN a NaN): the fill is a constant the caller chose, so
    nothing about it is rounding, and zeros leave the judged numbers as they are under the default padding.
    An ``AssertionError`` naming the peer, the config and the first element that differs otherwise."""
    if outputs is None or cfg.lengths is None or not cfg.fills_padding:
        return outputs
    y = outputs.output
    steps = y if cfg.time_major else np.swapaxes(y, 0, 1)
    padded = np.arange(cfg.seq_len)[:, None] >= np.asarray(cfg.lengths)[None, :]  # [T, B]
    fill = np.dtype(cfg.dtype).type(cfg.padding_fill)
    held = steps[padded]
    wrong = ~((held == fill) | (np.isnan(held) & np.isnan(fill)))
    if wrong.any():
        t, b = np.argwhere(padded)[np.argwhere(wrong)[0][0]]
        name = peer if isinstance(peer, str) else peer.name
        raise AssertionError(f"{name} wrote {float(held[wrong][0])!r} at step {t} of sequence {b} (length "
                             f"{cfg.lengths[b]}), past its length, where padding_fill {cfg.padding_fill!r} belongs "
                             f"({int(wrong.sum())} such elements), on {cfg.short()}\n"
                             f"  reproduce: {reproduce_command(name, cfg)}")
    clean = steps.copy()
    clean[padded] = 0
    return outputs._replace(output=clean if cfg.time_major else np.swapaxes(clean, 0, 1))


@dataclass(frozen=True)
class Recorded:
    """Results computed elsewhere (a GPU capture, a run with a twist) as a peer for :func:`compare_peer`,
    so they are judged exactly as a peer's own run."""

    name: str
    outputs: Outputs | None = None
    gradients: GradOutputs | None = None

    def forward(self, cfg: RNNConfig, case: Case) -> Outputs | None:
        return self.outputs

    def backward(self, cfg: RNNConfig, case: Case) -> GradOutputs | None:
        return self.gradients


def _overflows(outputs: Outputs, dtype: np.dtype) -> bool:
    limit = np.finfo(dtype).max
    return any(a is not None and not (np.abs(a) <= limit).all() for a in outputs)


def assert_peer_agrees(peer: Peer, cfg: RNNConfig) -> None:
    """``peer``'s forward pass on ``cfg``, and its gradients where it has them, each pass against the float64
    truth by the policy (the failing comparison explained)."""
    for backward in (False, True) if peer.capabilities.backward else (False,):
        comparison = compare_peer(peer, cfg, backward=backward)
        assert comparison.passed, comparison.explain()


def assert_agree_within_policy(cfg: RNNConfig, case: Case, actual: Outputs, expected: Outputs,
                               peer: str = "reference") -> None:
    """Two forward results of ``cfg`` that may differ only by rounding (another evaluation order, another
    batch split) agree within ``peer``'s budget for ``cfg.dtype``; ``expected`` is upcast to float64."""
    kappa = sensitivity(cfg, case)
    for name, want in expected._asdict().items():
        if want is None:
            continue
        stats = error_stats(getattr(actual, name), want.astype(np.float64))
        verdict = tolerances.judge(peer, cfg.dtype, name, stats, kappa[name])
        assert verdict.passed, verdict.explain(name)
