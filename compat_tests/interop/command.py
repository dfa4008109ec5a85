"""The commands that read a model's file: ``rnn-compat convert`` (one format to another) and ``rnn-compat
infer`` (the model run on an input, on the CPU), from parsed arguments to an exit status; their outputs are
checked against their inputs, and ``infer``'s states come from and go to the files of
:mod:`compat_tests.interop.state_files`."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from .state_files import LAYOUT_KEY, NOTE_KEY, chain_initial_states, initial_state, layout_name, read_array, reading


def _read_model(args: argparse.Namespace, path: str):
    """The model and weights of the file at ``path`` in the format ``--from`` names, with the model options
    (``_model_options``) on top: they may say only what the file cannot tell."""
    from . import convert

    if args.source == convert.AUTO:  # told by the file: the options below are checked against what it is
        args.source = convert.detect(path, args.names)
    if args.scope and args.source not in convert.TF_NAMED:
        raise ValueError(f"--scope applies to TF-named files (--from tf or checkpoint), not to --from {args.source}")
    if args.module is not None and args.source != "torch":
        raise ValueError(f"--module applies to PyTorch files (--from torch), not to --from {args.source}")
    read = convert.read(args.source, path, reader_options(args))
    if read.note:  # an approximation of the file's model: said here, and in infer --out's .npz
        print(f"rnn-compat: note: {path}: {read.note}", file=sys.stderr)
        args.note = read.note
    return read


def reader_options(args: argparse.Namespace) -> dict:
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
    from . import convert

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


def cmd_infer(args: argparse.Namespace) -> int:
    if args.out is not None and not args.out:
        raise ValueError("--out must name a file, got ''")
    out = Path(args.out) if args.out else Path(args.input).with_name(Path(args.input).stem + "_output.npz")
    if out.suffix not in (".npy", ".npz"):
        raise ValueError(f"--out must end in .npz (output, output_h, output_c) or .npy (output only), got {out.name!r}")
    from .convert import read_files

    check_output("--out", [out], {"CHECKPOINT": read_files(args.checkpoint), "INPUT": [Path(args.input)],
                                  "--lengths": [Path(p) for p in [args.lengths] if p is not None],
                                  "--state": [Path(p) for p in [args.state] if p is not None]}, args.force)
    with reading("CHECKPOINT", args.checkpoint):
        try:
            source = _read_model(args, args.checkpoint)
        except ValueError as exc:
            from reference.formats.tf import UnevenLayers

            if args.layer is not None or not isinstance(exc.__cause__ or exc, UnevenLayers):
                raise
            source = None
    if source is None:  # a stack of layers of several sizes: a chain of one-layer models
        return _infer_chain(args, out)
    model = with_math(source.model, args.math)
    x = read_array(args.input, "INPUT")
    lengths = None if args.lengths is None else read_array(args.lengths, "--lengths")
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


def with_math(model, math_type: str):
    """``model`` (a reference model) of ``math_type`` (``--math``): itself for FMA math, else the same model
    of that math type (``tf32``: float32 models only, refused naming ``--math`` otherwise)."""
    if math_type == "fma":
        return model
    import reference

    if model.dtype != "float32":
        raise ValueError(f"--math {math_type} applies to float32 models, the checkpoint's is {model.dtype}")
    return reference.make_model(model.rnn_mode, model.num_layers, model.num_units, model.input_size, model.input_mode,
                                model.direction, model.dtype, num_proj=model.num_proj, bias_mode=model.bias_mode,
                                cell_clip=model.cell_clip, math_type=math_type)


def _infer_chain(args: argparse.Namespace, out: Path) -> int:
    """``infer`` of a TF-named stack whose layers differ in size, as a chain of one-layer models (see
    ``reference.chain``): ``output`` and each layer's final states, ``output_h_0``, ``output_h_1``, ...;
    ``--state`` holds a state per layer (:func:`chain_initial_states`)."""
    from . import convert

    with reading("CHECKPOINT", args.checkpoint):
        chain = convert.read_chain(args.source, args.checkpoint, reader_options(args))
    if args.math != "fma":  # each layer's model of that math type
        from reference.chain import Chain

        chain = Chain([dataclasses.replace(layer, model=with_math(layer.model, args.math)) for layer in chain.layers])
    x = read_array(args.input, "INPUT")
    lengths = None if args.lengths is None else read_array(args.lengths, "--lengths")
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
            np.savez(f, **arrays, **{LAYOUT_KEY: np.array(layout_name(args.batch_major))}, **note)
    print(f"{model!r}: input {list(x.shape)} -> " + ", ".join(f"{k} {list(v.shape)}" for k, v in arrays.items())
          + f" -> {out}")
    return 0
