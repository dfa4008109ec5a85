"""The report document -> ``report.md`` (renders on a code forge) and ``index.html`` (self-contained, plots
embedded as PNG data URIs), plus the short summary printed on the terminal."""

from __future__ import annotations

import html
import re
from collections import defaultdict

from ..config import MODE_NAMES
from . import plots
from .aggregate import WORST_CASES, budget_share, config_label, group_worst, unavailable_requested

MEASURE = ("conditioned error = max|x - truth| / (eps(dtype) * max(1, max|truth|) * max(1, kappa)), kappa the "
           "config's measured sensitivity; shown as error / budget (compat_tests/tolerances.py)")


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


_MARKUP = re.compile(r"([\\`*_\[\]<>|#~&!])")


def _md_text(text) -> str:
    """Free text (an error message, a backend's reason, a machine's description) as literal Markdown: one
    line, with every character Markdown could read as markup escaped."""
    return _MARKUP.sub(r"\\\1", " ".join(str(text).split()))


def _what(w: dict) -> str:
    """A worst case's error, or its quantity's error against its budget (and its non-finite mismatches)."""
    if w.get("error"):
        return w["error"]
    text = f"{w['quantity']}: {_fmt(w['conditioned'])} / budget {_fmt(w['budget'])}"
    if w.get("nonfinite_mismatch"):
        text = (f"{w['quantity']}: {w['nonfinite_mismatch']} non-finite mismatches (non-finite where the truth is "
                f"finite, or the reverse); the finite entries {_fmt(w['conditioned'])} / budget {_fmt(w['budget'])}")
    return text


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
        cells[(row["backend"], row["dtype"])][row["mode"]] = ("FAIL " if row["failed"] else "") + (worst[1] if worst else "-")
    return [[b, d, *(cells[(b, d)].get(m, "") for m in MODE_NAMES)] for (b, d) in sorted(cells)]


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


SUMMARY_HEAD = ["backend", "dtype", "units", "passed", "failed", "indeterminate", "worst forward", "worst gradient"]


def _drift_rows(report: dict) -> list[list[str]]:
    rows = []
    for d in report["studies"]["drift"]:
        steps = d["output"] or []
        picks = [i for i in (0, 9, 99, 999) if i < len(steps)]
        rows.append([d["backend"], d["dtype"], d["shape"], *(_fmt(steps[i]) for i in picks)])
    return rows


def _variant_rows(report: dict) -> list[list[str]]:
    rows = report["studies"]["gru_variant"]
    lengths = sorted({r["seq_len"] for r in rows})
    by: dict[tuple, float] = {}
    for r in rows:  # configs that share a scale and a length (other seeds or sizes): the largest difference
        key = (r["weight_scale"], r["seq_len"])
        by[key] = max(by.get(key, r["max_abs"]), r["max_abs"])
    return [[f"{s:g}", *(_fmt(by.get((s, t))) for t in lengths)] for s in sorted({r["weight_scale"] for r in rows})], \
        [f"T={t}" for t in lengths]


def _amplification_rows(report: dict) -> list[list[str]]:
    return [[r["backend"], r["dtype"], r["mode"], str(r["units"]), _fmt(r["forward_max_eps"]),
             _fmt(r["gradient_max_eps"]), _fmt(r["median_ratio"]), _fmt(r["max_ratio"])]
            for r in report["studies"]["amplification"]]


AMPLIFICATION_HEAD = ["backend", "dtype", "mode", "units", "forward max eps", "gradient max eps",
                      "median ratio", "max ratio"]


def _exceptions(report: dict) -> list[str]:
    """The policy's exceptions for the backends of this run, one line each: budget overrides (quantities of
    one budget together) and known divergences (the ledger of compat_tests/known_divergences.py); those a
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
    """FAIL, INCOMPLETE (no failure among the units that ran) or PASS."""
    return "FAIL" if not report["passed"] else "PASS" if report["complete"] else "INCOMPLETE"


_VERDICT_TEXT = {"FAIL": "FAIL", "INCOMPLETE": "INCOMPLETE, no failure among the units that ran",
                 "PASS": "PASS: every backend within the tolerance policy"}


def _worst_lines(report: dict) -> list[str]:
    lines = []
    for i, w in enumerate(report["worst"], 1):
        verdict = "PASS" if w["passed"] else "FAIL"
        what = _md_text(_what(w))
        lines.append(f"{i}. **{verdict}** `{w['backend']}` {w['config']} — {what}  ")
        lines.append(f"   `{w['reproduce']}`")
    return lines


def markdown(report: dict) -> str:
    t = report["totals"]
    lines = [
        "# cudnn-rnn-compat divergence report", "",
        f"Grid `{report['grid']}`, seed {report['seed']}, generated {report['generated_utc']}. "
        f"{t['compat_units']} comparisons: {t['passed']} passed, {t['failed']} failed, "
        f"{t['indeterminate']} indeterminate, {t['errors']} errors. **{_VERDICT_TEXT[_verdict(report)]}**.", "",
        *(line for note in _shortfalls(report) for line in (f"**{_md_text(note)}**", "")),
        f"Measure: {MEASURE}.", "",
        "## Summary", "",
        *_md_table(SUMMARY_HEAD, _backend_rows(report)), "",
        "## Worst share of the budget per mode", "",
        *_md_table(["backend", "dtype", *MODE_NAMES], _mode_rows(report)), "",
        "## Worst cases (every failure, then the largest shares of a budget; re-run one with its command)", "",
        *(_worst_lines(report) or ["none"]), "",
        "## Studies", "",
        "### Drift over long sequences: output error at step t (eps x scale)", "",
        *(_md_table(["backend", "dtype", "config", "t=1", "t=10", "t=100", "t=1000"],
                    [r + [""] * (7 - len(r)) for r in _drift_rows(report)]) if report["studies"]["drift"] else
          ["no long sequences in this grid"]), "",
    ]
    variant_rows, variant_head = _variant_rows(report)
    lines += ["### cuDNN GRU vs textbook GRU, same weights: max |output difference|", "",
              "Rows: weight scale (weights ~ U(-s/sqrt(H), s/sqrt(H))); columns: sequence length.", "",
              *(_md_table(["scale", *variant_head], variant_rows) if variant_rows else ["not in this grid"]), "",
              "### Forward vs backward error amplification (max error in eps x scale)", "",
              *(_md_table(AMPLIFICATION_HEAD, _amplification_rows(report)) if report["studies"]["amplification"]
                else ["no backend with a backward pass in this run"]), ""]
    exceptions = _exceptions(report)
    lines += ["## Policy exceptions for these backends", "",
              *([f"- {e}" for e in exceptions] or ["none: every backend is judged by the default budgets"]), ""]
    if report["skipped"]:
        lines += ["## Not run", "", *[f"- `{s['backend']}`: {s['count']} configs: {_md_text(s['reason'])}" for s in
                                      report["skipped"]], ""]
    if report["unrun"]:
        lines += ["Configs no selected backend could run:", "",
                  *[f"- {u['config']}: " + "; ".join(f"`{b}` {_md_text(why)}" for b, why in u["reasons"].items())
                    for u in report["unrun"]], ""]
    lines += ["## Backends", "", *[f"- `{b['name']}`: {'available' if b['available'] else 'unavailable'}, "
                                    f"{_md_text(b['detail'])}{_plugin(b, '`')}" for b in report["backends"]], ""]
    lines += ["## Environment", "", *[f"- {k}: {_md_text(v)}" for k, v in report["environment"].items()], ""]
    lines += ["## Configs", "", "Every comparison, by backend:", ""]
    for r in report["records"]:
        if r["study"] == "compat":
            lines.append(f"- `{r['backend']}` {config_label(r['config'])}: {'ok' if r['passed'] else 'FAIL'}")
    return "\n".join(lines) + "\n"


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def html_page(report: dict) -> str:
    t = report["totals"]
    figures = plots.figures(report)
    verdict = _verdict(report)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>cudnn-rnn-compat report</title><style>",
        "body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}th{background:#eee}"
        "img{max-width:100%}.FAIL{color:#b00;font-weight:bold}.PASS{color:#070;font-weight:bold}"
        ".INCOMPLETE{color:#b60;font-weight:bold}"
        "code{font-size:12px}",
        "</style></head><body>",
        "<h1>cudnn-rnn-compat divergence report</h1>",
        f"<p>Grid <code>{html.escape(report['grid'])}</code>, seed {report['seed']}, generated "
        f"{report['generated_utc']}. {t['compat_units']} comparisons: {t['passed']} passed, {t['failed']} failed, "
        f"{t['indeterminate']} indeterminate, {t['errors']} errors. <span class='{verdict}'>{verdict}</span></p>",
        *(f"<p class='FAIL'>{html.escape(note)}</p>" for note in _shortfalls(report)),
        f"<p>Measure: {html.escape(MEASURE)}.</p>",
        "<h2>Summary</h2>", _html_table(SUMMARY_HEAD, _backend_rows(report)),
        "<h2>Worst share of the budget per mode</h2>",
        _html_table(["backend", "dtype", *MODE_NAMES], _mode_rows(report)),
    ]
    for title, key in (("Worst share of the budget, per backend: mode x dtype", "heatmaps"),
                       ("Drift: output error per time step (long sequences)", "drift"),
                       ("cuDNN GRU vs textbook GRU under the same weights", "gru_variant"),
                       ("Forward vs backward error amplification", "amplification")):
        if figures.get(key):
            parts.append(f"<h2>{html.escape(title)}</h2><img alt='{key}' src='data:image/png;base64,{figures[key]}'>")
    if not figures:
        parts.append("<p><em>No figures: matplotlib was not installed where this page was written. With "
                     "pip install '.[report]', <code>rnn-compat render DIR</code> writes it again with them.</em></p>")
    parts.append("<h2>Worst cases</h2><p>Every failure, then the largest shares of a budget.</p><ol>")
    for w in report["worst"]:
        verdict = "PASS" if w["passed"] else "FAIL"
        what = _what(w)
        parts.append(f"<li><span class='{verdict}'>{verdict}</span> <code>{html.escape(w['backend'])}</code> "
                     f"{html.escape(w['config'])}: {html.escape(what)}<br><code>{html.escape(w['reproduce'])}</code></li>")
    parts.append("</ol>")
    variant_rows, variant_head = _variant_rows(report)
    if variant_rows:
        parts += ["<h2>GRU variants: max |output difference|</h2>", _html_table(["scale", *variant_head], variant_rows)]
    if report["studies"]["amplification"]:
        parts += ["<h2>Amplification table</h2>", _html_table(AMPLIFICATION_HEAD, _amplification_rows(report))]
    parts += ["<h2>Policy exceptions for these backends</h2><ul>",
              *([f"<li>{html.escape(e)}</li>" for e in _exceptions(report)] or
                ["<li>none: every backend is judged by the default budgets</li>"]), "</ul>"]
    if report["skipped"]:
        parts += ["<h2>Not run</h2><ul>", *[f"<li><code>{html.escape(s['backend'])}</code>: {s['count']} configs: "
                                            f"{html.escape(s['reason'])}</li>" for s in report["skipped"]], "</ul>"]
    if report["unrun"]:
        parts += ["<p>Configs no selected backend could run:</p><ul>",
                  *[f"<li>{html.escape(u['config'])}: " + html.escape("; ".join(f"{b}: {why}" for b, why in
                                                                               u["reasons"].items())) + "</li>"
                    for u in report["unrun"]], "</ul>"]
    parts += ["<h2>Backends</h2><ul>", *[f"<li><code>{html.escape(b['name'])}</code>: "
                                         f"{'available' if b['available'] else 'unavailable'}, "
                                         f"{html.escape(str(b['detail']) + _plugin(b))}</li>"
                                         for b in report["backends"]], "</ul>"]
    parts += ["<h2>Environment</h2>", _html_table(["item", "value"], [[k, str(v)] for k, v in
                                                                      report["environment"].items()])]
    rows = [[r["backend"], config_label(r["config"]), "ok" if r["passed"] else "FAIL"] for r in report["records"]
            if r["study"] == "compat"]
    parts += ["<h2>Every comparison</h2>", _html_table(["backend", "config", "verdict"], rows), "</body></html>"]
    return "\n".join(parts)


def terminal_summary(report: dict, out: str) -> str:
    t = report["totals"]
    head = SUMMARY_HEAD
    rows = _backend_rows(report)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*head), *(fmt.format(*r) for r in rows), "",
             f"{t['compat_units']} comparisons: {t['passed']} passed, {t['failed']} failed, "
             f"{t['indeterminate']} indeterminate, {t['errors']} errors",
             *_shortfalls(report),
             f"report: {out}/report.md, {out}/index.html, {out}/report.json ({out}/results.jsonl per unit)"]
    failing = [w for w in report["worst"] if not w["passed"]]
    if failing:
        lines += ["", "Failing (re-run one with its command):"]
        lines += [f"  {w['backend']} {w['config']} {w['quantity']}: {w['reproduce']}" for w in failing[:WORST_CASES]]
        if len(failing) > WORST_CASES:
            lines.append(f"  ... and {len(failing) - WORST_CASES} more, each with its command in {out}/report.md")
    return "\n".join(lines)
