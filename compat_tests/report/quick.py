"""The quick divergence table: every available backend against the float64 reference on a small grid."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable

from .. import tolerances
from ..compare import Comparison, compare_peer
from ..config import RNNConfig
from ..peers import Peer

@dataclass
class Row:
    """One (backend, dtype, mode): the worst conditioned error of its forward quantities and of its
    gradients, each with the budget it was judged against."""

    peer: str
    dtype: str
    mode: str
    configs: int = 0
    worst: dict[str, tuple[float, float]] = field(default_factory=dict)  # kind -> (error, budget)
    max_abs: float = 0.0
    failures: list[Comparison] = field(default_factory=list)
    indeterminate: int = 0

    def record(self, comparison: Comparison) -> None:
        self.indeterminate += any(v.indeterminate for v in comparison.verdicts.values())
        for q, v in comparison.verdicts.items():
            if v.indeterminate:
                continue
            kind = tolerances.kind_of(q)
            error, bound = self.worst.get(kind, (0.0, 1.0))
            if v.conditioned_error / v.bound >= error / bound:  # the worst share of its budget
                self.worst[kind] = (v.conditioned_error, v.bound)
            self.max_abs = max(self.max_abs, v.stats.max_abs)
        if not comparison.passed:
            self.failures.append(comparison)


def run(peers: Iterable[Peer], configs: list[RNNConfig]) -> tuple[list[Row], list[str]]:
    """Compare each peer on each config it supports; rows per (peer, dtype, mode) and skip notes."""
    rows: dict[tuple[str, str, str], Row] = {}
    skipped: dict[tuple[str, str], int] = defaultdict(int)
    for peer in peers:
        for cfg in configs:
            why = peer.unsupported(cfg)
            if why:
                skipped[(peer.name, why)] += 1
                continue
            row = rows.setdefault((peer.name, cfg.dtype, cfg.mode), Row(peer.name, cfg.dtype, cfg.mode))
            row.configs += 1
            row.record(compare_peer(peer, cfg))
            if peer.capabilities.backward:
                row.record(compare_peer(peer, cfg, backward=True))
    notes = [f"{peer}: {count} configs skipped: {why}" for (peer, why), count in sorted(skipped.items())]
    return list(rows.values()), notes


def format_table(rows: list[Row]) -> str:
    head = ("backend", "dtype", "mode", "configs", "forward/budget", "gradients/budget", "max abs", "verdict")
    body = []
    for r in sorted(rows, key=lambda r: (r.peer, r.dtype, r.mode)):
        cells = [f"{r.worst[k][0]:.2f}/{r.worst[k][1]:g}" if k in r.worst else "-" for k in ("forward", "gradient")]
        verdict = "ok" if not r.failures else f"FAIL x{len(r.failures)}"
        if r.indeterminate:
            verdict += f" ({r.indeterminate} indeterminate)"
        body.append((r.peer, r.dtype, r.mode, str(r.configs), *cells, f"{r.max_abs:.1e}", verdict))
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*line) for line in [head, *body])


def render(rows: list[Row], notes: list[str]) -> str:
    lines = [
        "Worst conditioned error of the outputs and final states (forward) and of all gradients (where the backend",
        "has a backward pass): max|x - truth| / (eps(dtype) * max(1, max|truth|) * max(1, kappa)), kappa = the",
        "config's measured sensitivity (compat_tests/tolerances.py); within budget = agrees up to rounding.",
        "",
        format_table(rows),
    ]
    if notes:
        lines += ["", "Not run:"] + [f"  {n}" for n in notes]
    failures = [c for r in rows for c in r.failures]
    if failures:
        lines += ["", "Failures (re-run one with its command):"]
        for c in failures:
            lines.append(c.explain())
    return "\n".join(lines)
