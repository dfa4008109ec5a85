"""One comparison: a peer's forward pass of a config against the float64 truth, judged by the policy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import tolerances
from .conditioning import sensitivity
from .config import Case, Outputs, RNNConfig, ground_truth, make_case
from .metrics import error_stats
from .peers import Peer


@dataclass(frozen=True)
class Comparison:
    peer: str
    cfg: RNNConfig
    verdicts: dict[str, tolerances.Verdict]

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts.values())

    def explain(self) -> str:
        lines = [f"{self.peer} vs float64 reference on {self.cfg.short()}",
                 f"  reproduce: {reproduce_command(self.peer, self.cfg)}"]
        lines += ["  " + v.explain(q) for q, v in self.verdicts.items()]
        return "\n".join(lines)


def reproduce_command(peer: str, cfg: RNNConfig) -> str:
    return f"rnn-compat check --peer {peer} --config '{cfg.to_json()}'"


def judge_outputs(peer: str, cfg: RNNConfig, actual: Outputs, truth: Outputs,
                  kappa: dict[str, float]) -> Comparison:
    verdicts = {}
    for name, expected in truth._asdict().items():
        if expected is None:
            continue
        got = getattr(actual, name)
        if got is None or got.shape != expected.shape or got.dtype != np.dtype(cfg.dtype):
            raise AssertionError(f"{peer} returned {name} of {None if got is None else (got.shape, got.dtype)}, "
                                 f"expected {expected.shape} {cfg.dtype} for {cfg.short()}")
        stats = error_stats(got, expected)
        verdicts[name] = tolerances.judge(peer, cfg.dtype, name, stats, kappa.get(name, 1.0))
    return Comparison(peer, cfg, verdicts)


def compare_peer(peer: Peer, cfg: RNNConfig, case: Case | None = None) -> Comparison:
    """Run ``peer`` on ``cfg`` and judge every forward quantity against the float64 reference."""
    case = case if case is not None else make_case(cfg)
    truth = ground_truth(cfg, case)
    with np.errstate(all="ignore"):
        actual = peer.forward(cfg, case)
    return judge_outputs(peer.name, cfg, actual, truth, sensitivity(cfg, case, truth))


def assert_agree_within_policy(cfg: RNNConfig, case: Case, actual: Outputs, expected: Outputs,
                               peer: str = "reference") -> None:
    """Two results of ``cfg`` that may differ only by rounding (another evaluation order, another batch
    split) agree within ``peer``'s budget for ``cfg.dtype``; ``expected`` is upcast to float64."""
    kappa = sensitivity(cfg, case)
    for name, want in expected._asdict().items():
        if want is None:
            continue
        stats = error_stats(getattr(actual, name), want.astype(np.float64))
        verdict = tolerances.judge(peer, cfg.dtype, name, stats, kappa[name])
        assert verdict.passed, verdict.explain(name)
