"""The report document -> ``report.md`` (renders on a code forge) and ``index.html`` (self-contained, plots
embedded as PNG data URIs), plus the short summary printed on the terminal.

Both documents lead with what a reader acts on: the summary, every failure and the closest calls (passes
nearest their budget), each with its numbers and the command that runs it again. ``index.html`` then shows
the figures and studies, and keeps the long lists (configs no backend could run, every comparison) in
collapsed sections; ``report.md`` leaves the per-comparison listing to ``report.json`` and ``results.jsonl``.

One vocabulary throughout: a comparison (one backend, one config, forward or gradients) is *passed*,
*failed* or *indeterminate*; the run is *passed*, *failed* or *incomplete*.
"""

from __future__ import annotations

import html
import json
import re
from collections import defaultdict

from ..config import MODE_NAMES
from . import plots
from .aggregate import WORST_CASES, budget_share, config_label, group_worst, tf32_stray, unavailable_requested
from .grids import LEFT_OUT

MEASURE = ("conditioned error = max|x - truth| / (eps(dtype) * max(1, max|truth|) * max(1, kappa)), kappa the "
           "config's measured sensitivity; shown as error / budget, both in conditioned eps, and as the share of "
           "the budget used (error / budget: above 1 fails) (compat_tests/judge/tolerances.py)")
CLOSEST_CALLS = 20  # passes nearest their budget, listed after the failures
KINDS = ("forward", "gradients")


def _fmt(v, digits=3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def _cell(worst: dict | None) -> str:
    if worst is None:
        return "-"
    if worst.get("nonfinite_mismatch"):
        return f"{worst['nonfinite_mismatch']} non-finite ({worst['quantity']})"
    return f"{_fmt(worst['conditioned'])} / {worst['budget']:.3g} ({worst['quantity']})"


def _share(v: dict) -> str:
    """The share of its budget a quantity used, as the tables show it."""
    return plots.share_text(budget_share(v))


_MARKUP = re.compile(r"([\\`*_\[\]<>|#~&!])")


def _md_text(text) -> str:
    """Free text (an error message, a backend's reason, a machine's description) as literal Markdown: one
    line, with every character Markdown could read as markup escaped."""
    return _MARKUP.sub(r"\\\1", " ".join(str(text).split()))


def _what(w: dict) -> str:
    """A worst case's error, a published checksum's miss, or its quantity's error against its budget (and its
    non-finite mismatches)."""
    if w.get("error"):
        return w["error"]
    if w.get("published"):
        return w["published"]
    text = f"{w['quantity']}: {_fmt(w['conditioned'])} / budget {_fmt(w['budget'])}"
    if w.get("nonfinite_mismatch"):
        text = (f"{w['quantity']}: {w['nonfinite_mismatch']} non-finite mismatches (non-finite where the truth is "
                f"finite, or the reverse); the finite entries {_fmt(w['conditioned'])} / budget {_fmt(w['budget'])}")
    return text + _strays(w)


def _strays(v: dict) -> str:
    """What a TF32 result's first step shows where it strays from the TF32 truth (``tf32_first_step`` over its
    bound), else nothing."""
    first = tf32_stray(v)
    if first is None:
        return ""
    return f"; its first step strays from the TF32 truth: {_fmt(first['share'])} of TF32's cost > {first['bound']:g}"


def _value(v) -> str:
    """An environment entry as readable text: a mapping as ``key: value`` pairs, nothing as "not installed"."""
    if v is None:
        return "not installed"
    if isinstance(v, dict):
        return ", ".join(f"{k}: {_value(x) if isinstance(x, dict) else x}" for k, x in v.items() if x is not None)
    return str(v)


# ---- what the documents list ----------------------------------------------------------------------------

def record_verdict(record: dict) -> str:
    """passed, failed (an error included) or indeterminate (passed, but some quantity could not be judged)."""
    if not record["passed"]:
        return "failed"
    return "indeterminate" if record["indeterminate"] else "passed"


def _judged_worst(stats: dict) -> tuple[str, dict] | None:
    judged = [(q, v) for q, v in stats.items() if not v.get("indeterminate")]
    return max(judged, key=lambda qv: (not qv[1]["passed"], budget_share(qv[1]))) if judged else None


def _comparison(record: dict, kind: str) -> dict | None:
    """One comparison of a compat record (its forward pass or its gradients) as the lists show it."""
    stats = record.get(kind)
    if not stats:
        return None
    worst = _judged_worst(stats)
    unjudged = "; ".join(f"{q} indeterminate: {v['indeterminate']}" for q, v in stats.items() if v.get("indeterminate"))
    entry = {"kind": kind, "passed": all(v["passed"] for v in stats.values()), "reproduce": record["reproduce"][kind],
             "indeterminate": unjudged}
    if worst is None:
        return {**entry, "quantity": None, "share": None}
    q, v = worst
    return {**entry, "quantity": q, "conditioned": v["conditioned"], "budget": v["budget"],
            "nonfinite_mismatch": v.get("nonfinite_mismatch", 0), "share": budget_share(v),
            "strays": _strays(v)}


def _closest_calls(report: dict, n: int = CLOSEST_CALLS) -> list[dict]:
    """The passed comparisons nearest their budget, nearest first."""
    calls = []
    for r in report["records"]:
        if r["study"] != "compat" or r["status"] != "ok":
            continue
        for kind in KINDS:
            c = _comparison(r, kind)
            if c and c["passed"] and c["share"] is not None:
                calls.append({**c, "id": r["id"], "backend": r["backend"], "config": config_label(r["config"])})
    calls.sort(key=lambda c: (-c["share"], c["id"], c["kind"]))
    return calls[:n]


def _failures(report: dict) -> list[dict]:
    """Every failure (the report's worst cases list them all, first)."""
    return [w for w in report["worst"] if not w["passed"]]


def _failure_share(w: dict) -> str:
    return "-" if w.get("error") or w.get("published") else _share(w)


def _backend_rows(report: dict) -> list[list[str]]:
    groups = defaultdict(lambda: {"units": 0, "passed": 0, "failed": 0, "indeterminate": 0, "fwd": None, "grad": None})
    for row in report["summary"]:
        g = groups[(row["backend"], row["dtype"])]
        for k in ("units", "passed", "failed", "indeterminate"):
            g[k] += row[k]
        for key, worst in (("fwd", row["worst_forward"]), ("grad", row["worst_gradient"])):
            if worst and (g[key] is None or budget_share(worst) > budget_share(g[key])):
                g[key] = worst
    return [[b, d, str(g["units"]), str(g["passed"]), str(g["failed"]), str(g["indeterminate"]),
             _cell(g["fwd"]), _cell(g["grad"])] for (b, d), g in sorted(groups.items())]


def _mode_rows(report: dict) -> list[list[str]]:
    cells = defaultdict(dict)
    for row in report["summary"]:
        worst = group_worst(row)
        text = plots.cell_text(worst) if worst else "indeterminate"
        failed = f", {row['failed']} failed" if row["failed"] else ""
        cells[(row["backend"], row["dtype"])][row["mode"]] = text + failed
    in_grid = plots.grid_cells(report)
    return [[b, d, *(cells[(b, d)].get(m, "not run" if (m, d) in in_grid else "not in grid") for m in MODE_NAMES)]
            for (b, d) in sorted(cells)]


SUMMARY_HEAD = ["backend", "dtype", "comparisons", "passed", "failed", "indeterminate",
                "worst forward (error / budget)", "worst gradient (error / budget)"]
CASE_HEAD = ["#", "backend", "config", "quantity: error / budget (conditioned eps)", "share of budget", "reproduce"]


def _drift_rows(report: dict) -> list[list[str]]:
    rows = []
    for d in report["studies"]["drift"]:
        steps = plots.drift_shares(report, d, "output") or []
        picks = [i for i in (0, 9, 99, 999) if i < len(steps)]
        rows.append([d["backend"], d["dtype"], d["shape"], *(_fmt(steps[i], 2) for i in picks)])
    return rows


DRIFT_HEAD = ["backend", "dtype", "config", "t=1", "t=10", "t=100", "t=1000"]


def _variant_rows(report: dict) -> list[list[str]]:
    rows = report["studies"]["gru_variant"]
    lengths = sorted({r["seq_len"] for r in rows})
    by: dict[tuple, float] = {}
    for r in rows:  # configs that share a scale and a length (other seeds or sizes): the largest difference
        key = (r["weight_scale"], r["seq_len"])
        by[key] = max(by.get(key, r["max_abs"]), r["max_abs"])
    return [[f"{s:g}", *(_fmt(by.get((s, t))) for t in lengths)] for s in sorted({r["weight_scale"] for r in rows})], \
        [f"T={t}" for t in lengths]


PUBLISHED_NOTE = ("cuDNN's own checksums, printed by NVIDIA's cuDNN RNN sample on the GPUs named (T=20, 2 layers, "
                  "H=I=512, B=64, float32, every matrix 1 / its element count, biases, inputs, states and output "
                  "gradients 1; compat_tests/data/cudnn_rnn_sample.json), beside the float64 truth's and each "
                  "backend's float32 run's. A cell: the value (its relative difference from the first published "
                  "run; its bound). The drift between the published runs is the scale of GPU-to-GPU variation; the "
                  "bound is the policy's (compat_tests/judge/tolerances.py, published_rtol: the 7 printed digits and "
                  "float32's worst case for the longest sum behind a checksum), checked against every published "
                  "run. The weights are uniform per matrix, so these numbers confirm the cell equations, the double "
                  "bias and backpropagation through time, not the opaque layout.")


def _published_source(v: dict) -> str:
    return "float64 truth" if v["dtype"] == "float64" else f"{v['source']} {v['dtype']}"


def _published_cell(v: dict | None) -> str:
    if v is None:
        return "-"
    text = f"{v['value']:.7e} ({v['relative']:+.1e}; {v['bound']:.1e})"
    return text if v["passed"] else text + " OUTSIDE its bound"


def _published_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """The published study as a table: a row per mode and checksum; the published values, their drift, then
    the float64 truth's and each backend's."""
    rows = report["studies"]["published"]
    runs = list(dict.fromkeys(name for r in rows for name in r["published"]))
    sources = list(dict.fromkeys(_published_source(v) for r in rows for v in r["values"]))
    head = ["mode", "checksum", *(f"cuDNN, {name}" for name in runs), "drift between them",
            *(f"{source} (relative difference; bound)" for source in sources)]
    body = []
    for r in rows:
        values = {_published_source(v): v for v in r["values"]}
        body.append([r["mode"], r["checksum"],
                     *("-" if name not in r["published"] else f"{r['published'][name]:.6e}" for name in runs),
                     "-" if r["drift"] is None else f"{r['drift']:+.1e}",
                     *(_published_cell(values.get(source)) for source in sources)])
    return head, body


TF32_HEAD = ["backend", "dtype", "first steps judged", "TF32 truths that fit best (GEMMs, rule: steps)",
             "largest share of TF32's cost", "strayed"]
TF32_NOTE = ("Each TF32 backend's first time step, where it reads only given values (one layer, no projection), "
             "against the truths of TF32 in its input GEMMs, its recurrent ones, both or neither, by each candidate "
             "rule while no GPU has settled it (reference-tf32: every GEMM, the decided rule): the truth it is "
             "nearest, and its distance as a share of what TF32 costs there; past the bound it failed.")


def _tf32_rows(report: dict) -> list[list[str]]:
    return [[r["backend"], r["dtype"], str(r["judged"]), "; ".join(f"{k}: {n}" for k, n in r["fits"].items()),
             _fmt(r["largest_share"]), str(r["strayed"])] for r in report["studies"].get("tf32", [])]


def _amplification_rows(report: dict) -> list[list[str]]:
    shares = plots.amplification_shares(report)
    rows = []
    for r in report["studies"]["amplification"]:
        pts = shares.get((r["backend"], r["dtype"], r["mode"]), [])
        rows.append([r["backend"], r["dtype"], r["mode"], str(r["units"]),
                     _fmt(max((f for f, _ in pts), default=None), 2), _fmt(max((g for _, g in pts), default=None), 2),
                     _fmt(r["median_ratio"]), _fmt(r["max_ratio"])])
    return rows


AMPLIFICATION_HEAD = ["backend", "dtype", "mode", "comparisons", "forward: worst share of budget",
                      "gradients: worst share of budget", "median raw ratio", "max raw ratio"]
AMPLIFICATION_NOTE = ("Share of budget: the worst conditioned error / its budget, the unit of every other table (above "
                      "1 fails). Raw ratio: gradient max error / forward max error on the same config, both in eps x "
                      "scale before dividing by kappa, i.e. how much the backward pass amplifies the rounding error; "
                      "a large raw ratio is expected where the gradients are ill-conditioned (kappa large), and is "
                      "not by itself a failure.")


def _exceptions(report: dict) -> list[str]:
    """The policy's exceptions for the backends of this run, one line each: budget overrides (quantities of
    one budget together) and known divergences (the ledger of compat_tests/judge/known_divergences.py); those a
    plugin peer declares for itself say so."""
    ran = {r["backend"] for r in report["records"]}
    plugin = {b["name"] for b in report["backends"] if b.get("plugin")}
    budgets: dict[tuple, list[str]] = defaultdict(list)
    for o in report["policy"]["overrides"]:
        if o["peer"] in ran:
            budgets[(o["peer"], o["dtype"], o["bound"], o["reason"])].append(o["quantity"])

    def whose(peer: str) -> str:
        return f"{peer} (declared by its plugin)" if peer in plugin else peer

    lines = [f"budget override: {whose(peer)} {dtype} {', '.join(qs)}: {_fmt(bound)} conditioned eps. {reason}"
             for (peer, dtype, bound, reason), qs in budgets.items()]
    lines += [f"known divergence: {whose(d['peer'])} {d['area']} ({', '.join(d['modes'])}): {d['reason']}"
              for d in report["policy"]["known_divergences"] if d["peer"] in ran]
    return lines


def _plugin(backend: dict, quote: str = "") -> str:
    """Where a plugin backend came from (``--plugin SPEC``), for the backends list."""
    return f" (plugin {quote}{backend['plugin']}{quote})" if backend.get("plugin") else ""


def _unrun_groups(report: dict) -> list[tuple[list[tuple[str, str]], list[str]]]:
    """The configs no selected backend could run, grouped by their reasons (each backend's): the largest group
    first, as ``(reasons, configs)``."""
    groups: dict[tuple, list[str]] = defaultdict(list)
    for u in report["unrun"]:
        groups[tuple(sorted(u["reasons"].items()))].append(u["config"])
    return sorted(((list(k), v) for k, v in groups.items()), key=lambda kv: (-len(kv[1]), kv[0]))


def _shortfalls(report: dict) -> list[str]:
    """What a report must say first of a run that did not do all it was asked: it stopped early, a backend
    named by ``--backends`` could not run, or no config of the grid fitted the backends."""
    t = report["totals"]
    notes = []
    if not report["complete"]:
        notes.append(f"INCOMPLETE: {t['units']} of {t['planned_units']} planned units ran (the run stopped at "
                     f"--max-seconds or was killed); the same rnn-compat report command with --resume runs the rest.")
    for b in unavailable_requested(report):
        notes.append(f"NOT RUN: backend {b['name']} was requested but is unavailable: {b['detail']}")
    if t["planned_units"] == 0:
        notes.append("NOTHING RAN: no config of the grid fits the available backends (see Not run)")
    return notes


def _verdict(report: dict) -> str:
    """The run's verdict: failed, incomplete (no failure among the units that ran) or passed."""
    return "failed" if not report["passed"] else "passed" if report["complete"] else "incomplete"


_VERDICT_TEXT = {"failed": "Verdict: failed", "incomplete": "Verdict: incomplete, no failure among the units that ran",
                 "passed": "Verdict: passed, every backend within the tolerance policy"}


def _counts(report: dict) -> str:
    t = report["totals"]
    text = (f"{t['compat_units']} comparisons: {t['passed']} passed, {t['failed']} failed, "
            f"{t['indeterminate']} indeterminate")
    if t["errors"]:
        text += f" ({t['errors']} units ended in an error)"
    if t.get("published_failed"):
        text += f"; {t['published_failed']} runs of cuDNN's published sample outside their bound"
    return text


def _failures_note(report: dict) -> str:
    t = report["totals"]
    return (f"{t['failed']} of {t['compat_units']} comparisons failed; one row per failed pass (forward or gradients) "
            f"or error, the largest share of a budget first, each with the command that runs it again.")


def _case_row(i: int, w: dict) -> list[str]:
    """A failure's or a closest call's row: its numbers and its command."""
    if w.get("error"):
        return [str(i), w["backend"], w["config"], f"error: {w['error']}", "-", w["reproduce"]]
    if w.get("published"):
        return [str(i), w["backend"], w["config"], w["published"], "-", w["reproduce"]]
    return [str(i), w["backend"], w["config"], _what(w), _failure_share(w), w["reproduce"]]


# ---- report.md ------------------------------------------------------------------------------------------

def _environment_rows(places: list[dict]) -> tuple[str, list[str], list[list[str]]]:
    """A fleet run's workers' environments (``report.environments``) as an introduction, a table's head and
    rows: each key's hosts and units, and the fields in which the environments differ (the summary's rows are
    ``BACKEND@KEY`` where there are several)."""
    fields = sorted({k for p in places for k in p["environment"]} - {"host"})
    differ = [k for k in fields if len({json.dumps(p["environment"].get(k), sort_keys=True) for p in places}) > 1]
    rows = [[p["key"], ", ".join(p["hosts"]), str(p["units"]), *[_value(p["environment"].get(k)) for k in differ]]
            for p in places]
    intro = (f"The units ran on a Dask cluster's workers, in {len(places)} distinct environment"
             f"{'s' if len(places) > 1 else ''}" + (f"; they differ in {', '.join(differ)}." if differ else "."))
    return intro, ["key", "hosts", "units", *differ], rows


def _md_environments(places: list[dict]) -> list[str]:
    if not places:
        return []
    intro, head, rows = _environment_rows(places)
    return ["## Environments of the workers", "", intro, "",
            *_md_table(head, [[_md_text(c) for c in row] for row in rows]), ""]


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


def _md_cases(cases: list[dict]) -> list[str]:
    lines = []
    for i, w in enumerate(cases, 1):
        what = _md_text(_what(w))
        share = "" if w.get("error") or w.get("published") else f" ({_failure_share(w)} of its budget)"
        lines.append(f"{i}. `{w['backend']}` {w['config']}: {what}{share}  ")
        lines.append(f"   `{w['reproduce']}`")
    return lines


def markdown(report: dict) -> str:
    failures = _failures(report)
    closest = _closest_calls(report)
    lines = [
        "# cudnn-rnn-compat divergence report", "",
        f"Grid `{report['grid']}`, seed {report['seed']}, generated {report['generated_utc']}. {_counts(report)}. "
        f"**{_VERDICT_TEXT[_verdict(report)]}**.", "",
        *((LEFT_OUT[report["grid"]], "") if report["grid"] in LEFT_OUT else ()),
        *(line for note in _shortfalls(report) for line in (f"**{_md_text(note)}**", "")),
        f"Measure: {MEASURE}.", "",
        "## Summary", "",
        *_md_table(SUMMARY_HEAD, _backend_rows(report)), "",
        "## Worst share of the budget per mode", "",
        "Error / budget of the worst comparison of each backend, dtype and mode (above 1 fails); \"not run\": the "
        "backend cannot run it (see Not run); \"not in grid\": the grid has no such config.", "",
        *_md_table(["backend", "dtype", *MODE_NAMES], _mode_rows(report)), "",
        f"## Failures ({len(failures)})", "",
        *([_failures_note(report), "", *_md_cases(failures)] if failures else ["No comparison failed."]), "",
        "## Closest calls", "",
        f"The {len(closest)} passed comparisons that used the largest share of their budget; re-run one with its "
        f"command." if closest else "No comparison was judged.", "",
        *_md_cases(closest), "",
    ]
    if report["skipped"] or report["unrun"]:
        lines += ["## Not run", ""]
    if report["skipped"]:
        lines += ["Configs a backend skipped, per backend and reason:", "",
                  *[f"- `{s['backend']}`: {s['count']} configs: {_md_text(s['reason'])}"
                    for s in report["skipped"]], ""]
    if report["unrun"]:
        lines += [f"{len(report['unrun'])} configs no selected backend could run, per distinct set of reasons "
                  f"(the configs are in report.json, `unrun`):", "",
                  *[f"- {len(configs)} configs: " + "; ".join(f"`{b}` {_md_text(why)}" for b, why in reasons)
                    for reasons, configs in _unrun_groups(report)], ""]
    variant_rows, variant_head = _variant_rows(report)
    published_head, published_rows = _published_rows(report)
    tf32_rows = _tf32_rows(report)
    lines += ["## Studies", "",
              "The drift (error per time step of long sequences) and forward-vs-backward amplification studies are "
              "figures and tables in index.html; their numbers are in report.json (`studies`).", "",
              "### cuDNN's published checksums", "",
              *([PUBLISHED_NOTE, "", *_md_table(published_head, published_rows)] if published_rows
                else ["not in this grid"]), "",
              "### cuDNN GRU vs textbook GRU, same weights: max |output difference|", "",
              "Rows: weight scale (weights ~ U(-s/sqrt(H), s/sqrt(H))); columns: sequence length.", "",
              *(_md_table(["scale", *variant_head], variant_rows) if variant_rows else ["not in this grid"]), "",
              "### TF32 as each backend computes it", "",
              *([TF32_NOTE, "", *_md_table(TF32_HEAD, tf32_rows)] if tf32_rows
                else ["no TF32 backend's first step judged in this run"]), ""]
    exceptions = _exceptions(report)
    lines += ["## Policy exceptions for these backends", "",
              *([f"- {e}" for e in exceptions] or ["none: every backend is judged by the default budgets"]), ""]
    lines += ["## Backends", "", *[f"- `{b['name']}`: {'available' if b['available'] else 'unavailable'}, "
                                    f"{_md_text(b['detail'])}{_plugin(b, '`')}" for b in report["backends"]], ""]
    lines += ["## Environment", "", *[f"- {k}: {_md_text(_value(v))}" for k, v in report["environment"].items()], ""]
    lines += _md_environments(report.get("environments") or [])
    lines += ["## Every comparison", "",
              f"Not listed here: report.json (`records`, each with its numbers and `reproduce` commands) and "
              f"results.jsonl (one line per unit, with per-step errors) hold all {report['totals']['compat_units']}, "
              f"and index.html lists them per backend.", ""]
    return "\n".join(lines)


# ---- index.html -----------------------------------------------------------------------------------------

class _Html(str):
    """Markup already escaped: a table cell that is not text."""


def _esc(cell) -> str:
    return cell if isinstance(cell, _Html) else html.escape(str(cell))


def _html_table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table{f' class={cls!r}' if cls else ''}><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def _command(text: str) -> _Html:
    return _Html(f"<code class='cmd'>{html.escape(text, quote=False)}</code>")


def _verdict_span(verdict: str) -> _Html:
    return _Html(f"<span class='{verdict}'>{verdict}</span>")


def _html_cases(cases: list[dict]) -> str:
    rows = []
    for i, w in enumerate(cases, 1):
        row = _case_row(i, w)
        rows.append([*row[:-1], _command(row[-1])])
    return _html_table(CASE_HEAD, rows, "cases numbered")


def _comparison_cell(c: dict | None) -> str:
    if c is None:
        return "-"
    if c["quantity"] is None:
        return c["indeterminate"]
    if c["nonfinite_mismatch"]:
        text = f"{c['quantity']}: {c['nonfinite_mismatch']} non-finite mismatches"
    else:
        text = f"{c['quantity']}: {_fmt(c['conditioned'])} / {_fmt(c['budget'])} ({_share(c)}){c['strays']}"
    return f"{text}; {c['indeterminate']}" if c["indeterminate"] else text


_ORDER = {"failed": 0, "indeterminate": 1, "passed": 2}


def _listing(report: dict) -> list[str]:
    """Every comparison, one collapsed section per backend: failures first, then by share of the budget."""
    by_backend: dict[str, list] = defaultdict(list)
    for r in report["records"]:
        if r["study"] != "compat":
            continue
        verdict = record_verdict(r)
        if r["status"] == "error":
            kind = r.get("error_in")
            command = r["reproduce"][kind] if kind else "; ".join(r["reproduce"].values())
            cells = [f"error: {r['error']}", "-"]
            share = float("inf")
        else:
            comps = {kind: _comparison(r, kind) for kind in KINDS}
            cells = [_comparison_cell(comps["forward"]), _comparison_cell(comps["gradients"])]
            ran = [c for c in comps.values() if c]
            worst = max(ran, key=lambda c: (not c["passed"], bool(c["indeterminate"]) and verdict == "indeterminate",
                                            -1 if c["share"] is None else c["share"]))
            command, share = worst["reproduce"], worst["share"] or 0.0
        row = [config_label(r["config"]), _verdict_span(verdict), *cells, _command(command)]
        by_backend[r["backend"]].append(((_ORDER[verdict], -share, r["id"]), row))
    parts = []
    for backend, rows in sorted(by_backend.items()):
        rows.sort(key=lambda kr: kr[0])
        counts = defaultdict(int)
        for key, _ in rows:
            counts[key[0]] += 1
        tally = ", ".join(f"{counts[_ORDER[v]]} {v}" for v in ("passed", "failed", "indeterminate"))
        parts.append(f"<details><summary><code>{html.escape(backend)}</code>: {len(rows)} comparisons ({tally})"
                     f"</summary>")
        parts.append(_html_table(["config", "verdict", "forward: quantity error / budget (share)",
                                  "gradients: quantity error / budget (share)", "reproduce (the worse comparison)"],
                                 [row for _, row in rows], "cases"))
        parts.append("</details>")
    return parts


def _figure(key: str, png: str, caption: str) -> str:
    return (f"<figure id='fig-{key}'><img alt='{key}' src='data:image/png;base64,{png}'>"
            f"<figcaption>{caption}</figcaption></figure>")


def _study(figures: dict, key: str, title: str, caption: str) -> list[str]:
    """A study's heading and figure, where the figure was drawn (none without matplotlib)."""
    return [f"<h3>{title}</h3>", _figure(key, figures[key], caption)] if figures.get(key) else []


def _collapsed(summary: str, head: list[str], rows: list[list[str]]) -> list[str]:
    """A table folded under ``summary`` (nothing where it has no rows)."""
    return [f"<details><summary>{summary}</summary>", _html_table(head, rows), "</details>"] if rows else []


def _heat_caption(report: dict) -> str:
    reasons: dict[str, list[str]] = defaultdict(list)
    for s in report["skipped"]:
        reasons[s["backend"]].append(f"{s['reason']} ({s['count']} configs)")
    why = "".join(f"<li><code>{html.escape(b)}</code>: {html.escape('; '.join(rs))}</li>"
                  for b, rs in sorted(reasons.items()))
    text = ("One panel per backend; each cell is the worst share of the budget (conditioned error / budget) "
            "among that mode and dtype's comparisons: green well within, red above 1 (failed); \"error\": a "
            "comparison ended in an error. Hatched cells: not run (the backend cannot run that mode or dtype), "
            "or indeterminate (every comparison there could not be judged); \"not in grid\": the grid has no "
            "config of that mode and dtype.")
    if why:
        text += f" Why not run:<ul>{why}</ul>"
    return text


CSS = ("body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;padding:1em 2em;"
       "max-width:1200px;line-height:1.4;color:#222}"
       "h2{margin-top:1.6em;border-bottom:1px solid #ddd}h3{margin-top:1.2em}"
       "table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;"
       "vertical-align:top;text-align:left}th{background:#eee}"
       "table.cases{width:100%}table.cases td{overflow-wrap:break-word}"
       "table.numbered td:first-child{white-space:nowrap}"
       ".unrun{margin:.6em 0 .6em 1em}.unrun ul{margin:.2em 0}"
       "img{max-width:100%;height:auto}figure{margin:1em 0}figcaption{font-size:13px;color:#444;max-width:70em}"
       "code{font-size:12px;overflow-wrap:anywhere}"
       "code.cmd{display:block;white-space:pre-wrap;word-break:break-all;background:#f5f5f5;padding:2px 4px;"
       "min-width:24em}"
       "details{margin:.4em 0}summary{cursor:pointer}"
       ".failed{color:#b00;font-weight:bold}.passed{color:#070;font-weight:bold}"
       ".incomplete,.indeterminate{color:#a60;font-weight:bold}"
       "nav{font-size:14px;margin:.5em 0}nav a{margin-right:1em}.note{color:#444;font-size:14px}")


def html_page(report: dict, figures: bool = True) -> str:
    """``index.html`` of ``report``: its tables, and its figures unless ``figures`` is false (``--no-figures``)
    or matplotlib is missing, which the page then says."""
    drawn = plots.figures(report) if figures else {}
    verdict = _verdict(report)
    failures = _failures(report)
    closest = _closest_calls(report)
    sections = [("summary", "Summary"), ("failures", f"Failures ({len(failures)})"), ("closest", "Closest calls"),
                ("studies", "Studies"), ("policy", "Policy"), ("not-run", "Not run"),
                ("environment", "Backends and environment"), ("every", "Every comparison")]
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<title>cudnn-rnn-compat report</title><style>", CSS, "</style></head><body>",
        "<h1>cudnn-rnn-compat divergence report</h1>",
        f"<p>Grid <code>{html.escape(report['grid'])}</code>, seed {report['seed']}, generated "
        f"{report['generated_utc']}. {html.escape(_counts(report))}. "
        f"<span class='{verdict}'>{html.escape(_VERDICT_TEXT[verdict])}</span></p>",
        *((f"<p>{html.escape(LEFT_OUT[report['grid']])}</p>",) if report["grid"] in LEFT_OUT else ()),
        *(f"<p class='failed'>{html.escape(note)}</p>" for note in _shortfalls(report)),
        "<nav>" + "".join(f"<a href='#{k}'>{html.escape(t)}</a>" for k, t in sections) + "</nav>",
        f"<p class='note'>Measure: {html.escape(MEASURE)}.</p>",
        "<a id='summary'></a><h2>Summary</h2>", _html_table(SUMMARY_HEAD, _backend_rows(report)),
    ]
    if drawn.get("heatmaps"):
        parts.append(_figure("heatmaps", drawn["heatmaps"], _heat_caption(report)))
    parts += ["<details><summary>The worst share of the budget per mode, as a table</summary>",
              _html_table(["backend", "dtype", *MODE_NAMES], _mode_rows(report)), "</details>"]
    if not figures:
        parts.append("<p><em>No figures: this page was written with --no-figures. <code>rnn-compat render DIR</code> "
                     "writes it again with them.</em></p>")
    elif not drawn:
        parts.append("<p><em>No figures: matplotlib was not installed where this page was written. With "
                     "pip install '.[report]', <code>rnn-compat render DIR</code> writes it again with them.</em></p>")
    parts.append(f"<a id='failures'></a><h2>Failures ({len(failures)})</h2>")
    if failures:
        parts += [f"<p>{html.escape(_failures_note(report))}</p>", _html_cases(failures)]
    else:
        parts.append("<p class='passed'>No comparison failed.</p>")
    parts.append("<a id='closest'></a><h2>Closest calls</h2>")
    if closest:
        parts += [f"<p>The {len(closest)} passed comparisons that used the largest share of their budget (error / "
                  f"budget, in conditioned eps; above 1 would fail).</p>", _html_cases(closest)]
    else:
        parts.append("<p>No comparison was judged.</p>")
    parts.append("<a id='studies'></a><h2>Studies</h2>")
    published_head, published_rows = _published_rows(report)
    if published_rows:
        parts += ["<h3>cuDNN's published checksums</h3>", f"<p class='note'>{html.escape(PUBLISHED_NOTE)}</p>",
                  _html_table(published_head, published_rows)]
    parts += _study(drawn, "drift", "Drift over long sequences",
                    "The error at each time step of the configs of at least 100 steps, in the tables' unit: the "
                    "step's error in conditioned eps (the config's kappa) / the quantity's budget, so 1 (the "
                    "shaded band above it) is the budget. Rows: output and input gradient; columns: dtype; one "
                    "line per backend, at each step the largest among its long configs of that dtype (for long "
                    "sequences, the largest of each window of steps). Each config's own: the table below, and "
                    "report.json (studies.drift).")
    if report["studies"]["drift"]:
        parts += _collapsed("Per config: output error / budget at steps 1, 10, 100, 1000", DRIFT_HEAD,
                            _drift_rows(report))
    parts += _study(drawn, "gru_variant", "cuDNN GRU vs textbook GRU under the same weights",
                    "Not a compatibility check: how far the two GRU formulations (cuDNN's reset gate after "
                    "the recurrent matmul, the textbook's before) drift apart under the same weights, per "
                    "weight scale (weights ~ U(-s/sqrt(H), s/sqrt(H))), in absolute output units.")
    variant_rows, variant_head = _variant_rows(report)
    parts += _collapsed("GRU variants: max |output difference| per weight scale and length", ["scale", *variant_head],
                        variant_rows)
    parts += _study(drawn, "amplification", "Forward vs backward error amplification",
                    "One point per comparison with gradients: its forward pass's worst share of the budget "
                    "(x) against its gradients' (y), both conditioned error / budget as in the tables. One "
                    "panel per backend, one colour per dtype, one marker per mode. The dashed lines at 1 are "
                    "the budgets (beyond them: failed); the grey diagonal is an equal share for both. Points "
                    "on the left or bottom edge had no error there at all (or less than the axis shows); "
                    "an error or a non-finite mismatch is not a point: see Failures. Points far below the "
                    "diagonal (in the built-in grids, float16 relu) are gradients with a large condition "
                    "estimate: a ReLU network's gradient depends on which units are active, which a "
                    "half-precision rounding can flip, so kappa is large, the error is divided by it and uses "
                    "little of its budget; their raw errors are the large raw ratios of the table below.")
    if report["studies"]["amplification"]:
        parts += [f"<p class='note'>{html.escape(AMPLIFICATION_NOTE)}</p>",
                  *_collapsed("Amplification per backend, dtype and mode, as a table", AMPLIFICATION_HEAD,
                              _amplification_rows(report))]
    tf32_rows = _tf32_rows(report)
    if tf32_rows:
        parts += ["<h3>TF32 as each backend computes it</h3>", f"<p class='note'>{html.escape(TF32_NOTE)}</p>",
                  _html_table(TF32_HEAD, tf32_rows)]
    parts += ["<a id='policy'></a><h2>Policy exceptions for these backends</h2><ul>",
              *([f"<li>{html.escape(e)}</li>" for e in _exceptions(report)] or
                ["<li>none: every backend is judged by the default budgets</li>"]), "</ul>"]
    parts.append("<a id='not-run'></a><h2>Not run</h2>")
    if report["skipped"]:
        parts += ["<p>Configs a backend skipped, per backend and reason:</p><ul>",
                  *[f"<li><code>{html.escape(s['backend'])}</code>: {s['count']} configs: "
                    f"{html.escape(s['reason'])}</li>" for s in report["skipped"]], "</ul>"]
    if report["unrun"]:
        parts.append(f"<p>{len(report['unrun'])} configs no selected backend could run, per distinct set of "
                     f"reasons:</p>")
        for reasons, configs in _unrun_groups(report):
            why = "".join(f"<li><code>{html.escape(b)}</code>: {html.escape(r)}</li>" for b, r in reasons)
            parts.append(f"<div class='unrun'>{len(configs)} configs, because<ul>{why}</ul><details><summary>"
                         f"the {len(configs)} configs</summary><p class='note'>{html.escape(', '.join(configs))}"
                         f"</p></details></div>")
    if not report["skipped"] and not report["unrun"]:
        parts.append("<p>Every config of the grid ran on every selected backend that could run it.</p>")
    parts += ["<a id='environment'></a><h2>Backends</h2><ul>", *[f"<li><code>{html.escape(b['name'])}</code>: "
                                                          f"{'available' if b['available'] else 'unavailable'}, "
                                                          f"{html.escape(str(b['detail']) + _plugin(b))}</li>"
                                                          for b in report["backends"]], "</ul>"]
    parts += ["<h2>Environment</h2>", _html_table(["item", "value"], [[k, _value(v)] for k, v in
                                                                      report["environment"].items()])]
    if report.get("environments"):
        intro, head, rows = _environment_rows(report["environments"])
        parts += ["<h2>Environments of the workers</h2>", f"<p>{html.escape(intro)}</p>", _html_table(head, rows)]
    parts += ["<a id='every'></a><h2>Every comparison</h2>",
              "<p>Per backend, failures first, then by the share of the budget used; each row's command runs its "
              "worse comparison again (report.json and results.jsonl hold every number).</p>",
              *_listing(report), "</body></html>"]
    return "\n".join(parts)


def terminal_summary(report: dict, out: str) -> str:
    head = SUMMARY_HEAD
    rows = _backend_rows(report)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*head), *(fmt.format(*r) for r in rows), "",
             f"{_counts(report)}. {_VERDICT_TEXT[_verdict(report)]}",
             *_shortfalls(report),
             f"report: {out}/report.md, {out}/index.html, {out}/report.json ({out}/results.jsonl per unit)"]
    failing = _failures(report)
    if failing:
        lines += ["", "Failing (re-run one with its command):"]
        lines += [f"  {w['backend']} {w['config']} {w['quantity']}: {w['reproduce']}" for w in failing[:WORST_CASES]]
        if len(failing) > WORST_CASES:
            lines.append(f"  ... and {len(failing) - WORST_CASES} more, each with its command in {out}/report.md")
    return "\n".join(lines)
