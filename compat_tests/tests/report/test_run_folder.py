"""A report's --out folder: one run at a time (its lock, naming the run that holds it), an existing run is
continued only with --resume and under the same plan, and a folder holding a run or a report is replaced
only with --force."""

from __future__ import annotations

import json
import os
import re

from compat_tests import cli
from compat_tests.report.lock import run_lock
from compat_tests.report.sweep import RESULTS, read_records
from compat_tests.tests.helpers import ROOT, SMALL_GRU, _grid, _one_unit_grid, run


def test_an_existing_run_is_not_overwritten_without_resume(tiny_report):
    _, out, _ = tiny_report
    assert run(out) == 2


def test_resume_refuses_a_plan_other_than_the_runs(tmp_path, capsys):
    """Resuming with another grid, seed or backends would mix two runs' records under one plan."""
    out = tmp_path / "run"
    first = _grid(tmp_path, [("compat", SMALL_GRU)])
    assert cli.main(["report", "--grid", str(first), "--backends", "reference", "--out", str(out), "--jobs", "1",
                     "--no-progress", "--no-figures"]) == 0
    plan_before, results_before = (out / "run.json").read_text(), (out / RESULTS).read_text()
    other = tmp_path / "other.json"
    other.write_text(json.dumps([{"study": "compat", "config": {**SMALL_GRU, "mode": "lstm"}}]))
    for argv in (["--grid", str(other), "--backends", "reference"], ["--grid", str(first), "--backends", "reference,torch-cpu"]):
        assert cli.main(["report", *argv, "--out", str(out), "--jobs", "1", "--no-progress", "--resume"]) == 2
        assert f"--resume: the run in {out} (grid 'grid.json', seed 0) planned 1 units; this command plans" \
            in capsys.readouterr().err
    assert (out / "run.json").read_text() == plan_before and (out / RESULTS).read_text() == results_before
    (out / "run.json").unlink()  # a plan lost: the records decide
    assert cli.main(["report", "--grid", str(other), "--backends", "reference", "--out", str(out), "--jobs", "1",
                     "--no-progress", "--resume"]) == 2
    assert f"{out / RESULTS} holds records of 1 units" in capsys.readouterr().err
    assert cli.main(["report", "--grid", str(first), "--backends", "reference", "--out", str(out), "--jobs", "1",
                     "--no-progress", "--resume", "--no-figures"]) == 0


def test_a_second_report_into_a_folder_being_written_is_refused_naming_the_first(tmp_path, capsys):
    """Two reports into one --out, started 0.3 s apart, both ran and both appended: every unit twice. The run
    holds the folder's lock (here held by this process), and the other is refused, resumed or not, naming it."""
    out = tmp_path / "run"
    argv = ["report", "--grid", str(ROOT / "compat_tests/data/tiny_grid.json"), "--backends", "reference",
            "--out", str(out), "--jobs", "1", "--no-progress"]
    with run_lock(out):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert re.search(f"--out {re.escape(str(out))} is being written by another run \\(pid {os.getpid()} on .*, "
                         f"started .*\\): wait for it to end", err), err
        (out / RESULTS).write_text("")
        assert cli.main([*argv, "--resume"]) == 2
        assert "is being written by another run" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [".run.lock", RESULTS], "nothing written by the refused runs"


def test_a_report_into_a_folder_that_holds_a_run_or_a_report_needs_resume_or_force(tmp_path, capsys):
    argv = _one_unit_grid(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    (out / "index.html").write_text("my page")
    assert cli.main([*argv, "--out", str(out)]) == 2
    assert f"--out {out} holds index.html, which this run would overwrite: pass --force" in capsys.readouterr().err
    assert (out / "index.html").read_text() == "my page"
    assert cli.main([*argv, "--out", str(out), "--force"]) == 0
    first = read_records(out / RESULTS)
    (out / "run.json").unlink()  # a run whose plan is lost still holds a run: its records
    assert cli.main([*argv, "--out", str(out)]) == 2
    assert "exists: pass --resume to continue that run, --force to start it over" in capsys.readouterr().err
    assert cli.main([*argv, "--out", str(out), "--resume", "--force"]) == 2
    assert cli.main([*argv, "--out", str(out), "--force"]) == 0
    again = read_records(out / RESULTS)
    assert len(again) == len(first) == 1, "started over: the unit once, not appended to the old run's"
