"""Ctrl-C and SIGTERM end every command other than a report's sweep quietly: an in-process command (status
130/143, no traceback, the caller's handler back), the benchmarks and their deaf workers, the GPU ladder's
child (its table kept), and rnn-compat test (pytest's own summary). Held at named points, as in
report/test_interrupts.py."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from compat_tests import cli
from compat_tests.tests.helpers import PEER, ROOT, _held, _ours


def test_ctrl_c_ends_a_command_without_a_traceback(monkeypatch, capsys, tmp_path):
    from compat_tests.report import sweep

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "sweep", interrupted)
    assert cli.main(["report", "--grid", "quick", "--backends", "reference", "--no-progress", "--out",
                     str(tmp_path)]) == 130
    assert "interrupted (its finished units are kept: the same command with --resume" in capsys.readouterr().err


def test_sigterm_stops_any_command_as_ctrl_c_does(gru_checkpoint, monkeypatch, capsys):
    """SIGTERM ended a command without a word (a file half-written, a child process orphaned); now it stops
    the command as Ctrl-C does, exit status 143, and the caller's handler is back afterwards."""
    from compat_tests.interop import convert

    def terminated(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)

    monkeypatch.setattr(convert, "read", terminated)
    before = signal.getsignal(signal.SIGTERM)
    started = time.monotonic()
    assert cli.main(["infer", "m.npz", "x.npy", "--out", "y.npz"]) == 143
    assert time.monotonic() - started < 5 and signal.getsignal(signal.SIGTERM) == before
    assert "rnn-compat infer: interrupted" in capsys.readouterr().err
    assert not (gru_checkpoint / "y.npz").exists()


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


def _signal_state(pid: int) -> tuple[set[int], set[int]]:
    """The signals process ``pid`` blocks, and those it ignores (from /proc)."""
    fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)
    return tuple({n for n in range(1, 65) if int(fields[key], 16) >> (n - 1) & 1} for key in ("SigBlk", "SigIgn"))


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
    ended, held = _held([sys.executable, "-m", "compat_tests.cli", "test", "compat_tests/tests/harness/"
                         "test_command_interrupts.py", "-k",
                         "ladder and Ctrl", "-n", "1", "-p", "held_plugin", "-p", "no:cacheprovider", "--profile",
                         "ci"], tmp_path, "testing", [(signal.SIGINT, True)],
                        PYTHONPATH=f"{tmp_path / 'plugin'}{os.pathsep}{ROOT}")
    assert held
    assert ended.returncode == 2, ended.stdout
    assert "KeyboardInterrupt" in ended.stdout and "Traceback" not in ended.stdout, ended.stdout
