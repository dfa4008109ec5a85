"""The GPU ladder's table and its runner (``compat_tests.gpu.ladder``) on a CPU: the ids it runs are the ones
pytest collects, the rungs are grouped as documented, and a climb under the CPU fakes (``fake_site``) records
passes, failures with their reproduce command, hangs and the window's end. ``test_gpu_run.py`` climbs the
whole ladder through ``scripts/gpu_run.sh`` with a fault planted per rung."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compat_tests.gpu import ladder as gpu_ladder
from compat_tests.tests.helpers import as_at_a_terminal, processes_with

ROOT = Path(__file__).resolve().parents[3]


def test_the_ids_the_runner_runs_are_the_ones_pytest_collects():
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             gpu_ladder.TEST_FILE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    collected = [line for line in listed.stdout.splitlines() if line.startswith(gpu_ladder.TEST_FILE + "::")]
    computed = [n for rung in gpu_ladder.RUNGS for n in gpu_ladder.node_ids(rung)]
    assert len(computed) == len(set(computed)) and set(collected) == set(computed), listed.stdout[-2000:]


def test_the_risky_rungs_run_last_each_alone_and_every_test_names_its_rung():
    groups = gpu_ladder.groups(gpu_ladder.RUNGS)
    assert [r.name for r in groups[0]] == [r.name for r in gpu_ladder.RUNGS if not r.isolated]
    assert [[r.name] for r in gpu_ladder.RUNGS if r.isolated] == [[r.name for r in g] for g in groups[1:]]
    assert {r.name for r in gpu_ladder.RUNGS if r.isolated} == {"dropout", "algorithms"}
    for rung in gpu_ladder.RUNGS:
        assert all(gpu_ladder.rung_of(n) is rung for n in gpu_ladder.node_ids(rung))


def test_rungs_are_named_or_refused():
    assert [r.name for r in gpu_ladder.select("skip_input,float16")] == ["float16", "skip_input"]
    with pytest.raises(ValueError, match="--rungs must name rungs among published, base"):
        gpu_ladder.select("base,peepholes")


def test_a_rungs_outcome_is_its_worst_tests():
    rung = gpu_ladder.BY_NAME["algorithms"]
    nodes = gpu_ladder.node_ids(rung)
    results = {nodes[0]: {"outcome": "passed"}, nodes[1]: {"outcome": "hung", "message": "killed"},
               nodes[2]: {"outcome": "not run", "message": "hung before"}}
    row = gpu_ladder.tabulate([rung], results, expect_cudnn=False)["rungs"][0]
    assert row["outcome"] == "hung" and row["passed"] == 1 and "killed" in row["first_failure"]
    assert row["reproduce"] == gpu_ladder.pytest_command(nodes[1])
    skipped = {n: {"outcome": "skipped", "message": "cuDNN backend unavailable: no GPU"} for n in nodes}
    assert gpu_ladder.tabulate([rung], skipped, expect_cudnn=False)["rungs"][0]["outcome"] == "skipped"
    row = gpu_ladder.tabulate([rung], skipped, expect_cudnn=True)["rungs"][0]
    assert row["outcome"] == "failed" and "skipped although the cuDNN backend is available" in row["first_failure"]


def climb(tmp_path: Path, *args: str, faults: str = "", seconds: float = 600) -> tuple[dict, float]:
    """The runner on the fake over ``args``' rungs within a window of ``seconds`` (generous by default: a busy
    machine must not run out of window), its table by rung name, and how long it took."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'compat_tests' / 'gpu' / 'fake_site'}", "FAKE_CUDA_FAULTS": faults}
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "compat_tests.gpu.ladder", "--out", str(tmp_path), "--seconds",
                           str(seconds), *args, "--", "--hypothesis-profile=gpu"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=seconds + 300)
    table = json.loads((tmp_path / "ladder.json").read_text())
    assert done.returncode == (0 if table["passed"] else 1), done.stdout[-2000:] + done.stderr[-2000:]
    for rung in table["rungs"]:
        assert f"{rung['rung']:<16} {rung['outcome']:<8}" in done.stdout
    return {r["name"]: r for r in table["rungs"]}, time.monotonic() - t0


WRONG_NUMBERS_THEN_AN_ERROR = """
import os
import pytest

pytestmark = pytest.mark.gpu


def ran(name):
    with open(os.environ["LADDER_TEST_PIDS"], "a") as f:
        f.write(f"{name} {os.getpid()}\\n")


def test_wrong_numbers():
    ran("wrong_numbers")
    assert 1.0 == 2.0, "the backend's output differs from the truth"


def test_after_wrong_numbers():
    ran("after_wrong_numbers")


def test_a_cuda_error():
    ran("a_cuda_error")
    raise RuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered")


def test_after_the_error():
    ran("after_the_error")
"""


def test_wrong_numbers_keep_the_process_any_other_failure_ends_it(tmp_path, monkeypatch):
    """A test that failed on its assertions (the backend's numbers are wrong) leaves its process healthy, and
    the next test runs in it; one that raised anything else (a CUDA error may stick to the context) ends it,
    and the next test runs in a fresh one. Told by the processes the tests ran in."""
    (tmp_path / "test_ladder_stops.py").write_text(WRONG_NUMBERS_THEN_AN_ERROR)
    monkeypatch.setenv("LADDER_TEST_PIDS", str(tmp_path / "pids.txt"))
    monkeypatch.chdir(tmp_path)  # the node ids as pytest names them there
    nodes = [f"test_ladder_stops.py::test_{name}" for name in ("wrong_numbers", "after_wrong_numbers",
                                                                "a_cuda_error", "after_the_error")]
    with open(tmp_path / "console.txt", "w") as console:
        results = gpu_ladder.run_group(nodes, tmp_path / "log.jsonl", time.monotonic() + 120, [], lambda node: 60,
                                       console)
    assert [results[n]["outcome"] for n in nodes] == ["failed", "passed", "failed", "passed"], results
    assert "the backend's output differs" in results[nodes[0]]["message"]
    pid = dict(line.split() for line in (tmp_path / "pids.txt").read_text().splitlines())
    assert pid["wrong_numbers"] == pid["after_wrong_numbers"] == pid["a_cuda_error"] != pid["after_the_error"], pid


def test_a_hang_is_killed_the_rest_of_its_rung_is_not_run_and_the_next_rung_goes_on(tmp_path):
    """The rest of the hung rung is "not run": one hang's limit is spent, not one per algorithm (told by the
    outcomes, not by a clock)."""
    rungs, _ = climb(tmp_path, "--rungs", "base,algorithms,dropout", "--risky-seconds", "8",
                           "--expect-cudnn", faults="persist_hang")
    assert rungs["base"]["outcome"] == "passed" and rungs["dropout"]["outcome"] == "passed"
    tests = {t["test"]: t for t in rungs["algorithms"]["tests"]}
    assert tests["test_algorithm[17-algorithms-standard]"]["outcome"] == "passed"
    assert tests["test_algorithm[17-algorithms-persist_static]"]["outcome"] == "hung"
    assert {t["outcome"] for name, t in tests.items() if "standard]" not in name and "persist_static]" not in name} \
        == {"not run"}


def test_when_the_window_ends_what_did_not_run_says_so(tmp_path):
    rungs, seconds = climb(tmp_path, "--rungs", "base,layers,algorithms", faults="persist_hang", seconds=12)
    assert rungs["algorithms"]["outcome"] in ("not run", "hung")
    assert "no time left" in json.dumps(rungs) or "stopped" in json.dumps(rungs)
    assert seconds < 40, seconds


def test_the_newest_run_is_told_by_its_start_stamp_not_its_file_times(tmp_path):
    """A checkout sets every file's time anew: --rerun-failed must read the run its summary says is newest."""
    for folder, stamp in (("a100-cudnn9.19.0", "2026-12-01T10:00:00Z"), ("h100-cudnn9.19.0", "2026-11-30T10:00:00Z"),
                          ("a100-cudnn9.19.0/rerun-1", "2026-12-01T10:20:00Z")):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "summary.txt").write_text(f"gpu_run.sh: grid window, 420 s, started {stamp}\n")
        (tmp_path / folder / "ladder.json").write_text('{"rungs": [], "passed": true}')
    os.utime(tmp_path / "h100-cudnn9.19.0" / "ladder.json")  # the newest file, the oldest run
    assert gpu_ladder.newest_run(tmp_path) == tmp_path / "a100-cudnn9.19.0" / "rerun-1" / "ladder.json"
    with pytest.raises(ValueError, match="no .*ladder.json to read the failed rungs from"):
        gpu_ladder.newest_run(tmp_path / "h100-cudnn9.19.0" / "none")


def test_a_torn_last_line_of_the_log_waits_for_the_next_read(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"event": "start", "nodeid": "a"}\n{"event": "end", "nod')
    assert gpu_ladder._read_log(log) == [{"event": "start", "nodeid": "a"}]


def test_an_interrupted_climb_writes_its_table_and_leaves_no_test_process(tmp_path):
    """gpu_run.sh ends a step out of time with SIGINT to the runner; its child pytest (a session of its own,
    here hung in a persistent algorithm) must end with it, and the table of what finished must be written."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'compat_tests' / 'gpu' / 'fake_site'}", "FAKE_CUDA_FAULTS": "persist_hang"}
    runner = subprocess.Popen([sys.executable, "-m", "compat_tests.gpu.ladder", "--out", str(tmp_path), "--rungs",
                               "algorithms", "--seconds", "300", "--", "--hypothesis-profile=gpu"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=as_at_a_terminal)
    log = tmp_path / "ladder-log.jsonl"
    try:
        deadline = time.monotonic() + 300  # (generous: a busy machine starts a pytest slowly; no cost when it starts)
        while not any("persist_static]" in e["nodeid"] for e in gpu_ladder._read_log(log)):
            assert time.monotonic() < deadline and runner.poll() is None, "the hanging test never started"
            time.sleep(0.2)
        assert processes_with(f"RNN_COMPAT_LADDER_LOG={log}"), "the child pytest should be running now"
        os.kill(runner.pid, signal.SIGINT)
        assert runner.wait(timeout=300) != 0
    finally:  # (a runner that failed the test must not outlive it)
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    table = json.loads((tmp_path / "ladder.json").read_text())
    tests = {t["test"]: t["outcome"] for t in table["rungs"][0]["tests"]}
    assert tests["test_algorithm[17-algorithms-standard]"] == "passed" and "not run" in tests.values(), tests
    assert not processes_with(f"RNN_COMPAT_LADDER_LOG={log}")


def test_tests_pytest_does_not_run_are_reported_at_once_not_started_again_until_the_window_ends(tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'compat_tests' / 'gpu' / 'fake_site'}"}
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "compat_tests.gpu.ladder", "--out", str(tmp_path), "--rungs", "base",
                           "--seconds", "120", "--", "-k", "no_such_test"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=200)
    assert done.returncode == 1 and time.monotonic() - t0 < 60
    row = json.loads((tmp_path / "ladder.json").read_text())["rungs"][0]
    assert row["outcome"] == "crashed" and "without running it" in row["first_failure"], row


def test_rung_00_is_cudnns_published_sample_and_runs_before_every_other():
    from compat_tests.judge import published

    first = gpu_ladder.RUNGS[0]
    assert (gpu_ladder.rung_id(first), first.peer, first.checks) == ("00-published", "cudnn", ("published",))
    assert first.values["published"] == published.modes()  # every mode the sample printed
    assert gpu_ladder.rung_id(gpu_ladder.BY_NAME["base"]) == "01-base"
    shared = [n for rung in gpu_ladder.groups(gpu_ladder.RUNGS)[0] for n in gpu_ladder.node_ids(rung)]
    assert shared[:4] == gpu_ladder.node_ids(first) and all(gpu_ladder.rung_of(n) is first for n in shared[:4])
