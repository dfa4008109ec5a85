"""The GPU ladder's table and its runner (``compat_tests.gpu_ladder``) on a CPU: the ids it runs are the ones
pytest collects, the rungs are grouped as documented, and a climb under the CPU fakes (``fake_site``) records
passes, failures with their reproduce command, hangs and the window's end. ``test_gpu_run.py`` climbs the
whole ladder through ``scripts/gpu_run.sh`` with a fault planted per rung."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compat_tests import gpu_ladder

ROOT = Path(__file__).resolve().parent.parent


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
    with pytest.raises(ValueError, match="--rungs must name rungs among base"):
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


def climb(tmp_path: Path, *args: str, faults: str = "", seconds: float = 120) -> tuple[dict, float]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'compat_tests' / 'fake_site'}", "FAKE_CUDA_FAULTS": faults}
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "compat_tests.gpu_ladder", "--out", str(tmp_path), "--seconds",
                           str(seconds), *args, "--", "--hypothesis-profile=gpu"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    table = json.loads((tmp_path / "ladder.json").read_text())
    assert done.returncode == (0 if table["passed"] else 1), done.stdout[-2000:] + done.stderr[-2000:]
    for rung in table["rungs"]:
        assert f"{rung['rung']:<16} {rung['outcome']:<8}" in done.stdout
    return {r["name"]: r for r in table["rungs"]}, time.monotonic() - t0


def test_a_hang_is_killed_the_rest_of_its_rung_is_not_run_and_the_next_rung_goes_on(tmp_path):
    rungs, seconds = climb(tmp_path, "--rungs", "base,algorithms,dropout", "--risky-seconds", "8",
                           "--expect-cudnn", faults="persist_hang")
    assert rungs["base"]["outcome"] == "passed" and rungs["dropout"]["outcome"] == "passed"
    tests = {t["test"]: t for t in rungs["algorithms"]["tests"]}
    assert tests["test_algorithm[13-algorithms-standard]"]["outcome"] == "passed"
    assert tests["test_algorithm[13-algorithms-persist_static]"]["outcome"] == "hung"
    assert {t["outcome"] for name, t in tests.items() if "standard]" not in name and "persist_static]" not in name} \
        == {"not run"}
    assert seconds < 90, seconds  # one hang's limit, not one per algorithm


def test_when_the_window_ends_what_did_not_run_says_so(tmp_path):
    rungs, seconds = climb(tmp_path, "--rungs", "base,layers,algorithms", faults="persist_hang", seconds=12)
    assert rungs["algorithms"]["outcome"] in ("not run", "hung")
    assert "no time left" in json.dumps(rungs) or "stopped" in json.dumps(rungs)
    assert seconds < 40, seconds
