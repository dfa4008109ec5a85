"""Figures for ``index.html``, as base64 PNG strings (empty when matplotlib is not installed).

Every error axis is in the tables' unit: the conditioned error (eps of the dtype x scale, divided by
max(1, kappa)) over its budget, so 1 is the budget and above it fails. Legends sit outside the data (one per
figure, above or beside the panels), and panels are laid out by matplotlib's constrained layout so that no
label runs into a neighbour.
"""

from __future__ import annotations

import base64
import io
import math
from collections import defaultdict

from ..config import DTYPE_NAMES, MODE_NAMES
from .aggregate import budget_share, group_worst

SHARE_FLOOR = 1e-4  # shares of the budget below this (no error at all, say) are drawn at it
DTYPE_COLOURS = {"float16": "#d62728", "float32": "#1f77b4", "float64": "#2ca02c"}
MODE_MARKERS = {"relu": "o", "tanh": "s", "lstm": "^", "gru": "D", "classic_gru": "v"}


def _png(fig) -> str:
    """The figure as base64 PNG, closed. A log axis over two decades or more has no minor ticks (its decades are
    labelled, and each minor tick is an artist that the constrained layout measures on each of its passes: two
    thirds of a figure's time); a narrower one keeps them, as they carry its only labels. The layout keeps
    every label and legend inside the figure, so it is saved as laid out."""
    from matplotlib.ticker import NullLocator

    for ax in fig.axes:
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            if axis.get_scale() == "log" and max(limits) >= 100 * min(limits) > 0:
                axis.set_minor_locator(NullLocator())
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
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


def _grid_shape(n: int, most: int) -> tuple[int, int]:
    cols = min(n, most)
    return -(-n // cols), cols


# ---- the numbers the figures (and the tables beside them) show --------------------------------------------

def heat_cells(report: dict) -> dict[str, dict[tuple[str, str], tuple[float, str]]]:
    """Per backend, ``(mode, dtype) -> (share of the budget, label)`` of every group with a verdict or an
    error (a backend whose every unit ended in an error has its panel too)."""
    cells: dict[str, dict[tuple[str, str], tuple[float, str]]] = defaultdict(dict)
    for row in report["summary"]:
        worst = group_worst(row)
        if worst:
            cells[row["backend"]][(row["mode"], row["dtype"])] = worst
    return dict(cells)


def share_text(share: float) -> str:
    """A share of the budget as the figures and tables print it: two significant digits, no exponent below
    10,000 ("0.31", "63", "700")."""
    if share == float("inf"):
        return "non-finite"
    return f"{share:.0f}" if 100 <= share < 1e4 else f"{share:.2g}"


def cell_text(worst: tuple[float, str]) -> str:
    """A group's worst (:func:`aggregate.group_worst`) as a heat-map cell or a table cell shows it."""
    share, label = worst
    return label if label in ("error", "non-finite") else share_text(share)


def grid_cells(report: dict) -> set[tuple[str, str]]:
    """The (mode, dtype) pairs of the grid: those a backend ran, and those of the configs none could run."""
    pairs = {(row["mode"], row["dtype"]) for row in report["summary"]}
    for u in report["unrun"]:
        words = u["config"].split()
        pairs |= {(words[0], w) for w in words if w in DTYPE_NAMES}
    return pairs


def drift_shares(report: dict, entry: dict, key: str) -> list[float | None] | None:
    """A drift entry's per-step errors (``key``: "output" or "d_input") as shares of the quantity's budget:
    each step's error (eps x scale) / max(1, kappa) / budget, so that its largest is the share the tables show."""
    steps = entry.get(key)
    if not steps:
        return None
    record = next((r for r in report["records"] if r["id"] == entry["id"]), None)
    kind = "forward" if key == "output" else "gradients"
    stats = ((record or {}).get(kind) or {}).get(key)
    if not stats or not stats.get("budget"):
        return None
    scale = 1.0 / (max(1.0, stats.get("kappa") or 0.0) * stats["budget"])
    return [None if v is None else v * scale for v in steps]


def amplification_shares(report: dict) -> dict[tuple[str, str, str], list[tuple[float, float]]]:
    """Per (backend, dtype, mode), one ``(forward share, gradients share)`` of the budget per judged comparison
    with gradients (the largest share among each pass's quantities)."""
    points: dict[tuple[str, str, str], list[tuple[float, float]]] = defaultdict(list)
    for r in report["records"]:
        if r.get("gradients") and r["status"] == "ok" and not r["indeterminate"]:
            shares = [max((budget_share(v) for v in r[kind].values() if not v.get("indeterminate")), default=0.0)
                      for kind in ("forward", "gradients")]
            points[(r["backend"], r["config"]["dtype"], r["config"]["mode"])].append(tuple(shares))
    return dict(points)


# ---- the figures ------------------------------------------------------------------------------------------

def _heatmaps(report: dict) -> str | None:
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Patch, Rectangle

    cells = heat_cells(report)
    judged = {(row["backend"], row["mode"], row["dtype"]) for row in report["summary"]}
    in_grid = grid_cells(report)
    backends = sorted({row["backend"] for row in report["summary"]})
    if not backends:
        return None
    rows, cols = _grid_shape(len(backends), 4)
    fig, axes = plt.subplots(rows, cols, figsize=(2.9 * cols + 1.4, 2.6 * rows + 0.9), squeeze=False,
                             layout="constrained")
    norm = LogNorm(vmin=1e-2, vmax=10)
    image = None
    for k, ax in enumerate(axes.flat):
        if k >= len(backends):
            ax.set_visible(False)
            continue
        backend = backends[k]
        grid = np.full((len(MODE_NAMES), len(DTYPE_NAMES)), np.nan)
        for i, mode in enumerate(MODE_NAMES):
            for j, dtype in enumerate(DTYPE_NAMES):
                cell = cells.get(backend, {}).get((mode, dtype))
                if cell:
                    grid[i, j] = min(max(cell[0], 1e-2), 1e3)  # an error or a non-finite mismatch: the worst colour
                    ax.text(j, i, cell_text(cell), ha="center", va="center", fontsize=8)
                    continue
                if (mode, dtype) not in in_grid:
                    ax.text(j, i, "not in grid", ha="center", va="center", fontsize=7, color="#999999")
                    continue
                indeterminate = (backend, mode, dtype) in judged
                ax.add_patch(Rectangle((j - .5, i - .5), 1, 1, facecolor="#f0f0f0", edgecolor="#aaaaaa",
                                       hatch="..." if indeterminate else "///", linewidth=0))
                ax.text(j, i, "indeterminate" if indeterminate else "not run", ha="center", va="center",
                        fontsize=7, color="#555555", bbox={"facecolor": "#f0f0f0", "edgecolor": "none", "pad": 1})
        image = ax.imshow(np.ma.masked_invalid(grid), cmap="RdYlGn_r", norm=norm, aspect="auto")
        ax.set_xticks(range(len(DTYPE_NAMES)), DTYPE_NAMES, fontsize=8)
        ax.set_yticks(range(len(MODE_NAMES)), MODE_NAMES if k % cols == 0 else [""] * len(MODE_NAMES), fontsize=8)
        ax.set_title(backend, fontsize=10)
    fig.colorbar(image, ax=axes, shrink=0.9, label="worst conditioned error / budget\n(above 1: failed)")
    fig.legend(handles=[Patch(facecolor="#f0f0f0", edgecolor="#aaaaaa", hatch="///",
                              label="not run: the backend cannot run this mode or dtype"),
                        Patch(facecolor="#f0f0f0", edgecolor="#aaaaaa", hatch="...",
                              label="indeterminate: no comparison there could be judged")],
               loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    return _png(fig)


def _drift(report: dict) -> str:
    """Rows: a quantity (output, input gradient); columns: dtype; one line per backend (its colour the same in
    every panel): at each time step, the largest share of the budget among that backend's long configs of the
    dtype. One legend for the figure, above the panels."""
    import matplotlib.pyplot as plt

    entries = report["studies"]["drift"]
    series: dict[tuple[str, str], dict[str, list[list]]] = defaultdict(lambda: defaultdict(list))
    for d in entries:
        for key in ("output", "d_input"):
            shares = drift_shares(report, d, key)
            if shares:
                series[(key, d["dtype"])][d["backend"]].append(shares)
    keys = [k for k in ("output", "d_input") if any(key == k for key, _ in series)] or ["output"]
    dtypes = [t for t in DTYPE_NAMES if any(dtype == t for _, dtype in series)] or sorted({d["dtype"] for d in entries})
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    backends = sorted({d["backend"] for d in entries})
    colour = {b: cycle[i % len(cycle)] for i, b in enumerate(backends)}  # one per backend in every panel
    fig, axes = plt.subplots(len(keys), len(dtypes), figsize=(3.9 * len(dtypes) + 0.6, 2.4 * len(keys) + 0.9),
                             squeeze=False, sharex=True, sharey=True, layout="constrained")
    handles, lowest = {}, 1.0
    for row, key in zip(axes, keys):
        for ax, dtype in zip(row, dtypes):
            ax.axhspan(1.0, 1e4, color="#d62728", alpha=0.07, linewidth=0)
            configs = 0
            for backend, runs in sorted(series.get((key, dtype), {}).items()):
                configs = max(configs, len(runs))
                worst = [max((r[t] or 0.0 for r in runs if t < len(r)), default=0.0)
                         for t in range(max(len(r) for r in runs))]
                x, y = _envelope(worst, floor=SHARE_FLOOR)
                lowest = min(lowest, *y)
                (line,) = ax.semilogy(x, y, linewidth=1.0, alpha=0.85, label=backend, color=colour[backend])
                handles.setdefault(backend, line)
            if not ax.get_lines():
                ax.text(0.5, 0.5, "not run", transform=ax.transAxes, ha="center", va="center", color="#777777")
            what = "output" if key == "output" else "input gradient"
            ax.set_title(f"{what}, {dtype}" + (f" (worst of {configs} configs)" if configs > 1 else ""), fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(True, which="major", linewidth=0.3, alpha=0.5)
        row[0].set_ylabel("error / budget\n(conditioned eps)", fontsize=8)
    axes[0][0].set_ylim(max(SHARE_FLOOR, 10 ** math.floor(math.log10(lowest))), 10)  # shared by every panel
    for ax in axes[-1]:
        ax.set_xlabel("time step (largest error per window)", fontsize=8)
    if handles:
        fig.legend(handles=list(handles.values()), labels=list(handles), loc="outside upper center",
                   ncol=min(len(handles), 6), fontsize=8, frameon=False,
                   title="backend (shaded: above the budget, failed)", title_fontsize=8)
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
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), squeeze=False, layout="constrained")
    by_scale = defaultdict(list)
    for r in rows:
        by_scale[r["weight_scale"]].append(r)
    longest = max(r["seq_len"] for r in rows)
    for scale, rs in sorted(by_scale.items()):  # one colour per scale, the same in both panels
        rs.sort(key=lambda r: r["seq_len"])
        (line,) = axes[0][0].loglog([r["seq_len"] for r in rs], [max(r["max_abs"], 1e-18) for r in rs], marker="o",
                                    label=f"weight scale {scale:g}")
        last = rs[-1]
        axes[0][1].semilogy(range(1, len(last["per_step_abs"]) + 1), [max(v, 1e-18) for v in last["per_step_abs"]],
                            linewidth=0.8, color=line.get_color(),
                            label=f"weight scale {scale:g}" + (f" (T={last['seq_len']})" if last["seq_len"] != longest
                                                                else ""))
    axes[0][0].set_xlabel("sequence length")
    axes[0][0].set_ylabel("max |cuDNN GRU - textbook GRU| (output)")
    axes[0][0].set_title("largest difference per sequence length", fontsize=9)
    axes[0][1].set_xlabel("time step")
    axes[0][1].set_ylabel("max |difference| at step")
    axes[0][1].set_title(f"per time step, the longest sequence (T={longest})", fontsize=9)
    fig.legend(handles=axes[0][0].get_lines(), loc="outside right center", fontsize=8, frameon=False)
    return _png(fig)


def _amplification(report: dict) -> str | None:
    """Forward against gradient share of the budget, one panel per backend, one colour per dtype, one marker
    per mode; the legend beside the panels."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    points = amplification_shares(report)
    if not points:  # every gradient comparison was indeterminate: nothing to plot
        return None
    backends = sorted({b for b, _, _ in points})
    rows, cols = _grid_shape(len(backends), 4)
    fig, axes = plt.subplots(rows, cols, figsize=(3.1 * cols + 1.8, 3.0 * rows + 0.4), squeeze=False,
                             sharex=True, sharey=True, layout="constrained")
    shares = [v for pts in points.values() for pt in pts for v in pt if v > 0]
    lo = max(SHARE_FLOOR, 10 ** math.floor(math.log10(min(shares, default=SHARE_FLOOR)))) / 2
    hi = max(20, 2 * max(shares, default=1.0)) if max(shares, default=1.0) < 1e3 else 2e3
    for k, ax in enumerate(axes.flat):
        if k >= len(backends):
            ax.set_visible(False)
            continue
        backend = backends[k]
        ax.plot([lo, hi], [lo, hi], color="grey", linewidth=0.5)
        ax.axvline(1, color="#d62728", linestyle="--", linewidth=0.7)
        ax.axhline(1, color="#d62728", linestyle="--", linewidth=0.7)
        for (b, dtype, mode), pts in sorted(points.items()):
            if b != backend:
                continue
            xs, ys = zip(*((min(max(f, lo), hi), min(max(g, lo), hi)) for f, g in pts))  # none off the axes
            ax.scatter(xs, ys, s=12, marker=MODE_MARKERS.get(mode, "o"), facecolors="none",
                       edgecolors=DTYPE_COLOURS.get(dtype, "black"), linewidths=0.7)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_title(backend, fontsize=10)
        ax.tick_params(labelsize=7)
        if k % cols == 0:
            ax.set_ylabel("gradients: worst error / budget", fontsize=8)
        if k // cols == rows - 1 or k + cols >= len(backends):
            ax.set_xlabel("forward: worst error / budget", fontsize=8)
    dtypes = [t for t in DTYPE_NAMES if any(d == t for _, d, _ in points)]
    modes = [m for m in MODE_NAMES if any(x == m for _, _, x in points)]
    handles = [Line2D([], [], linestyle="", marker="o", markerfacecolor="none", color=DTYPE_COLOURS[t], label=t)
               for t in dtypes]
    handles += [Line2D([], [], linestyle="", marker=MODE_MARKERS.get(m, "o"), markerfacecolor="none", color="black",
                       label=m) for m in modes]
    handles += [Line2D([], [], color="#d62728", linestyle="--", linewidth=0.7, label="budget"),
                Line2D([], [], color="grey", linewidth=0.5, label="equal shares")]
    fig.legend(handles=handles, loc="outside right center", fontsize=8, frameon=False)
    return _png(fig)
