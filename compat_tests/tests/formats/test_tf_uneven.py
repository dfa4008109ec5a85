"""A TensorFlow 1 ``MultiRNNCell`` whose cells differ in size is not one cuDNN stack: it is refused saying how its
layers differ; one layer is read alone (``--layer N``); and the stack runs as a chain of one-layer models, each
with its own states (``reference.chain``, ``rnn-compat infer``), computing what TensorFlow computed.

``compat_tests/data/tf_uneven/`` (``scripts/make_tf_uneven_fixtures.py``): ``GRUCell(6) -> GRUCell(4) ->
GRUCell(3)``, saved by ``tf.compat.v1.train.Saver`` and run by ``tf.compat.v1.nn.dynamic_rnn``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from compat_tests import cli
from compat_tests.interop import convert
from compat_tests.judge.metrics import tf32_share
from reference import spec
from reference.chain import Chain, load_chain

DATA = Path(__file__).resolve().parents[2] / "data" / "tf_uneven"


PROVENANCE = json.loads((DATA / "provenance.json").read_text())


PREFIX = DATA / PROVENANCE["prefix"]


ATOL = 2e-6  # float32, a few steps of three small layers (the differences seen are ~1.6e-7)


def expected() -> dict[str, np.ndarray]:
    with np.load(DATA / "expected.npz", allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def test_a_stack_of_layers_of_several_sizes_is_refused_saying_how_they_differ(capsys, tmp_path):
    with pytest.raises(ValueError) as refused:
        convert.read("auto", PREFIX)
    message = str(refused.value)
    for part in ("3 layers differ in size", "layer 0: 6 units on 3 inputs", "layer 1: 4 units on 6 inputs",
                 "layer 2: 3 units on 4 inputs", "--layer N", "chain"):
        assert part in message, message
    assert cli.main(["convert", str(PREFIX), "--to", "checkpoint", str(tmp_path / "ck.npz")]) == 2
    assert "differ in size" in capsys.readouterr().err


def test_each_layer_read_alone_and_chained_computes_what_tensorflow_did():
    want = expected()
    layers = [convert.read("auto", PREFIX, {"layer": k}) for k in range(len(PROVENANCE["sizes"]))]
    assert [(r.model.num_units, r.model.input_size, r.model.rnn_mode) for r in layers] == \
        [(6, 3, "classic_gru"), (4, 6, "classic_gru"), (3, 4, "classic_gru")]
    result = Chain(layers).forward(want["x"])
    np.testing.assert_allclose(result.output, want["output"], atol=ATOL)
    for k, h in enumerate(result.output_h):
        np.testing.assert_allclose(h[0], want[f"output_h_{k}"], atol=ATOL)
    chain = load_chain(PREFIX)  # the Python API: the whole checkpoint as its chain
    assert [m.num_units for m in chain.models] == PROVENANCE["sizes"]
    assert chain.forward(want["x"]).output.tobytes() == result.output.tobytes()
    with pytest.raises(ValueError, match="has no layer 3"):
        convert.read("auto", PREFIX, {"layer": 3})


def test_infer_runs_the_stack_as_a_chain_with_states_per_layer(tmp_path, capsys):
    want = expected()
    np.save(tmp_path / "x.npy", want["x"])
    assert cli.main(["infer", str(PREFIX), str(tmp_path / "x.npy"), "--out", str(tmp_path / "y.npz")]) == 0
    with np.load(tmp_path / "y.npz", allow_pickle=False) as y:
        np.testing.assert_allclose(y["output"], want["output"], atol=ATOL)
        for k in range(3):
            np.testing.assert_allclose(y[f"output_h_{k}"][0], want[f"output_h_{k}"], atol=ATOL)
    assert cli.main(["infer", str(PREFIX), str(tmp_path / "x.npy"), "--layer", "0", "--out",
                     str(tmp_path / "first.npz")]) == 0
    with np.load(tmp_path / "first.npz", allow_pickle=False) as y:
        np.testing.assert_allclose(y["output_h"][0], want["output_h_0"], atol=ATOL)


def test_infer_runs_a_chain_in_chunks_from_each_layers_state(tmp_path, capsys):
    """``--state`` of a chain: a state per layer (``input_h_0``, ``input_h_1``, ...; or an earlier ``--out``'s
    ``output_h_K``): the sequence run in two chunks, the second from the first's final states, is the sequence
    run at once; a file without a layer's state, or with one of the wrong shape, is refused naming it, before
    any output is written."""
    want = expected()
    x = want["x"]
    np.save(tmp_path / "x1.npy", x[:2])
    np.save(tmp_path / "x2.npy", x[2:])
    infer = ["infer", str(PREFIX)]
    sizes = PROVENANCE["sizes"]
    B = x.shape[1]
    np.savez(tmp_path / "s0.npz", **{f"input_h_{k}": np.zeros((1, B, h), np.float32) for k, h in enumerate(sizes)})
    assert cli.main(infer + [str(tmp_path / "x1.npy"), "--state", str(tmp_path / "s0.npz"), "--out",
                             str(tmp_path / "y1.npz")]) == 0
    assert cli.main(infer + [str(tmp_path / "x2.npy"), "--state", str(tmp_path / "y1.npz"), "--out",
                             str(tmp_path / "y2.npz")]) == 0
    whole = load_chain(PREFIX).forward(x)
    with np.load(tmp_path / "y1.npz", allow_pickle=False) as y1, np.load(tmp_path / "y2.npz", allow_pickle=False) as y2:
        np.testing.assert_allclose(np.concatenate([y1["output"], y2["output"]]), whole.output, atol=ATOL)
        for k in range(len(sizes)):
            np.testing.assert_allclose(y2[f"output_h_{k}"], whole.output_h[k], atol=ATOL)
    states = [({"input_h_0": np.zeros((1, B, 6), np.float32)}, r"holds no input_h_1 \(or output_h_1\)"),
              ({f"input_h_{k}": np.zeros((1, B, 6), np.float32) for k in range(3)},
               r"initial_h\[1\] must have shape \[D, B, H\] = \(1, 2, 4\), got \(1, 2, 6\)"),
              ({"input_h": np.zeros((1, B, 6), np.float32)}, r"holds \['input_h'\]; expected input_h_K")]
    for i, (arrays, match) in enumerate(states):
        np.savez(tmp_path / f"bad{i}.npz", **arrays)
        assert cli.main(infer + [str(tmp_path / "x1.npy"), "--state", str(tmp_path / f"bad{i}.npz"), "--out",
                                 str(tmp_path / f"z{i}.npz")]) == 2
        err = capsys.readouterr().err
        assert f"--state {tmp_path / f'bad{i}.npz'}" in err and re.search(match, err), (match, err)
        assert not (tmp_path / f"z{i}.npz").exists()


def test_a_layer_number_applies_to_tf_named_files_only(tmp_path):
    from compat_tests.config import RNNConfig, make_case

    cfg = RNNConfig("gru", num_units=3, input_size=2)
    case = make_case(cfg)
    convert.write("torch", tmp_path / "sd.safetensors", cfg.model(), case.weights, case.biases)
    with pytest.raises(ValueError, match="a layer number applies to TF-named files"):
        convert.read("auto", tmp_path / "sd.safetensors", {"layer": 0})
    convert.write("checkpoint", tmp_path / "ck.npz", cfg.model(), case.weights, case.biases)
    with pytest.raises(ValueError, match="this file carries its config"):
        convert.read("auto", tmp_path / "ck.npz", {"layer": 0})


def test_infer_runs_a_chain_under_tf32_math_as_a_gpu_would(tmp_path, capsys):
    """``--math tf32`` on a chain: every layer's GEMMs on TF32 operands, so the output follows the TF32 truth of
    the chained layers (the spec's, layer after layer) and not the FMA one."""
    want = expected()
    np.save(tmp_path / "x.npy", want["x"])
    assert cli.main(["infer", str(PREFIX), str(tmp_path / "x.npy"), "--math", "tf32", "--out",
                     str(tmp_path / "y.npz")]) == 0
    chain = convert.read_chain("auto", PREFIX, {})
    truths = {}
    for math_type in ("fma", "tf32"):
        x = want["x"].astype(np.float64)
        for layer in chain.layers:
            x = spec.forward(spec.Network.of(layer.model), [w.astype(np.float64) for w in layer.weights],
                             [b.astype(np.float64) for b in layer.biases], x, math_type=math_type).output
        truths[math_type] = x
    with np.load(tmp_path / "y.npz", allow_pickle=False) as y:
        share = tf32_share(y["output"], truths["fma"], truths["tf32"], 0.0)
    assert share is not None and share < 0.05, share
