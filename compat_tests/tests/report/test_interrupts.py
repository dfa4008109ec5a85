"""Ctrl-C, SIGTERM and SIGKILL to a report, wherever they land (held at a named point: the parent spawning,
a worker importing, in a unit, ending): no traceback, every finished unit kept whole, nothing left running,
and the printed --resume command completes the run to a clean run's report."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from compat_tests import cli
from compat_tests.report.sweep import RESULTS, read_records
from compat_tests.tests.helpers import PEER, _held, _kept

DRIVER = '''
"""rnn-compat, with holds where the command has no hook: a worker re-importing this module (as spawn does)
holds between its imports, and the parent holds right after it spawned its first worker."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from slow_peer import hold  # noqa: E402

import compat_tests.config  # noqa: E402,F401
if __name__ == "__mp_main__":
    hold("worker-importing")
from concurrent.futures import process  # noqa: E402

from compat_tests import cli  # noqa: E402

_spawn = process.ProcessPoolExecutor._spawn_process
_spawned = []


def _spawn_and_hold(self):
    _spawn(self)
    _spawned.append(self)
    if len(_spawned) == 1:  # (one hold: the test releases it once)
        hold("parent-spawning")


process.ProcessPoolExecutor._spawn_process = _spawn_and_hold
if __name__ == "__main__":
    sys.exit(cli.main())
'''


UNITS = 10


POINTS = ("parent-spawning", "worker-importing", "worker-running", "worker-ending")


KEPT_AT = {"parent-spawning": [], "worker-importing": [], "worker-running": [0, 1], "worker-ending": list(range(UNITS))}


"""The seeds whose records a run interrupted at each point keeps: what finished before it (units of seeds
0 and 1 are quick, the others hold at 'worker-running')."""


RELEASED = {"parent-spawning"}


"""The points the run must go past to end: the test releases them after the signal."""


def _run(tmp_path: Path) -> tuple[list[str], Path]:
    """A report command (the slow peer, ten units, two jobs) through the driver, and its --out."""
    (tmp_path / "slow_peer.py").write_text(PEER)
    (tmp_path / "driver.py").write_text(DRIVER)
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"study": "compat", "config": {"mode": "tanh", "seq_len": 3, "batch": 2,
                                                               "dtype": "float32", "seed": k}} for k in range(UNITS)]))
    out = tmp_path / "run"
    return [sys.executable, str(tmp_path / "driver.py"), "report", "--plugin", f"{tmp_path / 'slow_peer.py'}:SLOW",
            "--backends", "slow", "--grid", str(grid), "--out", str(out), "--no-progress", "--no-figures", "--jobs",
            "2"], out


def _interrupt(tmp_path: Path, point: str, signals: list[tuple[int, bool]]) -> tuple[subprocess.CompletedProcess, Path]:
    """The slow report held at ``point`` (at 'worker-running' once the two quick units are recorded), sent
    ``signals``: its exit and output, and its --out."""
    argv, out = _run(tmp_path)

    def ready() -> bool:
        return point != "worker-running" or (out / RESULTS).exists() and len(read_records(out / RESULTS)) >= 2

    ended, _ = _held(argv, tmp_path, point, signals, ready, release=point in RELEASED)
    return subprocess.CompletedProcess(argv, ended.returncode, "", ended.stdout), out


@pytest.mark.parametrize("point, signum", [(point, signal.SIGINT) for point in POINTS]
                         + [(point, signal.SIGTERM) for point in ("worker-importing", "worker-running")],
                         ids=lambda v: v.name if isinstance(v, signal.Signals) else v)
def test_a_signal_to_the_group_wherever_it_lands_stops_the_report_without_a_traceback(registry, tmp_path, point,
                                                                                     signum):
    """The signal reaches every process of the group: a worker spawned a moment ago, one importing (where a
    KeyboardInterrupt traceback came from a worker started by spawn), one in a unit, one ending. The main
    process alone acts: exit status 128 + the signal, no traceback from any process, what finished kept, the
    command that resumes printed, nothing left running."""
    ended, out = _interrupt(tmp_path, point, [(signum, True)])
    assert ended.returncode == 128 + signum, ended.stderr
    assert "Traceback" not in ended.stderr and "KeyboardInterrupt" not in ended.stderr, ended.stderr
    assert sorted(r["config"]["seed"] for r in _kept(out)) == KEPT_AT[point], "the finished units, and none other"
    assert f"by {signal.Signals(signum).name}: {len(KEPT_AT[point])} of {UNITS} units are in" in ended.stderr
    assert "--resume" in ended.stderr


def test_ctrl_c_keeps_a_reports_units_and_resume_completes_it(registry, tmp_path):
    """Ctrl-C in a unit: the run ends (it used to compute every remaining unit, then throw them away), keeping
    every record written and printing the command that runs the rest; that command completes the run, each
    unit once."""
    ended, out = _interrupt(tmp_path, "worker-running", [(signal.SIGINT, True)])
    assert ended.returncode == 130, ended.stderr
    kept = _kept(out)
    resume = re.search(r"to run the rest:\n  rnn-compat (.*)\n", ended.stderr).group(1).split()
    assert resume[:7] == ["report", "--grid", str(tmp_path / "grid.json"), "--out", str(out), "--resume",
                          "--backends"] and resume[-1] == "--no-figures", resume  # the run's own choice kept
    assert cli.main([*resume, "--jobs", "1", "--no-progress"]) == 0  # (no HOLD here: the units run through)
    after = _kept(out)
    assert after[:len(kept)] == kept and len(after) == UNITS
    assert json.loads((out / "report.json").read_text())["complete"]


def test_a_report_killed_in_a_unit_resumes_to_the_report_of_a_clean_run(registry, tmp_path):
    """SIGKILL to the whole group while a unit runs (nothing of the run can act), its last record torn as if
    killed while writing it: ``--resume`` (two workers) keeps the records written, runs each other unit once,
    and writes the report a clean run of the same grid writes."""
    ended, out = _interrupt(tmp_path, "worker-running", [(signal.SIGKILL, True)])
    assert ended.returncode == -signal.SIGKILL, ended.stderr
    kept = _kept(out)
    assert sorted(r["config"]["seed"] for r in kept) == [0, 1]
    with (out / RESULTS).open("a") as f:
        f.write('{"id": "torn')
    common = ["report", "--plugin", f"{tmp_path / 'slow_peer.py'}:SLOW", "--backends", "slow", "--grid",
              str(tmp_path / "grid.json"), "--no-progress", "--no-figures"]  # (no HOLD here: the units run through)
    assert cli.main([*common, "--out", str(out), "--resume", "--jobs", "2"]) == 0
    assert cli.main([*common, "--out", str(tmp_path / "clean"), "--jobs", "1"]) == 0
    after = _kept(out)
    assert after[:len(kept)] == kept, "resuming must keep the records already written, not redo them"
    assert sorted(r["config"]["seed"] for r in after) == list(range(UNITS)), "each unit exactly once"
    resumed, clean = (json.loads((folder / "report.json").read_text()) for folder in (out, tmp_path / "clean"))
    differ = ("generated_utc", "environment")  # what legitimately differs between two runs
    assert {k: v for k, v in resumed.items() if k not in differ} == {k: v for k, v in clean.items() if k not in differ}


@pytest.mark.parametrize("signals", [[(signal.SIGTERM, False)], [(signal.SIGINT, True), (signal.SIGINT, True)]],
                         ids=["SIGTERM to the main process", "Ctrl-C twice"])
def test_sigterm_to_the_main_process_or_a_second_ctrl_c_ends_a_report_leaving_no_process(registry, tmp_path, signals):
    """SIGTERM to the main process alone used to end it without a word, its workers and the resource tracker
    orphaned; a second Ctrl-C used to hang. Either ends the run, no process of its group left, the records
    written whole."""
    ended, out = _interrupt(tmp_path, "worker-running", signals)
    # (a second signal that lands in the interpreter's last steps ends it as the signal does: -SIGINT)
    assert ended.returncode in (128 + signals[0][0], -signals[-1][0]), ended.stderr
    assert "interrupted" in ended.stderr and "--resume" in ended.stderr and "Traceback" not in ended.stderr
    assert sorted(r["config"]["seed"] for r in _kept(out)) == [0, 1]
