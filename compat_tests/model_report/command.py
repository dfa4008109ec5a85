"""``rnn-compat report --model FILE [--model FILE ...]``: the report about a user's own model, from parsed
arguments to an exit status (0 every result within rounding, 1 one beyond it or a report stopped early, 2 bad
input); and ``rnn-compat render`` of a model run's folder."""

from __future__ import annotations

import argparse
import math
import shlex
import signal
import sys
from pathlib import Path

import numpy as np

from ..report.folder import REPORT_FILES, RUN_FILES, check_own
from . import plan as run_plan

# report's options that only a model report takes (with their flags)
MODEL_ONLY = (("input", "--input"), ("lengths", "--lengths"), ("batch_major", "--batch-major"),
              ("input_scale", "--input-scale"), ("steps", "--steps"))
# the model options (_model_options of the CLI): what a file cannot tell
MODEL_OPTIONS = ("mode", "num_layers", "num_units", "input_size", "direction", "input_mode", "num_proj", "dtype",
                 "bias_mode", "scope", "module", "recurrent_activation", "names", "layer", "node", "dequantize",
                 "layers")


def given_flags(args: argparse.Namespace, names) -> list[str]:
    """The flags of ``names`` (``(dest, flag)`` pairs, or dests) the command line set."""
    pairs = [(n, "--" + n.replace("_", "-")) if isinstance(n, str) else n for n in names]
    return [flag for dest, flag in pairs if getattr(args, dest, None) not in (None, False)]


def check_grid_arguments(args: argparse.Namespace) -> None:
    """A grid report given a model report's options: refused, naming them."""
    stray = given_flags(args, MODEL_ONLY) + given_flags(args, MODEL_OPTIONS) + (
        ["--from"] if args.source != "auto" else [])
    if stray:
        raise ValueError(f"{', '.join(stray)} {'applies' if len(stray) == 1 else 'apply'} to a report about a model "
                         f"file: give --model FILE")


def _steps(text: str | None) -> tuple[int, ...]:
    from .inputs import STEPS

    if text is None:
        return STEPS
    try:
        steps = tuple(int(s) for s in text.split(","))
    except ValueError:
        steps = ()
    if not steps or min(steps) < 1 or max(steps) > 100_000:
        raise ValueError(f"--steps must be comma-separated sequence lengths in 1..100000, such as 10,1000, got "
                         f"{text!r}")
    return steps


def cmd_model_report(args: argparse.Namespace) -> int:
    import datetime

    from ..interop.command import reader_options
    from ..report.command import check_run_folder
    from . import files as model_files
    from . import inputs

    if args.grid is not None:
        raise ValueError("--grid and --model: a report is about a grid of configs or about a model file, not both")
    if args.scheduler or args.fanout:
        raise ValueError("--scheduler: a model report runs on this machine's processes (--jobs)")
    if args.max_seconds is not None and not (math.isfinite(args.max_seconds) and args.max_seconds > 0):
        raise ValueError(f"--max-seconds must be a finite number of seconds > 0, got {args.max_seconds}")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    if args.seed is not None:
        raise ValueError("--seed applies to the built-in grids: a model report's drawn inputs carry their own seeds")
    if args.resume and args.force:
        raise ValueError("--resume continues the run in --out, --force starts it over: pass one of them")
    if args.resume and not args.out:
        raise ValueError("--resume needs --out, the folder of the run to continue")
    if args.input is None and (args.lengths is not None or args.batch_major):
        raise ValueError(f"{', '.join(given_flags(args, ('lengths', 'batch_major')))} describe --input: give it too")
    if args.input is not None and (args.input_scale is not None or args.steps is not None):
        raise ValueError("--input-scale and --steps shape the drawn inputs: with --input the input is yours")
    scale = 1.0 if args.input_scale is None else args.input_scale
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"--input-scale must be a finite number > 0, got {args.input_scale}")
    steps = _steps(args.steps)
    options = reader_options(args)
    read = [model_files.read_model(args.model[0], args.source, options)]
    read += [model_files.read_later_model(path, args.source, options) for path in args.model[1:]]
    unused = model_files.unused_options(options, [f.fmt for f in read])
    if unused:
        files = ", ".join(f"{f.path} ({f.fmt})" for f in read)
        raise ValueError(f"{', '.join(unused)} applies to none of the files ({files})")
    model_files.check_one_model(read)
    first = read[0]
    if args.input is not None:
        chosen = [inputs.given(args.input, args.lengths, args.batch_major, first.model.input_size, first.model.dtype)]
    else:
        chosen = fitted_inputs(read, inputs.drawn(first.model.input_size, scale, steps))
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else Path("reports") / "_scratch" / f"model-{Path(first.path).stem}-{stamp}"
    check_run_folder(out, args)
    check_own(out, run_plan.FILES)
    for f in read:
        if f.note:
            print(f"rnn-compat: note: {f.path}: {f.note}", file=sys.stderr)
    return _run(args, read, chosen, out, options)


def _plan_units(read: list, chosen: list, out: Path, backends: str | None):
    """The units of the run (every available peer x dtype x input on the first file's weights, each file in its
    own framework x input), the considered backends' status, and what was skipped, with why."""
    from ..peers import choose
    from .frameworks import fixed_sizes, unavailable
    from .units import FILE_BACKEND, ModelUnit

    peers, status = choose(backends)
    first = read[0]
    units, skipped = [], []
    architectures = first.architectures()  # (a chain's layers each; else the one model's)
    for k, inp in enumerate(chosen):
        T, B = inp.x.shape[:2]
        lengths = None if inp.lengths is None else tuple(int(n) for n in inp.lengths)
        bases = [a.with_(seq_len=T, batch=B, lengths=lengths, initial_state=False, seed=inp.seed or 0)
                 for a in architectures]
        for layer, base in enumerate(bases):
            for peer in peers:
                for dtype in ("float16", "float32", "float64"):
                    cfg = base.with_(dtype=dtype)
                    why = peer.unsupported(cfg)
                    if why:
                        if k == 0 and layer == 0:
                            skipped.append({"backend": peer.name, "dtype": dtype, "reason": why})
                        continue
                    units.append(ModelUnit(peer.name, cfg, 0, k, str(out), layer))
        base = bases[-1]  # a file's framework runs the whole chain: its output is the last layer's
        for n, f in enumerate(read):
            dtype = (f.model or first.model).dtype.name  # (a file the readers refused: the first's)
            why = unavailable(f.path, f.fmt) or _misfit(fixed_sizes(f.path, f.fmt), T, B)
            if why:
                skipped.append({"backend": f"{FILE_BACKEND} {n}", "dtype": dtype, "input": inp.label,
                                "reason": f"{f.path}: {why}"})
                continue
            units.append(ModelUnit(FILE_BACKEND, base.with_(dtype=dtype), n, k, str(out), len(bases) - 1))
    return units, status, skipped


def _misfit(sizes: tuple | None, T: int, B: int) -> str | None:
    """Why an input of ``T`` steps and ``B`` sequences cannot go to a model of fixed ``sizes`` (``(T, B)``, either
    ``None`` where free), or ``None`` where it can."""
    if sizes is None or all(want in (None, got) for want, got in zip(sizes, (T, B))):
        return None
    return (f"its graph takes inputs of T={sizes[0] or 'any'}, B={sizes[1] or 'any'} only (fixed dims), not T={T}, "
            f"B={B}")


def fitted_inputs(read: list, chosen: list) -> list:
    """The drawn inputs, and for each file whose model takes one length and batch only (``fixed_sizes``) that no
    drawn input has, one drawn input of its sizes, so that every file runs in its own framework."""
    from .frameworks import fixed_sizes
    from .inputs import Input

    extra = []
    for f in read:
        sizes = fixed_sizes(f.path, f.fmt)
        if sizes is None or any(_misfit(sizes, *i.x.shape[:2]) is None for i in chosen + extra):
            continue
        T, B = sizes[0] or chosen[0].x.shape[0], sizes[1] or chosen[0].x.shape[1]
        seed = len(chosen) + len(extra)
        x = np.random.default_rng(seed).standard_normal((T, B, chosen[0].x.shape[2])) * chosen[0].x.std()
        extra.append(Input(f"drawn: seed {seed}, T={T}, B={B} (the sizes {Path(f.path).name} takes)", x, None, seed))
    return chosen + extra


def _run(args: argparse.Namespace, read: list, chosen: list, out: Path, options: dict) -> int:
    from ..report.aggregate import environment, policy_summary
    from ..report.command import check_run_folder
    from ..report.lock import run_lock
    from ..report.sweep import sweep
    from . import files as model_files
    from . import inputs
    from .units import MODEL_UNITS

    units, status, skipped = _plan_units(read, chosen, out, args.backends)
    if not units:
        raise ValueError("no backend can run this model here: " + "; ".join(
            f"{s['backend']} {s['dtype']}: {s['reason']}" for s in skipped))
    described = []
    for f in read:
        applied = {k: v for k, v in options.items() if v is not None}
        described.append({**f.describe(), "options": applied})
    plan = {"files": described, "architecture": read[0].architecture().to_dict(),
            "inputs": [{"label": i.label, "seed": i.seed, "T": int(i.x.shape[0]), "B": int(i.x.shape[1]),
                        "lengths": None if i.lengths is None else [int(n) for n in i.lengths]} for i in chosen],
            "weights": [model_files.compare_weights(read[0], f) for f in read[1:]],
            "backends": status, "units": [u.id for u in units], "skipped": skipped,
            "environment": environment(), "policy": policy_summary()}
    with run_lock(out):
        check_run_folder(out, args)
        if args.resume:
            _check_resumable(out, plan)
        if args.force:
            for name in RUN_FILES + REPORT_FILES + run_plan.FILES:
                (out / name).unlink(missing_ok=True)
        inputs.save(out, chosen, layer_inputs(read[0], chosen))
        run_plan.save_weights(out, read)
        run_plan.write(out, plan)
        print(f"rnn-compat report --model {' '.join(f.path for f in read)}: {len(units)} units "
              f"({', '.join(sorted({u.backend for u in units}))}) on {len(chosen)} input(s) against the float64 "
              f"truth, {args.jobs} jobs -> {out}", flush=True)
        try:
            sweep(units, out, jobs=args.jobs, progress=not args.no_progress, max_seconds=args.max_seconds,
                  kind=MODEL_UNITS)
        except KeyboardInterrupt as exc:
            signum = getattr(exc, "signum", signal.SIGINT)
            print(f"\nrnn-compat report: interrupted by {signal.Signals(signum).name} (its finished units are kept); "
                  f"to run the rest:\n  {_resume_command(args, out)}", file=sys.stderr, flush=True)
            return 128 + signum
        return rendered(out, figures=not args.no_figures)


def layer_inputs(first, chosen: list) -> dict:
    """What each layer after the first of a chain reads of each input: ``{(k, layer): x}``, the float64 truth of the
    layers before on input ``k`` (so each layer is judged on its own, from a true input); ``{}`` for one model."""
    from ..config import Case
    from ..run import ground_truth

    found = {}
    for k, inp in enumerate(chosen if first.chain else ()):
        x = inp.x.astype(np.float64)
        lengths = None if inp.lengths is None else tuple(int(n) for n in inp.lengths)
        for layer, ((_, weights, biases), arch) in enumerate(zip(first.chain[:-1], first.architectures())):
            cfg = arch.with_(seq_len=x.shape[0], batch=x.shape[1], lengths=lengths, initial_state=False,
                             dtype="float64")
            x = ground_truth(cfg, Case([np.asarray(w, np.float64) for w in weights],
                                       [np.asarray(b, np.float64) for b in biases], x, None, None, inp.lengths)).output
            found[(k, layer + 1)] = x
    return found


def _check_resumable(out: Path, plan: dict) -> None:
    """A resumed model run plans what the run in ``out`` planned, on the same files (by digest) and policy."""
    if not run_plan.is_model_run(out):
        raise ValueError(f"--resume: {out} holds no model report's plan (a grid report's, or none): use another --out")
    before = run_plan.read(out)
    changed = [f"{a['path']}" for a, b in zip(plan["files"], before["files"]) if a["sha256"] != b["sha256"]]
    if changed or len(plan["files"]) != len(before["files"]):
        raise ValueError(f"--resume: the model files changed since the run in {out} began "
                         f"({', '.join(changed) or 'another number of files'}): start a new run in another --out")
    if before["units"] != plan["units"]:
        raise ValueError(f"--resume: the run in {out} planned {len(before['units'])} units, this command "
                         f"{len(plan['units'])}: resume with that run's options and backends, or use another --out")
    if before["policy"] != plan["policy"]:
        raise ValueError(f"--resume: the tolerance policy changed since the run in {out} began: start a new run in "
                         f"another --out")


def _resume_command(args: argparse.Namespace, out: Path) -> str:
    words = ["rnn-compat", "report"]
    for path in args.model:
        words += ["--model", path]
    for dest in MODEL_OPTIONS + ("input", "lengths", "input_scale", "steps", "backends"):
        value = getattr(args, dest, None)
        if value not in (None, False):
            words += ["--" + dest.replace("_", "-")] + ([] if value is True else [str(value)])
    if args.source != "auto":
        words += ["--from", args.source]
    if args.batch_major:
        words.append("--batch-major")
    for spec in args.plugin:
        words += ["--plugin", spec]
    words += ["--out", str(out), "--resume"]
    return " ".join(shlex.quote(w) for w in words)


def rendered(out: Path, figures: bool = True) -> int:
    """Write the report of the model run in ``out``, print its summary, and return the exit status."""
    from .page import render, terminal_summary

    report = render(out, figures)
    print(terminal_summary(report, str(out)))
    return 0 if report["passed"] and report["complete"] else 1
