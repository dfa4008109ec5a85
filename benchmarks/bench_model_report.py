"""How long a report about a user's model takes: ``rnn-compat report --model`` on a 2-layer 256-unit LSTM ``.pt``
with the drawn inputs (T = 10 and 1000, batches of 4 and 1), each run a process of its own, alternating with the
quick grid's report as the yardstick of the machine.

    python -m benchmarks.bench_model_report [--rounds 3] [--jobs N] [--backends a,b]

Each round runs the model report and ``rnn-compat report --grid quick`` (every other round in the other order)
from start to page written. It prints the median seconds of each, their ranges, and the ratio of the medians:
the time docs/model-report.md states is this benchmark's.
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


def lstm_file(folder: Path) -> Path:
    """A 2-layer 256-unit LSTM (input 64) as ``torch.save`` writes a state_dict, at PyTorch's initial scale."""
    import numpy as np

    from compat_tests.interop.convert import write
    from reference import make_model

    model = make_model("lstm", 2, 256, 64, dtype=np.float32)
    rng = np.random.default_rng(0)
    shapes_w, shapes_b = model.canonical_shapes()
    s = 1 / 16
    weights = [rng.uniform(-s, s, shape).astype(np.float32) for shape in shapes_w]
    biases = [rng.uniform(-s, s, shape).astype(np.float32) for shape in shapes_b]
    path = folder / "lstm_2x256.pt"
    write("torch", path, model, weights, biases)
    return path


def timed(words: list[str], out: Path) -> tuple[float, int]:
    """Seconds of one ``rnn-compat report WORDS --out out`` and the units it ran; it must complete (exit 0 or 1)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "compat_tests.cli", "report", *words, "--no-progress", "--out",
                           str(out)], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1) or not (out / "index.html").is_file():
        raise RuntimeError(f"rnn-compat report {' '.join(words)} exited with {done.returncode}:\n{done.stderr[-2000:]}")
    report = json.loads((out / "report.json").read_text())
    return seconds, report.get("ran_units") or report["totals"]["units"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--backends")
    args = parser.parse_args(argv)
    print(machine(), flush=True)
    extra = [*(["--jobs", str(args.jobs)] if args.jobs else []), *(["--backends", args.backends] if args.backends
                                                                     else [])]
    with tempfile.TemporaryDirectory() as scratch:
        model = lstm_file(Path(scratch))
        runs = {"model": ["--model", str(model), *extra], "quick grid": ["--grid", "quick", *extra]}
        times: dict[str, list[float]] = {name: [] for name in runs}
        units: dict[str, int] = {}
        for k in range(args.rounds):
            for name in (list(runs) if k % 2 == 0 else list(runs)[::-1]):
                seconds, units[name] = timed(runs[name], Path(scratch) / f"{name.replace(' ', '-')}-{k}")
                times[name].append(seconds)
                print(f"round {k}: {name}: {seconds:.1f} s", flush=True)
    for name, seconds in times.items():
        print(f"{name:12} {units[name]:4d} units  {median(seconds):6.1f} s [{min(seconds):.1f}-{max(seconds):.1f}]")
    print(f"model report / quick grid report: {median(times['model']) / median(times['quick grid']):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(stopped_quietly(main, "benchmarks.bench_model_report"))
