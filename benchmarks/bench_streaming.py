"""Streaming inference: a bound reference model's steps against onnxruntime and PyTorch, float32, each in a
worker process of its own, in short bursts that alternate (``benchmarks.harness.interleaved``).

``python -m benchmarks.bench_streaming [--rounds 30] [--seconds 0.05] [--modes gru,lstm] [--threads 1]
[--only steps|sequences]``: for each cell, batch ``B`` in 1 and 16 and ``H`` in 128 and 512 (input 64, one
layer), the time of one step (``T = 1``) of a stream whose states each call carries to the next
(``benchmarks.worker.step_call``): a :class:`reference.Stream`'s ``step`` (``stream``:
``model.bind(params).stream(B)``, the states kept inside), the bound model's ``step`` into the caller's
state buffers (``bound``), the model's own ``T = 1`` call (``reference``), PyTorch's module call
(``torch``), onnxruntime's ``session.run`` of the cell's one node (``onnxruntime``), and the floors: the
step's NumPy calls alone (``floor_bound``: a bound model's step and its input GEMM on buffers that stay in
cache) and its GEMMs alone (``floor``); then one batch-1 sequence of ``T = 200`` (``bound``:
``bound.forward``; no stream). Each ratio is a ratio of medians, followed by the range of the per-round
ratios, after a line naming the machine. Goals: a step (``stream``) no slower than onnxruntime's at every
config; the ``T = 200`` batch-1 sequence (``bound``) within 1.5x. Prints a Markdown table
(``benchmarks/NOTES.md``, "Streaming").
``--threads N`` (default 1) gives every implementation's pools ``N`` threads (``OPENBLAS_NUM_THREADS``,
``OMP_NUM_THREADS``, which torch follows, and onnxruntime's ``intra_op_num_threads``, which the worker sets
from it); ``--threads 0`` leaves each library's default. One thread is a stream's usual lot, and on a shared
2-core host a second thread's wake-ups made medians of whole milliseconds for microsecond steps (NOTES.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from statistics import median

from compat_tests.interrupts import stopped_quietly

from .harness import Case, interleaved, machine, ratio

STEPS = [(B, H) for B in (1, 16) for H in (128, 512)]
SEQUENCE = (200, 1, 64, 128)  # T, B, I, H
INPUT = 64
COLUMNS = ["stream", "bound", "reference", "torch", "onnxruntime", "floor_bound", "floor"]
# The run order (benchmarks.harness.interleaved): the goal's pair first, next to each other. T=200: no stream.
STEP_IMPLS = ["stream", "onnxruntime", "floor_bound", "floor", "bound", "torch", "reference"]
SEQUENCE_IMPLS = ["bound", "onnxruntime", "floor_bound", "floor", "torch", "reference"]


def row(task: str, case: Case, impls: list[str], rounds: int, seconds: float, goal: float) -> str:
    """One Markdown row: the medians in µs, the ratios, and whether the fastest bound path (``stream`` for a
    step, ``bound`` for a sequence) is within ``goal`` x onnxruntime."""
    times = interleaved(task, case, impls, rounds, seconds)
    what = f"step B={case.B} H={case.H}" if task == "step" else f"T={case.T} B={case.B} H={case.H}"
    judged = "stream" if "stream" in times else "bound"
    cells = [f"{1e6 * median(times[impl]):.1f}" if impl in times else "-" for impl in COLUMNS]
    pairs = (("stream", "onnxruntime"), ("bound", "onnxruntime"), ("floor_bound", "onnxruntime"),
             ("floor", "onnxruntime"), (judged, "torch"), ("reference", judged))
    cells += [ratio(times, a, b) if a in times else "-" for a, b in pairs]
    met = median(times[judged]) <= goal * median(times["onnxruntime"])
    return f"| {case.mode} {what} | " + " | ".join(cells) + f" | {'yes' if met else 'no'} ({judged} <= {goal:g}x) |"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--seconds", type=float, default=0.05, help="the length of one implementation's burst")
    p.add_argument("--modes", default="gru,lstm")
    p.add_argument("--threads", type=int, default=1, help="threads of every implementation (0: their defaults)")
    p.add_argument("--only", choices=("steps", "sequences"), help="only the step rows or only the T=200 rows")
    a = p.parse_args()
    print(machine())
    if a.threads:
        for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = str(a.threads)  # the workers' environment
    print(f"threads per implementation: {a.threads or 'the libraries defaults'}")
    print("times in µs (medians over rounds); ratios: median / median [range of the per-round ratios]; "
          "stream = bound.stream(B).step, bound = bound.step into the caller's buffers (T=200: bound.forward); "
          "floor_bound = a bound model's step and input GEMM alone, on buffers that stay in cache; "
          "floor = its GEMMs alone")
    print("| config | stream | bound | reference (T=1 call) | torch | onnxruntime | floor_bound | floor "
          "| stream/onnxruntime | bound/onnxruntime | floor_bound/onnxruntime | floor/onnxruntime "
          "| fastest/torch | reference/fastest | goal met |")
    print("|---" * 15 + "|")
    modes = a.modes.split(",")
    for mode in modes if a.only != "sequences" else ():
        for B, H in STEPS:
            print(row("step", Case(mode, 1, B, INPUT, H, 1, False), STEP_IMPLS, a.rounds, a.seconds, 1.0), flush=True)
    for mode in modes if a.only != "steps" else ():
        print(row("infer", Case(mode, *SEQUENCE[:3], SEQUENCE[3], 1, False), SEQUENCE_IMPLS, a.rounds, a.seconds, 1.5),
              flush=True)


if __name__ == "__main__":
    sys.exit(stopped_quietly(main, "benchmarks.bench_streaming"))
