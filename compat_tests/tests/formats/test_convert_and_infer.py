"""``rnn-compat convert`` and ``infer`` on the command line: formats told by names, options that must agree
with the file, state files, and the outputs written."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from compat_tests import cli
from compat_tests.config import Outputs, RNNConfig, make_case
from compat_tests.judge.compare import assert_agree_within_policy
from compat_tests.run import run_reference
from reference import checkpoint
from reference.formats import keras as keras_format
from reference.formats import tf, tf_bundle
from reference.formats import torch as torch_format


def test_infer_refuses_a_damaged_input_naming_it(tmp_path, capsys):
    cfg = RNNConfig("gru", num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    checkpoint.save(tmp_path / "m.npz", cfg.model(), case.weights, case.biases)
    np.save(tmp_path / "x.npy", case.x)
    header_unclosed = (tmp_path / "x.npy").read_bytes().replace(b"}", b" ", 1)  # NumPy: tokenize.TokenError
    (tmp_path / "x.npy").write_bytes(header_unclosed)
    assert cli.main(["infer", str(tmp_path / "m.npz"), str(tmp_path / "x.npy")]) == 2
    assert f"{tmp_path / 'x.npy'}: not a readable NumPy file (TokenError" in capsys.readouterr().err


def test_infer_refuses_an_output_it_would_not_write_as_named(tmp_path, capsys):
    """np.savez adds .npz to a name without it: infer would write elsewhere than --out says."""
    cfg = RNNConfig("gru", num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    checkpoint.save(tmp_path / "m.npz", cfg.model(), case.weights, case.biases)
    np.save(tmp_path / "x.npy", case.x)
    assert cli.main(["infer", str(tmp_path / "m.npz"), str(tmp_path / "x.npy"), "--out", str(tmp_path / "y")]) == 2
    assert "--out must end in .npz" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz", "x.npy"]


def test_convert_between_every_format_and_infer(tmp_path, capsys):
    pytest.importorskip("onnx")
    cfg = RNNConfig("gru", num_layers=2, num_units=4, input_size=3, direction="bidirectional", seq_len=5, batch=2,
                    dtype="float32")
    case = make_case(cfg)
    start = tmp_path / "model.safetensors"
    checkpoint.save(start, cfg.model(), case.weights, case.biases)
    chain = [("checkpoint", start), ("torch", tmp_path / "torch.safetensors"), ("keras", tmp_path / "keras.npz"),
             ("onnx", tmp_path / "model.onnx"), ("checkpoint", tmp_path / "back.npz")]
    for (src, a), (dst, b) in zip(chain, chain[1:]):
        assert cli.main(["convert", "--from", src, "--to", dst, str(a), str(b)]) == 0
    np.save(tmp_path / "x.npy", case.x)
    assert cli.main(["infer", str(tmp_path / "back.npz"), str(tmp_path / "x.npy"), "--out", str(tmp_path / "y.npz")]) == 0
    with np.load(tmp_path / "y.npz", allow_pickle=False) as y:
        got = Outputs(y["output"], y["output_h"], None)
    expected = cfg.model().forward(case.x, None, cfg.model().canonical_to_params(case.weights, case.biases),
                                   is_training=False)
    assert_agree_within_policy(cfg, case._replace(h0=None), got, Outputs(expected.output, expected.output_h, None))


@pytest.mark.parametrize("mode, time_major", [("lstm", True), ("lstm", False), ("gru", True)])
def test_infer_goes_on_from_an_earlier_runs_state(tmp_path, mode, time_major):
    """A sequence run in two chunks, each from the state the one before ended in (``--state``: the initial
    state's own file, then the first chunk's ``--out``), equals the sequence run at once."""
    cfg = RNNConfig(mode, num_layers=2, num_units=4, input_size=3, num_proj=3 if mode == "lstm" else None,
                    seq_len=7, batch=2, time_major=time_major, dtype="float64")
    case = make_case(cfg)
    model = cfg.model()
    checkpoint.save(tmp_path / "m.npz", model, case.weights, case.biases)
    start = {"input_h": case.h0} | ({"input_c": case.c0} if cfg.has_cell_state else {})
    np.savez(tmp_path / "s0.npz", **start)
    time_axis = 0 if time_major else 1
    layout = [] if time_major else ["--batch-major"]
    for i, chunk in enumerate(np.split(case.x, [3], axis=time_axis), 1):
        np.save(tmp_path / f"x{i}.npy", chunk)
        state = tmp_path / ("s0.npz" if i == 1 else f"y{i - 1}.npz")
        assert cli.main(["infer", str(tmp_path / "m.npz"), str(tmp_path / f"x{i}.npy"), "--state", str(state),
                         "--out", str(tmp_path / f"y{i}.npz"), *layout]) == 0
    with np.load(tmp_path / "y1.npz", allow_pickle=False) as y1, np.load(tmp_path / "y2.npz", allow_pickle=False) as y2:
        got = Outputs(np.concatenate([y1["output"], y2["output"]], axis=time_axis), y2["output_h"],
                      y2["output_c"] if cfg.has_cell_state else None)
    whole = model.forward(case.x, case.h0, model.canonical_to_params(case.weights, case.biases), input_c=case.c0,
                          is_training=False, time_major=time_major)
    assert_agree_within_policy(cfg, case, got, Outputs(whole.output, whole.output_h, whole.output_c))


def test_infer_refuses_a_state_file_it_cannot_use(tmp_path, capsys):
    lstm, gru, bi = (RNNConfig(mode, num_units=4, input_size=3, seq_len=3, batch=2, dtype="float32",
                               direction=direction)
                     for mode, direction in (("lstm", "unidirectional"), ("gru", "unidirectional"),
                                             ("lstm", "bidirectional")))
    cases = {name: (cfg, make_case(cfg)) for name, cfg in (("lstm", lstm), ("gru", gru), ("bi", bi))}
    for name, (cfg, case) in cases.items():
        checkpoint.save(tmp_path / f"{name}.npz", cfg.model(), case.weights, case.biases)
    case, bi_case = cases["lstm"][1], cases["bi"][1]
    h0, c0, bi_h0, bi_c0 = case.h0, case.c0, bi_case.h0, bi_case.c0
    np.save(tmp_path / "x.npy", case.x)
    np.save(tmp_path / "h.npy", h0)
    states = [
        ("lstm", {"input_h": h0}, "holds no input_c"),
        ("lstm", {"input_c": c0}, "holds no input_h"),
        ("lstm", {"input_h": h0, "input_c": c0, "output_h": h0}, "both input_h and output_h"),
        ("lstm", {"input_h": h0, "input_c": c0, "h0": h0}, r"holds \['h0'\]"),
        ("lstm", {"input_h": h0[:, :1], "input_c": c0}, r"input_h must have shape .* = \(1, 2, 4\), got \(1, 1, 4\)"),
        ("lstm", {"input_h": h0.astype(np.float64), "input_c": c0}, "input_h must have dtype float32 .*, got float64"),
        ("gru", {"input_h": h0, "input_c": c0}, "a gru model has none"),
        ("bi", {"output_h": bi_h0, "output_c": bi_c0}, "cannot seed a bidirectional model's next chunk"),
    ]
    for i, (mode, arrays, match) in enumerate(states):
        np.savez(tmp_path / f"s{i}.npz", **arrays)
        assert cli.main(["infer", str(tmp_path / f"{mode}.npz"), str(tmp_path / "x.npy"), "--state",
                         str(tmp_path / f"s{i}.npz")]) == 2, arrays.keys()
        assert re.search(match, capsys.readouterr().err), match
    assert cli.main(["infer", str(tmp_path / "lstm.npz"), str(tmp_path / "x.npy"), "--state", str(tmp_path / "h.npy")]) == 2
    assert "not a single array" in capsys.readouterr().err
    np.savez(tmp_path / "bi_state.npz", input_h=bi_h0, input_c=bi_c0)  # initial states are fine
    np.save(tmp_path / "bi_x.npy", bi_case.x)
    assert cli.main(["infer", str(tmp_path / "bi.npz"), str(tmp_path / "bi_x.npy"), "--state", str(tmp_path / "bi_state.npz"),
                     "--out", str(tmp_path / "bi_y.npz")]) == 0
    with np.load(tmp_path / "bi_y.npz", allow_pickle=False) as y:
        got = Outputs(y["output"], y["output_h"], y["output_c"])
    assert_agree_within_policy(bi, bi_case, got, run_reference(bi, bi_case))
    assert not list(tmp_path.glob("x_output*")), "a refused state must not leave an output behind"


def test_a_foreign_torch_file_needs_only_the_mode(tmp_path):
    cfg = RNNConfig("tanh", num_layers=2, num_units=4, input_size=3, dtype="float32")
    case = make_case(cfg)
    state = torch_format.to_state_dict(cfg.model(), case.weights, case.biases)
    checkpoint.write_tensors(tmp_path / "sd.safetensors", state, None)  # as a PyTorch user would save it
    argv = ["convert", "--from", "torch", "--to", "checkpoint", str(tmp_path / "sd.safetensors"), str(tmp_path / "c.npz")]
    assert cli.main(argv) == 2  # relu or tanh? the weights cannot say
    assert cli.main(argv + ["--mode", "tanh"]) == 0
    assert repr(checkpoint.load(tmp_path / "c.npz").model) == repr(cfg.model())


@pytest.mark.parametrize(("fmt", "name"), [("torch", "w.safetensors"), ("torch", "w.pt"), ("keras", "w.npz"),
                                          ("keras", "w.keras"), ("keras", "w.weights.h5"), ("keras", "w.h5"),
                                          ("onnx", "w.onnx"), ("tf", "w"), ("tf", "w.index"),
                                          ("checkpoint", "w.safetensors")],
                         ids=lambda v: v)
def test_infer_runs_weights_of_every_format_directly(fmt, name, tmp_path, capsys):
    """``rnn-compat infer --from FORMAT`` runs a file of any format as ``convert`` would read it: the same
    outputs, bit for bit, as the checkpoint it was written from, and the reference's within the policy; and
    so does ``infer`` without ``--from``, which tells the format from the file."""
    if "keras" in name or name.endswith(".h5"):
        pytest.importorskip("h5py")
    cfg = RNNConfig("gru", num_layers=2, num_units=4, input_size=3, direction="bidirectional", dtype="float32")
    case = make_case(cfg)
    checkpoint.save(tmp_path / "ours.npz", cfg.model(), case.weights, case.biases)
    np.save(tmp_path / "x.npy", case.x)
    np.savez(tmp_path / "h0.npz", input_h=case.h0)
    state = ["--state", str(tmp_path / "h0.npz")]
    written = tmp_path / name.removesuffix(".index")  # a bundle is written by its prefix, read by either
    assert cli.main(["convert", "--from", "checkpoint", "--to", fmt, str(tmp_path / "ours.npz"), str(written)]) == 0
    assert cli.main(["infer", str(tmp_path / "ours.npz"), str(tmp_path / "x.npy"), *state,
                     "--out", str(tmp_path / "want.npz")]) == 0
    for told in (["--from", fmt], []):
        assert cli.main(["infer", *told, str(tmp_path / name), str(tmp_path / "x.npy"), *state,
                         "--out", str(tmp_path / "got.npz"), "--force"]) == 0, (told, capsys.readouterr().err)
        with np.load(tmp_path / "want.npz", allow_pickle=False) as want, \
                np.load(tmp_path / "got.npz", allow_pickle=False) as got:
            assert sorted(got) == sorted(want) == ["layout", "output", "output_h"]  # layout: time_major
            for key in want:
                assert got[key].dtype == want[key].dtype and got[key].tobytes() == want[key].tobytes(), (told, key)
            assert_agree_within_policy(cfg, case, Outputs(got["output"], got["output_h"], None),
                                       run_reference(cfg, case))
    capsys.readouterr()
    assert cli.main(["convert", "--to", "checkpoint", str(tmp_path / name), str(tmp_path / "back.npz")]) == 0
    assert f"{tmp_path / name} ({fmt}) -> " in capsys.readouterr().out
    if fmt not in ("tf", "checkpoint"):
        assert cli.main(["infer", "--from", fmt, str(tmp_path / name), str(tmp_path / "x.npy"), "--scope", "rnn"]) == 2
        assert f"--scope applies to TF-named files (--from tf or checkpoint), not to --from {fmt}" in capsys.readouterr().err


def test_the_format_is_told_by_the_files_names_and_contents(tmp_path, capsys):
    """``detect`` (``--from auto``, the default) reads a tensor file's names, not its data: a whole model's
    state_dict is torch, TF names are checkpoint; a file it cannot tell is left to the checkpoint reader, which
    names what is wrong with it."""
    from compat_tests.interop import convert

    cfg = RNNConfig("tanh", num_units=4, input_size=3, dtype="float32")
    case, model = make_case(cfg), cfg.model()
    state = torch_format.to_state_dict(model, case.weights, case.biases)
    checkpoint.write_tensors(tmp_path / "net.npz", {"embed.weight": np.ones((3, 2), np.float32),
                                                    **{f"encoder.rnn.{k}": v for k, v in state.items()}}, None)
    checkpoint.write_tensors(tmp_path / "tf.safetensors", tf.to_tf(model, case.weights, case.biases), None)
    (tmp_path / "odd.npz").write_bytes(b"PK\x03\x04 not a zip")
    (tmp_path / "odd.dat").write_bytes(b"weights")
    for name, fmt in [("net.npz", "torch"), ("tf.safetensors", "checkpoint"), ("odd.npz", "checkpoint"),
                      ("odd.dat", "checkpoint")]:
        assert convert.detect(tmp_path / name) == fmt, name
    read = convert.read("auto", tmp_path / "net.npz", {"rnn_mode": "tanh"})
    assert repr(read.model) == repr(model)
    for name, message in [("odd.npz", "odd.npz: not a readable NumPy file (BadZipFile"),
                          ("odd.dat", "odd.dat: unknown checkpoint type")]:
        assert cli.main(["infer", str(tmp_path / name), str(tmp_path / "x.npy")]) == 2
        assert message in capsys.readouterr().err, name


def test_infer_takes_what_a_foreign_file_cannot_tell_and_refuses_what_it_contradicts(tmp_path, capsys):
    """A TF-named relu or tanh file without our config cannot say which: ``infer --mode`` says it (and runs
    that cell); an option the file's names and shapes contradict is refused naming both."""
    cfg = RNNConfig("relu", num_units=4, input_size=3, dtype="float64")
    case = make_case(cfg)
    checkpoint.write_tensors(tmp_path / "foreign.npz", tf.to_tf(cfg.model(), case.weights, case.biases), None)
    np.save(tmp_path / "x.npy", case.x)
    np.savez(tmp_path / "h0.npz", input_h=case.h0)
    argv = ["infer", str(tmp_path / "foreign.npz"), str(tmp_path / "x.npy"), "--state", str(tmp_path / "h0.npz")]
    assert cli.main(argv + ["--out", str(tmp_path / "y.npz")]) == 2
    assert "relu and tanh RNNs have the same weights (basic_rnn_cell): say which" in capsys.readouterr().err
    for mode in ("relu", "tanh"):
        assert cli.main(argv + ["--mode", mode, "--out", str(tmp_path / f"{mode}.npz")]) == 0
        run = dataclasses.replace(cfg, mode=mode)
        with np.load(tmp_path / f"{mode}.npz", allow_pickle=False) as y:
            assert_agree_within_policy(run, case, Outputs(y["output"], y["output_h"], None), run_reference(run, case))
    with np.load(tmp_path / "relu.npz", allow_pickle=False) as relu, np.load(tmp_path / "tanh.npz", allow_pickle=False) as tanh:
        assert not np.allclose(relu["output"], tanh["output"]), "the two modes must differ on this case"
    assert cli.main(argv + ["--mode", "relu", "--num-units", "5"]) == 2
    assert "disagrees with the options given: num_units is 4, not 5" in capsys.readouterr().err
    checkpoint.save(tmp_path / "ours.npz", cfg.model(), case.weights, case.biases)
    assert cli.main(["infer", str(tmp_path / "ours.npz"), str(tmp_path / "x.npy"), "--mode", "tanh"]) == 2
    assert "disagrees with the options given: rnn_mode is 'relu', not 'tanh'" in capsys.readouterr().err


def test_convert_refuses_what_the_target_cannot_hold(tmp_path):
    cfg = RNNConfig("lstm", num_units=4, input_size=3, num_proj=2, dtype="float32")
    case = make_case(cfg)
    checkpoint.save(tmp_path / "p.npz", cfg.model(), case.weights, case.biases)
    for target, name in (("keras", "k.npz"), ("onnx", "p.onnx")):
        assert cli.main(["convert", "--from", "checkpoint", "--to", target, str(tmp_path / "p.npz"),
                         str(tmp_path / name)]) == 2


def _tf_named_without_config(path, model, case) -> None:
    checkpoint.write_tensors(path, tf.to_tf(model, case.weights, case.biases), None)


# Each writes a 1-layer tanh (num_units 4, input_size 3) as a file of its format, with or without our config.
OPTION_SOURCES = {
    "checkpoint": lambda p, m, c: checkpoint.save(p / "w.npz", m, c.weights, c.biases) or p / "w.npz",
    "tf-named-foreign": lambda p, m, c: _tf_named_without_config(p / "w.npz", m, c) or p / "w.npz",
    "torch": lambda p, m, c: _write("torch", p / "w.npz", m, c),
    "torch-pt": lambda p, m, c: _write("torch", p / "w.pt", m, c),  # torch.save's format, with our config
    "torch-foreign": lambda p, m, c: checkpoint.write_tensors(
        p / "w.npz", torch_format.to_state_dict(m, c.weights, c.biases), None) or p / "w.npz",
    "keras": lambda p, m, c: _write("keras", p / "w.npz", m, c),
    "onnx": lambda p, m, c: _write("onnx", p / "w.onnx", m, c),
    "onnx-foreign": lambda p, m, c: _write("onnx", p / "w.onnx", m, c, foreign=True),
}


def _write(fmt, path, model, case, foreign=False):
    from compat_tests.interop import convert, onnx_model

    convert.write(fmt, path, model, case.weights, case.biases)
    if foreign:  # without our config: what the nodes tell
        import onnx

        proto = onnx.load(str(path))
        del proto.metadata_props[:]
        path.write_bytes(proto.SerializeToString())
        assert onnx_model.META_KEY not in str(proto.metadata_props)
    return path


@pytest.mark.parametrize("source", OPTION_SOURCES)
def test_convert_options_must_agree_with_what_the_file_carries_or_tells(source, tmp_path, capsys):
    """An option can only mislabel a file's tensors where the file says otherwise (its config, or its
    names and shapes): ``--num-units 7`` or ``--mode relu`` for a file of a 4-unit tanh is refused naming
    both, whatever the format; options that agree (or tell relu from tanh) are accepted."""
    cfg = RNNConfig("tanh", num_units=4, input_size=3, dtype="float32")
    case, model = make_case(cfg), cfg.model()
    path = OPTION_SOURCES[source](tmp_path, model, case)
    fmt = source.split("-")[0] if source != "tf-named-foreign" else "checkpoint"
    argv = ["convert", "--from", fmt, "--to", "checkpoint", str(path), str(tmp_path / "out.npz")]
    mode = ["--mode", "tanh"]  # a foreign file cannot tell tanh from relu
    assert cli.main(argv + mode + ["--num-units", "7"]) == 2
    assert "which disagrees with the options given: num_units is 4, not 7" in capsys.readouterr().err
    if "foreign" not in source:
        assert cli.main(argv + ["--mode", "relu"]) == 2
        assert "rnn_mode is 'tanh', not 'relu'" in capsys.readouterr().err
    assert cli.main(argv + mode + ["--num-units", "4", "--dtype", "float32"]) == 0, capsys.readouterr().err
    assert repr(checkpoint.load(tmp_path / "out.npz").model) == repr(model)


def test_a_foreign_onnx_graph_may_be_told_it_is_skip_input(tmp_path):
    """What a foreign graph cannot tell (skip_input behind identity W) an option may."""
    from compat_tests.interop import convert

    cfg = RNNConfig("gru", num_units=3, input_size=3, input_mode="skip_input", dtype="float32")
    case, model = make_case(cfg), cfg.model()
    path = _write("onnx", tmp_path / "w.onnx", model, case, foreign=True)
    assert convert.read("onnx", path).model.input_mode == "linear_input"
    read = convert.read("onnx", path, {"input_mode": "skip_input"})
    assert repr(read.model) == repr(model)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(read.weights + read.biases, case.weights + case.biases,
                                                          strict=True))


def test_a_keras_file_with_more_layers_than_its_model_is_refused(tmp_path, capsys):
    cfg = RNNConfig("lstm", num_layers=3, num_units=4, input_size=4, dtype="float32")
    case = make_case(cfg)
    tensors = {f"layer{k}/{n}": a for k, layer in enumerate(keras_format.to_keras(cfg.model(), case.weights, case.biases))
               for n, a in zip(("kernel", "recurrent_kernel", "bias"), layer)}
    checkpoint.write_tensors(tmp_path / "k.npz", tensors, None)  # a foreign Keras file: options give the config
    argv = ["convert", "--from", "keras", "--to", "checkpoint", str(tmp_path / "k.npz"), str(tmp_path / "c.npz"),
            "--mode", "lstm", "--num-units", "4", "--input-size", "4", "--dtype", "float32"]
    assert cli.main(argv + ["--num-layers", "1"]) == 2
    assert "does not: ['layer1/bias', 'layer1/kernel', 'layer1/recurrent_kernel'] ..." in capsys.readouterr().err
    assert cli.main(argv + ["--num-layers", "3"]) == 0


def test_convert_keeps_a_tf_named_source_s_scope_unless_told_another(tmp_path, capsys):
    """A TF graph built under ``main/`` restores only ``main/rnn/...`` names: converting its checkpoint to
    a TF bundle (or another checkpoint) keeps them; ``--out-scope`` sets another, ``''`` none."""
    cfg = RNNConfig("gru", num_units=4, input_size=3, dtype="float32")
    case, model = make_case(cfg), cfg.model()
    checkpoint.save(tmp_path / "s.npz", model, case.weights, case.biases, scope="main")
    def convert(target: str, out: str, *extra: str) -> int:
        return cli.main(["convert", "--from", "checkpoint", "--to", target, str(tmp_path / "s.npz"), str(tmp_path / out),
                         "--force", *extra])

    for out_scope, scope in ((None, "main"), ("other", "other"), ("", None)):
        extra = [] if out_scope is None else ["--out-scope", out_scope]
        assert convert("tf", "b", *extra) == 0
        names = set(tf_bundle.open_bundle(tmp_path / "b").entries)
        assert names == set(tf.to_tf(model, case.weights, case.biases, scope)), (out_scope, sorted(names)[:1])
        assert convert("checkpoint", "c.npz", *extra) == 0
        assert checkpoint.load(tmp_path / "c.npz").config["scope"] == scope
    assert convert("torch", "t.npz", "--out-scope", "x") == 2
    assert "--out-scope applies to TF-named files" in capsys.readouterr().err


def test_a_file_written_into_a_missing_folder_is_named_in_the_error(tmp_path, capsys):
    cfg = RNNConfig("gru", num_units=4, input_size=3, dtype="float32")
    case = make_case(cfg)
    checkpoint.save(tmp_path / "s.npz", cfg.model(), case.weights, case.biases)
    target = tmp_path / "nowhere" / "t.npz"
    assert cli.main(["convert", "--from", "checkpoint", "--to", "torch", str(tmp_path / "s.npz"), str(target)]) == 2
    err = capsys.readouterr().err
    assert f"cannot write {target}: there is no folder {target.parent}" in err and ".partial" not in err


def test_infer_with_tf32_math_runs_the_models_tf32_forward_and_refuses_other_dtypes(tmp_path, capsys):
    """``--math tf32`` writes what ``reference.CudnnLSTM(..., math_type="tf32")`` computes (another output than the
    FMA run's); a float64 checkpoint, or a chain, is refused naming ``--math``."""
    import reference

    cfg = RNNConfig("lstm", 2, 8, 3, seq_len=20, batch=2, dtype="float32")
    case = make_case(cfg)
    model = cfg.model()
    checkpoint.save(tmp_path / "m.safetensors", model, case.weights, case.biases)
    np.save(tmp_path / "x.npy", case.x)
    outputs = {}
    for math in ("fma", "tf32"):
        assert cli.main(["infer", str(tmp_path / "m.safetensors"), str(tmp_path / "x.npy"), "--math", math, "--out",
                         str(tmp_path / f"{math}.npz")]) == 0
        with np.load(tmp_path / f"{math}.npz") as held:
            outputs[math] = held["output"]
    tf32_model = reference.CudnnLSTM(2, 8, 3, math_type="tf32")
    want = tf32_model.forward(case.x, None, tf32_model.canonical_to_params(case.weights, case.biases),
                              is_training=False).output
    assert np.array_equal(outputs["tf32"], want) and not np.array_equal(outputs["tf32"], outputs["fma"])
    wide = cfg.with_(dtype="float64")
    checkpoint.save(tmp_path / "w.safetensors", wide.model(), *make_case(wide)[:2])
    np.save(tmp_path / "x64.npy", make_case(wide).x)
    capsys.readouterr()
    assert cli.main(["infer", str(tmp_path / "w.safetensors"), str(tmp_path / "x64.npy"), "--math", "tf32"]) == 2
    assert "--math tf32 applies to float32 models" in capsys.readouterr().err
