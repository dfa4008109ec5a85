"""Reference inference against PyTorch and ONNX Runtime on the CPU, float32, one process per measurement.

``python -m benchmarks.bench_inference [--rounds 3] [--seconds 1.5] [--modes gru,lstm,tanh] [--lengths]``: for each
(T, B, I, H, L, bidirectional) of the issue and each cell, the medians, the ratio reference / fastest peer,
the same ratio for the reference's GEMMs alone (its floor), for those GEMMs with the step's ``exp`` and
``tanh`` (``floor+act``) and for its own steps and GEMMs on buffers that stay in cache (``floor_steps``: its
data movement free), and the reference's GFLOP/s as a share of this machine's measured float32 GEMM rate
(numpy, 2048^3), after a line naming the machine (CPU, BLAS kernels, NumPy's SIMD loops).
Goals: at batch >= 16 no slower than the fastest peer; at batch 1 within 1.5x; at H >= 512 at least 85%
of the GEMM rate. ``--lengths``: padded batches (``benchmarks.worker.lengths``: drawn from T/2..T) instead of
full-length sequences, each peer with its own way of taking them.
"""

from __future__ import annotations

import argparse
import sys
from statistics import median

from compat_tests.interrupts import stopped_quietly
from reference.modes import MODES

from .harness import Case, machine, measure, ratio, samples

SHAPES = [(100, 32, 128, 256, 1, False), (100, 64, 256, 512, 2, False), (50, 16, 128, 128, 1, True),
          (200, 1, 64, 128, 1, False), (100, 128, 512, 1024, 1, False)]


def flops(case: Case) -> float:
    G, D = MODES[case.mode].num_gates, 2 if case.bidi else 1
    total = 0.0
    for layer in range(case.L):
        width = case.I if layer == 0 else D * case.H
        total += D * 2 * case.B * case.T * (width * G * case.H + case.H * G * case.H)
    return total


def gemm_rate(seconds: float) -> float:
    """This machine's float32 GEMM rate in GFLOP/s: the best of three processes (numpy, 2048^3)."""
    return max(2 * 2048**3 / measure("gemm", "infer", Case("gemm", 2048, 0, 0, 0, 0, False), seconds) / 1e9
               for _ in range(3))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--modes", default="gru,lstm,tanh")
    p.add_argument("--lengths", action="store_true", help="padded batches of sequences of lengths T/2..T")
    a = p.parse_args()
    print(machine())
    peak = gemm_rate(a.seconds)
    print(f"float32 GEMM rate (numpy, 2048^3, best of 3): {peak:.1f} GFLOP/s; ratios are reference / fastest peer")
    print("floor = the reference's GEMMs alone (same shapes, numpy); floor/fastest > 1 means no NumPy "
          "implementation of this algorithm can reach the fastest peer here; floor+act = the same GEMMs and "
          "each step's exp and tanh (numpy's): where floor+act/fastest > 1, none that uses them can; "
          "floor_steps = the reference's own steps and GEMMs on buffers that stay in cache (its data movement free)")
    floors = {"floor": "floor", "floor_act": "floor+act", "floor_steps": "floor_steps"}  # impl: printed name
    impls = ["reference", "torch", "onnxruntime", *floors]
    for mode in a.modes.split(","):
        for shape in SHAPES:
            case = Case(mode, *shape, lengths=a.lengths)
            times = samples("infer", case, impls, a.rounds, a.seconds)
            med = {impl: median(v) for impl, v in times.items()}
            fastest = min(("torch", "onnxruntime"), key=med.get)
            rate, floor_rate = (flops(case) / med[impl] / 1e9 for impl in ("reference", "floor"))
            print(f"{case.label():52s} reference {1e3 * med['reference']:8.2f} ms  torch {1e3 * med['torch']:8.2f}  "
                  f"onnxruntime {1e3 * med['onnxruntime']:8.2f}  "
                  + "".join(f"{name} {1e3 * med[impl]:8.2f}  " for impl, name in floors.items())
                  + "".join(f"{name}/{fastest} = {ratio(times, impl, fastest)}  "
                            for impl, name in {"reference": "reference", **floors}.items())
                  + f"{rate:6.1f} GFLOP/s = {100 * rate / peak:3.0f}% of GEMM (floor {100 * floor_rate / peak:3.0f}%)",
                  flush=True)
    print(f"float32 GEMM rate at the end: {gemm_rate(a.seconds):.1f} GFLOP/s (the host drifted where it is far "
          f"from {peak:.1f}: the shares of it above moved with it)")


if __name__ == "__main__":
    sys.exit(stopped_quietly(main, "benchmarks.bench_inference"))
