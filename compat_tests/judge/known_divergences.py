"""Every known divergence of a peer from cuDNN's semantics, with its reason: the suite's ledger.

A test that meets one of these marks itself ``xfail(strict=True)`` with the reason, so the ledger stays
true both ways: a divergence that disappears (a peer fixed it) turns the test red until its entry goes.
``KNOWN`` is the built-in peers'; any other peer carries its own (``Peer.known_divergences``, in one of
``PEER_AREAS``), checked by ``peer_exceptions.problem`` as its plugin loads.
"""

from __future__ import annotations

from . import peer_exceptions
from .peer_exceptions import AREAS, PEER_AREAS, WHOLE_PEER_AREAS, Divergence  # noqa: F401 (re-exported)

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


def divergences_of(peer) -> tuple[Divergence, ...]:
    """``peer``'s known divergences (a peer, or a name: the registered peer of that name): the built-in
    ledger's for its name, then those the peer carries (``Peer.known_divergences``)."""
    from ..peers import exceptions_of

    name = peer_exceptions.name_of(peer)
    return (*(d for d in KNOWN if d.peer == name), *exceptions_of(peer, "known_divergences"))


def ledger() -> tuple[Divergence, ...]:
    """The built-in ledger, then the divergences the registered peers carry (plugin peers loaded here)."""
    from ..peers import declared_exceptions

    return (*KNOWN, *declared_exceptions("known_divergences"))


def known(peer, area: str, mode: str) -> Divergence | None:
    """The divergence of ``peer`` (a peer, or a name) its test of ``area`` in ``mode`` is to expect, if any."""
    for d in divergences_of(peer):
        if d.area == area and mode in d.modes:
            return d
    return None
