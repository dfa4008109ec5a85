"""The reference at two commits, alternating, one process per measurement: did a change cost speed?

    python -m benchmarks.bench_commits BEFORE [AFTER] [--rounds N] [--seconds S]

``AFTER`` defaults to the working tree. Each commit is checked out into a temporary ``git worktree`` and
timed there by its own ``benchmarks.worker`` (``reference`` for inference and training) on the configs of
:data:`CASES`: a batch-1 step dominated by per-call overhead, and the inference and training configs of the
other benchmarks. Prints ``after/before`` as the ratio of medians with the range of per-round ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

from compat_tests.interrupts import stopped_quietly

from .harness import Case, machine, run_worker

ROOT = Path(__file__).resolve().parent.parent
CASES = [
    ("infer", Case("gru", 1, 1, 64, 128, 1, False)),
    ("infer", Case("lstm", 1, 1, 64, 128, 1, False)),
    ("infer", Case("gru", 100, 32, 128, 256, 1, False)),
    ("infer", Case("lstm", 100, 32, 128, 256, 1, False)),
    ("train", Case("gru", 50, 32, 128, 256, 1, False)),
    ("train", Case("lstm", 50, 32, 128, 256, 1, False)),
]


def measure(tree: Path, task: str, case: Case, seconds: float) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = run_worker(["reference", task, *case.args(), "--seconds", str(seconds)], cwd=tree, env=env)
    return json.loads(out.strip().splitlines()[-1])["median"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="a commit")
    parser.add_argument("after", nargs="?", help="a commit (default: the working tree)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0, help="timing per measurement")
    args = parser.parse_args(argv)
    print(machine(), flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        trees = {}
        try:
            for label, rev in (("before", args.before), ("after", args.after)):
                if rev is None:
                    trees[label] = ROOT
                    continue
                subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(Path(scratch) / label),
                                rev], check=True, capture_output=True)
                trees[label] = Path(scratch) / label
            print(f"after/before: {args.after or 'working tree'} / {args.before}")
            for task, case in CASES:
                times = {label: [] for label in trees}
                for _ in range(args.rounds):
                    for label, tree in trees.items():
                        times[label].append(measure(tree, task, case, args.seconds))
                per_round = [a / b for a, b in zip(times["after"], times["before"])]
                print(f"{task:5} {case.label():44} before {1e3 * median(times['before']):9.3f} ms  after "
                      f"{1e3 * median(times['after']):9.3f} ms  after/before "
                      f"{median(times['after']) / median(times['before']):.2f} "
                      f"[{min(per_round):.2f}-{max(per_round):.2f}]", flush=True)
        finally:
            for label, tree in trees.items():
                if tree != ROOT:
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                                   capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(stopped_quietly(main, "benchmarks.bench_commits"))
