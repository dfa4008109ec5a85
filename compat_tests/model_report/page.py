"""A model run's records -> its report: ``report.json`` (:func:`build`), ``report.md``, ``index.html`` (with the
per-step error figure) and the terminal summary. Deterministic in the records and the plan but for the
``generated_utc`` stamp."""

from __future__ import annotations

import datetime as _dt
import html
import json
from pathlib import Path

from reference.formats.files import replacing

from ..report.aggregate import tf32_stray
from ..report.folder import check_own
from ..report.render import CSS, MEASURE, _command, _figure, _Html, _html_table, _md_table, _md_text
from ..report.run_plan import PLAN
from ..report.sweep import RESULTS, read_records
from . import plan as run_plan
from .units import FILE_BACKEND

SCHEMA_VERSION = 1
# the math modes of the tolerance lines (others: standard); reference-tf32 predicts a GPU's TF32 on the CPU
MATH = {"cudnn-tf32": "TF32 tensor-core math", "reference-tf32": "TF32 tensor-core math",
        "cudnn-persist": "cuDNN's persistent kernels"}
ROW_HEAD = ["backend", "dtype", "input", "verdict", "share of budget", "batch / repeat invariance"]


def _share(record: dict) -> float | None:
    shares = [v["conditioned"] / v["budget"] for v in (record.get("forward") or {}).values()
              if not v.get("indeterminate") and v.get("conditioned") is not None]
    bad = any(v.get("nonfinite_mismatch") for v in (record.get("forward") or {}).values())
    return float("inf") if bad else max(shares) if shares else None


def _backend_label(record: dict, files: list[dict]) -> str:
    if record["backend"] != FILE_BACKEND:
        chained = bool(files[0].get("layers"))
        return record["backend"] + (f", layer {record['layer']}" if chained else "")
    f = files[record["file"]]
    framework = (record.get("model") or {}).get("framework") or "its framework"
    return f"{Path(f['path']).name} in {framework}"


def _verdict_text(record: dict) -> str:
    if record["status"] == "error":
        return f"error: {record['error']}"
    share = _share(record)
    if record["indeterminate"] and record["passed"]:
        return "indeterminate: the model is too ill-conditioned on this input to tell rounding from a fault"
    if record["passed"]:
        return f"within rounding ({share:.0%} of its budget)" if share is not None else "within rounding"
    result = record.get("model") or {}
    strays = [first for first in map(tf32_stray, (record.get("forward") or {}).values()) if first]
    if strays and share is not None and share <= 1:
        return (f"not TF32 as any TF32 truth computes it: its first step is {strays[0]['share']:.3g} of TF32's cost "
                f"from the nearest (more than {strays[0]['bound']:g}; 1 is a run without TF32), within its budget "
                f"otherwise ({share:.0%})")
    found = result.get("diagnosis") or []
    where = _where(result.get("location"))
    size = "non-finite where the truth is finite" if share == float("inf") else f"{share:.3g} times its budget"
    if found:
        return f"beyond rounding ({size}): most likely {found[0]['detail']}" + (
            f" (or: {'; '.join(d['detail'] for d in found[1:3])})" if len(found) > 1 else "") + where
    return f"beyond rounding ({size}); none of the checked faults explains it{where}"


def _where(location: dict | None) -> str:
    if not location:
        return ""
    parts = []
    if location.get("layer") is not None:
        parts.append(f"layer {location['layer']}")
    if location.get("direction"):
        parts.append(f"the {location['direction']} direction" if location["direction"] != "both" else "both directions")
    if location.get("step") is not None:
        parts.append(f"time step {location['step']}")
    return f"; it first leaves its budget at {', '.join(parts)}" if parts else ""


def _invariance(record: dict) -> str:
    found = (record.get("model") or {}).get("invariance")
    if not found:
        return "-"
    batch = found.get("batch") or "batch of one"
    return f"{batch} / {found['repeat']}"


# The tolerance to use keeps this headroom over the largest conditioned error the model's runs showed, as the
# policy's budgets keep 2-4x over the largest their calibration saw (compat_tests/judge/tolerances.py); never
# more than the budget, never less than one conditioned eps.
HEADROOM = 4.0
QUANTITIES = ("output", "output_h", "output_c")


def tolerances(records: list[dict]) -> list[dict]:
    """Per dtype, math mode, T and quantity, over the results within rounding: ``atol`` = the largest conditioned
    eps on this model (``eps_scaled``: eps x scale x kappa) x ``min(budget, max(1, HEADROOM x the largest
    conditioned error seen))``, and the backends it covers. The policy's measure solved for the error, on the
    model's own conditioning, with the policy's headroom over what this model's runs measured."""
    groups: dict[tuple, list[tuple[str, dict]]] = {}
    for r in records:
        if r["status"] != "ok" or not r["passed"] or r["indeterminate"]:
            continue
        math = MATH.get(r["backend"], "standard")
        if r["backend"] == FILE_BACKEND and r["layer"]:
            continue  # (a chain's file: its whole chain's error against its last layer's truth alone)
        for quantity, basis in (r["model"].get("tolerance") or {}).items():
            groups.setdefault((r["config"]["dtype"], math, r["config"]["seq_len"], r["layer"], quantity),
                              []).append((r["backend"], basis))
    found = []
    for (dtype, math, T, layer, quantity), entries in groups.items():
        worst = max(b["conditioned"] for _, b in entries)
        factor = min(min(b["budget"] for _, b in entries), max(1.0, HEADROOM * worst))
        found.append({"dtype": dtype, "math": math, "T": T, "layer": layer, "quantity": quantity,
                      "conditioned": worst, "factor": factor, "atol": factor * max(b["eps_scaled"] for _, b in entries),
                      "backends": sorted({name for name, _ in entries})})
    order = {q: i for i, q in enumerate(QUANTITIES)}
    return sorted(found, key=lambda t: (t["dtype"], t["math"], t["T"], t["layer"], order.get(t["quantity"], 9)))


def paste_line(t: dict) -> str:
    """The ``assert_allclose`` line of a tolerance entry (:func:`tolerances`)."""
    return (f"np.testing.assert_allclose({t['quantity']}, expected_{t['quantity']}, rtol=0, atol={t['atol']:.2g})"
            f"  # {t['dtype']}, {t['math']}, T={t['T']}" + (f", layer {t['layer']} (on its own truth input)"
                                                           if t["layer"] else ""))


def build(out: Path) -> dict:
    """The report document of the model run in ``out`` (its plan and its records)."""
    plan = run_plan.read(out)
    done = {r["id"]: r for r in read_records(out / RESULTS)}
    records = [done[i] for i in plan["units"] if i in done]
    files = plan["files"]
    rows = []
    for r in records:
        rows.append({"backend": _backend_label(r, files), "kind": "file" if r["backend"] == FILE_BACKEND else "peer",
                     "file": r["file"], "layer": r["layer"], "dtype": r["config"]["dtype"], "input": r["input"],
                     "input_label": plan["inputs"][r["input"]]["label"], "status": r["status"],
                     "passed": r["passed"], "indeterminate": r["indeterminate"], "share": _share(r),
                     "verdict": _verdict_text(r), "invariance": _invariance(r),
                     "diagnosis": (r.get("model") or {}).get("diagnosis"),
                     "location": (r.get("model") or {}).get("location"),
                     "per_step": _per_step_shares(r), "reproduce": r["reproduce"]["forward"], "id": r["id"]})
    complete = len(records) == len(plan["units"])
    passed = all(r["passed"] for r in records) and not any(
        b.get("requested") and not b["available"] for b in plan["backends"])
    return {"kind": "model", "schema_version": SCHEMA_VERSION,
            "generated_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "files": files, "architecture": plan["architecture"], "inputs": plan["inputs"], "weights": plan["weights"],
            "rows": rows, "tolerances": tolerances(records), "skipped": plan["skipped"],
            "backends": plan["backends"], "environment": plan["environment"], "policy": plan["policy"],
            "planned_units": len(plan["units"]), "ran_units": len(records), "complete": complete,
            "passed": passed, "verdict": "failed" if not passed else "passed" if complete else "incomplete"}


def _per_step_shares(record: dict) -> list[float] | None:
    v = (record.get("forward") or {}).get("output")
    if not v or v.get("per_step") is None or v.get("indeterminate"):
        return None
    return [s / max(1.0, v["kappa"]) / v["budget"] for s in v["per_step"]]


def render(out: Path, figures: bool = True) -> dict:
    """Write ``report.json``, ``report.md`` and ``index.html`` of the model run in ``out``; return the report."""
    check_own(out)
    if not (out / PLAN).is_file():
        raise ValueError(f"{out} holds no {PLAN}: it is not the folder of an rnn-compat report run")
    report = build(out)
    for name, text in (("report.json", json.dumps(report, indent=1, sort_keys=True) + "\n"),
                       ("report.md", markdown(report)), ("index.html", html_page(report, figures))):
        with replacing(out / name) as partial:
            partial.write_text(text)
    return report


HEADLINE = {"passed": "Verdict: every backend within rounding of the float64 truth",
            "failed": "Verdict: failed, a result beyond rounding (or an error)",
            "incomplete": "Verdict: incomplete, no failure among the units that ran"}


def _headline(report: dict) -> str:
    names = ", ".join(f"{Path(f['path']).name} ({f['format']})" for f in report["files"])
    return (f"{names}: {report['files'][0]['model']}; {report['ran_units']} of {report['planned_units']} units ran. "
            f"{HEADLINE[report['verdict']]}.")


def _row_cells(row: dict) -> list[str]:
    share = "-" if row["share"] is None else "non-finite" if row["share"] == float("inf") else f"{row['share']:.2g}"
    return [row["backend"], row["dtype"], row["input_label"], row["verdict"], share, row["invariance"]]


def _sorted_rows(report: dict) -> list[dict]:
    """Failures first, then by backend, dtype and input."""
    return sorted(report["rows"], key=lambda r: (r["passed"], r["backend"], r["dtype"], r["input"]))


SUMMARY_HEAD = ["backend", "dtype", "results", "verdict", "worst share of budget", "batch / repeat invariance"]
INVARIANCE_ORDER = ("beyond rounding", "within rounding", "bit for bit", "batch of one", "-")


def summary(report: dict) -> list[dict]:
    """One entry per backend and dtype, over its inputs: ``results``, ``failed`` (how many beyond rounding or in
    error), the worst ``share`` of the budget, the verdict of its worst result (``verdict``) and its weakest
    batch and repeat invariance."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in report["rows"]:
        groups.setdefault((r["backend"], r["dtype"]), []).append(r)
    entries = []
    for (backend, dtype), rows in groups.items():
        worst = max(rows, key=lambda r: (not r["passed"], r["status"] == "error",
                                         -1.0 if r["share"] is None else r["share"]))
        batch = [r["invariance"].split(" / ")[0] for r in rows if " / " in r["invariance"]]
        repeat = [r["invariance"].split(" / ")[1] for r in rows if " / " in r["invariance"]]
        weakest = [min(v, key=INVARIANCE_ORDER.index) if v else "-" for v in (batch, repeat)]
        entries.append({"backend": backend, "dtype": dtype, "results": len(rows),
                        "failed": sum(not r["passed"] for r in rows), "share": worst["share"],
                        "verdict": worst["verdict"], "invariance": " / ".join(weakest) if batch else "-",
                        "reproduce": worst["reproduce"], "passed": all(r["passed"] for r in rows)})
    return sorted(entries, key=lambda e: (e["passed"], e["backend"], e["dtype"]))


def _summary_cells(entry: dict) -> list[str]:
    share = entry["share"]
    shown = "-" if share is None else "non-finite" if share == float("inf") else f"{share:.2g}"
    results = f"{entry['results']}" + (f" ({entry['failed']} beyond rounding)" if entry["failed"] else "")
    return [entry["backend"], entry["dtype"], results, entry["verdict"], shown, entry["invariance"]]


def _weights_lines(report: dict) -> list[str]:
    lines = []
    for w in report["weights"]:
        tensors = "; ".join(t["tensor"] + (f" (max difference {t['max_abs']:.3g})" if t.get("max_abs") else
                                           f" ({t.get('why')})") for t in w["tensors"][:6])
        more = f" and {len(w['tensors']) - 6} more" if len(w["tensors"]) > 6 else ""
        why = f": the readers refused it ({w['why']}); its own framework's results are judged alone" \
            if w["verdict"] == "not read" else f": {tensors}{more}" if tensors else ""
        lines.append(f"{w['file']} against {w['against']}: {w['verdict']}{why}")
    return lines


def _skipped_lines(report: dict) -> list[str]:
    return [f"{s['backend']} {s['dtype']}: {s['reason']}" for s in report["skipped"]] + [
        f"{b['name']}: {b['detail']}" for b in report["backends"] if not b["available"]]


def markdown(report: dict) -> str:
    lines = ["# cudnn-rnn-compat report: your model", "", _md_text(_headline(report)), "",
             f"Measure: {_md_text(MEASURE)}.", "", "## Every backend", "",
             "The worst result of each backend and dtype over the inputs (every result: below).", ""]
    lines += _md_table(SUMMARY_HEAD, [[_md_text(c) for c in _summary_cells(e)] for e in summary(report)])
    failing = [r for r in _sorted_rows(report) if not r["passed"]]
    if failing:
        lines += ["", "## Beyond rounding", "", "Each result beyond rounding, and the command that runs it again "
                  "(it prints its record):", ""]
        lines += [f"- {_md_text(r['backend'])} {r['dtype']}, {_md_text(r['input_label'])}: {_md_text(r['verdict'])}  "
                  f"\n  `{r['reproduce']}`" for r in failing[:20]]
        if len(failing) > 20:
            lines.append(f"- ... and {len(failing) - 20} more, in every result below")
    lines += ["", "## The tolerance to use", "",
              "For your own test of an output against the float64 truth (rtol 0: an RNN's rounding error scales "
              "with the tensor's largest value, not each element's; between two runs in one dtype, twice the atol):",
              "", "```python", *(paste_line(t) for t in report["tolerances"]), "```", ""]
    if report["weights"]:
        lines += ["## The files' weights", "", *(f"- {_md_text(w)}" for w in _weights_lines(report)), ""]
    lines += ["## Files", "", *(f"- {_md_text(f['path'])} ({f['format']}): {_md_text(f['model'])}"
                                + (f"; note: {_md_text(f['note'])}" if f.get("note") else "") for f in report["files"]),
              "", "## Inputs", "", *(f"- {_md_text(i['label'])}" for i in report["inputs"]), ""]
    skipped = _skipped_lines(report)
    if skipped:
        lines += ["## Not run", "", *(f"- {_md_text(s)}" for s in skipped), ""]
    lines += ["## Every result", ""]
    lines += _md_table(ROW_HEAD, [[_md_text(c) for c in _row_cells(r)] for r in _sorted_rows(report)])
    env = report["environment"]
    lines += ["", "## Environment", "", _md_text(", ".join(f"{k} {v}" for k, v in sorted(env.items())
                                                       if isinstance(v, (str, int)))), ""]
    return "\n".join(lines)


def _figure_png(report: dict) -> str | None:
    """The per-step error of each backend on the longest input, as shares of its budget (its envelope: the
    largest over each hundredth of the steps; colour by backend, line by dtype), or ``None`` without
    matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    from ..report.plots import _envelope, _png

    rows = [r for r in report["rows"] if r["per_step"]]
    if not rows:
        return None
    longest = max(len(r["per_step"]) for r in rows)
    curves: dict[tuple[str, str], list[float]] = {}
    for r in rows:  # the worst over the inputs of that length, per backend and dtype
        if len(r["per_step"]) == longest:
            key = (r["backend"], r["dtype"])
            curves[key] = [max(a, b) for a, b in zip(curves.get(key, r["per_step"]), r["per_step"])]
    colours = {name: plt.get_cmap("tab10")(k % 10) for k, name in enumerate(sorted({b for b, _ in curves}))}
    styles = {"float16": "--", "float32": "-", "float64": ":"}
    fig, ax = plt.subplots(figsize=(10, 4.2), layout="constrained")
    for (backend, dtype), shares in sorted(curves.items()):
        steps, envelope = _envelope(shares, floor=1e-4)
        ax.plot(steps, envelope, label=f"{backend} {dtype}", lw=1.2, color=colours[backend], ls=styles.get(dtype, "-"))
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel(f"time step (each point: the largest over {max(1, longest // 100)} steps)")
    ax.set_ylabel("error / budget")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return _png(fig)


def html_page(report: dict, figures: bool = True) -> str:
    png = _figure_png(report) if figures else None
    rows = [[_Html(f"<span class='{'passed' if r['passed'] else 'failed'}'>{html.escape(r['backend'])}</span>"),
             *_row_cells(r)[1:]] for r in _sorted_rows(report)]
    summarised = [[_Html(f"<span class='{'passed' if e['passed'] else 'failed'}'>{html.escape(e['backend'])}</span>"),
                   *_summary_cells(e)[1:]] for e in summary(report)]
    failing = [r for r in _sorted_rows(report) if not r["passed"]]
    parts = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>"
             "<meta name='viewport' content='width=device-width, initial-scale=1'>"
             "<title>cudnn-rnn-compat report: your model</title><style>", CSS, "</style></head><body>",
             "<h1>cudnn-rnn-compat report: your model</h1>",
             f"<p class='{report['verdict']}'>{html.escape(_headline(report))}</p>",
             f"<p class='note'>Measure: {html.escape(MEASURE)}.</p>",
             "<nav><a href='#every-backend'>Every backend</a><a href='#beyond'>Beyond rounding</a>"
             "<a href='#tolerance'>The tolerance to use</a><a href='#every'>Every result</a></nav>",
             "<a id='every-backend'></a><h2>Every backend</h2>",
             "<p>The worst result of each backend and dtype over the inputs.</p>",
             _html_table(SUMMARY_HEAD, summarised)]
    if failing:
        parts += ["<a id='beyond'></a><h2>Beyond rounding</h2><p>Each result beyond rounding, and the command that "
                  "runs it again (it prints its record):</p>",
                  _html_table(["backend", "dtype", "input", "verdict", "command"],
                              [[r["backend"], r["dtype"], r["input_label"], r["verdict"], _command(r["reproduce"])]
                               for r in failing[:20]], "cases")]
    if png:
        parts.append(_figure("steps", png, "The output's error at each time step of the longest input, as a share of "
                                           "its budget (dashed: beyond rounding; above 1: beyond the budget)."))
    elif figures:
        parts.append("<p><em>No figure: matplotlib is not installed here (pip install '.[report]', then rnn-compat "
                     "render DIR).</em></p>")
    parts += ["<a id='tolerance'></a><h2>The tolerance to use</h2>",
              "<p>For your own test of an output against the float64 truth (rtol 0: an RNN's rounding error scales "
              "with the tensor's largest value, not each element's; between two runs in one dtype, twice the "
              "atol):</p>", "<pre>" + html.escape("\n".join(paste_line(t) for t in report["tolerances"])) + "</pre>"]
    if report["weights"]:
        parts += ["<h2>The files' weights</h2>", "<ul>" + "".join(f"<li>{html.escape(w)}</li>"
                                                                for w in _weights_lines(report)) + "</ul>"]
    parts += ["<h2>Files and inputs</h2>", "<ul>" + "".join(
        f"<li>{html.escape(f['path'])} ({html.escape(f['format'])}): {html.escape(f['model'])}</li>"
        for f in report["files"]) + "".join(f"<li>{html.escape(i['label'])}</li>" for i in report["inputs"]) + "</ul>"]
    skipped = _skipped_lines(report)
    if skipped:
        parts += ["<h2>Not run</h2>", "<ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in skipped) + "</ul>"]
    parts += ["<a id='every'></a><h2>Every result</h2><details><summary>Each backend, dtype and input "
              f"({len(rows)})</summary>", _html_table(ROW_HEAD, rows, "cases"), "</details>", "</body></html>"]
    return "\n".join(parts)


def terminal_summary(report: dict, out: str) -> str:
    lines = [_headline(report), ""]
    for e in summary(report):
        lines.append(f"  {e['backend']} {e['dtype']} ({_summary_cells(e)[2]} results): {e['verdict']}")
    failing = [r for r in _sorted_rows(report) if not r["passed"]]
    if failing:
        lines += ["", "Beyond rounding (each re-runs with its command, in report.md):"]
        lines += [f"  {r['backend']} {r['dtype']}, {r['input_label']}: {r['verdict']}" for r in failing[:20]]
    lines += ["", "The tolerance to use for the output against the float64 truth (the states': in report.md):",
              *(f"  {paste_line(t)}" for t in report["tolerances"] if t["quantity"] == "output")]
    lines += [f"report: {out}/report.md, {out}/index.html, {out}/report.json ({out}/results.jsonl per unit)"]
    return "\n".join(lines)
