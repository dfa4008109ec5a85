"""The quick divergence table: every available backend against the float64 reference on a small grid."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

from ..compare import Comparison, compare_peer
from ..config import RNNConfig
from ..peers import Peer

QUANTITIES = ("output", "output_h", "output_c")


@dataclass
class Row:
    peer: str
    dtype: str
    mode: str
    configs: int = 0
    worst: dict[str, float] | None = None
    max_abs: float = 0.0
    bound: float = 0.0
    failures: list[Comparison] | None = None
    indeterminate: int = 0


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
            comparison = compare_peer(peer, cfg)
            row = rows.setdefault((peer.name, cfg.dtype, cfg.mode),
                                  Row(peer.name, cfg.dtype, cfg.mode, worst={}, failures=[]))
            row.configs += 1
            row.indeterminate += any(v.indeterminate for v in comparison.verdicts.values())
            for q, v in comparison.verdicts.items():
                if v.indeterminate:
                    continue
                row.worst[q] = max(row.worst.get(q, 0.0), v.conditioned_error)
                row.max_abs = max(row.max_abs, v.stats.max_abs)
                row.bound = v.bound
            if not comparison.passed:
                row.failures.append(comparison)
    notes = [f"{peer}: {count} configs skipped: {why}" for (peer, why), count in sorted(skipped.items())]
    return list(rows.values()), notes


def format_table(rows: list[Row]) -> str:
    head = ("backend", "dtype", "mode", "configs", "output", "output_h", "output_c", "budget", "max abs", "verdict")
    body = []
    for r in sorted(rows, key=lambda r: (r.peer, r.dtype, r.mode)):
        cells = [f"{r.worst[q]:.2f}" if q in r.worst else "-" for q in QUANTITIES]
        verdict = "ok" if not r.failures else f"FAIL x{len(r.failures)}"
        if r.indeterminate:
            verdict += f" ({r.indeterminate} indeterminate)"
        body.append((r.peer, r.dtype, r.mode, str(r.configs), *cells, f"{r.bound:g}", f"{r.max_abs:.1e}", verdict))
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*line) for line in [head, *body])


def render(rows: list[Row], notes: list[str]) -> str:
    lines = [
        "Worst conditioned error per quantity: max|x - truth| / (eps(dtype) * max(1, max|truth|) * max(1, kappa)),",
        "kappa = the config's measured sensitivity (compat_tests/tolerances.py). Within budget = agrees up to rounding.",
        "",
        format_table(rows),
    ]
    if notes:
        lines += ["", "Not run:"] + [f"  {n}" for n in notes]
    failures = [c for r in rows for c in (r.failures or [])]
    if failures:
        lines += ["", "Failures (re-run one with its command):"]
        for c in failures:
            lines.append(c.explain())
    return "\n".join(lines)
