"""``rnn-compat``: the command line.

Exit status: 0 when everything compared is within the tolerance policy, 1 when something is not,
2 on bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .config import RNNConfig


def _peers(names: str | None):
    from .peers import PEERS, get_peer

    chosen = [get_peer(n) for n in names.split(",")] if names else list(PEERS.values())
    available, notes = [], []
    if not names:
        import cudnn_backend

        ok, why = cudnn_backend.available()
        if not ok:
            notes.append(f"cudnn: unavailable ({why})")
    for peer in chosen:
        ok, why = peer.available()
        (available.append(peer) if ok else notes.append(f"{peer.name}: unavailable ({why})"))
    return available, notes


def cmd_report(args: argparse.Namespace) -> int:
    from .report import quick
    from .report.grids import GRIDS

    if args.grid not in GRIDS:
        print(f"rnn-compat report: the {args.grid!r} grid comes with the full report generator; "
              f"available now: {', '.join(GRIDS)}", file=sys.stderr)
        return 2
    peers, unavailable = _peers(args.backends)
    configs = GRIDS[args.grid](args.seed)
    print(f"rnn-compat report --grid {args.grid}: {len(configs)} configs x {len(peers)} backends "
          f"({', '.join(p.name for p in peers)}) against the float64 NumPy reference, seed {args.seed}")
    rows, notes = quick.run(peers, configs)
    print(quick.render(rows, unavailable + notes))
    return 0 if all(not r.failures for r in rows) else 1


def cmd_check(args: argparse.Namespace) -> int:
    from .compare import compare_peer
    from .peers import get_peer

    peer = get_peer(args.peer)
    ok, why = peer.available()
    if not ok:
        print(f"{peer.name} is unavailable: {why}", file=sys.stderr)
        return 2
    cfg = RNNConfig.from_json(args.config)
    why = peer.unsupported(cfg)
    if why:
        print(f"{peer.name} cannot run {cfg.short()}: {why}", file=sys.stderr)
        return 2
    comparison = compare_peer(peer, cfg)
    print(comparison.explain())
    return 0 if comparison.passed else 1


def cmd_test(args: argparse.Namespace, extra: list[str]) -> int:
    import pytest

    suite = Path(__file__).resolve().parent
    return int(pytest.main([str(suite), f"--hypothesis-profile={args.profile}", *extra]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rnn-compat", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    report = sub.add_parser("report", help="divergence of every available backend from the float64 reference")
    report.add_argument("--backends", help="comma-separated backends (default: all available)")
    report.add_argument("--grid", choices=("quick", "default", "full"), default="quick")
    report.add_argument("--seed", type=int, default=0)

    check = sub.add_parser("check", help="re-run one comparison (the command a failure prints)")
    check.add_argument("--peer", required=True)
    check.add_argument("--config", required=True, help="an RNNConfig as JSON")

    test = sub.add_parser("test", help="run the suite; other arguments go to pytest")
    test.add_argument("--profile", choices=("ci", "dev", "thorough"), default="dev")

    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "test":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if args.command == "test":
            return cmd_test(args, extra)
        return {"report": cmd_report, "check": cmd_check}[args.command](args)
    except ValueError as exc:  # unknown peer, malformed config: bad arguments
        print(f"rnn-compat {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
