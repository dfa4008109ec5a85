"""Alternate implementations, one fresh process per measurement, and report ratios of medians.

Two cores shared by torch's OpenMP pool, OpenBLAS's threads or onnxruntime's pool make same-process
timings meaningless, so every measurement is its own ``python -m benchmarks.worker`` process. Rounds
alternate the implementations, every other round in reverse order, so slow phases of a shared host hit
all of them alike; each cell of the table is the median over rounds, and the ratio is
``median(reference) / median(peer)``, followed by the range of the per-round ratios in brackets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from statistics import median

import numpy as np

from compat_tests import host
from compat_tests.interrupts import children_start_deaf

ROOT = Path(__file__).resolve().parent.parent
"""The working tree the workers run in (``python -m benchmarks.worker``, from wherever the harness is called)."""


@dataclass(frozen=True)
class Case:
    mode: str
    T: int
    B: int
    I: int
    H: int
    L: int
    bidi: bool
    lengths: bool = False  # a padded batch of sequences of benchmarks.worker.lengths(T, B)

    def args(self) -> list[str]:
        return [self.mode, *(str(v) for v in (self.T, self.B, self.I, self.H, self.L)), "Y" if self.bidi else "N",
                *(["--lengths"] if self.lengths else [])]

    def label(self) -> str:
        return (f"{self.mode} T={self.T} B={self.B} I={self.I} H={self.H} L={self.L} bi={'Y' if self.bidi else 'N'}"
                + (" lengths" if self.lengths else ""))


def machine() -> str:
    """The lines a benchmark prints first: what its numbers were measured on. The ratios depend on it
    (:mod:`compat_tests.host`): NumPy's float32 ``exp`` took 1.4-2.4 ns an element through its AVX2 loop on
    one of the project's machines and 0.46-0.62 ns through its AVX-512 loop on another, and OpenBLAS's and
    the peers' GEMM kernels differ by CPU too."""
    versions = []
    for package in ("torch", "onnxruntime"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} not installed")
    facts = host.describe()
    return (f"machine: {facts['cpu']}, {os.cpu_count()} cores; numpy {np.__version__}, {facts['numpy_blas']}; "
            f"{', '.join(versions)}\nnumpy's loops: {facts['numpy_simd']}")


def run_worker(args: list[str], **popen) -> str:
    """``python -m benchmarks.worker ARGS``'s standard output (``popen``: ``cwd``, ``env``). The worker starts
    deaf to Ctrl-C and SIGTERM, which are this process's to handle: interrupted while it waits, it kills the
    worker. A worker that fails raises ``CalledProcessError``."""
    command = [sys.executable, "-m", "benchmarks.worker", *args]
    with children_start_deaf():  # (the spawn alone: this process's signals act while it waits)
        worker = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    try:
        out, err = worker.communicate()
    except BaseException:
        worker.kill()
        worker.wait()
        raise
    if worker.returncode:
        raise subprocess.CalledProcessError(worker.returncode, command, out, err)
    return out


def measure(impl: str, task: str, case: Case, seconds: float) -> float:
    out = run_worker([impl, task, *case.args(), "--seconds", str(seconds)], cwd=ROOT)
    return json.loads(out.strip().splitlines()[-1])["median"]


def samples(task: str, case: Case, impls: list[str], rounds: int, seconds: float) -> dict[str, list[float]]:
    """Seconds per call of each implementation in each of ``rounds`` rounds that alternate them, in
    ``impls``' order and then in reverse (A B C, C B A, ...), so that a host drifting during a pair of
    rounds weighs on all of them alike; implementations compared with each other go next to each other."""
    times: dict[str, list[float]] = {impl: [] for impl in impls}
    for k in range(rounds):
        for impl in impls if k % 2 == 0 else impls[::-1]:
            times[impl].append(measure(impl, task, case, seconds))
    return times


def interleaved(task: str, case: Case, impls: list[str], rounds: int, seconds: float) -> dict[str, list[float]]:
    """Seconds per call of each implementation in each of ``rounds`` rounds, each implementation in a worker
    process of its own that stays up (``benchmarks.worker --serve``) and times a burst of ``seconds`` when
    asked, one worker at a time, in ``impls``' order and then in reverse. Bursts a fraction of a second
    long, next to each other, see the same phase of a drifting host, where one process per measurement
    (:func:`samples`) puts seconds of start-up between them. A worker that fails raises ``RuntimeError``
    with its command and what it printed on standard error; every worker is gone when this returns or
    raises (an interrupt included)."""
    workers: dict[str, subprocess.Popen] = {}
    errors = tempfile.TemporaryFile("w+")  # the workers' warnings, shown only if one fails

    def reply(impl: str, key: str) -> float | bool:
        worker = workers[impl]
        line = worker.stdout.readline()
        try:
            return json.loads(line)[key]
        except (ValueError, KeyError, TypeError):
            if not line:  # its standard output closed: it is ending
                try:
                    worker.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            errors.seek(0)
            raise RuntimeError(f"benchmarks.worker {impl} {task} {' '.join(case.args())} --serve answered "
                               f"{line.strip()!r} (exit status {worker.poll()}): {errors.read()[-2000:]}") from None

    try:
        for impl in impls:
            with children_start_deaf():  # (the spawn alone) Ctrl-C is the harness's to handle: it ends the workers
                workers[impl] = subprocess.Popen(
                    [sys.executable, "-m", "benchmarks.worker", impl, task, *case.args(), "--seconds", str(seconds),
                     "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True, cwd=ROOT)
        for impl in impls:
            reply(impl, "ready")
        times: dict[str, list[float]] = {impl: [] for impl in impls}
        for k in range(rounds):
            for impl in impls if k % 2 == 0 else impls[::-1]:
                workers[impl].stdin.write("burst\n")
                workers[impl].stdin.flush()
                times[impl].append(reply(impl, "median"))
        return times
    except BaseException:  # interrupted, or a worker failed: no burst is awaited any more, so none is finished
        for worker in workers.values():
            worker.kill()
        raise
    finally:
        for worker in workers.values():
            try:
                worker.stdin.close()
            except OSError:
                pass
        for worker in workers.values():
            try:
                worker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        errors.close()


def ratio(times: dict[str, list[float]], a: str, b: str) -> str:
    """``median(a) / median(b)`` and, in brackets, the range of the per-round ratios: each round ran both
    close in time, so the range shows how far the host drifted during the measurement."""
    per_round = [x / y for x, y in zip(times[a], times[b])]
    return f"{median(times[a]) / median(times[b]):.2f} [{min(per_round):.2f}-{max(per_round):.2f}]"


def compare(task: str, cases: list[Case], impls: list[str], rounds: int, seconds: float) -> list[dict]:
    rows = []
    for case in cases:
        times = samples(task, case, impls, rounds, seconds)
        rows.append({"case": case.label(), **{f"{i}_ms": 1e3 * median(v) for i, v in times.items()},
                     **{f"reference/{i}": ratio(times, "reference", i) for i in impls if i != "reference"},
                     "times": times})
        print(format_row(rows[-1]), flush=True)
    return rows


def format_row(row: dict) -> str:
    cells = [row["case"].ljust(52)]
    cells += [f"{k} {v:9.2f}" if k.endswith("_ms") else f"{k} = {v}" for k, v in row.items()
              if k not in ("case", "times")]
    return "  ".join(cells)
