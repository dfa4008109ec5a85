"""The benchmarks' harness (``benchmarks.harness``): interleaved bursts from workers that stay up, and no
worker left behind, whether the measurement ends, a worker fails to start or the caller is interrupted."""

from __future__ import annotations

import os
from unittest import mock

import pytest

from benchmarks import harness

CASE = harness.Case("gru", 1, 1, 4, 8, 1, False)


def workers_alive() -> list[int]:
    """This process's children, running or not yet waited for (zombies, whose command line is gone), other
    than the ones pytest itself may have (read from /proc)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                state, parent = f.read().rsplit(")", 1)[1].split()[:2]
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read()
        except OSError:
            continue
        if int(parent) == os.getpid() and (state == "Z" or b"benchmarks.worker" in command):
            found.append(int(pid))
    return found


pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc to find the workers")


def test_each_implementation_gets_a_burst_a_round_and_no_worker_outlives_it():
    times = harness.interleaved("step", CASE, ["floor", "gemm"], rounds=3, seconds=0.01)
    assert sorted(times) == ["floor", "gemm"]
    assert all(len(v) == 3 and all(t > 0 for t in v) for v in times.values())
    assert workers_alive() == []


def test_a_worker_that_cannot_start_is_named_and_none_is_left():
    with pytest.raises(RuntimeError, match="(?s)benchmarks.worker no-such-impl .*exit status 2.*invalid choice"):
        harness.interleaved("step", CASE, ["floor", "no-such-impl"], rounds=1, seconds=0.01)
    assert workers_alive() == []


def test_a_worker_that_fails_during_the_bursts_is_named_and_none_is_left():
    """``floor_bound`` is inference's floor: a training task fails in the worker, after the harness started it."""
    with pytest.raises(RuntimeError, match="(?s)benchmarks.worker floor_bound train .*inference"):
        harness.interleaved("train", CASE, ["floor", "floor_bound"], rounds=1, seconds=0.01)
    assert workers_alive() == []


def test_the_harness_runs_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert len(harness.interleaved("step", CASE, ["floor"], rounds=1, seconds=0.01)["floor"]) == 1


def test_an_interrupt_leaves_no_worker():
    calls = []
    real = harness.json.loads

    def interrupt_on_the_second_burst(line):
        result = real(line)
        if "median" in result:
            calls.append(result)
            if len(calls) == 2:
                raise KeyboardInterrupt
        return result

    with mock.patch.object(harness.json, "loads", interrupt_on_the_second_burst), pytest.raises(KeyboardInterrupt):
        harness.interleaved("step", CASE, ["floor", "gemm"], rounds=2, seconds=0.01)
    assert workers_alive() == []
