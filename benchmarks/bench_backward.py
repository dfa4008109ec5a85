"""Forward + backward (all gradients) of the reference against PyTorch autograd on the CPU, float32.

``python -m benchmarks.bench_backward [--rounds 3] [--seconds 1.5] [--lengths]``: prints reference/torch time ratios
(goal <= 1.0) for GRU and LSTM at (T=100, B=32, I=128, H=256, L=1) and (T=100, B=64, I=256, H=512, L=2),
and the same ratio for the reference's GEMMs alone (``floor``), with each forward step's ``exp`` and
``tanh`` (``floor_act``): the reference can come no closer to torch than ``floor_act/torch`` plus the rest
of its elementwise work, and for its own step functions and GEMMs on buffers that stay in cache
(``floor_steps``: what it would take if its data movement cost nothing). ``--lengths``: padded batches
(lengths drawn from T/2..T; torch packs them in each call) instead of full-length sequences.
"""

from __future__ import annotations

import argparse
import sys

from compat_tests.interrupts import stopped_quietly

from .harness import Case, compare, machine, ratio

SHAPES = [(100, 32, 128, 256, 1, False), (100, 64, 256, 512, 2, False)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--lengths", action="store_true", help="padded batches of sequences of lengths T/2..T")
    a = p.parse_args()
    print(machine())
    print("forward + backward, float32, each measurement in its own process; ratio = reference / torch")
    print("floor = the reference's GEMMs alone (same shapes, numpy); floor_act = the same and each forward "
          "step's exp and tanh (numpy's); floor_steps = the reference's own steps and GEMMs on buffers that stay "
          "in cache (its data movement free)")
    cases = [Case(mode, *shape, lengths=a.lengths) for shape in SHAPES for mode in ("gru", "lstm")]
    floors = ["floor", "floor_act", "floor_steps"]
    rows = compare("train", cases, ["reference", "torch", *floors], a.rounds, a.seconds)
    for row in rows:
        print(f"{row['case']}: " + "  ".join(f"{f}/torch = {ratio(row['times'], f, 'torch')}" for f in floors))


if __name__ == "__main__":
    sys.exit(stopped_quietly(main, "benchmarks.bench_backward"))
