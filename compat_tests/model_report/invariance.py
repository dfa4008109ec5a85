"""Batch and repeat invariance of a peer on the model: each sample run alone against the same sample inside the
batch, and the batch run twice. Each is ``"bit for bit"``, ``"within rounding"`` (another result, but each within
the backend's budget of the float64 truth) or ``"beyond rounding"``."""

from __future__ import annotations

import numpy as np

from ..config import Case, Outputs, RNNConfig
from ..judge import tolerances
from ..judge.metrics import error_stats


def _same_bits(a: Outputs, b: Outputs) -> bool:
    return all((x is None and y is None) or (x is not None and y is not None and x.shape == y.shape
                                             and x.tobytes() == y.tobytes()) for x, y in zip(a, b))


def _within(backend: str, cfg: RNNConfig, got: Outputs, truth: Outputs, kappa: dict) -> bool:
    for name, want in truth._asdict().items():
        have = getattr(got, name)
        if want is None or have is None:
            continue
        verdict = tolerances.judge(backend, cfg.dtype, name, error_stats(have, want), kappa.get(name, 1.0))
        if not verdict.passed:
            return False
    return True


def _alone(cfg: RNNConfig, case: Case, b: int) -> tuple[RNNConfig, Case]:
    lengths = None if case.lengths is None else case.lengths[b:b + 1]
    return (cfg.with_(batch=1, lengths=None if lengths is None else (int(lengths[0]),)),
            case._replace(x=case.x[:, b:b + 1], h0=None, c0=None, lengths=lengths))


def _sample(outputs: Outputs, b: int) -> Outputs:
    return Outputs(*(None if a is None else a[:, b:b + 1] for a in outputs))


def check(backend: str, cfg: RNNConfig, case: Case, actual: Outputs, truth: Outputs, kappa: dict) -> dict:
    """``{"repeat": ..., "batch": ...}`` for the peer ``backend`` (``batch`` ``None`` for a batch of one), each as
    the module says; ``actual``: the peer's run of ``case``, ``truth`` and ``kappa`` its float64 truth's."""
    from ..peers import PEERS

    peer = PEERS[backend]

    def verdict(runs: list[tuple[Outputs, Outputs, Outputs]]) -> str:
        if all(_same_bits(got, want) for got, want, _ in runs):
            return "bit for bit"
        return "within rounding" if all(_within(backend, cfg, got, t, kappa) for got, _, t in runs) \
            else "beyond rounding"

    with np.errstate(all="ignore"):
        again = peer.forward(cfg, case)
        result = {"repeat": verdict([(again, actual, truth)]), "batch": None}
        if cfg.batch > 1:
            runs = []
            for b in range(cfg.batch):
                alone_cfg, alone_case = _alone(cfg, case, b)
                runs.append((peer.forward(alone_cfg, alone_case), _sample(actual, b), _sample(truth, b)))
            result["batch"] = verdict(runs)
    return result
