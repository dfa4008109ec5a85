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
)


def known(peer: str, area: str, mode: str) -> Divergence | None:
    for d in KNOWN:
        if d.peer == peer and d.area == area and mode in d.modes:
            return d
    return None
