"""How long ``make report``'s job takes: ``rnn-compat report`` on built-in grids, each run a process of its own.

    python -m benchmarks.bench_report [--grids quick,default] [--rounds 3] [--jobs N]

Each round runs ``rnn-compat report --grid G`` once per grid (every other round in reverse order), on every
available backend, with the command's own default workers unless ``--jobs`` says otherwise, from its start to
the page written (the figures included). It prints each grid's units, the median wall-clock seconds and their
range: the time the README states for ``make report`` is this benchmark's ``default`` median.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

from compat_tests.interrupts import stopped_quietly

from .harness import machine

ROOT = Path(__file__).resolve().parent.parent


def timed(grid: str, out: Path, jobs: int | None) -> tuple[float, int]:
    """Seconds of one ``rnn-compat report --grid grid`` into ``out`` (a new folder), and the units it ran; the
    run must complete (exit status 0 or 1: a divergence found is still a report)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "compat_tests.cli", "report", "--grid", grid, "--no-progress",
                           "--out", str(out), *(["--jobs", str(jobs)] if jobs else [])], cwd=ROOT,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1) or not (out / "index.html").is_file():
        raise RuntimeError(f"rnn-compat report --grid {grid} exited with {done.returncode}:\n{done.stderr[-2000:]}")
    report = json.loads((out / "report.json").read_text())
    return seconds, report["totals"]["units"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grids", default="quick,default")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int)
    args = parser.parse_args(argv)
    grids = args.grids.split(",")
    print(machine(), flush=True)
    times: dict[str, list[float]] = {g: [] for g in grids}
    units: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for k in range(args.rounds):
            for grid in (grids if k % 2 == 0 else grids[::-1]):
                seconds, units[grid] = timed(grid, Path(scratch) / f"{grid}-{k}", args.jobs)
                times[grid].append(seconds)
                print(f"round {k}: --grid {grid}: {seconds:.1f} s", flush=True)
    for grid, seconds in times.items():
        print(f"rnn-compat report --grid {grid:8} {units[grid]:5d} units  {median(seconds):6.1f} s "
              f"[{min(seconds):.1f}-{max(seconds):.1f}]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(stopped_quietly(main, "benchmarks.bench_report"))
