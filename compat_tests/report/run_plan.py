"""The run's plan on disk (``run.json``), written before the first unit runs, so that a report can be built
from ``results.jsonl`` at any time and anywhere: after a run stopped at its time limit or killed, or on
another machine than the one that ran it (a GPU run rendered on a laptop that has matplotlib for the
figures). The report then describes the machine and the backends of the run, not of the renderer.

``run.json``: ``grid``, ``seed``, ``backends`` (every considered backend's availability), ``environment``
(:func:`aggregate.environment` of the running machine), ``units`` (the planned unit ids, in plan order) and
``skipped`` (``{backend, reason, config}`` for every grid config a backend cannot run).
"""

from __future__ import annotations

import json
from pathlib import Path

from reference.formats.files import replacing

from ..config import RNNConfig
from . import write_report
from .aggregate import build_report, environment
from .sweep import RESULTS, read_records
from .units import Unit

PLAN = "run.json"


def write_plan(out: Path, grid: str, seed: int, backends: list[dict], units: list[Unit],
               skipped: list[tuple[str, str, RNNConfig]]) -> None:
    """Record what the run in ``out`` is about to do (a resumed run records it again)."""
    out.mkdir(parents=True, exist_ok=True)
    plan = {"grid": grid, "seed": seed, "backends": backends, "environment": environment(),
            "units": [u.id for u in units],
            "skipped": [{"backend": b, "reason": why, "config": json.loads(cfg.to_json())} for b, why, cfg in skipped]}
    with replacing(out / PLAN) as tmp:  # never a torn plan, whatever kills the run
        tmp.write_text(json.dumps(plan, indent=1, sort_keys=True) + "\n")


def check_resumable(out: Path, units: list[Unit]) -> None:
    """A run resumed into ``out`` must plan the units the run there planned (the same grid, seed and
    backends), or the records of two runs would mix under one plan; ``ValueError`` saying what differs."""
    ids = [u.id for u in units]
    path = out / PLAN
    if path.is_file():
        plan = _read_plan(path)
        before = plan["units"]
        what = f"the run in {out} (grid {plan['grid']!r}, seed {plan['seed']}) planned"
    else:  # a plan lost (or a folder of an older version): its records must belong to this plan
        before = [r["id"] for r in read_records(out / RESULTS)]
        what = f"{out / RESULTS} holds records of"
    if before != ids and (path.is_file() or not set(before) <= set(ids)):
        new, gone = len(set(ids) - set(before)), len(set(before) - set(ids))
        raise ValueError(f"--resume: {what} {len(before)} units; this command plans {len(ids)} ({new} not in that "
                         f"run, {gone} of that run's not in this one): resume with the --grid, --seed and --backends "
                         f"of that run (and the same backends available), or use another --out")


def _read_plan(path: Path) -> dict:
    try:
        plan = json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path} is not JSON ({exc})") from None
    _check_plan(plan, path)
    return plan


def render(out: Path) -> dict:
    """Build the report of the run in ``out`` from its ``run.json`` and ``results.jsonl`` (the planned units
    that have a record, in plan order), write ``report.json``, ``report.md`` and ``index.html`` there, and
    return the report. Its ``complete`` says whether every planned unit ran."""
    path = out / PLAN
    if not path.is_file():
        raise ValueError(f"{out} holds no {PLAN}: it is not the folder of an rnn-compat report run")
    plan = _read_plan(path)
    done = {r["id"]: r for r in read_records(out / RESULTS)}
    records = [done[i] for i in plan["units"] if i in done]
    skipped = [(s["backend"], s["reason"], RNNConfig.from_dict(s["config"])) for s in plan["skipped"]]
    report = build_report(records, plan["grid"], plan["seed"], plan["backends"], skipped,
                          env=plan["environment"], planned=plan["units"])
    write_report(out, report)
    return report


# run.json's fields and those of its entries, with the types the report reads (write_plan writes them).
PLAN_TYPES = {"grid": str, "seed": int, "environment": dict, "units": list, "backends": list, "skipped": list}
ENTRY_TYPES = {"backends": {"name": str, "available": bool, "detail": str},
               "skipped": {"backend": str, "reason": str, "config": dict}}


def _check_plan(plan: object, path: Path) -> None:
    """``plan`` as :func:`write_plan` writes it, else a ValueError naming the first field that is not."""
    def refuse(what: str):
        raise ValueError(f"{path}: {what} (written by another version of rnn-compat, or edited?)")

    if not isinstance(plan, dict):
        refuse(f"not an object with {', '.join(sorted(PLAN_TYPES))}")
    for key, kind in PLAN_TYPES.items():
        if key not in plan or not isinstance(plan[key], kind) or isinstance(plan[key], bool):
            refuse(f"{key} must be a {kind.__name__}, got {type(plan.get(key)).__name__ if key in plan else 'nothing'}")
    if not all(isinstance(u, str) for u in plan["units"]):
        refuse("units must be a list of unit ids")
    for key, fields in ENTRY_TYPES.items():
        for n, entry in enumerate(plan[key]):
            if not isinstance(entry, dict) or any(not isinstance(entry.get(f), t) for f, t in fields.items()):
                refuse(f"{key}[{n}] must be an object with "
                       + ", ".join(f"{f} ({t.__name__})" for f, t in fields.items()))
