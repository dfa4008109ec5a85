"""``rnn-compat``: the command line of the cuDNN RNN compatibility suite.

Exit status: 0 when everything compared is within the tolerance policy, 1 when something is not (or a
report run stopped before its last unit), 2 on bad arguments, 128 + the signal's number when interrupted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import sys
from pathlib import Path

from reference.model import DIRECTIONS

from .config import BIAS_MODE_NAMES, DTYPE_NAMES, MODE_NAMES, RNNConfig, json_loads
from .interop.command import cmd_convert, cmd_infer
from .interop.convert import AUTO, FORMATS
from .interrupts import terminated_as_interrupted
from .optional import MissingDependency
from .report.command import cmd_diff, cmd_render, cmd_report

# Capabilities a peer may lack, each with the feature name its notes use for the reason.
FEATURES = (("skip_input", "skip_input"), ("projection", "projection"), ("lengths", "sequence lengths"),
            ("batch_major", "batch-major"), ("bidirectional", "bidirectional"), ("backward", "gradients"),
            ("padding_fill", "padding_fill"), ("cell_clip", "cell_clip"), ("packed", "packed sequences"))


def peer_summary(peer) -> dict:
    """What ``rnn-compat peers`` says of one peer: availability, where a plugin came from, what it runs, and
    its exceptions to the tolerance policy (budget overrides and known divergences, each with its reason)."""
    from .judge.known_divergences import divergences_of
    from .judge.tolerances import overrides_of
    from .peers.base import availability
    from .peers.plugins import SPECS

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
    report.add_argument("--grid", help="quick | window (a GPU window's) | default (the default) | full | a JSON grid "
                                       "file")
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
    yours = report.add_argument_group("a report about your model (docs/model-report.md)", "every backend on the "
                                      "weights of your file, the file in its own framework, a verdict, a diagnosis "
                                      "and the tolerance to use")
    yours.add_argument("--model", action="append", metavar="FILE",
                       help="a model file of any format rnn-compat infer reads; repeat it for an export or a port of "
                            "the first (each file is judged against the first's truth)")
    yours.add_argument("--from", dest="source", default=AUTO, choices=FORMATS + (AUTO,),
                       help="the model files' format (default auto: told by each file's name and contents)")
    yours.add_argument("--input", metavar="X.npy", help="your input, [T, B, input_size] (default: inputs drawn for "
                                                        "the model)")
    yours.add_argument("--lengths", metavar="LENGTHS.npy", help="with --input: the sequence lengths [B]")
    yours.add_argument("--batch-major", action="store_true", help="--input is [B, T, input_size]")
    yours.add_argument("--input-scale", type=float, metavar="S",
                       help="the drawn inputs: standard normal times S (default 1)")
    yours.add_argument("--steps", metavar="T,T", help="the drawn inputs' sequence lengths (default 10,1000)")
    _model_options(report)

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
    infer.add_argument("--math", choices=("fma", "tf32"), default="fma",
                       help="float32 models: tf32 runs every GEMM on TF32-rounded operands, the outputs a GPU with "
                            "TF32 math gives (PyTorch's default on cuDNN), on the CPU (docs/reference.md)")
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


def _report(args: argparse.Namespace) -> int:
    """``report``: about a model file (``--model``), else about a grid (``--grid``, default ``default``)."""
    from .model_report.command import check_grid_arguments, cmd_model_report

    if args.model:
        return cmd_model_report(args)
    check_grid_arguments(args)
    args.grid = args.grid or "default"
    return cmd_report(args)


def _render(args: argparse.Namespace) -> int:
    """``render``: a model run's folder by its own report, any other by the grid report's."""
    from .model_report.command import rendered
    from .model_report.plan import is_model_run

    if is_model_run(Path(args.dir)):
        return rendered(Path(args.dir), figures=not args.no_figures)
    return cmd_render(args)


def _dispatch(args: argparse.Namespace, extra: list[str]) -> int:
    try:
        if args.command in PEER_COMMANDS:  # the installed plugins and RNN_COMPAT_PLUGINS', then --plugin's
            from .peers import load_plugin, load_plugins

            load_plugins()
            for spec in getattr(args, "plugin", ()):
                load_plugin(spec)
        if args.command == "test":
            return cmd_test(args, extra)
        commands = {"report": _report, "render": _render, "check": cmd_check, "convert": cmd_convert,
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
