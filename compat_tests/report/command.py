"""The commands of the divergence report, from parsed arguments to an exit status: ``rnn-compat report`` (a
run's folder checked, its plan written, the sweep on this machine's processes or a Dask fleet, and what an
interrupted or stopped run says, with the command that resumes it), ``render`` and ``diff``."""

from __future__ import annotations

import argparse
import json
import math
import shlex
import signal
import sys
from pathlib import Path

from .folder import REPORT_FILES, RUN_FILES, check_own


def cmd_report(args: argparse.Namespace) -> int:
    import datetime

    from .grids import GRIDS, load_grid

    if args.max_seconds is not None and not (math.isfinite(args.max_seconds) and args.max_seconds > 0):
        raise ValueError(f"--max-seconds must be a finite number of seconds > 0, got {args.max_seconds} (leave it "
                         f"out for no limit)")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    if args.seed is not None and (args.seed < 0 or args.grid not in GRIDS):
        raise ValueError(f"--seed must be >= 0, got {args.seed}" if args.seed < 0 else
                         "--seed applies to the built-in grids: a grid file's configs carry their own seeds")
    if args.resume and args.force:
        raise ValueError("--resume continues the run in --out, --force starts it over: pass one of them")
    if args.resume and not args.out:
        raise ValueError("--resume needs --out, the folder of the run to continue")
    if args.fanout and not args.scheduler:
        raise ValueError("--fanout runs every unit on every environment of a Dask cluster: it needs --scheduler")
    if args.scheduler:
        from .fleet import parse_scheduler

        parse_scheduler(args.scheduler)  # refused before anything starts
        _reach(args).check(args.scheduler)
    elif _reach_options(args):
        raise ValueError(f"{_reach_options(args)[0]} says how to reach a Dask scheduler: it needs --scheduler")
    seed = args.seed or 0
    specs = load_grid(args.grid, seed)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    folder = args.grid if args.grid in GRIDS else Path(args.grid).stem
    out = Path(args.out) if args.out else Path("reports") / "_scratch" / f"{folder}-{stamp}"
    check_run_folder(out, args)  # refused before the folder is made
    if not args.scheduler:
        return _report_run(args, specs, seed, out, None)
    from .fleet import FleetLost, open_fleet

    reached = False
    try:
        with open_fleet(args.scheduler, out / FLEET_LOG, _reach(args)) as fleet:
            reached = True
            return _report_run(args, specs, seed, out, fleet)
    except FleetLost as exc:
        return _report_stopped(args, out, f"the Dask cluster was lost: {exc}")
    except KeyboardInterrupt as exc:
        if reached:
            raise
        print(f"rnn-compat report: interrupted while reaching the scheduler {args.scheduler}, before any unit ran",
              file=sys.stderr, flush=True)
        return 128 + getattr(exc, "signum", signal.SIGINT)


# report's options that say how to reach a Dask scheduler (--scheduler's), and their fields of fleet.Reach
REACH_OPTIONS = (("--scheduler-wait", "scheduler_wait", "wait"), ("--tls-ca-file", "tls_ca_file", "ca_file"),
                 ("--tls-cert", "tls_cert", "cert"), ("--tls-key", "tls_key", "key"))


def _reach_options(args: argparse.Namespace) -> list[str]:
    """The options of :data:`REACH_OPTIONS` given, as ``--name value`` words (for the resume command too)."""
    return [word for option, dest, _ in REACH_OPTIONS if getattr(args, dest) is not None
            for word in (option, str(getattr(args, dest)))]


def _reach(args: argparse.Namespace):
    from .fleet import Reach

    return Reach(**{field: getattr(args, dest) for _, dest, field in REACH_OPTIONS if getattr(args, dest) is not None})


def _report_run(args: argparse.Namespace, specs: list, seed: int, out: Path, fleet) -> int:
    """The report run into ``out``, on this machine's processes or (``fleet``) a Dask cluster's workers."""
    from ..peers import choose
    from .grids import GRIDS, plan
    from .lock import run_lock
    from .run_plan import check_resumable, write_plan
    from .sweep import sweep

    peers, status = choose(args.backends) if fleet is None else fleet.backends(args.backends)
    if not peers:
        raise ValueError("no requested backend is available: " + "; ".join(f"{b['name']}: {b['detail']}" for b in status))
    # a grid file is labelled by its name, or where that is a built-in grid's (a file named 'quick') by its path
    file_name = Path(args.grid).name
    grid_name = args.grid if args.grid in GRIDS or file_name in GRIDS else file_name
    units, skipped = plan(specs, peers)
    if fleet is not None:
        units = fleet.place(units, args.fanout)
    where = f"{args.jobs} jobs" if fleet is None else f"the Dask cluster {args.scheduler}" + (
        f", on each of its {len(fleet.groups)} environments" if args.fanout else "")
    with run_lock(out):  # one run at a time writes a folder; what it holds is judged again under the lock
        check_run_folder(out, args)
        if args.resume:
            check_resumable(out, units)
        if args.force:
            for name in RUN_FILES + REPORT_FILES:
                (out / name).unlink(missing_ok=True)
        print(f"rnn-compat report --grid {args.grid}: {len(units)} units ({', '.join(p.name for p in peers)}) "
              f"against the float64 NumPy reference, seed {seed}, {where} -> {out}", flush=True)
        write_plan(out, grid_name, seed, status, units, skipped)
        try:
            sweep(units, out, jobs=args.jobs, progress=not args.no_progress, max_seconds=args.max_seconds,
                  runner=None if fleet is None else fleet.runner())
        except KeyboardInterrupt as exc:
            return _report_interrupted(args, out, units, getattr(exc, "signum", signal.SIGINT))
        return _rendered(out, figures=not args.no_figures)


FLEET_LOG = RUN_FILES[3]  # a fleet run's: Dask's own messages in this process (a connection lost and retried)


def check_run_folder(out: Path, args: argparse.Namespace) -> None:
    """``--out`` as this run may write it: with ``--resume``, a run to continue; else a folder without the files
    a run writes, unless ``--force`` (start over: the run there, and its report, are replaced)."""
    from .sweep import RESULTS

    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder")
    check_own(out)
    has_run = any((out / name).is_file() for name in RUN_FILES[:2])
    if args.resume and not has_run:
        raise ValueError(f"--resume: there is no run in {out} to resume (no {RESULTS}); --out names the folder of "
                         f"the run to continue")
    existing = [name for name in RUN_FILES + REPORT_FILES if (out / name).exists()]
    if not args.resume and not args.force and existing:
        if has_run:
            found = next(out / name for name in (RESULTS, RUN_FILES[0]) if (out / name).is_file())
            raise ValueError(f"{found} exists: pass --resume to continue that run, --force to start it over, or "
                             f"another --out")
        raise ValueError(f"--out {out} holds {', '.join(existing)}, which this run would overwrite: pass --force to "
                         f"replace them, or another --out")


def _resume_command(args: argparse.Namespace, out: Path) -> str:
    """The command that continues this run: its grid, backends, seed and plugins, with --resume."""
    words = ["rnn-compat", "report", "--grid", args.grid, "--out", str(out), "--resume"]
    if args.scheduler:
        words += ["--scheduler", args.scheduler] + (["--fanout"] if args.fanout else []) + _reach_options(args)
    if args.backends:
        words += ["--backends", args.backends]
    if args.seed is not None:
        words += ["--seed", str(args.seed)]
    for spec in args.plugin:
        words += ["--plugin", spec]
    if args.no_figures:
        words.append("--no-figures")
    return " ".join(shlex.quote(w) for w in words)


def _report_interrupted(args: argparse.Namespace, out: Path, units: list, signum: int) -> int:
    """What an interrupted run says: how many units it kept, and the command that runs the rest."""
    from .sweep import RESULTS, read_records

    planned = {u.id for u in units}
    try:
        kept = len({r["id"] for r in read_records(out / RESULTS)} & planned)
    except (ValueError, OSError):
        kept = "?"
    name = signal.Signals(signum).name
    print(f"\nrnn-compat report: interrupted (its finished units are kept: the same command with --resume runs the "
          f"rest) by {name}: {kept} of {len(units)} units are in {out / RESULTS}; to run the rest:\n"
          f"  {_resume_command(args, out)}\n(rnn-compat render {shlex.quote(str(out))} writes the report of the units "
          f"that ran)", file=sys.stderr, flush=True)
    return 128 + signum


def _report_stopped(args: argparse.Namespace, out: Path, why: str) -> int:
    """What a run that could not go on says: why, how many units it kept, and the command that runs the rest."""
    from .run_plan import PLAN, read_plan
    from .sweep import RESULTS, read_records

    try:
        planned = read_plan(out / PLAN)["units"]
        kept = f"{len({r['id'] for r in read_records(out / RESULTS)} & set(planned))} of {len(planned)}"
    except (ValueError, OSError):  # (no plan: it stopped before its first unit)
        print(f"rnn-compat report: stopped before any unit ran, {why}", file=sys.stderr, flush=True)
        return 1
    print(f"\nrnn-compat report: stopped, {why}\n{kept} units are in {out / RESULTS}; to run the rest:\n"
          f"  {_resume_command(args, out)}", file=sys.stderr, flush=True)
    return 1


def _rendered(out: Path, figures: bool = True) -> int:
    """Write the report of the run in ``out`` (``figures``: with the page's figures), print its summary, and
    return the exit status."""
    from .render import terminal_summary
    from .run_plan import render

    report = render(out, figures)
    print(terminal_summary(report, str(out)))
    return 0 if report["passed"] and report["complete"] else 1


def cmd_render(args: argparse.Namespace) -> int:
    return _rendered(Path(args.dir), figures=not args.no_figures)


def cmd_diff(args: argparse.Namespace) -> int:
    import datetime

    from reference.formats.files import replacing

    from . import diff as differ

    band = differ.NOISE_BAND if args.band is None else args.band
    a, b = differ.load_run(args.run_a), differ.load_run(args.run_b)
    result = differ.diff(a, b, band)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else Path("reports") / "_scratch" / f"diff-{stamp}"
    check_own(out, differ.FILES)
    present = [name for name in differ.FILES if (out / name).exists()]
    if present and not args.force:
        raise ValueError(f"--out {out} holds {', '.join(present)} already: name another folder, or --force")
    out.mkdir(parents=True, exist_ok=True)
    name_a, name_b = f"A ({args.run_a})", f"B ({args.run_b})"
    documents = {"diff.json": json.dumps({"a": str(args.run_a), "b": str(args.run_b), **result}, indent=1,
                                         sort_keys=True) + "\n",
                 "diff.md": differ.markdown(result, name_a, name_b),
                 "index.html": differ.page(result, name_a, name_b, differ.figure(result))}
    for name, text in documents.items():
        with replacing(out / name) as partial:
            partial.write_text(text)
    for line in differ.regressions(result):
        print(line)
    print(f"{len(result['regressed'])} regressed, {len(result['fixed'])} fixed, {len(result['moved'])} moved beyond "
          f"{band:g} conditioned eps, {result['identical']} identical, {result['within_band']} within the band; "
          f"{len(result['only_a'])} only in A, {len(result['only_b'])} only in B\ndiff: {out / 'diff.md'}, "
          f"{out / 'index.html'}, {out / 'diff.json'}")
    return 1 if result["regressed"] else 0
