"""The work unit of a model report: one backend (a peer, or the file in its own framework) x one dtype x one
input, on the weights of the run's model files -> one JSON record.

A unit reads what it needs from the run's folder (the plan ``run.json``, the canonical weights ``weights.npz``
and the inputs ``inputs.npz``, all written before the first unit runs), so any process runs it
(:func:`run_model_unit`, a sweep's :data:`MODEL_UNITS`) and ``python -m compat_tests.model_report.units UNIT``
runs one again and prints its record. The record holds, beside what a grid report's compat record holds
(``forward``: each quantity's verdict), ``model``: the unit's ``tolerance`` (per quantity, what the tolerance
to use is made of), and for a result beyond rounding its ``diagnosis`` (:mod:`.diagnosis`) and ``location``
(:mod:`.locate`); for a peer, its ``invariance`` (:mod:`.invariance`).
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import Case, Outputs, RNNConfig, json_loads
from ..judge.compare import conditioning, first_step_fit, judge_results
from ..run import ground_truth
from ..report.sweep import UnitKind
from ..report.units import json_safe, verdict_records
from . import diagnosis, inputs, invariance, locate, plan as run_plan

STUDY = "model"
FILE_BACKEND = "file"  # the unit that runs a model file in its own framework


@dataclass(frozen=True)
class ModelUnit:
    """``backend`` (a peer's name, or :data:`FILE_BACKEND`) on ``cfg`` (the model's architecture in the unit's
    dtype, with the input's T, B and lengths), the weights of ``--model`` number ``file`` (a peer's: the first),
    input number ``input``; ``folder``: the run's folder (not part of the unit's identity)."""

    backend: str
    cfg: RNNConfig
    file: int
    input: int
    folder: str
    layer: int = 0  # of a chain (a stack whose layers differ in size): the layer judged, on its own truth input
    study: str = STUDY

    @property
    def id(self) -> str:
        identity = {k: v for k, v in self.to_dict().items() if k != "folder"}
        return hashlib.sha1(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        return {"study": STUDY, "backend": self.backend, "config": self.cfg.to_dict(), "file": self.file,
                "input": self.input, "layer": self.layer, "folder": self.folder}

    @classmethod
    def from_dict(cls, data: dict) -> "ModelUnit":
        if not isinstance(data, dict) or data.get("study") != STUDY:
            raise ValueError(f"a model report's unit is an object of study {STUDY!r}, got {str(data)[:80]}")
        missing = [k for k in ("backend", "config", "file", "input", "layer", "folder") if k not in data]
        if missing:
            raise ValueError(f"a model report's unit lacks {missing}")
        return cls(data["backend"], RNNConfig.from_dict(data["config"]), int(data["file"]), int(data["input"]),
                   str(data["folder"]), int(data["layer"]))


def unit_command(unit: ModelUnit) -> str:
    """The one-line shell command that runs ``unit`` again and prints its record."""
    return f"python -m compat_tests.model_report.units {shlex.quote(json.dumps(unit.to_dict(), sort_keys=True))}"


def case_of(unit: ModelUnit) -> Case:
    """The unit's case, in its dtype: the canonical weights of the first ``--model`` (every result is judged
    against the first file's truth; of a chain, the unit's layer's) and the unit's input (of a chain's layer,
    what that layer reads: the float64 truth of the layers before)."""
    folder = Path(unit.folder)
    weights, biases = run_plan.load_weights(folder, 0, unit.layer)
    x, lengths = inputs.load(folder, unit.input, unit.layer)
    dtype = np.dtype(unit.cfg.dtype)
    return Case([w.astype(dtype) for w in weights], [b.astype(dtype) for b in biases], x.astype(dtype), None, None,
                lengths)


def judge_available(backend: str, cfg: RNNConfig, actual: Outputs, truth: Outputs, kappa: dict,
                    tf32_fit=None) -> dict:
    """Each quantity of ``truth`` that ``actual`` holds (a file's framework may not give every state) judged by
    ``backend``'s budgets (``tf32_fit``: a TF32 backend's first step, ``compare.first_step_fit``):
    ``{quantity: Verdict}``; a result of another shape or dtype is an ``AssertionError``."""
    return judge_results(backend, cfg, actual, truth, kappa, available_only=True, tf32_fit=tf32_fit).verdicts


def tolerance(verdicts: dict, dtype: str) -> dict:
    """What the tolerance of each judged quantity is made of (:func:`compat_tests.model_report.page.tolerances`):
    its ``conditioned`` error, its ``budget``, and ``eps_scaled``, one conditioned eps as an absolute error on this
    model and input: eps(dtype) x the tensor's scale (``max(1, max|truth|)``) x ``max(1, kappa)``."""
    eps = float(np.finfo(dtype).eps)
    return {q: {"conditioned": v.conditioned_error, "budget": v.bound,
                "eps_scaled": eps * v.stats.scale * max(1.0, v.kappa)}
            for q, v in verdicts.items() if not v.indeterminate}


def _run_backend(unit: ModelUnit, case: Case) -> tuple[Outputs, str | None]:
    """The unit's backend on ``case``: its outputs, and (a file in its own framework) the framework's name."""
    if unit.backend == FILE_BACKEND:
        from .frameworks import run_file

        described = run_plan.read(Path(unit.folder))["files"][unit.file]
        x = case.x if unit.layer == 0 else inputs.load(Path(unit.folder), unit.input)[0].astype(case.x.dtype)
        run = run_file(described["path"], described["format"], x, case.lengths, described["options"])
        # (a chain's file: its last layer's output judged; its states, of layers of several sizes, are not)
        return Outputs(run.output, run.output_h if unit.layer == 0 else None, None), run.framework
    from ..peers import PEERS

    return PEERS[unit.backend].forward(unit.cfg, case), None


def run_model_unit(data: dict) -> dict:
    """Run one unit (``ModelUnit.to_dict()``) and return its record; a unit's own failure (a backend raising)
    becomes a record of ``status: "error"``, never an exception."""
    start = time.perf_counter()
    unit = ModelUnit.from_dict(data)
    record = {"id": unit.id, **{k: v for k, v in unit.to_dict().items() if k != "folder"},
              "reproduce": {"forward": unit_command(unit)}}
    try:
        with np.errstate(all="ignore"):
            record.update(status="ok", **_judged(unit))
    except Exception as exc:  # a crashing backend is a finding, not the end of the report
        record.update(status="error", error=f"{type(exc).__name__}: {exc}", passed=False, indeterminate=False)
    record["seconds"] = round(time.perf_counter() - start, 4)
    return json_safe(record)


def _judged(unit: ModelUnit) -> dict:
    cfg = unit.cfg
    case = case_of(unit)
    truth = ground_truth(cfg, case)
    kappa = conditioning(unit.backend, cfg, case, truth)
    actual, framework = _run_backend(unit, case)
    verdicts = judge_available(unit.backend, cfg, actual, truth, kappa,
                               first_step_fit(unit.backend, cfg, case, actual.output))
    if not verdicts:
        raise ValueError("the backend returned none of the quantities the truth has (no output sequence, no state)")
    passed = all(v.passed for v in verdicts.values())
    indeterminate = any(v.indeterminate for v in verdicts.values())
    result: dict = {"tolerance": tolerance(verdicts, cfg.dtype), "kappa": kappa}
    if framework:
        result["framework"] = framework
    if not passed:
        def fits(alt_cfg: RNNConfig, alt_case: Case, evaluate) -> bool:
            alt_truth = evaluate(alt_cfg, alt_case)
            alt_kappa = conditioning(unit.backend, alt_cfg, alt_case, alt_truth, evaluate)
            judged = judge_available(unit.backend, alt_cfg, actual, alt_truth, alt_kappa)
            return bool(judged) and all(v.passed and not v.indeterminate for v in judged.values())

        result["diagnosis"] = diagnosis.diagnose(cfg, case, fits)
        result["location"] = locate.where(unit.backend, cfg, case, actual, truth, verdicts)
        if unit.layer and unit.backend != FILE_BACKEND and result["location"]["layer"] is not None:
            result["location"]["layer"] += unit.layer  # (a chain's layer, judged alone)
    if unit.backend != FILE_BACKEND:
        result["invariance"] = invariance.check(unit.backend, cfg, case, actual, truth, kappa)
    return {"forward": verdict_records(verdicts), "model": result, "passed": passed, "indeterminate": indeterminate}


def died_record(unit: ModelUnit) -> dict:
    """The record of a unit whose worker process died running it alone (a native crash, or killed for memory)."""
    return {"id": unit.id, **{k: v for k, v in unit.to_dict().items() if k != "folder"},
            "reproduce": {"forward": unit_command(unit)}, "status": "error", "passed": False,
            "indeterminate": False, "seconds": 0.0,
            "error": "the worker process died running this unit alone (a native crash such as a segfault, or killed "
                     "for memory)"}


MODEL_UNITS = UnitKind(run_model_unit, died_record)


if __name__ == "__main__":  # unit_command: run one unit, print its record
    from ..peers import load_plugins

    load_plugins()
    print(json.dumps(run_model_unit(json_loads(sys.argv[1], "the unit (a JSON argument)")), indent=1, sort_keys=True))
