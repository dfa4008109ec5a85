"""The sweep the tolerance budgets were set from: ``python -m compat_tests.judge.calibration [--seed S]``.

Options: ``--configs N`` (random configs per dtype, default 150), ``--peers a,b`` (default: every peer).

Random configs well beyond the property tests' sizes (H and input size up to 64, T up to 200, weight
scales up to 4, i.e. into chaotic dynamics), every mode and dtype, every available peer (or those of
``--peers``); prints the largest conditioned error per (peer, dtype, quantity: outputs, states and, for
peers with a backward pass, gradients) next to its budget; for a peer that reads TF32, also the largest
share of TF32's cost its outputs' first step strays from the TF32 truth (``tolerances.TF32_FIRST_STEP_SHARE``).
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np

from .compare import compare_peer
from .tolerances import TF32_FIRST_STEP_SHARE
from ..config import DTYPE_NAMES, MODE_NAMES, RNNConfig
from ..peers import PEERS, get_peer, load_plugins
from ..peers.base import availability


def random_configs(n: int, seed: int) -> list[RNNConfig]:
    rng = np.random.default_rng(seed)
    configs = []
    for k in range(n):
        shape = dict(
            mode=str(rng.choice(MODE_NAMES)), num_layers=int(rng.integers(1, 4)),
            num_units=int(rng.choice([1, 2, 4, 8, 16, 32, 64])), input_size=int(rng.choice([1, 3, 8, 32, 64])),
            seq_len=int(rng.choice([1, 2, 5, 10, 30, 60, 200])), batch=int(rng.integers(1, 5)),
            weight_scale=float(rng.choice([0.5, 1.0, 2.0, 4.0])),
            direction=str(rng.choice(["unidirectional", "bidirectional"])), seed=seed * 100_000 + k,
        )
        configs += [RNNConfig(dtype=dtype, **shape) for dtype in DTYPE_NAMES]
    return configs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=150)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--peers", default="", help="comma-separated peers (default: every available peer)")
    args = parser.parse_args(argv)
    load_plugins()
    peers = [get_peer(name) for name in args.peers.split(",") if name] or list(PEERS.values())
    worst: dict[tuple[str, str, str], tuple[float, float, str]] = defaultdict(lambda: (0.0, 0.0, ""))
    shares: dict[str, tuple[float, str]] = defaultdict(lambda: (0.0, ""))
    left_out = 0
    for cfg in random_configs(args.configs, args.seed):
        for peer in peers:
            if not availability(peer)[0] or peer.unsupported(cfg):
                continue
            verdicts = dict(compare_peer(peer, cfg).verdicts)
            if peer.capabilities.backward:
                verdicts.update(compare_peer(peer, cfg, backward=True).verdicts)
            for q, v in verdicts.items():
                if v.stats.nonfinite_mismatch or v.indeterminate or not np.isfinite(v.kappa):
                    left_out += 1  # overflow, or a truth too ill-conditioned to judge
                    continue
                if v.tf32_share is not None and v.tf32_share >= shares[peer.name][0]:
                    shares[peer.name] = (v.tf32_share, cfg.short())
                key = (peer.name, cfg.dtype, q)
                if v.conditioned_error > worst[key][0]:
                    worst[key] = (v.conditioned_error, v.bound, cfg.short())
    print(f"{'peer':<12} {'dtype':<8} {'quantity':<9} {'worst':>7} {'budget':>6}  config")
    for (peer, dtype, q), (err, bound, where) in sorted(worst.items()):
        print(f"{peer:<12} {dtype:<8} {q:<9} {err:7.2f} {bound:6g}  {where}")
    for peer, (share, where) in sorted(shares.items()):
        print(f"{peer}: first step's share of TF32's cost at most {share:.3g} (bound "
              f"{TF32_FIRST_STEP_SHARE.bound:g})  {where}")
    print(f"({left_out} comparisons left out: results beyond the dtype's range, or kappa too large to judge)")


if __name__ == "__main__":
    main()
