"""A report on a Dask fleet against the local process pool, at equal worker count, alternating.

    python -m benchmarks.bench_fleet [--grid quick] [--backends reference] [--workers 2] [--rounds 3]

Each round runs ``rnn-compat report`` three ways, each in a process of its own, in alternating order:
``--jobs N`` (the local pool), ``--scheduler local:N`` (a scheduler and N workers started by the command:
what a user trying the fleet pays, start-up included) and ``--scheduler FILE`` on a cluster of N workers
started once beforehand (the steady state of a fleet, the cost of the scheduler and of moving records). It
prints each way's median wall-clock time and its ratio to the local pool with the range of per-round ratios.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

from compat_tests.interrupts import stopped_quietly

from .harness import machine

ROOT = Path(__file__).resolve().parent.parent


def timed(args: list[str], out: Path) -> float:
    """Seconds of one ``rnn-compat report`` run into ``out`` (replaced), which must pass."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "compat_tests.cli", "report", "--no-progress", "--force",
                           "--out", str(out), *args], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"rnn-compat report {' '.join(args)} exited with {done.returncode}:\n{done.stderr[-2000:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    from compat_tests.report import fleet

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", default="quick")
    parser.add_argument("--backends", default="reference")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    fleet.require_distributed()
    print(machine(), flush=True)
    n = str(args.workers)
    common = ["--grid", args.grid, "--backends", args.backends]
    with tempfile.TemporaryDirectory() as scratch, fleet.local_cluster(args.workers) as (_, _, file):
        ways = {f"--jobs {n}": common + ["--jobs", n], f"--scheduler local:{n}": common + ["--scheduler", f"local:{n}"],
                f"--scheduler FILE ({n} workers up)": common + ["--scheduler", str(file)]}
        times: dict[str, list[float]] = {way: [] for way in ways}
        for k in range(args.rounds):
            for way in (list(ways) if k % 2 == 0 else list(ways)[::-1]):
                times[way].append(timed(ways[way], Path(scratch) / f"run-{len(times[way])}-{way[:9].strip('-')}"))
        pool = times[f"--jobs {n}"]
        print(f"rnn-compat report --grid {args.grid} --backends {args.backends}, {args.rounds} rounds, "
              f"OMP/OPENBLAS threads {os.environ.get('OPENBLAS_NUM_THREADS', 'default')}")
        for way, seconds in times.items():
            per_round = [a / b for a, b in zip(seconds, pool)]
            print(f"{way:36} {median(seconds):7.1f} s   / local pool {median(seconds) / median(pool):.2f} "
                  f"[{min(per_round):.2f}-{max(per_round):.2f}]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(stopped_quietly(main, "benchmarks.bench_fleet"))
