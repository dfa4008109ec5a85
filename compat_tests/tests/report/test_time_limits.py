"""A report's --max-seconds: a run stopped at its limit reports what ran (incomplete, not passed) and resumes
to the whole report, worker processes stop too, and a limit that is not a finite positive number is refused
before any work while a huge finite one runs the whole grid."""

from __future__ import annotations

import json

import pytest

from compat_tests import cli
from compat_tests.report import sweep as sweep_module
from compat_tests.report.sweep import RESULTS, read_records
from compat_tests.tests.helpers import _validate, deterministic, run


class UnitClock:
    """A clock for ``sweep`` that only a unit moves, one second per unit: a time limit stops a run at a
    known unit, however fast or slow the machine."""

    def __init__(self, run_unit):
        self.now, self._run_unit = 0.0, run_unit

    def monotonic(self) -> float:
        return self.now

    def run_unit(self, unit: dict) -> dict:
        self.now += 1.0
        return self._run_unit(unit)


def test_a_run_stopped_at_its_time_limit_reports_what_ran_and_resumes(tmp_path, monkeypatch, capsys, tiny_report):
    clock = UnitClock(sweep_module.run_unit)
    monkeypatch.setattr(sweep_module, "time", clock)
    monkeypatch.setattr(sweep_module, "run_unit", clock.run_unit)
    assert run(tmp_path, "--max-seconds", "2.5", "--no-figures") == 1, "a run that stopped early must not exit 0"
    partial = json.loads((tmp_path / "report.json").read_text())
    _validate(partial)
    planned = json.loads((tmp_path / "run.json").read_text())["units"]
    assert len(read_records(tmp_path / RESULTS)) == 3, "units start at t = 0, 1 and 2 only"
    assert not partial["complete"] and partial["totals"]["units"] == 3
    assert partial["totals"]["planned_units"] == len(planned) > 3
    assert [r["id"] for r in partial["records"]] == planned[:3]
    notice = f"INCOMPLETE: 3 of {len(planned)} planned units ran"
    assert notice in (tmp_path / "report.md").read_text() and notice in (tmp_path / "index.html").read_text()
    assert notice in capsys.readouterr().out
    headline = (tmp_path / "report.md").read_text().split("## Summary")[0]
    assert "Verdict: incomplete, no failure among the units that ran" in headline and "Verdict: passed" not in headline
    assert run(tmp_path, "--resume", "--no-figures") == 0
    resumed = json.loads((tmp_path / "report.json").read_text())
    assert resumed["complete"] and deterministic(resumed) == deterministic(tiny_report[2])


def test_a_time_limit_stops_worker_processes_too(tmp_path):
    """With worker processes, units not yet started when the time is up are dropped (those already handed
    to a worker finish) and the report of the rest is written."""
    assert run(tmp_path, "--jobs", "2", "--max-seconds", "1e-9", "--no-figures") == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert not report["complete"] and report["totals"]["units"] < report["totals"]["planned_units"]
    assert len(read_records(tmp_path / RESULTS)) == report["totals"]["units"]


@pytest.mark.parametrize("value", ["inf", "nan", "-1"])
def test_a_time_limit_that_is_not_a_finite_positive_number_is_refused_before_any_work(tmp_path, capsys, value):
    """``--max-seconds inf`` was an OverflowError traceback, with run.json left behind."""
    out = tmp_path / "run"
    assert cli.main(["report", "--grid", "quick", "--backends", "reference", "--out", str(out), "--max-seconds",
                     value, "--no-progress"]) == 2
    assert "--max-seconds must be a finite number of seconds > 0" in capsys.readouterr().err
    assert not out.exists()


def test_a_time_limit_beyond_what_a_wait_takes_runs_the_whole_grid(tmp_path):
    """1e300 seconds is finite and > 0, but no lock can wait that long: the wait is capped."""
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"study": "compat", "config": {"mode": "tanh", "seq_len": 2, "dtype": "float32"}}]))
    assert cli.main(["report", "--grid", str(grid), "--backends", "reference", "--out", str(tmp_path / "run"),
                     "--jobs", "2", "--max-seconds", "1e300", "--no-progress", "--no-figures"]) == 0
