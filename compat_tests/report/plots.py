"""Figures for ``index.html``, as base64 PNG strings (empty when matplotlib is not installed)."""

from __future__ import annotations

import base64
import io
from collections import defaultdict

from ..config import DTYPE_NAMES, MODE_NAMES
from .aggregate import group_worst


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def figures(report: dict) -> dict[str, str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: F401
    except ImportError:
        return {}
    out = {"heatmaps": _heatmaps(report)}
    if report["studies"]["drift"]:
        out["drift"] = _drift(report)
    if report["studies"]["gru_variant"]:
        out["gru_variant"] = _gru_variant(report)
    if any(r.get("gradients") for r in report["records"]):
        out["amplification"] = _amplification(report)
    return {k: v for k, v in out.items() if v}


def heat_cells(report: dict) -> dict[str, dict[tuple[str, str], tuple[float, str]]]:
    """Per backend, ``(mode, dtype) -> (share of the budget, label)`` of every group with a verdict or an
    error (a backend whose every unit ended in an error has its panel too)."""
    cells: dict[str, dict[tuple[str, str], tuple[float, str]]] = defaultdict(dict)
    for row in report["summary"]:
        worst = group_worst(row)
        if worst:
            cells[row["backend"]][(row["mode"], row["dtype"])] = worst
    return dict(cells)


def _heatmaps(report: dict) -> str | None:
    import matplotlib.pyplot as plt
    import numpy as np

    cells = heat_cells(report)
    if not cells:
        return None
    backends = sorted(cells)
    fig, axes = plt.subplots(1, len(backends), figsize=(3.2 * len(backends), 3.4), squeeze=False)
    for ax, backend in zip(axes[0], backends):
        grid = np.full((len(MODE_NAMES), len(DTYPE_NAMES)), np.nan)
        for (mode, dtype), (share, label) in cells[backend].items():
            i, j = MODE_NAMES.index(mode), DTYPE_NAMES.index(dtype)
            grid[i, j] = min(share, 1e3)  # an error or a non-finite mismatch: the worst colour
            ax.text(j, i, label, ha="center", va="center", fontsize=8)
        image = ax.imshow(np.log10(np.maximum(grid, 1e-3)), cmap="RdYlGn_r", vmin=-2, vmax=1, aspect="auto")
        ax.set_xticks(range(len(DTYPE_NAMES)), DTYPE_NAMES, fontsize=8)
        ax.set_yticks(range(len(MODE_NAMES)), MODE_NAMES, fontsize=8)
        ax.set_title(backend, fontsize=10)
    fig.colorbar(image, ax=axes[0].tolist(), label="log10(worst error / budget)")
    return _png(fig)


def _drift(report: dict) -> str:
    import matplotlib.pyplot as plt
    import numpy as np

    by_shape = defaultdict(list)
    for d in report["studies"]["drift"]:
        by_shape[d["shape"]].append(d)
    shapes = sorted(by_shape)
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labels = sorted({f"{d['backend']} {d['dtype']}" for d in report["studies"]["drift"]})
    color = {label: cycle[i % len(cycle)] for i, label in enumerate(labels)}  # one per line in every panel
    fig, axes = plt.subplots(len(shapes), 2, figsize=(12, 2.6 * len(shapes)), squeeze=False)
    for row, shape in zip(axes, shapes):
        for ax, key, title in ((row[0], "output", "output"), (row[1], "d_input", "input gradient")):
            for d in by_shape[shape]:
                if d.get(key):  # eps units of the record's dtype -> one absolute scale for every dtype
                    eps = float(np.finfo(d["dtype"]).eps)
                    x, y = _envelope([None if v is None else v * eps for v in d[key]], floor=1e-17)
                    label = f"{d['backend']} {d['dtype']}"
                    ax.semilogy(x, y, linewidth=0.8, label=label, color=color[label])
            ax.set_title(f"{shape}: {title}", fontsize=9)
            ax.set_ylabel("max error / max(1, |truth|)", fontsize=8)
            ax.tick_params(labelsize=7)
        row[0].legend(fontsize=6, ncol=2)
    axes[-1][0].set_xlabel("time step (largest error per window of steps)")
    axes[-1][1].set_xlabel("time step")
    fig.tight_layout()
    return _png(fig)


def _envelope(steps: list, points: int = 100, floor: float = 1e-3) -> tuple[list[int], list[float]]:
    """The largest error in each of ``points`` windows of time steps: readable at T=1000."""
    width = max(1, len(steps) // points)
    x, y = [], []
    for start in range(0, len(steps), width):
        x.append(start + 1)
        y.append(max(max(v or 0.0 for v in steps[start:start + width]), floor))
    return x, y


def _gru_variant(report: dict) -> str:
    import matplotlib.pyplot as plt

    rows = report["studies"]["gru_variant"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), squeeze=False)
    by_scale = defaultdict(list)
    for r in rows:
        by_scale[r["weight_scale"]].append(r)
    for scale, rs in sorted(by_scale.items()):
        rs.sort(key=lambda r: r["seq_len"])
        axes[0][0].loglog([r["seq_len"] for r in rs], [max(r["max_abs"], 1e-18) for r in rs], marker="o",
                          label=f"weight scale {scale:g}")
        longest = rs[-1]
        axes[0][1].semilogy(range(1, len(longest["per_step_abs"]) + 1),
                            [max(v, 1e-18) for v in longest["per_step_abs"]], linewidth=0.8,
                            label=f"scale {scale:g}, T={longest['seq_len']}")
    axes[0][0].set_xlabel("sequence length")
    axes[0][0].set_ylabel("max |cuDNN GRU - textbook GRU| (output)")
    axes[0][1].set_xlabel("time step")
    axes[0][1].set_ylabel("max |difference| at step")
    for ax in axes[0]:
        ax.legend(fontsize=7)
    return _png(fig)


def _amplification(report: dict) -> str | None:
    import matplotlib.pyplot as plt

    points = defaultdict(list)
    for r in report["records"]:
        if r.get("gradients") and r["status"] == "ok" and not r["indeterminate"]:
            fwd = max(v["max_eps"] or 0.0 for v in r["forward"].values())
            grad = max(v["max_eps"] or 0.0 for v in r["gradients"].values())
            points[r["config"]["mode"]].append((max(fwd, 1e-3), max(grad, 1e-3)))
    if not points:  # every gradient comparison was indeterminate: nothing to plot
        return None
    fig, ax = plt.subplots(figsize=(6, 5))
    for mode, pts in points.items():
        ax.loglog(*zip(*pts), linestyle="", marker=".", label=mode)
    lo, hi = ax.get_xlim()
    ax.plot([lo, hi], [lo, hi], color="grey", linewidth=0.5)
    ax.set_xlabel("forward max error (eps x scale)")
    ax.set_ylabel("gradient max error (eps x scale)")
    ax.legend(fontsize=8)
    return _png(fig)
