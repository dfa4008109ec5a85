"""``rnn-compat``: the command line of the cuDNN RNN compatibility suite.

Exit status: 0 when everything compared is within the tolerance policy, 1 when something is not (or a
report run stopped before its last unit), 2 on bad arguments, 128 + the signal's number when interrupted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shlex
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from reference.model import DIRECTIONS

from .config import BIAS_MODE_NAMES, DTYPE_NAMES, MODE_NAMES, RNNConfig, json_loads
from .interop.convert import AUTO, FORMATS
from .interrupts import terminated_as_interrupted
from .optional import MissingDependency
from .report.folder import REPORT_FILES, RUN_FILES, check_own


def cmd_report(args: argparse.Namespace) -> int:
    import datetime

    from .report.grids import GRIDS, load_grid

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
        from .report.fleet import parse_scheduler

        parse_scheduler(args.scheduler)  # refused before anything starts
        _reach(args).check(args.scheduler)
    elif _reach_options(args):
        raise ValueError(f"{_reach_options(args)[0]} says how to reach a Dask scheduler: it needs --scheduler")
    seed = args.seed or 0
    specs = load_grid(args.grid, seed)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    folder = args.grid if args.grid in GRIDS else Path(args.grid).stem
    out = Path(args.out) if args.out else Path("reports") / "_scratch" / f"{folder}-{stamp}"
    _check_run_folder(out, args)  # refused before the folder is made
    if not args.scheduler:
        return _report_run(args, specs, seed, out, None)
    from .report.fleet import FleetLost, open_fleet

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
    from .report.fleet import Reach

    return Reach(**{field: getattr(args, dest) for _, dest, field in REACH_OPTIONS if getattr(args, dest) is not None})


def _report_run(args: argparse.Namespace, specs: list, seed: int, out: Path, fleet) -> int:
    """The report run into ``out``, on this machine's processes or (``fleet``) a Dask cluster's workers."""
    from .peers import choose
    from .report.grids import GRIDS, plan
    from .report.lock import run_lock
    from .report.run_plan import check_resumable, write_plan
    from .report.sweep import sweep

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
        _check_run_folder(out, args)
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


def _check_run_folder(out: Path, args: argparse.Namespace) -> None:
    """``--out`` as this run may write it: with ``--resume``, a run to continue; else a folder without the files
    a run writes, unless ``--force`` (start over: the run there, and its report, are replaced)."""
    from .report.sweep import RESULTS

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
    from .report.sweep import RESULTS, read_records

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
    from .report.run_plan import PLAN, read_plan
    from .report.sweep import RESULTS, read_records

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
    from .report.render import terminal_summary
    from .report.run_plan import render

    report = render(out, figures)
    print(terminal_summary(report, str(out)))
    return 0 if report["passed"] and report["complete"] else 1


# Capabilities a peer may lack, each with the feature name its notes use for the reason.
FEATURES = (("skip_input", "skip_input"), ("projection", "projection"), ("lengths", "sequence lengths"),
            ("batch_major", "batch-major"), ("bidirectional", "bidirectional"), ("backward", "gradients"),
            ("padding_fill", "padding_fill"), ("cell_clip", "cell_clip"), ("packed", "packed sequences"))


def peer_summary(peer) -> dict:
    """What ``rnn-compat peers`` says of one peer: availability, where a plugin came from, what it runs, and
    its exceptions to the tolerance policy (budget overrides and known divergences, each with its reason)."""
    from .judge.known_divergences import divergences_of
    from .peers.base import availability
    from .peers.plugins import SPECS
    from .judge.tolerances import overrides_of

    ok, why = availability(peer)
    caps, notes = peer.capabilities, dict(peer.capabilities.notes)
    lacks = {}
    for field, names, kind in (("mode", MODE_NAMES, ""), ("dtype", DTYPE_NAMES, ""),
                               ("bias_mode", BIAS_MODE_NAMES, "bias_mode ")):
        missing = [n for n in names if n not in getattr(caps, field + "s")]
        if missing:
            lacks[kind + ", ".join(missing)] = notes.get(field, "")
    lacks.update({label: notes.get(field, "") for field, label in FEATURES if not getattr(caps, field)})
    if caps.max_layers is not None:
        lacks[f"stacks of more than {caps.max_layers} layer(s)"] = notes.get("num_layers", "")
    overrides = [{"dtype": o.dtype, "quantity": o.quantity, "bound": o.budget.bound, "reason": o.budget.reason}
                 for o in overrides_of(peer)]
    divergences = [{"area": d.area, "modes": list(d.modes), "reason": d.reason} for d in divergences_of(peer)]
    return {"name": peer.name, "available": ok, "detail": why, "plugin": SPECS.get(peer.name),
            "modes": list(caps.modes), "dtypes": list(caps.dtypes), "lacks": lacks,
            "overrides": overrides, "known_divergences": divergences}


def cmd_peers(args: argparse.Namespace) -> int:
    from .peers import PEERS

    summaries = [peer_summary(peer) for peer in PEERS.values()]
    if args.json:
        print(json.dumps(summaries, indent=1))
        return 0
    for s in summaries:
        print(f"{s['name']}: {'available' if s['available'] else 'UNAVAILABLE'}, {s['detail']}"
              + (f" (plugin {s['plugin']})" if s["plugin"] else ""))
        print(f"  modes {', '.join(s['modes'])}; dtypes {', '.join(s['dtypes'])}")
        for feature, why in s["lacks"].items():
            print(f"  no {feature}" + (f": {why}" if why else ""))
        budgets: dict[tuple, list[str]] = {}  # quantities of one budget on one line
        for o in s["overrides"]:
            budgets.setdefault((o["dtype"], o["bound"], o["reason"]), []).append(o["quantity"])
        for (dtype, bound, reason), quantities in budgets.items():
            print(f"  budget {dtype} {', '.join(quantities)}: {bound:g} conditioned eps ({reason})")
        for d in s["known_divergences"]:
            print(f"  known divergence {d['area']} ({', '.join(d['modes'])}): {d['reason']}")
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    import datetime
    import json

    from .report import diff as differ
    from reference.formats.files import replacing

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


def cmd_render(args: argparse.Namespace) -> int:
    return _rendered(Path(args.dir), figures=not args.no_figures)


def cmd_check(args: argparse.Namespace) -> int:
    from .judge.compare import compare_peer
    from .peers import get_peer
    from .peers.base import availability

    peer = get_peer(args.peer)
    ok, why = availability(peer)
    if not ok:
        raise ValueError(f"--peer {peer.name} is unavailable here: {why}")
    try:
        data = json_loads(args.config, "--config")
    except ValueError as exc:
        raise ValueError(f"{exc} (--config must be an RNNConfig as JSON)") from None
    if isinstance(data, dict) and "dtype" not in data:  # the peer's float32 (or its first dtype), not the truth's
        dtypes = peer.capabilities.dtypes
        data = {**data, "dtype": "float32" if "float32" in dtypes else dtypes[0]}
    cfg = RNNConfig.from_dict(data)
    why = peer.unsupported(cfg) or (None if peer.capabilities.backward or not args.backward
                                    else f"{peer.name} has no backward pass")
    if why:
        raise ValueError(f"--peer {peer.name} cannot run --config {cfg.short()}: {why}")
    try:
        comparison = compare_peer(peer, cfg, backward=args.backward)
    except MemoryError as exc:  # the config's size, not the peer's doing
        raise ValueError(f"--config {cfg.short()} does not fit in this machine's memory: {exc}") from None
    except Exception as exc:  # the peer's own failure: a finding (as in a report), not a bad argument
        print(f"rnn-compat check: {peer.name} failed on {cfg.short()} "
              f"({'gradients' if args.backward else 'forward'}): {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(comparison.explain())
    return 0 if comparison.passed else 1


def _read_model(args: argparse.Namespace, path: str):
    """The model and weights of the file at ``path`` in the format ``--from`` names, with the model options
    (``_model_options``) on top: they may say only what the file cannot tell."""
    from .interop import convert

    if args.source == convert.AUTO:  # told by the file: the options below are checked against what it is
        args.source = convert.detect(path, args.names)
    if args.scope and args.source not in convert.TF_NAMED:
        raise ValueError(f"--scope applies to TF-named files (--from tf or checkpoint), not to --from {args.source}")
    if args.module is not None and args.source != "torch":
        raise ValueError(f"--module applies to PyTorch files (--from torch), not to --from {args.source}")
    read = convert.read(args.source, path, _overrides(args))
    if read.note:  # an approximation of the file's model: said here, and in infer --out's .npz
        print(f"rnn-compat: note: {path}: {read.note}", file=sys.stderr)
        args.note = read.note
    return read


def _overrides(args: argparse.Namespace) -> dict:
    """The model options of the command line as the readers' options (``None``: not given)."""
    return {"rnn_mode": args.mode, "num_layers": args.num_layers, "num_units": args.num_units,
            "input_size": args.input_size, "direction": args.direction, "input_mode": args.input_mode,
            "num_proj": args.num_proj, "dtype": args.dtype, "bias_mode": args.bias_mode, "scope": args.scope,
            "module": args.module, "recurrent_activation": args.recurrent_activation, "names": args.names,
            "layers": args.layers, "layer": args.layer, "node": args.node, "dequantize": args.dequantize}


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (through links, ``..`` or another spelling), existing or not."""
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return Path(os.path.realpath(a)) == Path(os.path.realpath(b))


def check_output(what: str, outputs: list[Path], inputs: dict[str, list[Path]], force: bool) -> None:
    """Refuse, before any work, to write a file (``outputs``: the files the argument ``what`` makes) that is one
    of the command's inputs, or that exists unless ``force`` (``--force``) says to replace it."""
    for out in outputs:
        if out.is_dir():
            raise ValueError(f"cannot write {out}: it is a folder")
        for argument, files in inputs.items():
            if any(_same_file(out, f) for f in files):
                raise ValueError(f"{what} {out} is {argument} {files[0]}: writing it would replace an input; name "
                                 f"another file")
    existing = [str(out) for out in outputs if out.exists() or out.is_symlink()]
    if existing and not force:
        raise ValueError(f"{what} {', '.join(existing)} exists: pass --force to replace it, or name another file")


def cmd_convert(args: argparse.Namespace) -> int:
    from .interop import convert

    if args.out_scope and args.target not in convert.TF_NAMED:
        raise ValueError(f"--out-scope applies to TF-named files (--to tf or checkpoint), not to --to {args.target}")
    if args.cell and args.target != "torch":
        raise ValueError(f"--cell applies to PyTorch files (--to torch), not to --to {args.target}")
    check_output("OUTPUT", convert.written_files(args.target, args.output),
                 {"INPUT": convert.read_files(args.input)}, args.force)
    source = _read_model(args, args.input)
    scope = (args.out_scope or None) if args.out_scope is not None else source.scope
    convert.write(args.target, args.output, source.model, source.weights, source.biases,
                  scope if args.target in convert.TF_NAMED else None, cell=args.cell)
    print(f"{args.input} ({args.source}) -> {args.output} ({args.target}): {source.model!r}"
          + (f" under scope {scope!r}" if scope and args.target in convert.TF_NAMED else ""))
    return 0


# What ``infer --state`` reads: a state file of its own, or an earlier ``infer --out`` (whose output is skipped).
STATE_KEYS = {"h": ("input_h", "output_h"), "c": ("input_c", "output_c")}
# The key of ``infer --out``'s ``.npz`` that says the layout of its arrays, "time_major" or "batch_major".
LAYOUT_KEY = "layout"
# The key of ``infer --out``'s ``.npz`` that says the model run is an approximation of the file's (a dequantized one).
NOTE_KEY = "note"


def _layout(batch_major: bool) -> str:
    return "batch_major" if batch_major else "time_major"


@contextmanager
def _reading(what: str, path: str) -> Iterator[None]:
    """An OSError reading the file an argument names (missing, a folder, unreadable) names the argument, and
    the file it was about where that is another (one a checkpoint's index leads to)."""
    try:
        yield
    except OSError as exc:
        other = f" ({exc.filename})" if exc.filename is not None and str(exc.filename) != str(path) else ""
        raise type(exc)(f"{what} {path}: {exc.strerror or exc}{other}") from None


def initial_state(path: str, model, batch_major: bool = False, batch: int | None = None):
    """``(input_h, input_c)`` for ``model`` from the ``.npz`` at ``path``: ``input_h`` (and the LSTM's
    ``input_c``), or the ``output_h``/``output_c`` an earlier ``infer --out`` wrote, so that a long sequence
    runs in chunks (unidirectional models only: a backward direction ends at its chunk's first step).
    States are ``[L*D, B, H]`` (``[B, L*D, H]`` with ``--batch-major``); the model checks their shapes, and a
    file that says its layout (``infer --out`` does) must be in this run's, since at ``B = L*D`` the shapes
    cannot tell."""
    # every state of this model and input holds at most L*D * B * H float64 values (the output is not read at all)
    most = model.num_layers * model.num_dirs * (batch or 1) * model.num_units * 8
    arrays = _state_arrays(path, {k for keys in STATE_KEYS.values() for k in keys}, most, batch_major, batch,
                           "input_h and input_c (or output_h and output_c from infer --out)")
    return _layer_state(path, arrays, model, "")


def chain_initial_states(path: str, chain, batch_major: bool = False, batch: int | None = None):
    """``(initial_h, initial_c)``, a state per layer, for a chain of one-layer models (``reference.chain``) from
    the ``.npz`` at ``path``: ``input_h_0``, ``input_h_1``, ... (and the LSTM layers' ``input_c_K``), or the
    ``output_h_K``/``output_c_K`` an earlier ``infer --out`` of the chain wrote; each layer's as
    :func:`initial_state` reads one model's (``initial_c`` ``None`` for a chain without cell states)."""
    n = len(chain.models)
    keys = {f"{k}_{layer}" for keys in STATE_KEYS.values() for k in keys for layer in range(n)}
    most = max(m.num_dirs * (batch or 1) * m.num_units * 8 for m in chain.models)
    arrays = _state_arrays(path, keys, most, batch_major, batch,
                           f"input_h_K and input_c_K for K in 0..{n - 1} (or output_h_K and output_c_K from infer "
                           f"--out), one state per layer of the chain")
    states = [_layer_state(path, arrays, model, f"_{k}") for k, model in enumerate(chain.models)]
    cells = [c for _, c in states]
    return [h for h, _ in states], None if all(c is None for c in cells) else cells


def _state_arrays(path: str, keys: set[str], most: int, batch_major: bool, batch: int | None,
                  expected: str) -> dict:
    """The arrays of the ``--state`` file named ``keys`` (an ``output`` beside them is not read), each
    declaring at most ``most`` bytes before it is read, and the file's layout, if it says one, this run's."""
    from reference import checkpoint

    with _reading("--state", path):
        declared = checkpoint.declared_arrays(path)  # headers only: nothing inflated before it is checked
    if declared is None:
        raise ValueError(f"--state {path} must be an .npz holding {expected}, not a single array")
    unknown = sorted(set(declared) - {"output", LAYOUT_KEY, NOTE_KEY} - keys)
    if unknown:
        raise ValueError(f"--state {path} holds {unknown}; expected {expected}")

    def check(name: str, array) -> None:
        limit = 256 if name == LAYOUT_KEY else most  # the layout: a short string
        if array.nbytes > limit:
            raise ValueError(f"--state {path}: {name} declares {list(array.shape)} {array.dtype} ({array.nbytes} "
                             f"bytes), more than this model's states for a batch of {batch} hold: refused before "
                             f"it is read")

    with _reading("--state", path):
        arrays = checkpoint.load_arrays(path, [k for k in declared if k not in ("output", NOTE_KEY)], check)
    layout = arrays.pop(LAYOUT_KEY, None)
    if layout is not None and (layout.shape != () or str(layout) != _layout(batch_major)):
        raise ValueError(f"--state {path} holds states in the layout {str(layout)!r}, this run's is "
                         f"{_layout(batch_major)!r}: run with{'out' if batch_major else ''} --batch-major")
    return arrays


def _layer_state(path: str, arrays: dict, model, suffix: str):
    """``(h, c)`` of ``model`` among ``arrays`` under the names of :data:`STATE_KEYS` with ``suffix``."""
    from reference.modes import MODES

    state = {}
    for role, keys in STATE_KEYS.items():
        present = [k + suffix for k in keys if k + suffix in arrays]
        if len(present) > 1:
            raise ValueError(f"--state {path} holds both {present[0]} and {present[1]}: keep one")
        state[role] = arrays[present[0]] if present else None
    has_cell_state = MODES[model.rnn_mode].has_cell_state
    h, c = "input_h" + suffix, "input_c" + suffix
    if state["h"] is None:
        raise ValueError(f"--state {path} holds no {h} (or output_h{suffix})")
    if has_cell_state and state["c"] is None:
        raise ValueError(f"--state {path} holds no {c} (or output_c{suffix}): the LSTM's cell state is needed too")
    if not has_cell_state and state["c"] is not None:
        raise ValueError(f"--state {path} holds a cell state{f' for layer {suffix[1:]}' if suffix else ''}, but a "
                         f"{model.rnn_mode} model has none")
    if model.num_dirs == 2 and {"output_h" + suffix, "output_c" + suffix} & set(arrays):
        raise ValueError(f"--state {path} holds the final states of an earlier run, which cannot seed a "
                         f"bidirectional model's next chunk (its backward direction ended at that chunk's "
                         f"first step); name initial states {h}{f' (and {c})' if has_cell_state else ''}")
    return state["h"], state["c"]


def _array(path: str, what: str):
    """The array of the ``.npy`` file an argument names (damaged files and archives refused, naming it)."""
    from reference import checkpoint

    with _reading(what, path):
        if checkpoint.declared_arrays(path) is not None:  # (its members are not inflated)
            raise ValueError(f"{what} {path} must be a .npy array, not an .npz archive")
        return checkpoint.load_arrays(path)


def cmd_infer(args: argparse.Namespace) -> int:
    if args.out is not None and not args.out:
        raise ValueError("--out must name a file, got ''")
    out = Path(args.out) if args.out else Path(args.input).with_name(Path(args.input).stem + "_output.npz")
    if out.suffix not in (".npy", ".npz"):
        raise ValueError(f"--out must end in .npz (output, output_h, output_c) or .npy (output only), got {out.name!r}")
    from .interop.convert import read_files

    check_output("--out", [out], {"CHECKPOINT": read_files(args.checkpoint), "INPUT": [Path(args.input)],
                                  "--lengths": [Path(p) for p in [args.lengths] if p is not None],
                                  "--state": [Path(p) for p in [args.state] if p is not None]}, args.force)
    with _reading("CHECKPOINT", args.checkpoint):
        try:
            source = _read_model(args, args.checkpoint)
        except ValueError as exc:
            from reference.formats.tf import UnevenLayers

            if args.layer is not None or not isinstance(exc.__cause__ or exc, UnevenLayers):
                raise
            source = None
    if source is None:  # a stack of layers of several sizes: a chain of one-layer models
        return _infer_chain(args, out)
    model = source.model
    x = _array(args.input, "INPUT")
    lengths = None if args.lengths is None else _array(args.lengths, "--lengths")
    batch = x.shape[0 if args.batch_major else 1] if x.ndim == 3 else max(1, x.size)
    h0, c0 = (None, None) if args.state is None else initial_state(args.state, model, args.batch_major, batch)
    if x.dtype != model.dtype:
        raise ValueError(f"{args.input} holds {x.dtype}, the checkpoint's model is {model.dtype}")
    given = {"input_data": f"INPUT {args.input}", "sequence_lengths": f"--lengths {args.lengths}",
             "input_h": f"--state {args.state}", "input_c": f"--state {args.state}",
             "padding_fill": f"--padding-fill {args.padding_fill}"}
    try:
        result = model.forward(x, h0, model.canonical_to_params(source.weights, source.biases), input_c=c0,
                               is_training=False, sequence_lengths=lengths, time_major=not args.batch_major,
                               padding_fill=args.padding_fill)
    except (ValueError, TypeError) as exc:  # the model names its arguments: say which of ours each is
        argument = given.get(str(exc).split(" ", 1)[0])
        if argument is None:
            raise
        raise type(exc)(f"{argument}: {exc}") from None
    arrays = {k: v for k, v in (("output", result.output), ("output_h", result.output_h),
                                ("output_c", result.output_c)) if v is not None}
    return _write_results(args, out, model, x, result.output, arrays)


def _infer_chain(args: argparse.Namespace, out: Path) -> int:
    """``infer`` of a TF-named stack whose layers differ in size, as a chain of one-layer models (see
    ``reference.chain``): ``output`` and each layer's final states, ``output_h_0``, ``output_h_1``, ...;
    ``--state`` holds a state per layer (:func:`chain_initial_states`)."""
    from .interop import convert

    with _reading("CHECKPOINT", args.checkpoint):
        chain = convert.read_chain(args.source, args.checkpoint, _overrides(args))
    x = _array(args.input, "INPUT")
    lengths = None if args.lengths is None else _array(args.lengths, "--lengths")
    if x.dtype != chain.dtype:
        raise ValueError(f"{args.input} holds {x.dtype}, the checkpoint's models are {chain.dtype}")
    batch = x.shape[0 if args.batch_major else 1] if x.ndim == 3 else max(1, x.size)
    h0, c0 = (None, None) if args.state is None else chain_initial_states(args.state, chain, args.batch_major,
                                                                            batch)
    try:
        result = chain.forward(x, h0, c0, sequence_lengths=lengths, time_major=not args.batch_major,
                               padding_fill=args.padding_fill)
    except (ValueError, TypeError) as exc:  # a layer's state of the wrong shape or dtype: the file is --state's
        if args.state is None or not str(exc).startswith(("initial_h", "initial_c")):
            raise
        raise type(exc)(f"--state {args.state}: {exc}") from None
    arrays = {"output": result.output, **{f"output_h_{k}": h for k, h in enumerate(result.output_h)},
              **{f"output_c_{k}": c for k, c in enumerate(result.output_c or [])}}
    return _write_results(args, out, chain, x, result.output, arrays)


def _write_results(args: argparse.Namespace, out: Path, model, x, output, arrays: dict) -> int:
    """``infer``'s results into ``out`` (``.npy``: the output alone; ``.npz``: every array and their layout),
    written whole or not at all, and a line saying what was written."""
    import numpy as np

    from reference.formats.files import replacing

    with replacing(out) as partial, open(partial, "wb") as f:
        if out.suffix == ".npy":
            np.save(f, output)
        else:
            note = {NOTE_KEY: np.array(args.note)} if getattr(args, "note", None) else {}
            np.savez(f, **arrays, **{LAYOUT_KEY: np.array(_layout(args.batch_major))}, **note)
    print(f"{model!r}: input {list(x.shape)} -> " + ", ".join(f"{k} {list(v.shape)}" for k, v in arrays.items())
          + f" -> {out}")
    return 0


SUITE = Path(__file__).resolve().parent


def names_suite_tests(arguments: list[str]) -> bool:
    """Whether pytest ``arguments`` begin with some of the suite's tests (files, folders or node ids inside
    it, before any option), so ``rnn-compat test`` runs those rather than the whole suite. Only the leading
    arguments count: after an option, a path may be that option's value (``--ignore PATH``)."""
    leading = [a for a in itertools.takewhile(lambda a: not a.startswith("-"), arguments)]
    paths = [Path(a.split("::")[0]).resolve() for a in leading]
    return bool(paths) and all(p.exists() and (p == SUITE or SUITE in p.parents) for p in paths)


def cmd_test(args: argparse.Namespace, extra: list[str]) -> int:
    from .optional import require

    require("hypothesis", "the suite")
    pytest = require("pytest", "the suite")
    whole_suite = [] if names_suite_tests(extra) else [str(SUITE)]
    return int(pytest.main([*whole_suite, f"--hypothesis-profile={args.profile}", *extra]))


def _model_options(parser: argparse.ArgumentParser) -> None:
    """The config options of ``convert`` and ``infer``: only for what the weights' file cannot tell."""
    options = parser.add_argument_group("model options", "what the weights' file cannot tell; an option that "
                                                         "contradicts the file is refused")
    options.add_argument("--mode", choices=MODE_NAMES,
                         help="for files without a config (relu vs tanh cannot be read off the weights)")
    options.add_argument("--num-layers", type=int, help="stacked layers (files that hold only some of a stack's)")
    options.add_argument("--num-units", type=int, help="hidden units H of each layer")
    options.add_argument("--input-size", type=int, help="the width of the input (skip_input: the input is H wide)")
    options.add_argument("--direction", choices=DIRECTIONS, help="one direction or two")
    options.add_argument("--input-mode", choices=("linear_input", "skip_input"),
                         help="skip_input: layer 0 adds its input as it is, without input matrices")
    options.add_argument("--num-proj", type=int, help="an LSTM's recurrent projection width (cuDNN's projSize)")
    options.add_argument("--dtype", choices=DTYPE_NAMES, help="the weights' and data's dtype")
    options.add_argument("--bias-mode", choices=BIAS_MODE_NAMES,
                         help="cuDNN's cudnnRNNBiasMode_t, where the file cannot tell it: TF-named files without our "
                              "config hold a single mode's biases under the names of either (PyTorch, Keras and "
                              "ONNX files tell 'double' from 'none' by their biases)")
    options.add_argument("--scope", help="TF-named files without our config: the variable scope of the RNN's "
                                         "tensors, where the file holds several")
    options.add_argument("--module", help="PyTorch files (--from torch) holding several recurrent modules: the "
                                          "path of the one to read (e.g. encoder.rnn, or model.rnn in a training "
                                          "checkpoint's 'model' entry)")
    options.add_argument("--recurrent-activation", choices=("sigmoid", "hard_sigmoid"),
                         help="Keras .h5 weights files: the recurrent_activation the LSTM or GRU layers were trained "
                              "with, where the file cannot say (Keras before 2.3 defaulted to hard_sigmoid, which "
                              "is refused: cuDNN computes sigmoid)")
    options.add_argument("--names", metavar="FILE.json",
                         help="safetensors / .npz files under names of their own: a JSON object mapping them onto "
                              "a scheme read here (TensorFlow's, PyTorch's or Keras's per-layer names), such as "
                              "{\"enc_w_ih\": \"weight_ih_l0\"}; names it leaves out are kept; torch.save's "
                              "files too (the keys of their state_dicts, onto PyTorch's names)")
    options.add_argument("--layer", type=int, metavar="N",
                         help="TF-named stacks whose layers differ in size (a MultiRNNCell of 512, 256, 128 units): "
                              "read layer N alone, as a one-layer model (infer runs the whole stack as a chain of "
                              "one-layer models without it)")
    options.add_argument("--node", metavar="NAME",
                         help="ONNX files: read the recurrent node of this name alone, as a one-layer model, "
                              "wherever it lies (inside an If branch or a Loop or Scan body too); frozen TensorFlow "
                              "graphs (.pb): the CudnnRNN op of this name")
    options.add_argument("--dequantize", action="store_true", default=None,
                         help="ONNX files of onnxruntime's DynamicQuantizeLSTM nodes: read their int8 weights "
                              "dequantized, an approximation (onnxruntime quantizes the inputs at run time too), "
                              "said so in the output")
    options.add_argument("--layers", metavar="NAME,NAME",
                         help="Keras weights files that hold other layers too (an Embedding, a Dense head): the "
                              "recurrent layers of the stack, in its order, by name (lstm_1,lstm_2) or by index in "
                              "the file's list of layers")


def _plugin_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plugin", action="append", default=[], metavar="SPEC",
                        help="a peer of your own: MODULE:ATTR or PATH.py:ATTR naming a compat_tests.peers.Peer "
                             "(or a subclass, or a list of them); repeatable; see compat_tests/peers/plugins.py")


DESCRIPTION = """How far cuDNN-style recurrent networks (relu/tanh RNN, LSTM, cuDNN's GRU and the textbook GRU)
drift from an exact reference: every available backend (the NumPy reference, PyTorch, onnxruntime, Keras,
cuDNN on a GPU) against the float64 truth, judged by a tolerance policy; and the NumPy reference run on the
CPU on weights of any format."""

EPILOG = """exit status: 0 within the tolerance policy, 1 outside it (or a report stopped early), 2 bad
arguments, 130/143 interrupted (SIGINT/SIGTERM). Each command's own help: rnn-compat COMMAND --help."""


def _version() -> str:
    from importlib import metadata

    try:
        return f"rnn-compat {metadata.version('cudnn-rnn-compat')}"
    except metadata.PackageNotFoundError:  # run from a working tree that pip never installed
        return "rnn-compat (uninstalled working tree)"


def _command(sub, name: str, help: str, description: str = "", **kwargs) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` opens with what it does (its one-line help, then ``description``)."""
    return sub.add_parser(name, help=help, description=help[0].upper() + help[1:] + "." + (
        f" {description}" if description else ""), formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser; ``parser.commands`` maps each command to its own parser."""
    from .peers import BUILT_IN

    parser = argparse.ArgumentParser(prog="rnn-compat", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    report = _command(sub, "report", "divergence of every available backend from the float64 reference",
                      "Writes report.md, index.html, report.json and results.jsonl (one record per unit) into --out; "
                      "Ctrl-C keeps the finished units, and --resume runs the rest.")
    report.add_argument("--backends", help="comma-separated backends (default: all available)")
    _plugin_option(report)
    report.add_argument("--grid", default="default", help="quick | window (a GPU window's) | default | full | a JSON grid file")
    report.add_argument("--out", help="report folder (default: reports/_scratch/GRID-TIMESTAMP)")
    report.add_argument("--resume", action="store_true", help="continue the run whose results.jsonl is in --out")
    report.add_argument("--force", action="store_true", help="start over in an --out that holds a run or a report "
                                                             "(they are replaced)")
    report.add_argument("--seed", type=int, help="the built-in grids' seed (default 0)")
    report.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help=f"worker processes (default: the CPU count, {os.cpu_count() or 1} here)")
    report.add_argument("--scheduler", metavar="ADDRESS",
                        help="run the units on a Dask cluster (the fleet extra): a scheduler's address "
                             "(tls://HOST:8786 with --tls-*, tcp://HOST:8786), the scheduler file it wrote, or "
                             "local:N for one of N workers started here (see docs/fleet.md)")
    report.add_argument("--scheduler-wait", type=float, metavar="SECONDS",
                        help="with --scheduler: how long to wait for the scheduler to connect and greet (default 5)")
    report.add_argument("--tls-ca-file", metavar="PEM", help="with a tls:// --scheduler: the CA its certificate is "
                                                              "signed by (docs/fleet.md)")
    report.add_argument("--tls-cert", metavar="PEM", help="with a tls:// --scheduler: the client's certificate")
    report.add_argument("--tls-key", metavar="PEM", help="with --tls-cert: its key, unless the certificate's file "
                                                          "holds it")
    report.add_argument("--fanout", action="store_true",
                        help="with --scheduler: every unit on each distinct environment of the cluster's workers")
    report.add_argument("--no-progress", action="store_true", help="no progress bar")
    report.add_argument("--no-figures", action="store_true",
                        help="index.html without its figures (every table stays; rnn-compat render draws them later)")
    report.add_argument("--max-seconds", type=float,
                        help="start no unit after this many seconds; the report then covers the units that ran "
                             "(marked incomplete, exit status 1) and --resume runs the rest")

    render = _command(sub, "render", "write a report run's report.json, report.md and index.html again from its "
                                     "run.json and results.jsonl", "For a stopped run, or the figures on a machine "
                                                                   "with matplotlib.")
    render.add_argument("dir", help="the folder of a report run (--out of rnn-compat report)")
    render.add_argument("--no-figures", action="store_true", help="index.html without its figures")

    diff = _command(sub, "diff", "what changed between two report runs, unit by unit",
                    "Verdicts that changed (exit status 1 where a unit passed in RUN_A and fails in RUN_B), errors "
                    "that moved beyond --band conditioned eps, identical units, units only one run holds, and the "
                    "two environments; diff.md, index.html (one figure) and diff.json in --out.")
    diff.add_argument("run_a", help="the earlier run's folder (rnn-compat report --out), or FOLDER@KEY: one "
                                    "environment of a fleet run (docs/fleet.md)")
    diff.add_argument("run_b", help="the later run's folder, or FOLDER@KEY")
    diff.add_argument("--band", type=float, help="the noise band in conditioned eps (default 1)")
    diff.add_argument("--out", help="folder for the diff (default: reports/_scratch/diff-TIMESTAMP)")
    diff.add_argument("--force", action="store_true", help="replace an earlier diff in --out")

    check = _command(sub, "check", "re-run one comparison (the command a failure prints)",
                     "The peer's forward pass (or gradients) on one config against the float64 truth, every "
                     "quantity judged by the tolerance policy. A config without a dtype runs in float32.")
    check.add_argument("--peer", required=True, help=f"the implementation to judge: {', '.join(BUILT_IN)}, or a "
                                                     "plugin's (--plugin, RNN_COMPAT_PLUGINS or an installed "
                                                     "package: rnn-compat peers lists them)")
    _plugin_option(check)
    check.add_argument("--config", required=True,
                       help='an RNNConfig as JSON, e.g. \'{"mode": "gru", "num_layers": 2, "dtype": "float32"}\' '
                            "(fields: compat_tests/config.py RNNConfig; absent ones take their defaults)")
    check.add_argument("--backward", action="store_true", help="compare the gradients instead of the forward pass")

    conv = _command(sub, "convert", "weights between formats (checkpoint, torch, keras, onnx, tf)",
                    "The output's suffix picks the file kind: checkpoint .safetensors/.npz; torch .pt/.pth "
                    "(torch.save's format) or .safetensors/.npz (a state_dict); keras .keras, .weights.h5, .h5/.hdf5 "
                    "or .safetensors/.npz; onnx .onnx; tf a checkpoint prefix (its .index and .data files).")
    conv.add_argument("--from", dest="source", default=AUTO, choices=FORMATS + (AUTO,),
                      help="the input's format (default auto: told by its name and contents)")
    conv.add_argument("--to", dest="target", required=True, choices=FORMATS,
                      help="the output's format (its file kinds above)")
    conv.add_argument("input", help="the weights to read")
    conv.add_argument("output", help="the file to write (refused where it is INPUT; an existing one needs --force)")
    _model_options(conv)
    conv.add_argument("--force", action="store_true", help="replace OUTPUT where it exists")
    conv.add_argument("--out-scope", help="TF-named targets: the variable scope to write the tensors under ('' for "
                                           "none; default: a TF-named source's own)")
    conv.add_argument("--cell", action="store_true",
                      help="--to torch: name the tensors as a single nn.RNNCell, nn.LSTMCell or nn.GRUCell does "
                           "(weight_ih, weight_hh, bias_ih, bias_hh; a one-layer, one-direction model)")

    infer = _command(sub, "infer", "run a checkpoint (or weights of another format) on the CPU with the NumPy "
                                   "reference", "Prints the output's shape and writes it (and the final states) with "
                                                "--out; --state goes on from an earlier --out.")
    infer.add_argument("checkpoint", help="the weights: our checkpoint or a file of any format (see --from)")
    infer.add_argument("--from", dest="source", default=AUTO, choices=FORMATS + (AUTO,),
                       help="the weights' format (default auto: told by the file's name and contents, see "
                            "compat_tests.interop.convert.detect)")
    _model_options(infer)
    infer.add_argument("input", help=".npy of [T, B, input_size] (or [B, T, input_size] with --batch-major)")
    infer.add_argument("--out", help=".npz (output, output_h, output_c and their layout) or .npy (output only)")
    infer.add_argument("--force", action="store_true", help="replace --out where it exists")
    infer.add_argument("--lengths", help=".npy of sequence lengths [B]")
    infer.add_argument("--padding-fill", type=float, default=0.0, metavar="VALUE",
                       help="the output past each length (cuDNN's paddingFill; default 0; nan, inf, -inf too)")
    infer.add_argument("--batch-major", action="store_true",
                       help="INPUT is [B, T, input_size], and the output [B, T, D*H] and the states (--out's and "
                            "--state's) [B, L*D, H], as TensorFlow's time_major=False")
    infer.add_argument("--state", help=".npz of initial states input_h (and input_c), or an earlier --out .npz "
                                       "(its output_h, output_c), to go on from where that run ended (in its "
                                       "layout: --out's .npz says it under 'layout')")

    peers = _command(sub, "peers", "every peer (built-in and plugins): available here or why not, and what it "
                                   "can run", "With its exceptions to the tolerance policy, each with its reason.")
    peers.add_argument("--json", action="store_true", help="as JSON")
    _plugin_option(peers)

    test = _command(sub, "test", "run the suite (or the tests the arguments name); other arguments go to pytest")
    test.add_argument("--profile", choices=("ci", "dev", "thorough"), default="dev",
                      help="Hypothesis examples per property: ci 100 derandomized (what CI runs), dev 300 fresh "
                           "each run (the default), thorough 2000")
    _plugin_option(test)

    parser.commands = sub.choices
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "test":
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    with terminated_as_interrupted() as ending:
        status = _dispatch(args, extra)
        if argv is None and status > 128:  # this process was interrupted and ends: another signal ends it at once
            ending()
        return status


# The commands that look peers up (or the policy, which reads their exceptions): they load the plugin peers.
PEER_COMMANDS = ("report", "render", "check", "peers", "test")


def _dispatch(args: argparse.Namespace, extra: list[str]) -> int:
    try:
        if args.command in PEER_COMMANDS:  # the installed plugins and RNN_COMPAT_PLUGINS', then --plugin's
            from .peers import load_plugin, load_plugins

            load_plugins()
            for spec in getattr(args, "plugin", ()):
                load_plugin(spec)
        if args.command == "test":
            return cmd_test(args, extra)
        commands = {"report": cmd_report, "render": cmd_render, "check": cmd_check, "convert": cmd_convert,
                    "infer": cmd_infer, "peers": cmd_peers, "diff": cmd_diff}
        return commands[args.command](args)
    except (ValueError, TypeError, OSError, MissingDependency) as exc:  # named in the message
        print(f"rnn-compat {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: no traceback; a report run's finished units are kept
        resume = " (its finished units are kept: the same command with --resume runs the rest)"
        print(f"rnn-compat {args.command}: interrupted{resume if args.command == 'report' else ''}", file=sys.stderr)
        return 128 + getattr(exc, "signum", signal.SIGINT)


if __name__ == "__main__":
    sys.exit(main())
