"""The work unit of a report: one study x one backend x one config -> one JSON record.

``run_unit`` takes and returns plain JSON-able dicts and touches nothing but its own arguments, so any
executor can run it: the in-process loop, a process pool (``--jobs``), or a Dask cluster's workers across
many machines or GPUs (``--scheduler``, :mod:`compat_tests.report.fleet`). A unit of a
plugin peer needs that peer registered where it runs: ``compat_tests.peers.load_plugins()`` first (the
report's own worker processes call it as they start).

Studies:

- ``compat``: the backend's forward pass (and its gradients, where it has a backward pass) against the
  float64 reference, every quantity measured and judged by the tolerance policy;
- ``gru_variant``: how far cuDNN's reset-after GRU and the textbook GRU drift apart under the same weights
  (both float64 references), per time step: the quantitative side of "no accuracy impact";
- ``published``: cuDNN's own published checksums (its RNN sample, ``compat_tests.judge.published``) beside the
  float64 truth's (a float64 unit, computed by reference.spec) or a backend's float32 run's, each checksum's
  relative difference from every published run, passed where each is within the policy's bound
  (``tolerances.published_rtol``).
"""

from __future__ import annotations

import hashlib
import json
import math
import shlex
import sys
import time
from dataclasses import dataclass

import numpy as np

from ..judge import published
from ..judge.compare import Comparison, compare_peer, reproduce_command
from ..config import RNNConfig, json_loads, make_case
from ..run import ground_truth
from ..judge.metrics import error_stats
from ..peers import PEERS, load_plugins
from ..judge.tolerances import TF32_FIRST_STEP_SHARE, published_rtol

STUDIES = ("compat", "gru_variant", "published")
TRUTH = "float64 truth (reference.spec)"  # what a float64 published unit computes, whatever its backend field


@dataclass(frozen=True)
class Unit:
    study: str
    backend: str
    cfg: RNNConfig

    @property
    def id(self) -> str:
        """Stable identity (for --resume): a hash of what the unit computes."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha1(text.encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        return {"study": self.study, "backend": self.backend, "config": self.cfg.to_dict()}

    @classmethod
    def from_dict(cls, data: dict) -> "Unit":
        return cls(data["study"], data["backend"], RNNConfig.from_dict(data["config"]))


def json_safe(value):
    """JSON has no inf/NaN: non-finite floats become null (counts and verdicts keep the information)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    return value


def _round(values, digits: int = 4):
    return None if values is None else [float(f"{v:.{digits}g}") for v in values]


def _verdicts(comparison: Comparison) -> dict:
    return verdict_records(comparison.verdicts)


def verdict_records(verdicts: dict) -> dict:
    """Each quantity's :class:`~compat_tests.judge.tolerances.Verdict` as a record holds it (its error statistics,
    the per-step errors rounded to 4 digits, conditioned error, budget, kappa, passed, indeterminate and, for a
    TF32 result's output, ``tf32_first_step``: its first step's share of TF32's cost from the truth of TF32 in
    the ``gemms`` by the ``rule`` that fit it best, and the bound)."""
    out = {}
    for name, v in verdicts.items():
        stats = v.stats.to_dict()
        stats["per_step"] = _round(stats["per_step"])
        out[name] = {**stats, "conditioned": v.conditioned_error, "budget": v.bound, "kappa": v.kappa,
                     "passed": v.passed, "indeterminate": v.indeterminate}
        if v.tf32_share is not None:  # a TF32 result's first step (tolerances.TF32_FIRST_STEP_SHARE)
            out[name]["tf32_first_step"] = {"share": v.tf32_share, "bound": TF32_FIRST_STEP_SHARE.bound,
                                            "gemms": list(v.tf32_gemms), "rule": v.tf32_rule}
    return out


def _run_compat(unit: Unit, record: dict) -> None:
    """Fill ``record`` with the unit's verdicts, each comparison's as soon as it is made (an error in the
    backward pass keeps the forward verdicts)."""
    peer = PEERS[unit.backend]
    case = make_case(unit.cfg)
    forward = compare_peer(peer, unit.cfg, case)
    record["forward"] = _verdicts(forward)
    comparisons = [forward]
    if peer.capabilities.backward:
        gradients = compare_peer(peer, unit.cfg, case, backward=True)
        comparisons.append(gradients)
        record["gradients"] = _verdicts(gradients)
    verdicts = [v for c in comparisons for v in c.verdicts.values()]
    record["passed"] = all(v.passed for v in verdicts)
    record["indeterminate"] = any(v.indeterminate for v in verdicts)


def _run_gru_variant(unit: Unit) -> dict:
    cfg = unit.cfg
    case = make_case(cfg)
    cudnn = ground_truth(cfg, case)
    classic = ground_truth(cfg.with_(mode="classic_gru"), case)
    stats = error_stats(classic.output.astype(np.float64), cudnn.output, time_axis=0 if cfg.time_major else 1)
    per_step_abs = [v * np.finfo(np.float64).eps * stats.scale for v in stats.per_step]
    return {"variant": {"max_abs": stats.max_abs, "scale": stats.scale, "per_step_abs": _round(per_step_abs),
                        "final_h_max_abs": float(np.abs(classic.output_h - cudnn.output_h).max())},
            "passed": True, "indeterminate": False}


def _run_published(unit: Unit) -> dict:
    """The sample's checksums of ``unit``'s float64 truth or backend (``checksums``), each with its bound
    (``bound``, relative), and every published run that printed the mode, golden first, with its checksums and
    their relative differences from ours (``runs``: the record carries the published numbers it was judged
    against, so a report renders from its records alone)."""
    cfg = unit.cfg
    peer = None if cfg.dtype == "float64" else PEERS[unit.backend]
    got = published.checksums(*published.run(cfg, peer))
    bound = {name: published_rtol(cfg, published.CHECKSUMS[name], peer) for name in got}
    runs = [{"name": run.name, "device": run.device, "checksums": dict(run.checksums[cfg.mode]),
             "relative": published.relative(got, run.checksums[cfg.mode])}
            for run in published.runs() if cfg.mode in run.checksums]
    passed = all(abs(delta) <= bound[name] for run in runs for name, delta in run["relative"].items())
    return {"published": {"source": TRUTH if peer is None else unit.backend, "checksums": got, "bound": bound,
                          "runs": runs},
            "passed": passed, "indeterminate": False}


def _identity(unit: Unit) -> dict:
    """What every record of ``unit`` starts with: its id, its fields, and (compat) its commands."""
    record = {"id": unit.id, **unit.to_dict()}
    if unit.study == "compat":
        record["reproduce"] = {"forward": reproduce_command(unit.backend, unit.cfg)}
        if PEERS[unit.backend].capabilities.backward:
            record["reproduce"]["gradients"] = reproduce_command(unit.backend, unit.cfg, backward=True)
    return record


def unit_command(unit: dict) -> str:
    """The one-line shell command that runs a unit (``Unit.to_dict()``) again and prints its record: for
    the units ``rnn-compat check`` does not run (the GRU-variant and published studies')."""
    return f"python -m compat_tests.report.units {shlex.quote(json.dumps(unit, sort_keys=True))}"


def died_record(unit: Unit) -> dict:
    """The record of a unit whose worker process died running it, alone (a native crash, or killed for memory):
    an error of the backend, like an exception."""
    return json_safe({**_identity(unit), "status": "error", "passed": False, "indeterminate": False, "seconds": 0.0,
                      "error": "the worker process died running this unit alone (a native crash such as a "
                               "segfault, or killed for memory)"})


def run_unit(data: dict) -> dict:
    """Execute one unit (``Unit.to_dict()``) and return its JSON record; never raises for a unit's own
    failure: an exception becomes a record with ``status: "error"`` (and counts as not passed)."""
    unit = Unit.from_dict(data)
    start = time.perf_counter()
    record = _identity(unit)
    body: dict = {}
    try:
        with np.errstate(all="ignore"):
            if unit.study == "compat":
                _run_compat(unit, body)
            elif unit.study == "published":
                body = _run_published(unit)
            else:
                body = _run_gru_variant(unit)
        record.update(status="ok", **body)
    except Exception as exc:  # a crashing backend is a finding, not the end of the sweep
        record.update(body, status="error", error=f"{type(exc).__name__}: {exc}", passed=False, indeterminate=False)
        if unit.study == "compat":  # the comparison it ended, whose command reproduces it
            record["error_in"] = "gradients" if "forward" in body else "forward"
    record["seconds"] = round(time.perf_counter() - start, 4)
    return json_safe(record)


if __name__ == "__main__":  # unit_command: run one unit, print its record
    load_plugins()
    print(json.dumps(run_unit(json_loads(sys.argv[1], "the unit (a JSON argument)")), indent=1, sort_keys=True))
