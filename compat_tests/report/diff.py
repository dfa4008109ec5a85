"""``rnn-compat diff RUN_A RUN_B``: what changed between two report runs (two cuDNN versions, two GPUs, a
PyTorch upgrade), unit by unit.

A unit is matched by its id (its study, backend and config). Either side may be one environment of a fleet
run (``FOLDER@KEY``, :func:`load_run`): two environments of one fan-out run are diffed as two runs. For the
units both runs hold: the verdicts that changed (``regressed``: passed or indeterminate in A, failed in B;
``fixed``: the reverse), the conditioned errors that moved by more than ``band`` (conditioned eps, the
report's unit of error) in some quantity (``moved``), the units whose records are equal in everything but
their run time (``identical``: the same errors against the same truth, every statistic to the last bit), and
the rest (``within_band``). Then the units one run holds alone, and the two environments side by side.
``diff.json`` holds all of it; ``diff.md`` and ``index.html`` (with one figure: each unit's worst share of its
budget in B against A, per backend, the changed units marked) show it, each changed unit with the commands
that re-run it on each side.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from ..config import RNNConfig
from .aggregate import budget_share
from .folder import check_own
from .render import record_verdict
from .units import unit_command

NOISE_BAND = 1.0  # conditioned eps: below it two runs of one unit differ by rounding only
KINDS = ("forward", "gradients")
FILES = ("diff.json", "diff.md", "index.html")


def load_run(folder: str | Path) -> dict:
    """A report run's ``report.json`` (``rnn-compat report --out``; ``rnn-compat render`` writes it again); or,
    given ``FOLDER@KEY``, the records one environment of a fleet run made (``report.environments``; a key's
    first digits do), under their unit ids, with that environment: a fan-out run holds one side of a diff per
    environment."""
    from reference.formats.files import load_json

    text = str(folder)
    plain = (Path(text) / "report.json").is_file() or "@" not in Path(text).name  # (a folder named with an @)
    base, _, key = (text, "", "") if plain else text.rpartition("@")
    check_own(base, ("report.json",))
    path = Path(base) / "report.json"
    if not path.is_file():
        raise ValueError(f"{base} holds no report.json: give the folder of a report run (rnn-compat report "
                         f"--out; rnn-compat render DIR writes its report.json again), or FOLDER@KEY for one "
                         f"environment of a fleet run")
    report = load_json(path.read_bytes(), str(path))
    if not isinstance(report, dict) or not isinstance(report.get("records"), list):
        raise ValueError(f"{path} is not a report (no list of records)")
    return _one_environment(report, key, text) if key else report


def _one_environment(report: dict, key: str, name: str) -> dict:
    places = report.get("environments") if isinstance(report.get("environments"), list) else []
    keys = [p.get("key") for p in places if isinstance(p, dict) and isinstance(p.get("key"), str)]
    matches = [k for k in keys if k.startswith(key)]
    if len(matches) != 1:
        raise ValueError(f"{name}: {'no' if not matches else 'more than one'} environment of that run has a key "
                         f"starting {key!r}; its environments: {', '.join(keys) or 'none (not a fleet run)'}")
    place = next(p for p in places if p["key"] == matches[0])
    records = [{**r, "id": r["id"].partition("@")[0]} for r in report["records"]
               if isinstance(r, dict) and r.get("environment_key") == matches[0]]
    return {**report, "records": records, "environment": place.get("environment") or {}}


def _errors(record: dict) -> dict[str, float]:
    """``kind.quantity`` -> conditioned error of a compat record (inf where it is not finite)."""
    out = {}
    for kind in KINDS:
        for q, v in (record.get(kind) or {}).items():
            c = v.get("conditioned")
            out[f"{kind}.{q}"] = math.inf if c is None else float(c)
    return out


def _worst_share(record: dict) -> float | None:
    shares = [budget_share(v) for kind in KINDS for v in (record.get(kind) or {}).values()]
    return max(shares) if shares else None


def _same(a: dict, b: dict) -> bool:
    drop = {"seconds", "environment_key"}  # (two environments of one fleet run: the same unit, placed twice)
    return {k: v for k, v in a.items() if k not in drop} == {k: v for k, v in b.items() if k not in drop}


def _commands(record: dict) -> list[str]:
    reproduce = record.get("reproduce")
    if reproduce:
        return list(reproduce.values())
    return [unit_command({k: record[k] for k in ("study", "backend", "config")})]


def _label(record: dict) -> str:
    try:
        config = RNNConfig.from_dict(record["config"]).short()
    except (TypeError, ValueError, KeyError):
        config = str(record.get("config"))
    return f"{record.get('study')} {record.get('backend')} {config}"


def diff(a: dict, b: dict, band: float = NOISE_BAND) -> dict:
    """The differences of report ``b`` from report ``a`` (both as ``load_run`` reads them)."""
    if not (isinstance(band, (int, float)) and not isinstance(band, bool) and math.isfinite(band) and band >= 0):
        raise ValueError(f"band must be a finite number >= 0 (conditioned eps), got {band!r}")
    ra, rb = ({r["id"]: r for r in rep["records"]} for rep in (a, b))
    out = {"band": band, "regressed": [], "fixed": [], "moved": [], "identical": 0, "within_band": 0,
           "only_a": [], "only_b": []}
    for uid in sorted(ra.keys() & rb.keys()):
        x, y = ra[uid], rb[uid]
        if _same(x, y):
            out["identical"] += 1
            continue
        ex, ey = _errors(x), _errors(y)
        moved = {q: [ex[q], ey[q]] for q in sorted(ex.keys() & ey.keys())
                 if not (ex[q] == ey[q] or abs(ey[q] - ex[q]) <= band)}  # inf to inf is no move
        vx, vy = record_verdict(x), record_verdict(y)
        entry = {"id": uid, "unit": _label(x), "verdict": [vx, vy], "status": [x.get("status"), y.get("status")],
                 "errors": moved, "worst_share": [_worst_share(x), _worst_share(y)],
                 "reproduce": {"a": _commands(x), "b": _commands(y)}}
        if vx != "failed" and vy == "failed":
            out["regressed"].append(entry)
        elif vx == "failed" and vy != "failed":
            out["fixed"].append(entry)
        elif moved:
            out["moved"].append(entry)
        else:
            out["within_band"] += 1
    out["only_a"] = [{"id": i, "unit": _label(ra[i])} for i in sorted(ra.keys() - rb.keys())]
    out["only_b"] = [{"id": i, "unit": _label(rb[i])} for i in sorted(rb.keys() - ra.keys())]
    env_a, env_b = a.get("environment") or {}, b.get("environment") or {}
    out["environment"] = [{"key": k, "a": env_a.get(k), "b": env_b.get(k), "differs": env_a.get(k) != env_b.get(k)}
                          for k in sorted(env_a.keys() | env_b.keys())]
    changed = {e["id"] for key in ("regressed", "fixed", "moved") for e in out[key]}
    out["points"] = [{"backend": ra[i].get("backend"), "a": _worst_share(ra[i]), "b": _worst_share(rb[i]),
                      "changed": i in changed}
                     for i in sorted(ra.keys() & rb.keys()) if ra[i].get("study") == "compat"]
    return out


TERMINAL_LIMIT = 20  # regressed units listed in the terminal; diff.md lists them all


def regressions(d: dict, limit: int = TERMINAL_LIMIT) -> list[str]:
    """The terminal's lines for the regressed units of diff ``d`` (pytest's short summary, for a CI log that
    gates on the exit status): a line each, its verdicts and worst shares of budget A -> B, and under it the
    commands that re-run it in B; at most ``limit`` units, then a line counting the rest."""
    lines = []
    for e in d["regressed"][:limit]:
        lines.append(f"REGRESSED {e['unit']} ({e['verdict'][0]} -> {e['verdict'][1]}, worst share of budget "
                     f"{_share_text(e['worst_share'][0])} -> {_share_text(e['worst_share'][1])})")
        lines += [f"  {command}" for command in e["reproduce"]["b"]]
    rest = len(d["regressed"]) - limit
    if rest > 0:
        lines.append(f"... and {rest} more regressed unit{'s' if rest > 1 else ''} (diff.md lists every one)")
    return lines


def _share_text(v: float | None) -> str:
    return "-" if v is None else ("inf" if math.isinf(v) else f"{v:.3g}")


def _cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown(d: dict, name_a: str, name_b: str) -> str:
    lines = [f"# {name_b} against {name_a}", "",
             f"{len(d['regressed'])} regressed (passed in A, failed in B), {len(d['fixed'])} fixed, "
             f"{len(d['moved'])} moved beyond {d['band']:g} conditioned eps, {d['identical']} identical, "
             f"{d['within_band']} within the band; {len(d['only_a'])} only in A, {len(d['only_b'])} only in B.", ""]
    for key, title in (("regressed", "Regressed"), ("fixed", "Fixed"), ("moved", "Moved beyond the band")):
        if not d[key]:
            continue
        lines += [f"## {title}", "", "| unit | verdict A -> B | worst share of budget A -> B | errors that moved "
                                     "(conditioned eps, A -> B) | reproduce (A, then B; once where the same) |",
                  "|---|---|---|---|---|"]
        for e in d[key]:
            moved = "; ".join(f"{q}: {_share_text(x)} -> {_share_text(y)}" for q, (x, y) in e["errors"].items())
            both = e["reproduce"]["a"] + [c for c in e["reproduce"]["b"] if c not in e["reproduce"]["a"]]
            commands = "<br>".join(f"`{c}`" for c in both)
            lines.append(f"| {e['unit']} | {e['verdict'][0]} -> {e['verdict'][1]} | "
                         f"{_share_text(e['worst_share'][0])} -> {_share_text(e['worst_share'][1])} | {moved or '-'} "
                         f"| {commands} |")
        lines.append("")
    for key, title in (("only_a", f"Only in {name_a}"), ("only_b", f"Only in {name_b}")):
        if d[key]:
            lines += [f"## {title}", ""] + [f"- {e['unit']} ({e['id']})" for e in d[key]] + [""]
    lines += ["## Environments", "", "| | A | B |", "|---|---|---|"]
    for e in d["environment"]:
        mark = " **(differs)**" if e["differs"] else ""
        lines.append(f"| {e['key']}{mark} | {_cell(e['a'])} | {_cell(e['b'])} |")
    return "\n".join(lines) + "\n"


def figure(d: dict) -> str | None:
    """The worst share of its budget of every compat unit both runs hold, B against A, per backend (log-log;
    a share of 1 is the budget), the changed units ringed: a base64 PNG, or ``None`` without matplotlib or
    points."""
    points = [p for p in d["points"] if p["a"] is not None and p["b"] is not None]
    if not points:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    from .plots import SHARE_FLOOR, _png

    clip = lambda v: min(max(v, SHARE_FLOOR), 1e3)  # noqa: E731  (inf drawn at the top edge)
    fig, ax = plt.subplots(figsize=(5.5, 5))
    for backend in sorted({p["backend"] for p in points}):
        mine = [p for p in points if p["backend"] == backend]
        ax.scatter([clip(p["a"]) for p in mine], [clip(p["b"]) for p in mine], s=14, label=backend, alpha=0.7)
    changed = [p for p in points if p["changed"]]
    if changed:
        ax.scatter([clip(p["a"]) for p in changed], [clip(p["b"]) for p in changed], s=90, facecolors="none",
                   edgecolors="#d62728", linewidths=1.5, label="changed")
    ax.plot([SHARE_FLOOR, 1e3], [SHARE_FLOOR, 1e3], color="#888", lw=0.8)
    for v in (1.0,):
        ax.axvline(v, color="#d62728", lw=0.6, ls=":")
        ax.axhline(v, color="#d62728", lw=0.6, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("A: worst conditioned error / budget")
    ax.set_ylabel("B: worst conditioned error / budget")
    ax.legend(fontsize=8)
    return _png(fig)


def page(d: dict, name_a: str, name_b: str, png: str | None) -> str:
    """``index.html``: the figure, then ``diff.md``'s text as preformatted text (its tables read as they are)."""
    image = (f'<img alt="B against A" src="data:image/png;base64,{png}">' if png else
             "<p>(no figure: matplotlib is not installed, or the runs share no compat unit)</p>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(name_b)} against "
            f"{html.escape(name_a)}</title></head><body>{image}<pre>{html.escape(markdown(d, name_a, name_b))}</pre>"
            "</body></html>\n")
