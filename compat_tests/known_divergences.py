"""Every known divergence of a peer from cuDNN's semantics, with its reason: the suite's ledger.

A test that meets one of these marks itself ``xfail(strict=True)`` with the reason, so the ledger stays
true both ways: a divergence that disappears (a peer fixed it) turns the test red until its entry goes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Divergence:
    peer: str
    area: str  # what the test checks, e.g. "nan_propagation"
    modes: tuple[str, ...]
    reason: str


KNOWN: tuple[Divergence, ...] = (
    Divergence(
        peer="onnxruntime",
        area="nan_propagation",
        modes=("relu", "lstm", "gru", "classic_gru"),
        reason="onnxruntime 1.31's CPU Relu and Sigmoid activations map NaN to a finite value, so a NaN "
               "input (or an inf that turns into NaN in the next GEMM) does not reach the outputs; only "
               "its Tanh propagates NaN. The reference, PyTorch and cuDNN's documented math propagate it.",
    ),
    Divergence(
        peer="keras",
        area="padded_nan_gradients",
        modes=("relu", "tanh", "lstm", "gru", "classic_gru"),
        reason="Keras 3.15 (torch backend) runs every step of a masked sequence, padded ones included, and "
               "keeps the old state with a select; autograd sends a zero gradient into the padded step, "
               "which meets the step's own derivatives there, so NaN in padded inputs (never read by cuDNN, "
               "nor by PyTorch's packed sequences) turns into NaN gradients of the weights and the padded "
               "inputs (0 * NaN). Finite padding is handled exactly (test_backward.py).",
    ),
    Divergence(
        peer="keras",
        area="float64_precision",
        modes=("relu", "tanh", "classic_gru"),
        reason="Keras 3.15 computes keras.ops.matmul of two float64 tensors in float32 on every backend but "
               "TensorFlow (dtypes.result_type maps 64-bit to 32-bit dtypes, JAX's default), and the generic "
               "cell loop steps through that op: SimpleRNN always takes it, GRU(reset_after=False) too (the "
               "torch backend's fused GRU knows only reset_after=True), so they are float32-accurate in "
               "float64 (errors ~1e-7 against ~1e-16).",
    ),
    Divergence(
        peer="keras",
        area="float64_precision_masked",
        modes=("relu", "tanh", "lstm", "gru", "classic_gru"),
        reason="As float64_precision: with a mask (sequence lengths) LSTM and GRU leave their torch "
               "fallback, which stays float64, for the generic cell loop over keras.ops.matmul, so they "
               "turn float32-accurate too.",
    ),
)


# The areas whose tests run every peer, so that a plugin peer may declare a divergence in them
# (``Peer.known_divergences``); the others test one built-in peer.
PEER_AREAS = {
    "nan_propagation": "test_forward.py::test_nan_input_propagates_to_its_own_sequence_only",
    "padded_nan_gradients": "test_backward.py::test_padded_steps_give_and_receive_no_gradient[nan]",
}
WHOLE_PEER_AREAS = ("padded_nan_gradients",)  # tests that draw the mode: a divergence of every mode or none

# The divergences plugin peers declare for themselves, by peer name (registered and checked as they load,
# in compat_tests.peers.plugins): the ledger is KNOWN and these.
_DECLARED: dict[str, tuple[Divergence, ...]] = {}


def declare(peer: str, divergences: tuple[Divergence, ...]) -> None:
    """Register ``divergences`` (already checked, each naming ``peer``) as ``peer``'s own; replaces any before."""
    if divergences:
        _DECLARED[peer] = tuple(divergences)
    else:
        _DECLARED.pop(peer, None)


def ledger() -> tuple[Divergence, ...]:
    """The built-in ledger, then the divergences declared by plugin peers loaded in this process."""
    return (*KNOWN, *(d for declared in _DECLARED.values() for d in declared))


def declared_problem(divergences: object, peer: str, modes: tuple[str, ...]) -> str | None:
    """Why ``divergences`` cannot be what ``peer`` (which runs ``modes``) declares, or ``None``: a tuple or
    list of :class:`Divergence`, each naming ``peer`` itself, one of :data:`PEER_AREAS`, some of ``modes``
    and a reason, at most one per area."""
    if not isinstance(divergences, (tuple, list)):
        return (f"known_divergences must be a tuple of compat_tests.known_divergences.Divergence, "
                f"got {type(divergences).__name__}")
    seen = set()
    for k, d in enumerate(divergences):
        what = f"known_divergences[{k}]"
        if not isinstance(d, Divergence):
            return f"{what} must be a compat_tests.known_divergences.Divergence, got {d!r:.80}"
        if d.peer != peer:
            return f"{what} names peer {d.peer!r}: a peer may declare only its own divergences ({peer!r})"
        if d.area not in PEER_AREAS:
            return f"{what} has area {d.area!r}, expecting one of {', '.join(PEER_AREAS)}"
        if not isinstance(d.modes, tuple) or not d.modes or not set(d.modes) <= set(modes):
            return f"{what} has modes {d.modes!r}, expecting a non-empty tuple of the peer's modes {modes}"
        if d.area in WHOLE_PEER_AREAS and set(d.modes) != set(modes):
            return (f"{what}: area {d.area!r} must name every mode the peer runs {modes} (its test draws the "
                    f"mode, so it can expect the divergence only of the peer as a whole)")
        if not isinstance(d.reason, str) or not d.reason.strip():
            return f"{what} has no reason: every divergence says what the peer does instead"
        if d.area in seen:
            return f"{what} declares area {d.area!r} a second time"
        seen.add(d.area)
    return None


def known(peer: str, area: str, mode: str) -> Divergence | None:
    for d in ledger():
        if d.peer == peer and d.area == area and mode in d.modes:
            return d
    return None
