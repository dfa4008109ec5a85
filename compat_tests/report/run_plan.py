"""The run's plan on disk (``run.json``), written before the first unit runs, so that a report can be built
from ``results.jsonl`` at any time and anywhere: after a run stopped at its time limit or killed, or on
another machine than the one that ran it (a GPU run rendered on a laptop that has matplotlib for the
figures). The report then describes the machine and the backends of the run, not of the renderer.

``run.json``: ``grid``, ``seed``, ``backends`` (every considered backend's availability), ``environment``
(:func:`aggregate.environment` of the running machine), ``units`` (the planned unit ids, in plan order),
``skipped`` (``{backend, reason, config}`` for every grid config a backend cannot run) and ``policy``
(:func:`aggregate.policy_summary` of the running version: the report shows the policy that judged the
records, whichever version renders them; a plan of a version before it has none, and is rendered with the
renderer's).
"""

from __future__ import annotations

import json
from pathlib import Path

from reference.formats.files import load_json, replacing

from ..config import RNNConfig
from . import write_report
from .aggregate import build_report, environment, policy_summary
from .folder import check_own
from .sweep import RESULTS, read_records
from .units import Unit

PLAN = "run.json"


def write_plan(out: Path, grid: str, seed: int, backends: list[dict], units: list[Unit],
               skipped: list[tuple[str, str, RNNConfig]]) -> None:
    """Record what the run in ``out`` is about to do (a resumed run records it again)."""
    out.mkdir(parents=True, exist_ok=True)
    plan = {"grid": grid, "seed": seed, "backends": backends, "environment": environment(),
            "units": [u.id for u in units], "policy": policy_summary(),
            "skipped": [{"backend": b, "reason": why, "config": json.loads(cfg.to_json())} for b, why, cfg in skipped]}
    with replacing(out / PLAN) as tmp:  # never a torn plan, whatever kills the run
        tmp.write_text(json.dumps(plan, indent=1, sort_keys=True) + "\n")


def check_resumable(out: Path, units: list[Unit]) -> None:
    """A run resumed into ``out`` must plan the units the run there planned (the same grid, seed and
    backends), or the records of two runs would mix under one plan; ``ValueError`` saying what differs."""
    ids = [u.id for u in units]
    path = out / PLAN
    if path.is_file():
        plan = read_plan(path)
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
    current = policy_summary()
    if path.is_file() and plan.get("policy", current) != current:
        raise ValueError(f"--resume: the tolerance policy changed since the run in {out} began (another version of "
                         f"rnn-compat, or an edited compat_tests/judge/tolerances.py or known_divergences.py), so its "
                         f"records and this run's would be judged by two policies: start a new run in another --out")


def read_plan(path: Path) -> dict:
    """``run.json`` at ``path``, checked (a ValueError naming the first field that is not as written)."""
    plan = load_json(path.read_bytes(), str(path))
    _check_plan(plan, path)
    return plan


def render(out: Path, figures: bool = True) -> dict:
    """Build the report of the run in ``out`` from its ``run.json`` and ``results.jsonl`` (the planned units
    that have a record, in plan order), write ``report.json``, ``report.md`` and ``index.html`` (with its
    figures unless ``figures`` is false) there, and return the report. Its ``complete`` says whether every
    planned unit ran."""
    check_own(out)
    path = out / PLAN
    if not path.is_file():
        raise ValueError(f"{out} holds no {PLAN}: it is not the folder of an rnn-compat report run")
    plan = read_plan(path)
    done = {r["id"]: r for r in read_records(out / RESULTS)}
    records = [done[i] for i in plan["units"] if i in done]
    skipped = [(s["backend"], s["reason"], RNNConfig.from_dict(s["config"])) for s in plan["skipped"]]
    report = build_report(records, plan["grid"], plan["seed"], plan["backends"], skipped,
                          env=plan["environment"], planned=plan["units"], policy=plan.get("policy"))
    write_report(out, report, figures)
    return report


# run.json's fields and those of its entries, with the types the report reads (write_plan writes them).
PLAN_TYPES = {"grid": str, "seed": int, "environment": dict, "units": list, "backends": list, "skipped": list}
ENTRY_TYPES = {"backends": {"name": str, "available": bool, "detail": str},
               "skipped": {"backend": str, "reason": str, "config": dict}}
# run.json's policy (absent from a plan of a version before it): its lists' entries and its budgets.
POLICY_TYPES = {"overrides": {"peer": str, "dtype": str, "quantity": str, "bound": (int, float), "reason": str},
                "known_divergences": {"peer": str, "area": str, "modes": list, "reason": str}}
BUDGET_TYPES = {"bound": (int, float), "reason": str}


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
    def check_entries(key: str, entries, fields: dict) -> None:
        for n, entry in (enumerate(entries) if isinstance(entries, list) else entries.items()):
            if not isinstance(entry, dict) or any(not isinstance(entry.get(f), t) or isinstance(entry.get(f), bool)
                                                  and t is not bool for f, t in fields.items()):
                refuse(f"{key}[{n!r}] must be an object with " + ", ".join(
                    f"{f} ({' or '.join(k.__name__ for k in (t if isinstance(t, tuple) else (t,)))})"
                    for f, t in fields.items()))

    for key, fields in ENTRY_TYPES.items():
        check_entries(key, plan[key], fields)
    if "policy" in plan:
        policy = plan["policy"]
        if not isinstance(policy, dict) or not isinstance(policy.get("measure"), str) or \
                not isinstance(policy.get("budgets"), dict) or \
                any(not isinstance(policy.get(k), list) for k in POLICY_TYPES):
            refuse(f"policy must be an object with measure (str), budgets (dict), {', '.join(POLICY_TYPES)} (list)")
        check_entries("policy.budgets", policy["budgets"], BUDGET_TYPES)
        for key, fields in POLICY_TYPES.items():
            check_entries(f"policy.{key}", policy[key], fields)
