"""``scripts/gpu_run.sh`` end to end on a CPU, with ``compat_tests.gpu.fake_cuda`` in place of CuPy and libcudnn
in every process (``compat_tests/gpu/fake_site``), then ``scripts/gpu_unpack.py`` on what it returned.

A GPU session is rare and short, so the script must not fail there for a reason a CPU can see: each step
runs here (``pytest -m gpu`` included, so a broken GPU test fails here too), what it returns fits the
device tool's limits on returned files, and the CPU side turns it into a committed report folder. Every
run here lacks what the GPU image lacks (``GPU_IMAGE_LACKS``, hidden by ``fake_site``'s ``RNN_COMPAT_HIDE``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from compat_tests import strategies
from compat_tests.gpu import capture as gpu_capture
from compat_tests.gpu import fake_cuda
from compat_tests.gpu import ladder as gpu_ladder

ROOT = Path(__file__).resolve().parents[3]


# What the device tool returns from $OUT: at most 8 files of at most 16 MiB, at most 2 folders down.
MAX_FILES, MAX_BYTES, MAX_DEPTH = 8, 16 << 20, 2


LADDER = {"ladder.txt", "ladder.json", "ladder.md", "ladder-pytest.txt"}


# Optional packages the GPU machine's image does not have; every dry run here hides them from every process.
GPU_IMAGE_LACKS = ("onnx", "onnxscript", "keras", "h5py", "jsonschema", "safetensors", "distributed")


# The runs whose subject is not PyTorch lack it too, as an image without it would: no step may need it (and
# their processes spare torch's start-up).
WITHOUT_TORCH = ",".join(GPU_IMAGE_LACKS + ("torch",))


ARCHIVED = {"versions.json", "versions.log", "summary.txt", "nvidia-smi.txt", "capture/capture.json",
            "capture/arrays.npz", "capture.txt", "capture-cudnn-tf32/capture.json", "capture-cudnn-tf32/arrays.npz",
            "capture-tf32.txt", "capture-cudnn-persist/capture.json", "capture-cudnn-persist/arrays.npz",
            "capture-persist.txt", "pytest-host.txt", "pytest.txt", "report.txt", "report/run.json",
            "report/results.jsonl", "report/report.json", "report/report.md", "report/index.html"} | LADDER


# The dry runs' report grid: six units over every dtype and study (the window grid's plan is report/test_grids.py's;
# the steps, not the grid's size, are under test here).
TINY_GRID = str(ROOT / "compat_tests" / "data" / "tiny_grid.json")


def gpu_run(out: Path, seconds: int, *args: str, **env_extra: str) -> subprocess.CompletedProcess:
    """The script on the fake with ``args`` (by default :data:`TINY_GRID`), the packages of ``GPU_IMAGE_LACKS``
    unimportable in all its processes, its properties under the ``gpu-dry`` profile (the plumbing is under
    test, not the properties); its report without torch-cuda, which no CPU runs (and naming it would fail
    it)."""
    # One BLAS thread a process: the run shares CI's 2 cores with the suite's other worker, and OpenBLAS's
    # spinning threads, oversubscribed, once made a ladder test take over its 120 s limit there.
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "OUT": str(out), "PYTHON": sys.executable, "GPU_RUN_SECONDS": str(seconds), "JOBS": "2",
           "PYTHONPATH": str(ROOT / "compat_tests" / "gpu" / "fake_site"), "BACKENDS": "reference,cudnn,cudnn-tf32",
           "RNN_COMPAT_HIDE": ",".join(GPU_IMAGE_LACKS), "GPU_RUN_PROFILE": "gpu-dry", **env_extra}
    return subprocess.run(["bash", "scripts/gpu_run.sh", *(args or (TINY_GRID,))], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)


def returned(out: Path) -> list[Path]:
    """The files under ``out``, each checked against the device tool's limits."""
    files = [p for p in out.rglob("*") if p.is_file()]
    assert 0 < len(files) <= MAX_FILES, files
    for p in files:
        rel = p.relative_to(out)
        assert len(rel.parts) - 1 <= MAX_DEPTH and re.fullmatch(r"[A-Za-z0-9._-]+", p.name), rel
        assert p.stat().st_size <= MAX_BYTES, (rel, p.stat().st_size)
    return files


def members(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return {m.name.removeprefix("./") for m in tar.getmembers() if m.isfile()}


def test_every_step_passes_on_the_fake_comes_back_in_few_files_and_unpacks_into_a_report(tmp_path):
    """The command as a GPU session sends it (the default budget, on what the GPU image has), with a six-unit
    grid for the window's (the same steps; the window grid's plan is ``report/test_grids.py``'s): every step passes
    and the run comes back in few files; ``gpu_unpack.py`` then files it under its device and renders its
    report. (One test: the dry run is the suite's most expensive step, and a module fixture shared by two tests
    is made once per xdist worker that runs one of them.)"""
    out = tmp_path / "out"
    run = gpu_run(out, 420)
    summary = (out / "summary.txt").read_text() if (out / "summary.txt").exists() else "(none)"
    assert run.returncode == 0, f"summary:\n{summary}\nstdout:\n{run.stdout[-4000:]}\nstderr:\n{run.stderr[-2000:]}"
    assert {p.name for p in returned(out)} == {"gpu_run.tar.gz", "summary.txt", "versions.json"}
    assert members(out / "gpu_run.tar.gz") >= ARCHIVED
    for step in ("versions", "capture", "capture-tf32", "capture-persist", "ladder", "host-tests", "gpu-tests",
                 "report"):
        assert f"gpu_run.sh: {step}: ok" in summary, summary
    assert "gpu_run.sh: report verdict: PASSED:" in summary, summary
    assert json.loads((out / "versions.json").read_text())["available"]
    with tarfile.open(out / "gpu_run.tar.gz") as tar:
        environment = json.load(tar.extractfile("./report/report.json"))["environment"]
        # the window's seconds go to the units; gpu_unpack.py draws the figures (below)
        assert "written with --no-figures" in tar.extractfile("./report/index.html").read().decode()
    assert environment["onnx"] is None, "the report's processes ran without onnx, as on the GPU image"
    for rung in gpu_ladder.RUNGS:  # the ladder's table, a row a rung
        assert re.search(rf"\| {gpu_ladder.rung_id(rung)} \| .* \| \*\*passed\*\* \|", summary), (rung, summary)

    into = tmp_path / "gpu"
    unpack = [sys.executable, "scripts/gpu_unpack.py", str(out), "--into", str(into)]
    done = subprocess.run(unpack, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    target = into / "fake-cudnn9.19.0"  # the fake's device and cuDNN version
    assert {str(p.relative_to(target)) for p in target.rglob("*") if p.is_file()} == ARCHIVED
    gpu_tests = (target / "pytest.txt").read_text().splitlines()[-1]
    assert re.search(r"\d+ passed", gpu_tests) and "failed" not in gpu_tests and "error" not in gpu_tests, gpu_tests
    assert "fake_cuda is in place" in (target / "pytest-host.txt").read_text(), "host tests skip on the fake"
    assert gpu_capture.check(target / "capture") == {}
    assert gpu_capture.check(target / "capture-cudnn-tf32") == {}
    assert gpu_capture.check(target / "capture-cudnn-persist") == {}
    report = json.loads((target / "report" / "report.json").read_text())
    assert report["complete"] and report["passed"]
    assert report["environment"]["cudnn"]["device"] == "fake", "the run's environment, not the renderer's"
    assert {b["name"] for b in report["backends"] if b["available"]} >= {"reference", "cudnn", "cudnn-tf32"}
    assert "data:image/png;base64," in (target / "report" / "index.html").read_text(), "figures drawn here"
    again = subprocess.run(unpack, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "exists already" in again.stderr and "the same summary.txt" in again.stderr
    second = tmp_path / "second"  # another whole run on the same device and cuDNN (its own summary)
    second.mkdir()
    with tarfile.open(out / "gpu_run.tar.gz") as tar:
        tar.extractall(second / "files", filter="data")
    (second / "files" / "summary.txt").write_text("gpu_run.sh: grid tiny, 420 s, started later\n")
    shutil.rmtree(second / "files" / "report")  # its report rendered once already, above
    with tarfile.open(second / "gpu_run.tar.gz", "w:gz") as tar:
        tar.add(second / "files", arcname=".")
    filed = subprocess.run(unpack[:2] + [str(second / "gpu_run.tar.gz"), "--into", str(into)], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert filed.returncode == 0 and (into / "fake-cudnn9.19.0-2" / "ladder.json").is_file(), filed.stderr


def test_out_of_time_the_steps_are_skipped_and_what_ran_still_comes_back(tmp_path):
    run = gpu_run(tmp_path, 1)
    assert run.returncode == 1
    summary = (tmp_path / "summary.txt").read_text()
    for step in ("capture", "ladder", "host-tests", "gpu-tests", "report"):
        assert f"gpu_run.sh: {step}: SKIPPED, no time left" in summary, summary
    returned(tmp_path)
    assert {"versions.json", "summary.txt"} <= members(tmp_path / "gpu_run.tar.gz")


def test_without_the_backend_the_capture_is_skipped_and_the_rest_still_runs(tmp_path):
    """A GPU whose cuDNN backend cannot start (here: the fake told so) still returns the binding's host tests,
    the GPU suite's skips with their reason, and a report of the backends that do run, which fails for
    the backends it was asked for and could not run; the exit status says the run fell short. Every step after
    a ladder that failed still runs. (On an image without PyTorch, too: no step needs it.)"""
    why = "CuPy cannot run its kernels (test double)"
    out = tmp_path / "out"
    run = gpu_run(out, 420, FAKE_CUDA_UNAVAILABLE=why, RNN_COMPAT_HIDE=WITHOUT_TORCH)
    assert run.returncode == 1
    summary = (out / "summary.txt").read_text()
    assert "gpu_run.sh: capture: SKIPPED, cuDNN backend unavailable" in summary, summary
    for step in ("versions", "host-tests", "gpu-tests"):
        assert f"gpu_run.sh: {step}: ok" in summary, summary
    assert "gpu_run.sh: ladder: FAILED" in summary and "| 01-base | " in summary, summary  # every rung skipped
    assert "gpu_run.sh: report: FAILED with exit status 1" in summary, summary
    versions = json.loads((out / "versions.json").read_text())
    assert not versions["available"] and versions["reason"] == why and "torch" not in versions
    returned(out)
    with tarfile.open(out / "gpu_run.tar.gz") as tar:
        assert not any(m.name.startswith("./capture/") for m in tar.getmembers())
        report = json.load(tar.extractfile("./report/report.json"))
        gpu_tests = tar.extractfile("./pytest.txt").read().decode()
    assert f"cuDNN backend unavailable: {why}" in gpu_tests
    backends = {b["name"]: b for b in report["backends"]}
    assert backends["reference"]["available"] and not backends["cudnn"]["available"]
    assert why in backends["cudnn"]["detail"] and backends["cudnn"]["requested"]
    assert not report["passed"] and report["records"], "what could run, ran"


# One planted fault a rung (compat_tests.gpu.fake_cuda.FAULTS), and the rungs each must fail; every other rung passes.
PLANTED = {"skip_input_bias": "skip_input", "float16_rounding": "float16", "persist_hang": "algorithms",
           "sticky_error": "dropout", "wide_single_bias": "published", "bias_mode_ignored": "bias_modes",
           "padding_fill_ignored": "padding_fill", "cell_clip_ignored": "cell_clip", "packed_by_sequence": "packed",
           "tf32_other_ties": "tf32"}


FAULTY_SECONDS = 300


def test_a_wrong_guess_fails_its_own_rung_and_the_second_command_reruns_it(tmp_path):
    """Under ten planted faults (a wrong skip_input bias, float16 rounded another way, a persistent algorithm
    that hangs, a CUDA error that sticks, the published sample's recurrent biases not read, biasMode,
    paddingFill and the cell clip not reaching cuDNN, packed data read in the wrong order, TF32 operands
    rounded at ties the other way), the whole ladder (``--rungs`` naming every rung: the
    steps after the ladder are ``test_without_the_backend_...``'s, which sees them run after a failed ladder)
    fails each fault's own rung (rung 00 alone for the published sample's) and passes every other rung, within
    GPU_RUN_SECONDS, and the capture's own check fails too. Then the second command for the same window
    (``--rerun-failed``) runs the failed rungs again with the capture."""
    out = tmp_path / "faulty"
    t0 = time.monotonic()
    gpu_run(out, FAULTY_SECONDS, "--rungs", ",".join(r.name for r in gpu_ladder.RUNGS),
            FAKE_CUDA_FAULTS=",".join(PLANTED), LADDER_RISKY_SECONDS="10", RNN_COMPAT_HIDE=WITHOUT_TORCH)
    assert time.monotonic() - t0 <= FAULTY_SECONDS + 5
    with tarfile.open(out / "gpu_run.tar.gz") as tar:
        ladder = json.load(tar.extractfile("./ladder.json"))
    outcome = {r["name"]: r for r in ladder["rungs"]}
    assert [r["name"] for r in ladder["rungs"]] == [r.name for r in gpu_ladder.RUNGS]
    for rung in gpu_ladder.RUNGS:
        if rung.name in PLANTED.values():
            assert outcome[rung.name]["outcome"] != "passed", outcome[rung.name]
        else:
            assert outcome[rung.name]["outcome"] == "passed", outcome[rung.name]
    assert outcome["algorithms"]["outcome"] == "hung", outcome["algorithms"]
    # rung 00 alone: its every test misses cuDNN's published numbers (H=512); no other rung draws 256 units or more
    assert strategies.MAX_UNITS < 256 < fake_cuda.WIDE_UNITS
    assert [t["outcome"] for t in outcome["published"]["tests"]] == ["failed"] * 4, outcome["published"]
    assert "from cuDNN's published M40 value" in outcome["published"]["first_failure"]
    assert outcome["published"]["reproduce"] == gpu_ladder.pytest_command(gpu_ladder.node_ids(gpu_ladder.RUNGS[0])[0])
    assert "sticky_error" in outcome["dropout"]["first_failure"]
    assert "another TF32 rule fits cuDNN's default math" in outcome["tf32"]["first_failure"], outcome["tf32"]
    for name in ("skip_input", "float16", "padding_fill"):  # the failing example's command, run from the tree
        assert outcome[name]["reproduce"].startswith("PYTHONPATH=. python3 -m compat_tests.cli check --peer cudnn ")
    summary = (out / "summary.txt").read_text()
    assert "gpu_run.sh: versions: ok" in summary and "gpu_run.sh: ladder: FAILED" in summary, summary
    # the capture's own check sees the planted skip_input and float16 faults too, and says so
    assert "gpu_run.sh: capture: FAILED" in summary and "capture/arrays.npz" in members(out / "gpu_run.tar.gz")
    returned(out)

    # --rerun-failed reads the failed rungs from the newest unpacked run's ladder.json (a re-run's too);
    # gpu_unpack.py files each re-run under the run's folder.
    into = tmp_path / "reports" / "gpu"
    unpack = [sys.executable, "scripts/gpu_unpack.py", str(out), "--into", str(into)]
    assert subprocess.run(unpack, cwd=ROOT, capture_output=True, text=True, timeout=300).returncode == 0
    first = into / "fake-cudnn9.19.0"
    assert gpu_ladder.failed_rungs(first / "rerun-1" / "ladder.json") == [
        "published", "float16", "skip_input", "bias_modes", "padding_fill", "cell_clip", "packed", "tf32",
        "dropout", "algorithms"]
    # The second command re-runs what that table says failed: two of those rungs here (the table cut to two
    # small ones, so that the re-run costs two rungs' time, not rung 00's H=512 sample; which rungs failed is the
    # ladder's to say, checked above).
    table = json.loads((first / "rerun-1" / "ladder.json").read_text())
    for rung in table["rungs"]:
        if rung["name"] not in ("skip_input", "padding_fill"):
            rung["outcome"] = "passed"
    (first / "rerun-1" / "ladder.json").write_text(json.dumps(table))
    again = tmp_path / "again"
    run = gpu_run(again, 120, "--rerun-failed", GPU_RUNS=str(into), FAKE_CUDA_FAULTS="skip_input_bias",
                  LADDER_RISKY_SECONDS="10", RNN_COMPAT_HIDE=WITHOUT_TORCH)
    summary = (again / "summary.txt").read_text()
    assert run.returncode == 1 and "re-run of the rungs skip_input,padding_fill" in summary, summary
    assert "gpu_run.sh: capture: FAILED" in summary  # its check sees the skip_input fault still planted
    assert "gpu_run.sh: host-tests" not in summary and "gpu_run.sh: report" not in summary
    with tarfile.open(again / "gpu_run.tar.gz") as tar:
        ladder = json.load(tar.extractfile("./ladder.json"))
    assert {r["name"]: r["outcome"] for r in ladder["rungs"]} == {"skip_input": "failed", "padding_fill": "passed"}
    assert subprocess.run(unpack[:2] + [str(again), "--into", str(into)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300).returncode == 0
    assert (first / "rerun-2" / "ladder.json").is_file() and (first / "rerun-2" / "rerun.txt").is_file()


def test_the_gpu_probes_run_with_the_reference_standing_in_for_cudnn():
    """``scripts/gpu_probe.py --backend reference``: every probe prints its table, none fails, and probe 5's
    model of a float16 step that rounds both GEMMs' results, written in the probe independently of the
    reference, matches the reference (which follows that rule, ``precision.HALF_ROUNDS``) on every output,
    where leaving the rounding out does not."""
    done = subprocess.run([sys.executable, "scripts/gpu_probe.py", "--backend", "reference"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "probe failed" not in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.findall(r"^## (\d)\.", done.stdout, re.M) == [str(n) for n in range(1, 10)]
    step = {tuple(cell.strip() for cell in line.split("|")[1:3]): float(line.split("|")[5])
            for line in done.stdout.split("## 5.")[1].split("## 6.")[0].splitlines() if line.startswith("| relu")
            or line.startswith("| tanh")}
    for mode in ("relu", "tanh"):
        assert step[(mode, "GEMMs rounded")] == 1.0 and step[(mode, "all float32")] < 0.9, step
