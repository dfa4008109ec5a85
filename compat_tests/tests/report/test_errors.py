"""Backends that raise or crash in a report: an error record, not a crash; a backward pass that raises keeps
the forward verdict; a worker that segfaults costs its unit only, a native crash in process is resumed past;
an error message is shown as written and an erroring backend keeps its cells."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from compat_tests import cli
from compat_tests.peers import PEERS
from compat_tests.peers.reference_peer import ReferencePeer
from compat_tests.report.sweep import IN_FLIGHT, RESULTS, read_records
from compat_tests.tests.helpers import ROOT, SMALL_GRU, BackwardFails, _grid, _validate, run


def test_an_error_in_the_backward_pass_keeps_the_forward_verdict_and_prints_the_backward_command(
        tmp_path, monkeypatch):
    monkeypatch.setitem(PEERS, "backward-fails", BackwardFails())
    assert run(tmp_path, "--backends", "backward-fails") == 1
    report = json.loads((tmp_path / "report.json").read_text())
    records = [r for r in report["records"] if r["study"] == "compat"]
    assert records and all(r["status"] == "error" and r["error_in"] == "gradients" and r["forward"]
                           and all(v["passed"] for v in r["forward"].values()) for r in records)
    errors = [w for w in report["worst"] if w["quantity"] == "error"]
    assert len(errors) == len(records) and all("--backward" in w["reproduce"] for w in errors)
    _validate(report)


def test_a_crashing_backend_becomes_an_error_record_not_a_crash(tmp_path, monkeypatch):
    class Crashing(ReferencePeer):
        name = "crashing"

        def forward(self, cfg, case):
            raise RuntimeError("kernel exploded")

    monkeypatch.setitem(PEERS, "crashing", Crashing())
    assert run(tmp_path, "--backends", "crashing") == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["totals"]["errors"] > 0 and not report["passed"]
    errors = [w for w in report["worst"] if w["quantity"] == "error"]
    assert errors and "kernel exploded" in errors[0]["error"] and errors[0]["reproduce"].startswith("rnn-compat check")
    _validate(report)
    crashed = [r for r in read_records(tmp_path / RESULTS) if r["status"] == "error"]
    assert crashed and not any(r["passed"] for r in crashed), "a crashed unit is not a passed one"
    assert sum(row["failed"] for row in report["summary"]) == sum(r["study"] == "compat" for r in crashed)


CRASHING_PEER = """
import os, signal
from compat_tests.peers.reference_peer import ReferencePeer

class Crashing(ReferencePeer):
    name = "crashing"

    def forward(self, cfg, case):
        if cfg.seed == 3:  # a native crash in the backend, as a segfault in its library would be
            os.kill(os.getpid(), signal.SIGSEGV)
        return super().forward(cfg, case)

CRASHING = Crashing()
"""


def _crashing_run(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The crashing peer's plugin file, a grid of six units whose fourth (seed 3) segfaults, and an --out."""
    plugin = tmp_path / "crashing_peer.py"
    plugin.write_text(CRASHING_PEER)
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"study": "compat", "config": {"mode": "tanh", "seq_len": 3, "batch": 2,
                                                               "dtype": "float32", "seed": k}} for k in range(6)]))
    return plugin, grid, tmp_path / "run"


def _only_seed_3_died(out: Path) -> tuple[dict, dict[int, dict]]:
    """The complete report of a crashing run, and its records by seed: seed 3's an error, the rest passed."""
    report = json.loads((out / "report.json").read_text())
    assert report["complete"] and report["totals"]["errors"] == 1
    by_seed = {r["config"]["seed"]: r for r in report["records"]}
    assert sorted(by_seed) == list(range(6))
    assert by_seed[3]["status"] == "error" and "worker process died" in by_seed[3]["error"]
    assert all(r["status"] == "ok" and r["passed"] for seed, r in by_seed.items() if seed != 3)
    return report, by_seed


def test_a_worker_that_dies_costs_its_unit_only(registry, tmp_path):
    """A segfault in a worker breaks the whole process pool; the unit that caused it gets an error record
    (found by running the units left one at a time), every other unit its own record, and the run ends
    with a whole report instead of a traceback."""
    plugin, grid, out = _crashing_run(tmp_path)
    assert cli.main(["report", "--plugin", f"{plugin}:CRASHING", "--backends", "crashing", "--grid", str(grid),
                     "--out", str(out), "--jobs", "2", "--no-progress"]) == 1
    report, by_seed = _only_seed_3_died(out)
    [crash] = [w for w in report["worst"] if w["quantity"] == "error"]
    assert f"--plugin {plugin}:CRASHING" in crash["reproduce"] and '"seed":3' in crash["reproduce"]
    forward, gradients = by_seed[3]["reproduce"]["forward"], by_seed[3]["reproduce"]["gradients"]
    assert crash["reproduce"] == f"{forward}; {gradients}", "where it died is unknown: both comparisons' commands"


def test_a_native_crash_in_process_ends_the_run_and_resume_goes_on_past_it(registry, tmp_path):
    """With ``--jobs 1`` the units run in the report's own process, so a segfault ends the run; the unit it
    was running is named in ``in_flight``, and ``--resume`` runs that unit alone in a worker process (where
    it dies again and gets an error record) and the rest as before."""
    plugin, grid, out = _crashing_run(tmp_path)
    common = ["report", "--plugin", f"{plugin}:CRASHING", "--backends", "crashing", "--grid", str(grid),
              "--out", str(out), "--jobs", "1", "--no-progress"]
    crashed = subprocess.run([sys.executable, "-m", "compat_tests.cli", *common], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert crashed.returncode == -signal.SIGSEGV, crashed.stderr
    before = read_records(out / RESULTS)
    assert sorted(r["config"]["seed"] for r in before) == [0, 1, 2]
    assert (out / IN_FLIGHT).read_text().strip() not in {r["id"] for r in before}
    assert cli.main([*common, "--resume"]) == 1
    assert not (out / IN_FLIGHT).exists()
    report, by_seed = _only_seed_3_died(out)
    assert read_records(out / RESULTS)[:3] == before


MARKUP_PEER = """
from compat_tests.peers.reference_peer import ReferencePeer

class Markup(ReferencePeer):
    name = "markup"

    def forward(self, cfg, case):
        raise TypeError("Half.__init__() got <half> | *x*\\n  and [a](b) & more")

    def backward(self, cfg, case):
        raise TypeError("no")

MARKUP = Markup()
"""


def test_free_text_in_the_markdown_is_one_escaped_line_and_an_erroring_backend_keeps_its_cells(registry, tmp_path):
    """An error message is the backend's text: in report.md it must read as written (not as emphasis, HTML
    tags or a table), and a backend whose every unit ended in an error is shown as such, not left out."""
    from compat_tests.report import render
    from compat_tests.report.plots import heat_cells

    plugin = tmp_path / "markup_peer.py"
    plugin.write_text(MARKUP_PEER)
    out = tmp_path / "run"
    grid = _grid(tmp_path, [("compat", {**SMALL_GRU, "mode": "tanh"})])
    assert cli.main(["report", "--plugin", f"{plugin}:MARKUP", "--backends", "markup,reference", "--grid", str(grid),
                     "--out", str(out), "--jobs", "1", "--no-progress"]) == 1
    md = (out / "report.md").read_text()
    assert r"TypeError: Half.\_\_init\_\_() got \<half\> \| \*x\* and \[a\](b) \& more" in md
    assert "<half>" not in md
    report = json.loads((out / "report.json").read_text())
    assert heat_cells(report)["markup"] == {("tanh", "float32"): (float("inf"), "error")}
    assert "error, 1 failed" in md and "<td>error, 1 failed</td>" in render.html_page(report)
