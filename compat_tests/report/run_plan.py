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

from ..config import RNNConfig
from . import write_report
from .aggregate import build_report, environment
from .sweep import RESULTS, read_records
from .units import Unit

PLAN = "run.json"
PLAN_KEYS = ("backends", "environment", "grid", "seed", "skipped", "units")


def write_plan(out: Path, grid: str, seed: int, backends: list[dict], units: list[Unit],
               skipped: list[tuple[str, str, RNNConfig]]) -> None:
    """Record what the run in ``out`` is about to do (a resumed run records it again)."""
    out.mkdir(parents=True, exist_ok=True)
    plan = {"grid": grid, "seed": seed, "backends": backends, "environment": environment(),
            "units": [u.id for u in units],
            "skipped": [{"backend": b, "reason": why, "config": json.loads(cfg.to_json())} for b, why, cfg in skipped]}
    tmp = out / (PLAN + ".tmp")
    tmp.write_text(json.dumps(plan, indent=1, sort_keys=True) + "\n")
    tmp.replace(out / PLAN)  # never a torn plan, whatever kills the run


def render(out: Path) -> dict:
    """Build the report of the run in ``out`` from its ``run.json`` and ``results.jsonl`` (the planned units
    that have a record, in plan order), write ``report.json``, ``report.md`` and ``index.html`` there, and
    return the report. Its ``complete`` says whether every planned unit ran."""
    path = out / PLAN
    if not path.is_file():
        raise ValueError(f"{out} holds no {PLAN}: it is not the folder of an rnn-compat report run")
    try:
        plan = json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path} is not JSON ({exc})") from None
    entries = {"backends": ("name", "available", "detail"), "skipped": ("backend", "reason", "config")}
    if (not isinstance(plan, dict) or not set(PLAN_KEYS) <= set(plan)
            or not (isinstance(plan["units"], list) and all(isinstance(u, str) for u in plan["units"]))
            or not all(isinstance(plan[k], list) and all(isinstance(e, dict) and set(keys) <= set(e) for e in plan[k])
                       for k, keys in entries.items())):
        raise ValueError(f"{path} must be an object with {', '.join(PLAN_KEYS)}: units a list of ids, backends "
                         f"and skipped lists of objects with {' / '.join(', '.join(v) for v in entries.values())} "
                         f"(written by another version of rnn-compat, or edited?)")
    done = {r["id"]: r for r in read_records(out / RESULTS)}
    records = [done[i] for i in plan["units"] if i in done]
    skipped = [(s["backend"], s["reason"], RNNConfig.from_dict(s["config"])) for s in plan["skipped"]]
    report = build_report(records, plan["grid"], plan["seed"], plan["backends"], skipped,
                          env=plan["environment"], planned=len(plan["units"]))
    write_report(out, report)
    return report
