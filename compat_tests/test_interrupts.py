"""Ctrl-C and SIGTERM, wherever they land: a report's main process alone decides what they mean. Its workers are
deaf to both from their first instruction (``compat_tests.interrupts``), so no process prints a traceback, the
run stops within seconds, keeps every finished unit whole, leaves no process behind and says how to resume.

Where the signal lands is not left to timing: the run is held at a named point (``HOLD``: the parent right
after it spawned a worker, a worker in the middle of its imports, a worker in a unit, a worker ending after
the last unit), the hold says so with a file, and the signal is sent then. A hold waits until its file is
removed; the test removes it after the signal where the run must go past it to end (the parent's)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compat_tests import cli
from compat_tests.report.sweep import RESULTS, read_records

ROOT = Path(__file__).resolve().parent.parent

PEER = '''
"""A peer whose units of seed >= 2 hold at 'worker-running', and hold() for the run's other points."""
import multiprocessing
import os
import time
from multiprocessing import util
from pathlib import Path

from compat_tests.peers.reference_peer import ReferencePeer


def hold(point):
    """Where the test asked for ``point`` (HOLD): a file point.PID in HOLD_DIR, then wait until it is gone."""
    if os.environ.get("HOLD") == point:
        flag = Path(os.environ["HOLD_DIR"]) / f"{point}.{os.getpid()}"
        flag.touch()
        while flag.exists():
            time.sleep(0.01)


class Slow(ReferencePeer):
    name = "slow"

    def forward(self, cfg, case):
        if cfg.seed >= 2:
            hold("worker-running")
        return super().forward(cfg, case)


SLOW = Slow()
if multiprocessing.parent_process() is not None:  # a worker, which loads its plugins when it starts
    util.Finalize(None, hold, args=("worker-ending",), exitpriority=0)  # run as it ends
'''

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


def processes_with(variable: str) -> list[int]:
    """The live (not zombie) processes whose environment holds ``variable`` (``NAME=value``), in any session:
    a command's workers and the children it put in sessions of their own (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] != "Z" and variable.encode() in environ:
            found.append(int(entry.name))
    return found


def _ours(marker: str) -> list[int]:
    """The live processes of a held command: those whose ``HOLD_DIR`` is ``marker``, the test's folder of holds."""
    return processes_with(f"HOLD_DIR={marker}")


def _signal_state(pid: int) -> tuple[set[int], set[int]]:
    """The signals process ``pid`` blocks, and those it ignores (from /proc)."""
    fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)
    return tuple({n for n in range(1, 65) if int(fields[key], 16) >> (n - 1) & 1} for key in ("SigBlk", "SigIgn"))


def as_at_a_terminal() -> None:
    """A child's SIGINT as a terminal's command gets it, Python's KeyboardInterrupt (``preexec_fn``): a test run
    from a background job (``cmd &`` in a script) would hand its children SIGINT ignored, and they keep it so."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _held(argv: list[str], tmp_path: Path, point: str | None, signals: list[tuple[int, bool]], ready=lambda: True,
          release: bool = False, on_hold=lambda: None, **env: str) -> tuple[subprocess.CompletedProcess, list[Path]]:
    """Run ``argv`` in a session of its own with ``HOLD=point``; once a process holds there (any time, for no
    point) and ``ready()``, call ``on_hold()``,
    send ``signals`` (each to the command's process group, or to its main process alone) and, with ``release``,
    remove the holds (where the command must go past its hold to end); return its exit and output and the
    holds' files seen (one a process that held). No process of the command may be left soon after."""
    if not Path("/proc/self/stat").is_file():
        pytest.skip("the processes are read from /proc")
    holds = tmp_path / "holds"
    holds.mkdir()
    log = tmp_path / "output.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env, "HOLD": point or "", "HOLD_DIR": str(holds)}
    with log.open("w") as output:
        proc = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, start_new_session=True, env=env,
                                cwd=ROOT, preexec_fn=as_at_a_terminal)
        try:
            deadline = time.monotonic() + 300  # (generous: processes start and import on a busy machine)
            while time.monotonic() < deadline and proc.poll() is None and not (
                    (point is None or any(holds.iterdir())) and ready()):
                time.sleep(0.01)
            held = sorted(holds.iterdir())
            assert proc.poll() is None and (point is None or held) and ready(), f"never held at {point}:\n{log.read_text()}"
            on_hold()
            for signum, group in signals:
                (os.killpg if group else os.kill)(proc.pid, signum)
                time.sleep(0.05)
            if release:
                for flag in holds.iterdir():
                    flag.unlink()
            code = proc.wait(timeout=300)  # (it would never end by itself; generous: a busy machine is slow)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    deadline = time.monotonic() + 10
    while _ours(str(holds)) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _ours(str(holds))
    info = {pid: (Path(f"/proc/{pid}/cmdline").read_bytes(), Path(f"/proc/{pid}/stat").read_text()) for pid in left}
    for pid in left:  # (not left running after the test either)
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {info}"
    return subprocess.CompletedProcess(argv, code, log.read_text(), ""), held


def _interrupt(tmp_path: Path, point: str, signals: list[tuple[int, bool]]) -> tuple[subprocess.CompletedProcess, Path]:
    """The slow report held at ``point`` (at 'worker-running' once the two quick units are recorded), sent
    ``signals``: its exit and output, and its --out."""
    argv, out = _run(tmp_path)

    def ready() -> bool:
        return point != "worker-running" or (out / RESULTS).exists() and len(read_records(out / RESULTS)) >= 2

    ended, _ = _held(argv, tmp_path, point, signals, ready, release=point in RELEASED)
    return subprocess.CompletedProcess(argv, ended.returncode, "", ended.stdout), out


def _kept(out: Path) -> list[dict]:
    """The run's records, each line whole and each unit once."""
    if not (out / RESULTS).exists():
        return []
    records = read_records(out / RESULTS)  # whole lines only: a torn one would be dropped, so count them all
    assert len((out / RESULTS).read_text().splitlines()) == len(records)
    assert len({r["id"] for r in records}) == len(records), "a unit recorded twice"
    return records


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


# ---- the benchmarks' workers, the GPU ladder's children, rnn-compat test -------------------------------------

SITE = '''
"""Holds at interpreter start (site), before any module of the process's own: HOLD=started-deaf in a process
that began with SIGINT blocked (a worker its parent started deaf), HOLD=ladder-child in the ladder's child."""
import os
import signal
import time
from pathlib import Path


def _hold(point):
    flag = Path(os.environ["HOLD_DIR"]) / f"{point}.{os.getpid()}"
    flag.touch()
    while flag.exists():
        time.sleep(0.01)


_point = os.environ.get("HOLD")
if _point == "started-deaf" and signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, ()):
    _hold(_point)
elif _point == "ladder-child" and "RNN_COMPAT_LADDER_LOG" in os.environ:
    _hold(_point)
'''

BENCH = '''
import sys
from benchmarks import harness
from compat_tests.interrupts import stopped_quietly
CASE = harness.Case("gru", 1, 1, 4, 8, 1, False)
sys.exit(stopped_quietly(lambda: harness.interleaved("step", CASE, ["floor", "gemm"], 10**9, 0.01), "bench"))
'''


MEASURE = '''
import sys
from benchmarks import harness
from compat_tests.interrupts import stopped_quietly
CASE = harness.Case("gru", 1, 1, 4, 8, 1, False)
sys.exit(stopped_quietly(lambda: harness.measure("floor", "step", CASE, 600.0), "bench"))
'''


def _site(tmp_path: Path) -> str:
    """A PYTHONPATH with :data:`SITE`'s holds first, then the working tree."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SITE)
    return f"{tmp_path / 'site'}{os.pathsep}{ROOT}"


def _workers(holds_marker: str) -> list[int]:
    return [pid for pid in _ours(holds_marker)
            if b"benchmarks.worker" in Path(f"/proc/{pid}/cmdline").read_bytes()]


@pytest.mark.parametrize("point, signum", [("started-deaf", signal.SIGINT), (None, signal.SIGINT),
                                           (None, signal.SIGTERM)],
                         ids=["starting-SIGINT", "bursting-SIGINT", "bursting-SIGTERM"])
def test_a_signal_to_a_benchmarks_group_stops_it_with_one_line_its_workers_deaf(tmp_path, point, signum):
    """A benchmark's workers (``benchmarks.harness``) start with SIGINT and SIGTERM blocked (held here at their
    interpreter's start, before any import of theirs) and ignore both once running (here bursting, without a
    hold); the harness alone acts: one line, status 128 + the signal, its workers gone."""
    marker = str(tmp_path / "holds")
    seen = []

    def ready() -> bool:  # both workers started; bursting: each up and deaf
        states = [_signal_state(pid) for pid in _workers(marker)]
        seen.extend(states)
        return len(states) == 2 and (point is not None or all({2, 15} <= ignored for _, ignored in states))

    ended, _ = _held([sys.executable, "-c", BENCH], tmp_path, point, [(signum, True)], ready,
                     PYTHONPATH=_site(tmp_path))
    assert ended.returncode == 128 + signum, ended.stdout
    assert ended.stdout.strip().splitlines()[-1] == f"bench: interrupted by {signal.Signals(signum).name}"
    assert "Traceback" not in ended.stdout, ended.stdout
    assert seen and all({2, 15} <= blocked or {2, 15} <= ignored for blocked, ignored in seen), seen


@pytest.mark.parametrize("point", ["started-deaf", None], ids=["starting", "measuring"])
def test_ctrl_c_stops_a_benchmark_measuring_in_one_process_at_once(tmp_path, point):
    """``harness.measure`` (a worker process a measurement, here one of 600 s): the worker starts deaf, and the
    harness acts on Ctrl-C while it waits, killing the worker, whether it is starting (held) or measuring."""
    marker = str(tmp_path / "holds")

    def ready() -> bool:  # the worker started; measuring: up and deaf
        states = [_signal_state(pid) for pid in _workers(marker)]
        return len(states) == 1 and (point is not None or {2, 15} <= states[0][1])

    ended, _ = _held([sys.executable, "-c", MEASURE], tmp_path, point, [(signal.SIGINT, True)], ready,
                     PYTHONPATH=_site(tmp_path))
    assert ended.returncode == 130, ended.stdout
    assert ended.stdout.strip().splitlines()[-1] == "bench: interrupted by SIGINT" and "Traceback" not in ended.stdout


@pytest.mark.parametrize("signum, group", [(signal.SIGINT, True), (signal.SIGTERM, False)],
                         ids=["Ctrl-C", "SIGTERM to the runner"])
def test_a_signal_to_the_gpu_ladder_stops_its_child_and_keeps_its_table(tmp_path, signum, group):
    """The ladder's child pytest runs in a session of its own (held here as it starts): Ctrl-C at the terminal
    does not reach it, and the runner stops it (gpu_run.sh's time limit sends the runner SIGINT; a kill, SIGTERM). Either signal ends the runner with one line naming its table
    (written: the rungs that finished), status 128 + the signal, no traceback, nothing left running."""
    out = tmp_path / "ladder"
    ended, held = _held([sys.executable, "-m", "compat_tests.gpu.ladder", "--out", str(out), "--seconds", "600",
                         "--rungs", "base"], tmp_path, "ladder-child", [(signum, group)], PYTHONPATH=_site(tmp_path))
    assert len(held) == 1
    assert ended.returncode == 128 + signum, ended.stdout
    assert ended.stdout.strip().splitlines()[-1] == (f"gpu_ladder: interrupted by {signal.Signals(signum).name}: "
                                                     f"the rungs that finished are in {out / 'ladder.md'}")
    assert "Traceback" not in ended.stdout, ended.stdout
    table = json.loads((out / "ladder.json").read_text())
    assert not table["passed"], table


HELD_PLUGIN = '''
"""A pytest plugin (-p held_plugin) whose xdist worker holds as a test runs (HOLD=testing)."""
from slow_peer import hold


def pytest_runtest_call(item):
    hold("testing")
'''


def test_ctrl_c_during_rnn_compat_test_ends_it_as_pytest_does_without_a_traceback(tmp_path):
    """``rnn-compat test`` is pytest (with xdist's workers): Ctrl-C while a worker runs a test ends it with
    pytest's own summary of the interrupt and its status (2), no traceback, no worker left."""
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "held_plugin.py").write_text(HELD_PLUGIN)
    (tmp_path / "plugin" / "slow_peer.py").write_text(PEER)  # (its hold())
    ended, held = _held([sys.executable, "-m", "compat_tests.cli", "test", "compat_tests/test_interrupts.py", "-k",
                         "ladder and Ctrl", "-n", "1", "-p", "held_plugin", "-p", "no:cacheprovider", "--profile",
                         "ci"], tmp_path, "testing", [(signal.SIGINT, True)],
                        PYTHONPATH=f"{tmp_path / 'plugin'}{os.pathsep}{ROOT}")
    assert held
    assert ended.returncode == 2, ended.stdout
    assert "KeyboardInterrupt" in ended.stdout and "Traceback" not in ended.stdout, ended.stdout
