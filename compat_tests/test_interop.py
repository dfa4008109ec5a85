"""Weights in and out: TF checkpoints and cells, safetensors/npz files, PyTorch, Keras 3 and ONNX
converters (each verified by running that framework), the command line, and bad or foreign files."""

from __future__ import annotations

import dataclasses
import io
import json
import pickle
import re
import struct
import warnings
import zipfile

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compat_tests import cli
from compat_tests.compare import assert_agree_within_policy
from compat_tests.conditioning import sensitivity
from compat_tests.config import Outputs, RNNConfig, make_case
from compat_tests.run import run_reference
from compat_tests.conftest import Killed
from compat_tests.metrics import error_stats
from compat_tests.peers import PEERS
from compat_tests.peers.keras_peer import import_keras, keras_layers
from compat_tests.strategies import damaged, rnn_configs
from compat_tests.tolerances import judge
from reference import checkpoint
from reference.cells import cells_from_tf, run_cells
from reference.formats import keras as keras_format
from reference.formats import onnx as onnx_format
from reference.formats import safetensors, tf, tf_bundle
from reference.formats import torch as torch_format

SMALL = dict(max_layers=2, max_units=5, max_input=4, max_time=5, max_batch=3)


def bias_sums(model, biases):
    """Per pseudo-layer and gate, b_W + b_R (b_R alone where b_W does not exist): what TF saves."""
    w_regions, b_regions = model.canonical_regions()
    by = {(r.pseudo_layer, r.lin_layer_id): b for r, b in zip(b_regions, biases)}
    G = len(model.gates)
    return [by.get((pl, g), 0) + by[(pl, G + g)] for pl in range(model.num_layers * model.num_dirs) for g in range(G)]


# ---- TF checkpoints and cells -----------------------------------------------------------------------


@given(cfg=rnn_configs(dtypes_=("float32", "float64"), **SMALL), suffix=st.sampled_from([".safetensors", ".npz"]))
def test_checkpoint_round_trip(cfg, suffix, tmp_path_factory):
    """Weights come back bit for bit; summed biases come back as halves whose sums are bit-exact."""
    case, model = make_case(cfg), cfg.model()
    path = tmp_path_factory.mktemp("ck") / f"model{suffix}"
    checkpoint.save(path, model, case.weights, case.biases)
    ck = checkpoint.load(path)
    assert repr(ck.model) == repr(model)
    for got, sent in zip(ck.weights, case.weights):
        assert got.tobytes() == sent.tobytes()
    for got, sent in zip(bias_sums(model, ck.biases), bias_sums(model, case.biases)):
        assert np.asarray(got).tobytes() == np.asarray(sent).tobytes()
    restored = run_reference(cfg, case._replace(weights=ck.weights, biases=ck.biases))
    assert_agree_within_policy(cfg, case, restored, run_reference(cfg, case))


def test_tf_names_follow_the_saveable():
    lstm = RNNConfig("lstm", num_layers=2, num_units=4, input_size=3, direction="bidirectional", num_proj=2).model()
    names = tf.expected_shapes(lstm)
    assert names["stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/cudnn_compatible_lstm_cell/kernel"] == (5, 16)
    assert names["stack_bidirectional_rnn/cell_1/bidirectional_rnn/bw/cudnn_compatible_lstm_cell/kernel"] == (6, 16)
    assert names["stack_bidirectional_rnn/cell_1/bidirectional_rnn/bw/cudnn_compatible_lstm_cell/projection/kernel"] \
        == (4, 2)
    gru = RNNConfig("gru", num_layers=1, num_units=4, input_size=3).model()
    assert sorted(tf.expected_shapes(gru, scope="main").items()) == [
        ("main/rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/candidate/hidden_projection/bias", (4,)),
        ("main/rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/candidate/hidden_projection/kernel", (4, 4)),
        ("main/rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/candidate/input_projection/bias", (4,)),
        ("main/rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/candidate/input_projection/kernel", (3, 4)),
        ("main/rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/gates/bias", (8,)),
        ("main/rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/gates/kernel", (7, 8)),
    ]


def test_tf_lstm_columns_are_icfo_and_gru_candidate_biases_stay_apart():
    cfg = RNNConfig("lstm", num_units=2, input_size=1)
    model, case = cfg.model(), make_case(cfg)
    p = tf.cell_prefix(model, 0)
    kernel = tf.to_tf(model, case.weights, case.biases)[f"{p}/kernel"]
    # canonical weights[g] is gate g's input row block (i, f, c, o); TF's columns are i, c, f, o
    for column, gate in enumerate((0, 2, 1, 3)):
        np.testing.assert_array_equal(kernel[:1, column * 2:(column + 1) * 2], case.weights[gate].T)
    gru = RNNConfig("gru", num_units=2, input_size=1)
    gmodel, gcase = gru.model(), make_case(gru)
    t = tf.to_tf(gmodel, gcase.weights, gcase.biases)
    gp = tf.cell_prefix(gmodel, 0)
    np.testing.assert_array_equal(t[f"{gp}/candidate/input_projection/bias"], gcase.biases[2])
    np.testing.assert_array_equal(t[f"{gp}/candidate/hidden_projection/bias"], gcase.biases[5])


@given(cfg=rnn_configs(dtypes_=("float16", "float32", "float64")))
def test_compatible_cells_equal_the_fused_reference(cfg):
    case, model = make_case(cfg), cfg.model()
    cells = cells_from_tf(model, tf.to_tf(model, case.weights, case.biases))
    got = Outputs(*run_cells(cells, model.num_dirs, case.x, case.h0, case.c0, case.lengths, cfg.time_major))
    assert_agree_within_policy(cfg, case, got, run_reference(cfg, case))


def test_cells_round_each_float16_layer_output_like_the_fused_reference():
    """A float16 stack stores each layer's output in float16 (``reference.precision``); here the second layer
    amplifies that rounding a thousandfold. Every product and sum below is exact in float32, so the expected
    value does not depend on the order of any GEMM."""
    model = RNNConfig("relu", num_layers=2, num_units=1, input_size=1, dtype="float16").model()
    f16, f32 = np.float16, np.float32
    weights = [np.full((1, 1), v, f16) for v in (0.1, 0.0, 1000.0, 0.0)]  # W0, R0, W1, R1
    biases = [np.full(1, v, f16) for v in (0.0, 0.0, -29.98, 0.0)]  # b_W0, b_R0, b_W1, b_R1
    x = np.full((1, 1, 1), 0.3, f16)
    layer0 = f16(max(f32(weights[0][0, 0]) * f32(x[0, 0, 0]), 0))  # stored in float16 between the layers
    expected = f16(max(f32(weights[2][0, 0]) * f32(layer0) + f32(biases[2][0]), 0))
    unrounded = f16(max(f32(weights[2][0, 0]) * (f32(weights[0][0, 0]) * f32(x[0, 0, 0])) + f32(biases[2][0]), 0))
    assert expected != unrounded, "the rounding between the layers must show in the output for this test to mean anything"
    fused, _ = model(x, None, model.canonical_to_params(weights, biases))
    cells = cells_from_tf(model, tf.to_tf(model, weights, biases))
    stepped, _, _ = run_cells(cells, model.num_dirs, x)
    assert fused[0, 0, 0] == stepped[0, 0, 0] == expected, (fused, stepped, expected)


@pytest.mark.parametrize(("mode", "tensor", "change", "match"), [
    ("gru", "candidate/input_projection/bias", lambda b: b + 0.5, "input_projection/bias must be zero with skip_input"),
    ("gru", "candidate/input_projection/kernel", lambda k: 2 * k, "gate 'h' is not the identity"),
    ("gru", "gates/kernel", lambda k: np.concatenate([k[:2][:, ::-1], k[2:]]), "gate 'r' is not the identity"),
    ("lstm", "kernel", lambda k: np.concatenate([k[:2] * 0, k[2:]]), "gate 'i' is not the identity"),
])
def test_a_skip_input_tf_checkpoint_the_layout_cannot_hold_is_refused(mode, tensor, change, match):
    """With skip_input, cuDNN has no input matrices or input biases in layer 0: a TF checkpoint whose input
    kernels are not the identity, or whose GRU candidate has an input bias (it would land inside
    ``r * (...)``), computes something else, so it is refused rather than silently changed."""
    cfg = RNNConfig(mode, num_units=2, input_size=2, input_mode="skip_input", dtype="float64")
    model, case = cfg.model(), make_case(cfg)
    tensors = tf.to_tf(model, case.weights, case.biases)
    tf.from_tf(model, tensors)  # as written: accepted
    name = f"{tf.cell_prefix(model, 0)}/{tensor}"
    tensors[name] = change(tensors[name])
    with pytest.raises(ValueError, match=re.escape(match)):
        tf.from_tf(model, tensors)


@pytest.mark.parametrize("change", ["W", "B"])
def test_a_skip_input_onnx_model_the_layout_cannot_hold_is_refused(change):
    """ONNX always has input matrices: with skip_input they must be the identity and the input biases zero."""
    cfg = RNNConfig("gru", num_units=2, input_size=2, input_mode="skip_input", dtype="float32")
    model, case = cfg.model(), make_case(cfg)
    (layer,) = onnx_format.to_onnx(model, case.weights, case.biases)
    onnx_format.from_onnx(model, [layer])  # as written: accepted
    layer = dict(layer)
    layer[change] = layer[change].copy()
    layer[change].reshape(-1)[1] += 0.5  # W: off the identity's diagonal; B: an input bias
    with pytest.raises(ValueError, match="skip_input needs identity input matrices and zero input biases"):
        onnx_format.from_onnx(model, [layer])


def test_cells_speak_tensorflows_call_convention():
    from reference.cells import CudnnCompatibleLSTMCell

    cfg = RNNConfig("lstm", num_units=3, input_size=2, seq_len=1, batch=2, dtype="float64")
    case, model = make_case(cfg), cfg.model()
    (cell,) = cells_from_tf(model, tf.to_tf(model, case.weights, case.biases))
    assert isinstance(cell, CudnnCompatibleLSTMCell)
    out, (c, h) = cell(case.x[0], (case.c0[0], case.h0[0]))
    ref = run_reference(cfg, case)
    np.testing.assert_array_equal(out, h)
    assert_agree_within_policy(cfg, case, Outputs(out[None], h[None], c[None]), ref)


@given(cfg=rnn_configs(dtypes_=("float16", "float32", "float64"), **SMALL),
       scope=st.sampled_from([None, "main", "outer/inner"]))
def test_tf_names_and_shapes_tell_the_config(cfg, scope):
    """What a file of TF-named tensors without our config restores as: the model that saved it (skip_input
    comes back as linear_input, whose saved identity input matrices compute the same function)."""
    model = cfg.model()
    meta = {n: (model.dtype.name, shape) for n, shape in tf.expected_shapes(model, scope).items()}
    meta |= {"global_step": ("int64", ()), f"{scope or 'x'}/opaque_kernel/Adam": ("float32", (7,))}
    if cfg.mode in ("relu", "tanh"):
        with pytest.raises(ValueError, match="relu and tanh RNNs have the same weights"):
            tf.config_from_tf(meta)
    found = tf.config_from_tf(meta, cfg.mode if cfg.mode in ("relu", "tanh") else None)
    assert found.pop("scope") == scope
    want = {k: v for k, v in checkpoint.model_config(model).items() if k not in ("format", "version")}
    assert found == want | {"input_mode": "linear_input"}


def test_tf_names_under_several_scopes_need_one_named():
    gru, lstm = RNNConfig("gru", num_units=3, input_size=2).model(), RNNConfig("lstm", num_units=5, input_size=2).model()
    meta = {n: ("float64", shape) for n, shape in tf.expected_shapes(gru, "encoder").items()}
    meta |= {n: ("float64", shape) for n, shape in tf.expected_shapes(lstm, "decoder").items()}
    with pytest.raises(ValueError, match=r"RNN cells under several scopes \['decoder', 'encoder'\]: say which"):
        tf.config_from_tf(meta)
    assert tf.config_from_tf(meta, scope="decoder")["rnn_mode"] == "lstm"
    assert tf.config_from_tf(meta, scope="encoder")["num_units"] == 3
    with pytest.raises(ValueError, match="no TensorFlow RNN cell tensors"):
        tf.config_from_tf({"global_step": ("int64", ())})


def test_a_foreign_tf_named_file_loads_and_runs(tmp_path, capsys):
    cfg = RNNConfig("lstm", num_layers=2, num_units=4, input_size=3, num_proj=2, dtype="float32")
    case = make_case(cfg)
    model = cfg.model()
    tensors = tf.to_tf(model, case.weights, case.biases, "trained")
    checkpoint.write_tensors(tmp_path / "foreign.npz", tensors | {"global_step": np.array(7)}, None)  # no config
    ck = checkpoint.load(tmp_path / "foreign.npz")
    assert repr(ck.model) == repr(model) and ck.config["scope"] == "trained"
    assert np.array_equal(ck.params(), model.canonical_to_params(*tf.from_tf(model, tensors, "trained")))
    np.save(tmp_path / "x.npy", case.x)
    assert cli.main(["infer", str(tmp_path / "foreign.npz"), str(tmp_path / "x.npy"), "--out", str(tmp_path / "y.npy")]) == 0
    checkpoint.save(tmp_path / "ours.npz", model, case.weights, case.biases)
    assert cli.main(["convert", "--from", "checkpoint", "--to", "torch", str(tmp_path / "ours.npz"),
                     str(tmp_path / "t.npz"), "--mode", "gru", "--num-units", "4"]) == 2
    assert "disagrees with the options given: rnn_mode is 'lstm', not 'gru'" in capsys.readouterr().err


def test_cells_from_a_checkpoint_that_lacks_a_tensor_name_it():
    cfg = RNNConfig("gru", num_layers=2, num_units=3, input_size=2, dtype="float64")
    case, model = make_case(cfg), cfg.model()
    tensors = tf.to_tf(model, case.weights, case.biases)
    name = "rnn/multi_rnn_cell/cell_1/cudnn_compatible_gru_cell/candidate/hidden_projection/bias"
    del tensors[name]
    expected = f"CudnnCompatibleGRUCell needs tensor(s) the checkpoint lacks: ['{name}']"
    with pytest.raises(ValueError, match=re.escape(expected)):
        cells_from_tf(model, tensors)


# ---- files: safetensors, npz, and what must be refused -------------------------------------------------


def test_our_safetensors_files_interoperate_with_the_safetensors_package(tmp_path):
    st_numpy = pytest.importorskip("safetensors.numpy", reason="interop check against the safetensors package")
    tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b/c": np.ones(4, np.float16),
               "d": np.array(3.5, np.float64)}
    safetensors.save(tmp_path / "ours.safetensors", tensors, {"k": "v"})
    theirs = st_numpy.load_file(tmp_path / "ours.safetensors")
    assert set(theirs) == set(tensors) and all(np.array_equal(theirs[k], tensors[k]) for k in tensors)
    st_numpy.save_file(tensors, tmp_path / "theirs.safetensors", metadata={"k": "v"})
    mine, meta = safetensors.load(tmp_path / "theirs.safetensors")
    assert meta == {"k": "v"} and all(np.array_equal(mine[k], tensors[k]) for k in tensors)


def _file(header: bytes, data: bytes = b"") -> bytes:
    return struct.pack("<Q", len(header)) + header + data


@pytest.mark.parametrize(("blob", "match"), [
    (b"\x01\x02", "shorter than"),
    (struct.pack("<Q", 10**9) + b"{}", "exceeds the file"),
    (struct.pack("<Q", 1000) + b"{}", "exceeds the file"),  # below the header cap, beyond the file
    (_file(b"nope"), "not JSON"),
    (_file(b'{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'), "lies outside"),
    (_file(b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', bytes(7)), "lies outside"),  # 1 byte short
    (_file(b'{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', bytes(8)), "needs 12"),
    (_file(b'{"a":{"dtype":"X9","shape":[2],"data_offsets":[0,8]}}', bytes(8)), "malformed"),
    (_file(b'{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],'
           b'"data_offsets":[2,6]}}', bytes(6)), "overlap"),
    (_file(b'{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],'
           b'"data_offsets":[3,7]}}', bytes(7)), "overlap"),  # by one byte
    (_file(b'{"a":{"dtype":"U8","shape":"12","data_offsets":[0,2]}}', bytes(2)), "malformed shape"),
    (_file(b'{"a":{"dtype":"U8","shape":[true],"data_offsets":[0,1]}}', bytes(1)), "malformed shape"),
    (_file(b'{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}'), "needs"),
    (_file(b'{"a":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,0]}}'), "needs"),
    (_file(b'{"__metadata__":["x"]}'), "__metadata__"),
])
def test_malformed_safetensors_are_refused_with_a_reason(tmp_path, blob, match):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(blob)
    with pytest.raises(ValueError, match=match):
        safetensors.load(path)


@pytest.fixture
def gru_checkpoint(tmp_path):
    cfg = RNNConfig("gru", num_layers=2, num_units=4, input_size=3, direction="bidirectional", dtype="float32")
    case = make_case(cfg)
    path = tmp_path / "gru.safetensors"
    checkpoint.save(path, cfg.model(), case.weights, case.biases)
    return path, cfg


def _rewrite(path, change):
    tensors, config = checkpoint.read_tensors(path)
    change(tensors, config)
    checkpoint.write_tensors(path, tensors, config)


@pytest.mark.parametrize(("change", "error", "match"), [
    (lambda t, c: t.pop(next(k for k in sorted(t) if k.endswith("gates/kernel"))), ValueError,
     r"lacks .*gates/kernel'"),
    (lambda t, c: t.update({k: t[k][:, :-1] for k in t if k.endswith("cell_1/bidirectional_rnn/bw/"
                                                                       "cudnn_compatible_gru_cell/gates/kernel")}),
     ValueError, r"cell_1/bidirectional_rnn/bw/cudnn_compatible_gru_cell/gates/kernel' has shape"),
    (lambda t, c: t.update({k: v.astype(np.float64) for k, v in t.items() if k.endswith("gates/bias")}), TypeError,
     r"gates/bias' must be a float32 array"),
    (lambda t, c: t.update({"rnn/stray": np.zeros(2, np.float32)}), ValueError, "does not: \\['rnn/stray'\\]"),
    (lambda t, c: c.update(rnn_mode="lstm"), ValueError, "lacks .*cudnn_compatible_lstm_cell"),
    (lambda t, c: c.update(format="something-else"), ValueError, "not a cudnn-rnn-compat"),
    (lambda t, c: c.update(version=99), ValueError, "checkpoint version 99 is not supported"),
    (lambda t, c: c.update(rnn_mode="bogus"), ValueError, "Invalid rnn_mode: 'bogus', expecting one of"),
    (lambda t, c: c.update(num_proj=2), ValueError, "num_proj must be None for rnn_mode='gru'"),
    (lambda t, c: [c.pop("num_units"), c.pop("dtype")], ValueError, "config lacks 'num_units', 'dtype'"),
])
def test_bad_or_foreign_checkpoints_fail_naming_the_tensor(gru_checkpoint, change, error, match):
    path, _ = gru_checkpoint
    _rewrite(path, change)
    with pytest.raises(error, match=match):
        checkpoint.load(path)


def _foreign_gru():
    """A 2-layer bidirectional float32 GRU's weights in the three foreign formats."""
    cfg = RNNConfig("gru", num_layers=2, num_units=4, input_size=3, direction="bidirectional", dtype="float32")
    case, model = make_case(cfg), cfg.model()
    return model, {"torch": torch_format.to_state_dict(model, case.weights, case.biases),
                   "keras": keras_format.to_keras(model, case.weights, case.biases),
                   "onnx": onnx_format.to_onnx(model, case.weights, case.biases)}


READERS = {"torch": torch_format.from_state_dict, "keras": keras_format.from_keras, "onnx": onnx_format.from_onnx}


@pytest.mark.parametrize(("fmt", "change", "error", "match"), [
    ("torch", lambda w: w.pop("weight_hh_l1_reverse"), ValueError, r"lacks 'weight_hh_l1_reverse' \(expected shape"),
    ("torch", lambda w: w.update(bias_ih_l0=w["bias_ih_l0"][:-1]), ValueError, r"'bias_ih_l0' has shape \[11\]"),
    ("torch", lambda w: w.update(weight_ih_l1=w["weight_ih_l1"].astype(np.float64)), TypeError,
     r"'weight_ih_l1' must be a float32 array"),
    ("torch", lambda w: w.update(weight_ih_l2=w["weight_ih_l1"]), ValueError, r"does not: \['weight_ih_l2'\]"),
    ("keras", lambda w: w.pop(), ValueError, "has 4 Keras layers"),
    ("keras", lambda w: w.append(w[0]), ValueError, "has 4 Keras layers"),
    ("keras", lambda w: w[1].__delitem__(slice(1, None)), ValueError,
     r"layer 1: expecting \[kernel, recurrent_kernel, bias\] \(or, without bias, \[kernel, recurrent_kernel\]\), "
     r"got 1"),
    ("keras", lambda w: w[3].__setitem__(1, w[3][1][:, :8]), ValueError,
     r"layer 3 recurrent_kernel has shape \[4, 8\]"),
    ("keras", lambda w: w[0].__setitem__(2, w[0][2].astype(np.float16)), TypeError,
     "layer 0 bias must be a float32 array"),
    ("onnx", lambda w: w.append(w[0]), ValueError, "has 2 ONNX recurrent nodes, got 3"),
    ("onnx", lambda w: w[1].pop("R"), ValueError, r"layer 1 lacks R \(expected shape \[2, 12, 4\]\)"),
    ("onnx", lambda w: w[0].update(B=w[0]["B"][:1]), ValueError, r"layer 0 B has shape \[1, 24\], ONNX GRU"),
    ("onnx", lambda w: w[1].update(W=w[1]["W"].tolist()), TypeError, "layer 1 W must be a float32 array, got list"),
], ids=["torch-missing", "torch-wrong-shape", "torch-wrong-dtype", "torch-extra", "keras-layer-count",
        "keras-too-many-layers", "keras-weight-count", "keras-wrong-shape", "keras-wrong-dtype", "onnx-layer-count", "onnx-missing",
        "onnx-wrong-shape", "onnx-not-an-array"])
def test_bad_foreign_weights_fail_naming_the_tensor(fmt, change, error, match):
    model, weights = _foreign_gru()
    READERS[fmt](model, weights[fmt])  # as written: accepted
    change(weights[fmt])
    with pytest.raises(error, match=match):
        READERS[fmt](model, weights[fmt])


@pytest.mark.parametrize(("rows", "mode", "match"), [
    (8, None, "weight_hh_l0 has 8 rows for hidden size 4: not 1, 3 or 4 gates"),
    (4, None, "relu and tanh RNNs have the same weights"),
    (12, "lstm", "holds 3-gate cells, which cannot be a 'lstm' RNN"),
    (0, "gru", "weight_ih_l0 must be a non-empty matrix, got shape \\[0, 3\\]"),
])
def test_a_torch_state_dict_of_the_wrong_gate_count_is_refused(rows, mode, match):
    state = {"weight_ih_l0": np.zeros((rows, 3), np.float32), "weight_hh_l0": np.zeros((rows, 4 if rows else 0), np.float32)}
    with pytest.raises(ValueError, match=match):
        torch_format.config_from_state_dict(state, mode)


def test_a_config_that_is_not_an_object_is_refused(tmp_path):
    safetensors.save(tmp_path / "c.safetensors", {"a": np.zeros(1, np.float32)}, {checkpoint.CONFIG_KEY: "[1, 2]"})
    with pytest.raises(ValueError, match="must be a JSON object"):
        checkpoint.load(tmp_path / "c.safetensors")


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_restored_bias_halves_sum_to_the_saved_bias_exactly(dtype):
    finfo = np.finfo(dtype)
    saved = np.array([3 * finfo.smallest_subnormal, finfo.max, -finfo.tiny, 1 / 3, 0.0], dtype=dtype)
    a, b = tf.halves(saved)
    assert (a + b).tobytes() == saved.tobytes()


# Every format a file can come in, one file set each (the TF bundle is two files).
DAMAGEABLE = [("checkpoint", "gru.npz"), ("checkpoint", "gru.safetensors"), ("torch", "gru.npz"),
              ("torch", "gru.pt"), ("keras", "gru.npz"), ("keras", "gru.keras"), ("onnx", "gru.onnx"), ("tf", "gru")]


@pytest.fixture(scope="module")
def intact_files(tmp_path_factory):
    """A 2-layer bidirectional float32 GRU written in every format: ``{(format, name): {file: bytes}}``."""
    from compat_tests.interop import convert

    cfg = RNNConfig("gru", num_layers=2, num_units=3, input_size=2, direction="bidirectional", dtype="float32")
    case = make_case(cfg)
    files = {}
    for fmt, name in DAMAGEABLE:
        folder = tmp_path_factory.mktemp(fmt)
        convert.write(fmt, folder / name, cfg.model(), case.weights, case.biases)
        files[(fmt, name)] = {p.name: p.read_bytes() for p in folder.iterdir()}
    return files


@pytest.mark.parametrize(("fmt", "name"), DAMAGEABLE, ids=lambda v: v)
@given(data=st.data())
def test_a_damaged_file_loads_or_is_refused_naming_it(intact_files, fmt, name, data, tmp_path_factory):
    """Whatever a file's damage (zip CRCs, protobuf wire format, bundle checksums, JSON headers), reading it
    gives weights the model runs on or a ValueError/TypeError that names the file: never zipfile's,
    protobuf's or an IndexError from a parser, which the command line would show as a traceback."""
    from compat_tests.interop import convert

    files = intact_files[(fmt, name)]
    victim = data.draw(st.sampled_from(sorted(files)), label="damaged file")
    folder = tmp_path_factory.mktemp("damaged")
    for file, blob in files.items():
        (folder / file).write_bytes(damaged(data, blob) if file == victim else blob)
    told = data.draw(st.sampled_from([fmt, convert.AUTO]), label="--from")  # auto: detect reads names first
    try:
        model, weights, biases, _ = convert.read(told, folder / name)
    except (ValueError, TypeError) as exc:
        assert str(folder / name) in str(exc), exc
        return
    x = np.zeros((2, 1, model.input_size), model.dtype)
    with np.errstate(all="ignore"):  # damaged weights may be inf or NaN: only their reading is under test
        model(x, None, *([None] if model.rnn_mode == "lstm" else []), model.canonical_to_params(weights, biases))


# Structural damage to a file's tensors: what a foreign exporter or a hand edit gets wrong.
TENSOR_EDITS = {
    "drop": lambda t, k: t.pop(k),
    "duplicate under a new name": lambda t, k: t.update({k + "_copy": t[k]}),
    "flatten": lambda t, k: t.update({k: t[k].reshape(-1)}),
    "transpose": lambda t, k: t.update({k: t[k].T.copy()}),
    "to a scalar": lambda t, k: t.update({k: np.zeros((), t[k].dtype)}),
    "empty rows": lambda t, k: t.update({k: t[k][:0] if t[k].ndim else t[k]}),
    "doubled rows": lambda t, k: t.update({k: np.concatenate([t[k], t[k]]) if t[k].ndim else t[k]}),
    "to float64": lambda t, k: t.update({k: t[k].astype(np.float64)}),
    "to int32": lambda t, k: t.update({k: t[k].astype(np.int32)}),
    "renumbered layer": lambda t, k: t.update({re.sub(r"(l|cell_|layer)0", r"\g<1>7", k, count=1): t.pop(k)}),
}


@pytest.mark.parametrize(("fmt", "mode", "with_config"), [("torch", "lstm", False), ("torch", "gru", True),
                                                          ("checkpoint", "lstm", False), ("checkpoint", "gru", True),
                                                          ("keras", "lstm", True)])
@given(data=st.data())
def test_a_file_with_wrong_tensors_loads_or_is_refused_naming_it(fmt, mode, with_config, data, tmp_path_factory):
    """Tensors dropped, added, reshaped, retyped or renamed, with or without the file's config (then read off
    names and shapes): a model that runs, or a ValueError/TypeError naming the file, never an IndexError."""
    from compat_tests.interop import convert

    cfg = RNNConfig(mode, num_layers=2, num_units=3, input_size=2, direction="bidirectional", dtype="float32",
                    num_proj=2 if mode == "lstm" and fmt != "keras" else None)
    case = make_case(cfg)
    path = tmp_path_factory.mktemp(fmt) / "w.npz"
    convert.write(fmt, path, cfg.model(), case.weights, case.biases)
    tensors, config = checkpoint.read_tensors(path)
    for edit in data.draw(st.lists(st.sampled_from(sorted(TENSOR_EDITS)), min_size=1, max_size=3), label="edits"):
        if tensors:
            TENSOR_EDITS[edit](tensors, data.draw(st.sampled_from(sorted(tensors)), label=f"tensor to {edit}"))
    checkpoint.write_tensors(path, tensors, config if with_config else None)
    try:
        model, weights, biases, _ = convert.read(fmt, path)
    except (ValueError, TypeError) as exc:
        assert str(path) in str(exc), exc
        return
    model(np.zeros((2, 1, model.input_size), model.dtype), None, *([None] if model.rnn_mode == "lstm" else []),
          model.canonical_to_params(weights, biases))


@pytest.mark.parametrize("fmt", ["checkpoint", "torch", "keras", "onnx"])
def test_a_config_larger_than_its_file_is_refused_before_anything_of_its_size_is_made(fmt, tmp_path):
    """A file's config is read first and its expected tensors made from it: a config claiming 10^9 units
    over a few dozen values must fail on the count, not ask NumPy for exabytes."""
    from compat_tests.interop import convert, onnx_model

    cfg = RNNConfig("gru", num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    path = tmp_path / ("w.onnx" if fmt == "onnx" else "w.npz")
    convert.write(fmt, path, cfg.model(), case.weights, case.biases)
    if fmt == "onnx":
        import onnx

        proto = onnx.load(str(path))
        config = json.loads(proto.metadata_props[0].value)
        proto.metadata_props[0].value = json.dumps({**config, "num_units": 10**9})
        path.write_bytes(proto.SerializeToString())
        assert proto.metadata_props[0].key == onnx_model.META_KEY
    else:
        tensors, config = checkpoint.read_tensors(path)
        checkpoint.write_tensors(path, tensors, {**config, "num_units": 10**9})
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}: .* hold \\d+ values in all, fewer than the "
                                         f"3000000006000000000 weights"):
        convert.read(fmt, path)


ONNX_EDITS = ["drop an attribute", "change an int attribute", "change a string attribute", "empty a list attribute",
              "reshape an initializer", "rename a node input", "change the op type", "garble the config"]


def _edit_onnx(proto, edit: str, data) -> None:
    import onnx
    from onnx import numpy_helper

    node = data.draw(st.sampled_from([n for n in proto.graph.node if n.op_type in ("GRU", "LSTM", "RNN")] or [None]),
                     label="node")
    attributes = list(node.attribute) if node is not None else []
    if edit == "drop an attribute" and attributes:
        node.attribute.remove(data.draw(st.sampled_from(attributes), label="attribute"))
    elif edit.startswith("change") and edit.endswith("attribute") or edit == "empty a list attribute":
        kind = {"change an int attribute": onnx.AttributeProto.INT,
                "change a string attribute": onnx.AttributeProto.STRING,
                "empty a list attribute": onnx.AttributeProto.STRINGS}[edit]
        chosen = [a for a in attributes if a.type == kind]
        if chosen:
            a = data.draw(st.sampled_from(chosen), label="attribute")
            if kind == onnx.AttributeProto.INT:
                a.i = data.draw(st.sampled_from([0, -1, 1, 7, 10**9]), label="value")
            elif kind == onnx.AttributeProto.STRING:
                a.s = data.draw(st.sampled_from([b"", b"reverse", b"forward", b"sideways"]), label="value")
            else:
                del a.strings[:]
    elif edit == "reshape an initializer" and proto.graph.initializer:
        t = data.draw(st.sampled_from(list(proto.graph.initializer)), label="initializer")
        a = numpy_helper.to_array(t)
        shape = data.draw(st.sampled_from(["flat", "row", "empty"]), label="reshape")
        a = a.reshape(-1) if shape == "flat" else a.reshape(1, -1) if shape == "row" else a[..., :0]
        t.CopyFrom(numpy_helper.from_array(a, t.name))
    elif edit == "rename a node input" and node is not None and len(node.input) > 1:
        node.input[data.draw(st.integers(0, len(node.input) - 1), label="input")] = data.draw(
            st.sampled_from(["", "nope", "X"]), label="name")
    elif edit == "change the op type" and node is not None:
        node.op_type = data.draw(st.sampled_from(["GRU", "LSTM", "RNN", "Conv"]), label="op type")
    elif edit == "garble the config" and proto.metadata_props:
        proto.metadata_props[0].value = data.draw(st.sampled_from(["{}", "[]", '{"rnn_mode": 3}', "x"]), label="config")


@pytest.mark.parametrize("mode", ["lstm", "gru", "relu", "classic_gru"])
@given(data=st.data())
def test_an_onnx_graph_with_wrong_nodes_loads_or_is_refused(mode, data):
    """Attributes dropped or changed, initializers reshaped, inputs renamed, ops swapped, with or without our
    config in its metadata (without it the config is read off the nodes): a model that runs, or a
    ValueError/TypeError, never a KeyError, an IndexError or a request for exabytes."""
    from compat_tests.interop import onnx_model

    cfg = RNNConfig(mode, num_layers=2, num_units=3, input_size=2, direction="bidirectional", dtype="float32")
    case = make_case(cfg)
    proto = onnx_model.export_model(cfg.model(), case.weights, case.biases)
    if data.draw(st.booleans(), label="drop our config"):
        del proto.metadata_props[:]
    for edit in data.draw(st.lists(st.sampled_from(ONNX_EDITS), min_size=1, max_size=3), label="edits"):
        _edit_onnx(proto, edit, data)
    try:
        model, weights, biases = onnx_model.import_model(proto)
    except (ValueError, TypeError):
        return
    model(np.zeros((2, 1, model.input_size), model.dtype), None, *([None] if model.rnn_mode == "lstm" else []),
          model.canonical_to_params(weights, biases))


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
@given(data=st.data())
def test_a_damaged_array_file_loads_or_is_refused_naming_it(suffix, data, tmp_path_factory):
    """``rnn-compat infer``'s inputs, lengths and states: NumPy's reader raises tokenize's TokenError or
    EOFError on a damaged ``.npy`` header and zipfile's errors on a damaged ``.npz``; none may get out."""
    folder = tmp_path_factory.mktemp("arrays")
    path = folder / f"x{suffix}"
    arrays = {"input_h": np.arange(24, dtype=np.float32).reshape(2, 3, 4), "lengths": np.array([3, 1])}
    np.save(path, arrays["input_h"]) if suffix == ".npy" else np.savez(path, **arrays)
    path.write_bytes(damaged(data, path.read_bytes()))
    try:
        loaded = checkpoint.load_arrays(path)
    except ValueError as exc:
        assert str(path) in str(exc), exc
        return
    assert isinstance(loaded, np.ndarray if suffix == ".npy" else dict)


def test_a_damaged_npy_header_is_refused_without_a_warning(tmp_path):
    """NumPy reads a header as a Python literal, which warns of an invalid escape where damage put a backslash
    before a comma: the file is refused naming it, and nothing is printed besides."""
    np.save(tmp_path / "x.npy", np.zeros(3, np.float32))
    blob = (tmp_path / "x.npy").read_bytes()
    assert b"'<f4'" in blob
    (tmp_path / "x.npy").write_bytes(blob.replace(b"'<f4'", b"'\\,4'"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match=re.escape(str(tmp_path / "x.npy"))):
            checkpoint.load_arrays(tmp_path / "x.npy")
    assert not caught, [str(w.message) for w in caught]


def test_infer_refuses_a_damaged_input_naming_it(tmp_path, capsys):
    cfg = RNNConfig("gru", num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    checkpoint.save(tmp_path / "m.npz", cfg.model(), case.weights, case.biases)
    np.save(tmp_path / "x.npy", case.x)
    header_unclosed = (tmp_path / "x.npy").read_bytes().replace(b"}", b" ", 1)  # NumPy: tokenize.TokenError
    (tmp_path / "x.npy").write_bytes(header_unclosed)
    assert cli.main(["infer", str(tmp_path / "m.npz"), str(tmp_path / "x.npy")]) == 2
    assert f"{tmp_path / 'x.npy'}: not a readable NumPy file (TokenError" in capsys.readouterr().err


WRITTEN = [("checkpoint", "w.npz"), ("checkpoint", "w.safetensors"), ("torch", "w.safetensors"), ("torch", "w.pt"),
           ("keras", "w.npz"), ("keras", "w.keras"), ("keras", "w.weights.h5"), ("keras", "w.h5"), ("onnx", "w.onnx"),
           ("tf", "w"), ("infer", "y.npz"), ("infer", "y.npy")]


@pytest.mark.parametrize(("fmt", "name", "message"), [
    ("torch", "w.bin", r"a PyTorch file must end in \.pt or \.pth \(torch\.save's format\) or \.safetensors or "
                       r"\.npz, got 'w\.bin'"),
    ("onnx", "m.pb", r"an ONNX file must end in \.onnx, got 'm\.pb'"),
    ("checkpoint", "w.pt", r"tensor file path must end in \.safetensors or \.npz, got 'w\.pt'")], ids=lambda v: v[:12])
def test_a_writer_refuses_a_name_it_does_not_write(fmt, name, message, tmp_path):
    """Before anything is written (a name of another format would be read back as that format)."""
    from compat_tests.interop import convert

    cfg = RNNConfig("gru", num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    with pytest.raises(ValueError, match=message):
        convert.write(fmt, tmp_path / name, cfg.model(), case.weights, case.biases)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("fmt", "name"), WRITTEN, ids=lambda v: v)
def test_a_write_that_dies_before_it_ends_leaves_the_old_file_whole(fmt, name, tmp_path, kill_before_replacing):
    """Every writer writes beside its file and replaces it last (reference.formats.files.replacing): killed
    at that last moment, the file it was overwriting is as it was and no partial file is left. A writer that
    wrote in place would change the old file here."""
    from compat_tests.interop import convert

    cfg = RNNConfig("gru", num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    model = cfg.model()
    out = tmp_path / "out"
    out.mkdir()

    def prepare(case):  # infer's checkpoint and input, written while writes still succeed
        checkpoint.save(tmp_path / "m.npz", model, case.weights, case.biases)
        np.save(tmp_path / "x.npy", case.x)

    def write(case):
        if fmt == "infer":
            assert cli.main(["infer", str(tmp_path / "m.npz"), str(tmp_path / "x.npy"), "--out", str(out / name),
                             "--force"]) == 0
        else:
            convert.write(fmt, out / name, model, case.weights, case.biases)

    prepare(case)
    write(case)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    case = case._replace(weights=[w + 1 for w in case.weights], x=case.x + 1)  # a second write changes every file
    prepare(case)
    kill_before_replacing()
    with pytest.raises(Killed):
        write(case)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_replacing_keeps_the_mode_and_the_link_and_gives_each_write_its_own_partial_file(tmp_path):
    import os

    from reference.formats.files import replacing

    target, link = tmp_path / "w.npz", tmp_path / "link.npz"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    link.symlink_to(target)
    with replacing(link) as first, replacing(link) as second:
        assert first != second and first.parent == second.parent == tmp_path
        first.write_bytes(b"first")
        second.write_bytes(b"second")
    assert link.is_symlink() and target.read_bytes() == b"first"  # the outer write replaced last
    assert os.stat(target).st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.npz", "w.npz"]


def test_infer_refuses_an_output_it_would_not_write_as_named(tmp_path, capsys):
    """np.savez adds .npz to a name without it: infer would write elsewhere than --out says."""
    cfg = RNNConfig("gru", num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    checkpoint.save(tmp_path / "m.npz", cfg.model(), case.weights, case.biases)
    np.save(tmp_path / "x.npy", case.x)
    assert cli.main(["infer", str(tmp_path / "m.npz"), str(tmp_path / "x.npy"), "--out", str(tmp_path / "y")]) == 2
    assert "--out must end in .npz" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz", "x.npy"]


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
@pytest.mark.parametrize("version", [1, 2, 3])
def test_an_array_header_claiming_more_than_its_file_holds_is_refused_before_allocating(suffix, version,
                                                                                         tmp_path):
    """A damaged .npy header can claim 10^12 elements; NumPy would ask for 4 TB before finding 12 bytes.
    Version 3.0 (UTF-8, for field names) is checked as well: NumPy has no public reader for its header."""
    descr = "<f4" if version < 3 else [("\u00e9t\u00e9", "<f4")]
    header = repr({"descr": descr, "fortran_order": False, "shape": (10**12,)}).encode("utf-8")
    length_bytes = 2 if version == 1 else 4
    header += b" " * (-(8 + length_bytes + len(header) + 1) % 64) + b"\n"
    blob = (np.lib.format.MAGIC_PREFIX + bytes([version, 0]) + len(header).to_bytes(length_bytes, "little")
            + header + bytes(12))
    assert np.lib.format.read_magic(io.BytesIO(blob)) == (version, 0)
    path = tmp_path / f"x{suffix}"
    if suffix == ".npy":
        path.write_bytes(blob)
    else:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("input_h.npy", blob)
    dtype = "float32" if version < 3 else re.escape(str(np.dtype(descr)))
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}.*: its header claims \\[1000000000000\\] {dtype} "
                                         f"\\(4000000000000 bytes\\), but 12 bytes follow it"):
        checkpoint.load_arrays(path)


def test_arrays_with_every_header_version_load(tmp_path):
    """The claim check reads each header version NumPy writes (3.0 by hand) and lets honest files through."""
    arrays = {version: np.arange(6, dtype=np.float32).reshape(2, 3) + version[0] for version in [(1, 0), (2, 0), (3, 0)]}
    arrays[(3, 0)] = arrays[(3, 0)].view([("\u00e9t\u00e9", "<f4")])  # what 3.0 is for: UTF-8 field names
    for version, array in arrays.items():
        path = tmp_path / f"v{version[0]}.npy"
        with open(path, "wb") as f:
            np.lib.format.write_array(f, array, version=version)
        assert np.lib.format.read_magic(io.BytesIO(path.read_bytes())) == version
        loaded = checkpoint.load_arrays(path)
        assert loaded.dtype == array.dtype and np.array_equal(loaded, array)


def test_an_npz_member_that_is_not_an_array_is_refused(tmp_path):
    """NumPy hands such a member back as raw bytes, which the checkpoint reader then took for a tensor."""
    path = tmp_path / "w.npz"
    np.savez(path, **{"rnn/multi_rnn_cell/cell_0/basic_rnn_cell/kernel": np.zeros((5, 3), np.float32)})
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("README.txt", "weights of my RNN")
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}: holds 'README.txt', which is not a .npy array"):
        checkpoint.load(path, {"rnn_mode": "tanh"})


@pytest.mark.parametrize("damage", ["unknown data type", "data in another file"])
def test_an_onnx_initializer_that_cannot_be_read_from_the_file_is_refused(damage, tmp_path):
    import onnx

    from compat_tests.interop import onnx_model

    cfg = RNNConfig("gru", num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    proto = onnx_model.export_model(cfg.model(), case.weights, case.biases)
    w = next(t for t in proto.graph.initializer if t.name.startswith("W"))
    if damage == "unknown data type":
        w.data_type, match = 999, f"initializer '{w.name}' cannot be read: KeyError: 999"
    else:  # a model may point at any file; nothing is opened on its say-so
        w.data_location, match = onnx.TensorProto.EXTERNAL, f"initializer '{w.name}' keeps its data in another file"
        location = w.external_data.add()
        location.key, location.value = "location", "/etc/passwd"
        w.ClearField("raw_data")
    path = tmp_path / "m.onnx"
    path.write_bytes(proto.SerializeToString())
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}: {match}"):
        onnx_model.import_model(path)


def test_an_onnx_graph_whose_layers_share_initializers_loads():
    """Tied weights (or an optimizer merging equal initializers): two bidirectional layers over three
    initializers, fewer than their four pseudo-layers. The layer-count guard must count nodes, not tensors."""
    from onnx import TensorProto, helper, numpy_helper

    from compat_tests.interop import onnx_model

    cfg = RNNConfig("gru", num_layers=2, num_units=3, input_size=6, direction="bidirectional", dtype="float32")
    model = cfg.model()
    case = make_case(cfg)
    n = len(case.weights) // 2  # layer 1 takes layer 0's tensors (its input width 2H = 6 = input_size)
    weights, biases = case.weights[:n] * 2, case.biases[:n] * 2
    exported = {t.name: t for t in onnx_model.export_model(model, weights, biases).graph.initializer}
    shared = [numpy_helper.from_array(numpy_helper.to_array(exported[f"{k}0"]), k) for k in "WRB"]
    attrs = dict(hidden_size=3, direction="bidirectional", linear_before_reset=1)
    nodes = [helper.make_node("GRU", ["X", "W", "R", "B"], ["Y0"], **attrs),
             helper.make_node("Transpose", ["Y0"], ["Y0t"], perm=[0, 2, 1, 3]),  # [T, D, B, H] -> [T, B, D*H]
             helper.make_node("Reshape", ["Y0t", "y_shape"], ["X1"]),
             helper.make_node("GRU", ["X1", "W", "R", "B"], ["Y1"], **attrs)]
    shared.append(numpy_helper.from_array(np.array([0, 0, -1], np.int64), "y_shape"))
    graph = helper.make_graph(nodes, "tied", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [5, 1, 6])],
                              [helper.make_tensor_value_info("Y1", TensorProto.FLOAT, None)], initializer=shared)
    loaded, got_weights, got_biases = onnx_model.import_model(helper.make_model(graph))
    assert (loaded.num_layers, loaded.num_dirs) == (2, 2)
    assert all(np.array_equal(a, b) for a, b in zip(got_weights + got_biases, weights + biases, strict=True))


@pytest.mark.parametrize("fmt", ["checkpoint", "torch"])
def test_a_layer_count_beyond_the_file_s_tensors_is_refused_before_the_model_is_made(fmt, tmp_path):
    """10^6 layers in a damaged config (or a torch name weight_ih_l999999999) took minutes and gigabytes to lay
    out before the tensors were even compared."""
    from compat_tests.interop import convert

    cfg = RNNConfig("gru", num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    path = tmp_path / "w.npz"
    convert.write(fmt, path, cfg.model(), case.weights, case.biases)
    tensors, config = checkpoint.read_tensors(path)
    if fmt == "checkpoint":
        config = {**config, "num_layers": 10**6}
    else:
        tensors["weight_ih_l999999"], config = tensors["weight_ih_l0"], None
    checkpoint.write_tensors(path, tensors, config)
    with pytest.raises(ValueError, match="the config's 1000000 layer\\(s\\) x 1 direction\\(s\\) are more than the "
                                         "file can hold"):
        convert.read(fmt, path)


def test_pickles_are_refused(tmp_path):
    pkl = tmp_path / "model.pt"
    pkl.write_bytes(pickle.dumps({"weight_ih_l0": np.zeros(3)}))
    with pytest.raises(ValueError, match="pickle-based files are refused"):
        checkpoint.read_tensors(pkl)
    obj = tmp_path / "objects.npz"
    np.savez(obj, a=np.array([{"x": 1}], dtype=object))
    with pytest.raises(ValueError, match="refused"):
        checkpoint.read_tensors(obj)
    archive = tmp_path / "torch_archive.npz"  # a zip holding a pickle, as torch.save writes (NumPy reads it as bytes)
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"weight_ih_l0": np.zeros(3)}))
    with pytest.raises(ValueError, match="holds a pickle"):
        checkpoint.read_tensors(archive)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_a_pickle_under_a_suffix_of_no_format_is_named_a_pickle(protocol, tmp_path):
    """Known by its first bytes (PROTO opcode 0x80, then the protocol), not only by a .pt/.pkl suffix, so
    the message says why it is refused rather than that its type is unknown."""
    path = tmp_path / "weights.dat"
    path.write_bytes(pickle.dumps({"weight_ih_l0": [0.0]}, protocol=protocol))
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}: pickle-based files are refused"):
        checkpoint.read_tensors(path)
    path.write_bytes(b"\x80\x06" + path.read_bytes()[2:])  # no pickle protocol (yet): an unknown file
    with pytest.raises(ValueError, match="unknown checkpoint type"):
        checkpoint.read_tensors(path)


@pytest.mark.parametrize("missing", [1, 60])
def test_an_array_file_short_of_its_data_by_less_than_its_header_is_named(missing, tmp_path):
    """The claim is held against the bytes after the header, not the whole file: a .npy cut short by fewer
    bytes than its header's length (here 128) is caught by that check, with its message."""
    path = tmp_path / "x.npy"
    np.save(path, np.zeros(100, np.float32))
    blob = path.read_bytes()
    assert len(blob) - 400 == 128 > missing
    path.write_bytes(blob[:-missing])
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}: its header claims \\[100\\] float32 \\(400 "
                                         f"bytes\\), but {400 - missing} bytes follow it"):
        checkpoint.load_arrays(path)


# ---- PyTorch, Keras 3, ONNX: converted both ways and run by the framework -------------------------------


@given(cfg=rnn_configs(PEERS["torch-cpu"].capabilities, dtypes_=("float64",), **SMALL))
def test_torch_state_dict_both_ways(cfg):
    torch = pytest.importorskip("torch")
    from compat_tests.peers.torch_peers import _module

    case, model = make_case(cfg), cfg.model()
    module = _module(cfg, torch.float64)
    module.load_state_dict({k: torch.from_numpy(v) for k, v in torch_format.to_state_dict(model, case.weights,
                                                                                          case.biases).items()})
    state = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    weights, biases = torch_format.from_state_dict(model, state)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, case.weights + case.biases))
    config = torch_format.config_from_state_dict(state, cfg.mode if cfg.mode in ("relu", "tanh") else None)
    assert config["num_layers"] == cfg.num_layers and config["num_proj"] == cfg.num_proj
    assert config["direction"] == cfg.direction and config["rnn_mode"] == cfg.mode
    # That modules loaded this way run to the reference's outputs and gradients is what the torch-cpu peer
    # checks in test_forward.py and test_backward.py: it loads its weights with to_state_dict.


KERAS_CONFIGS = [RNNConfig(mode, num_layers=layers, num_units=4, input_size=3, direction=direction, seq_len=6,
                           batch=3, time_major=False, dtype="float32", initial_state=False, seed=7)
                 for mode in ("relu", "tanh", "lstm", "gru", "classic_gru")
                 for layers, direction in ((1, "unidirectional"), (2, "bidirectional"))]


@pytest.mark.parametrize("cfg", KERAS_CONFIGS, ids=lambda c: c.short())
def test_keras_weights_both_ways(cfg, available_peer):
    """A ``keras.Sequential`` of the layers the Keras peer builds (the peer runs them layer by layer, with
    states and masks, in test_forward.py and test_backward.py)."""
    available_peer("keras")
    keras = import_keras()
    case, model = make_case(cfg), cfg.model()
    net = keras.Sequential([keras.Input((cfg.seq_len, cfg.input_size))] +
                           keras_layers(cfg, case.weights, case.biases, return_sequences=True))
    got = keras.ops.convert_to_numpy(net.predict(case.x, verbose=0))  # the output sequence only
    verdict = judge("keras", cfg.dtype, "output", error_stats(got, run_reference(cfg, case).output.astype(np.float64)),
                    sensitivity(cfg, case)["output"])
    assert verdict.passed, verdict.explain("output")
    flat = net.get_weights()
    back = keras_format.from_keras(model, [flat[k:k + 3] for k in range(0, len(flat), 3)])
    restored = run_reference(cfg, case._replace(weights=back[0], biases=back[1]))
    assert_agree_within_policy(cfg, case, restored, run_reference(cfg, case))


@given(cfg=rnn_configs(PEERS["onnxruntime"].capabilities, dtypes_=("float32",), **SMALL))
def test_onnx_export_import_round_trip(cfg):
    pytest.importorskip("onnx")
    from compat_tests.interop import onnx_model

    case, model = make_case(cfg), cfg.model()
    proto = onnx_model.export_model(model, case.weights, case.biases)
    back_model, weights, biases = onnx_model.import_model(proto)
    assert repr(back_model) == repr(model)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, case.weights + case.biases))
    del proto.metadata_props[:]  # a foreign graph: the config is read off the nodes
    foreign, _, _ = onnx_model.import_model(proto)
    assert repr(foreign) == repr(model)
    layers = onnx_format.to_onnx(model, case.weights, case.biases)
    assert len(layers) == cfg.num_layers and layers[0]["W"].shape[0] == cfg.num_dirs


def test_onnx_export_runs_with_dynamic_shapes_and_lengths():
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    cfg = RNNConfig("gru", num_layers=2, num_units=5, input_size=3, direction="bidirectional", seq_len=7, batch=4,
                    lengths=(7, 3, 1, 6), dtype="float32")
    case, model = make_case(cfg), cfg.model()
    proto = onnx_model.export_model(model, case.weights, case.biases)
    for T, B in ((7, 4), (3, 2)):  # one file, any T and B
        sub = case._replace(x=case.x[:T, :B], h0=case.h0[:, :B], lengths=np.minimum(case.lengths[:B], T))
        got = Outputs(*onnx_model.run(proto, sub.x, sub.lengths, sub.h0))
        small = cfg.with_(seq_len=T, batch=B, lengths=tuple(int(n) for n in sub.lengths))
        assert_agree_within_policy(small, sub, got, run_reference(small, sub), peer="onnxruntime")


# ---- the command line -------------------------------------------------------------------------------


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


# ---- foreign graphs and files: what computes another function is refused, what is the same one loads ------


def _foreign_onnx(cfg: RNNConfig, case, node_attrs: dict | None = None, peephole: bool = False, bias: bool = True):
    """``cfg``'s unidirectional stack as a foreign exporter writes it: a node per layer (named rnn0, rnn1,
    ...) chained through Squeeze, no config in the metadata; ``node_attrs[layer]`` adds attributes."""
    from onnx import TensorProto, helper, numpy_helper

    H, inits, nodes, x = cfg.num_units, [], [], "X"
    for layer, wrb in enumerate(onnx_format.to_onnx(cfg.model(), case.weights, case.biases)):
        names = [x]
        for k in "WRB" if bias else "WR":
            inits.append(numpy_helper.from_array(wrb[k], f"{k}{layer}"))
            names.append(f"{k}{layer}")
        if peephole:
            inits.append(numpy_helper.from_array(np.full((1, 3 * H), 0.5, np.float32), f"P{layer}"))
            names += [""] * (7 - len(names)) + [f"P{layer}"]
        attrs = {**onnx_format.ATTRIBUTES[cfg.mode], "hidden_size": H, **(node_attrs or {}).get(layer, {})}
        nodes.append(helper.make_node(onnx_format.OPS[cfg.mode], names, [f"Y{layer}"], name=f"rnn{layer}", **attrs))
        nodes.append(helper.make_node("Squeeze", [f"Y{layer}", "axis1"], [f"S{layer}"]))
        x = f"S{layer}"
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "axis1"))
    graph = helper.make_graph(nodes, "foreign", [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(case.x.shape))],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=10)


def _onnxruntime(proto, x: np.ndarray, optimized: bool = True, extra: dict | None = None) -> np.ndarray:
    """The first output of ``proto`` on ``x`` fed to its first input (``X`` in the graphs made here) and the
    ``extra`` inputs; not ``optimized``: every node as the ONNX spec defines it (onnxruntime's graph optimizer
    removes a Dropout whatever its training_mode)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if not optimized:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x, **(extra or {})})[0]


def _dynamo_export(torch, module, example, **kwargs):
    """``torch.onnx.export(module, (example,), dynamo=True, **kwargs)``'s ModelProto, the exporter quiet (it
    warns and logs what it skips, torchvision's ops); skips the test without onnxscript, which it needs."""
    import logging
    import warnings

    pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            return torch.onnx.export(module, (example,), dynamo=True, verbose=False, **kwargs).model_proto
        finally:
            logging.disable(logging.NOTSET)


def _no_initial_state(cfg: RNNConfig, bias: bool = True):
    """``cfg`` (float32, zero initial states: a foreign graph here has none) and its case, biases zeroed
    when not ``bias``."""
    cfg = cfg.with_(initial_state=False, dtype="float32")
    case = make_case(cfg)
    return cfg, case if bias else case._replace(biases=[np.zeros_like(b) for b in case.biases])


@pytest.mark.parametrize("bias", [True, False], ids=["with-B", "without-B"])
@pytest.mark.parametrize("mode", ["relu", "tanh", "lstm", "gru", "classic_gru"])
def test_a_foreign_onnx_graph_of_a_cudnn_cell_loads_as_that_cell(mode, bias):
    """The control for the refusals below: a plain foreign graph loads bit for bit and onnxruntime runs it
    to the reference's outputs; without B (a bias-free model: ONNX's B defaults to zero) as zero biases."""
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    cfg, case = _no_initial_state(RNNConfig(mode, num_layers=2, num_units=4, input_size=3, seq_len=5, batch=2), bias)
    proto = _foreign_onnx(cfg, case, bias=bias)
    model, weights, biases = onnx_model.import_model(proto)
    assert repr(model) == repr(cfg.model())
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, case.weights + case.biases, strict=True))
    expected = run_reference(cfg, case)
    got = Outputs(_onnxruntime(proto, case.x), expected.output_h, expected.output_c)  # the graph outputs y only
    assert_agree_within_policy(cfg, case, got, expected, peer="onnxruntime")


FOREIGN_NODES = {  # mode, layers, node attributes, peephole input, what the refusal says
    "clip": ("lstm", 1, {0: {"clip": 0.25}}, False, "node rnn0: clip=0.25 has no cuDNN equivalent"),
    "input_forget": ("lstm", 1, {0: {"input_forget": 1}}, False, "node rnn0: input_forget=1 has no cuDNN equivalent"),
    "peepholes": ("lstm", 1, {}, True, r"node rnn0: peephole weights \(input P, 'P0'\) have no cuDNN equivalent"),
    "gru-activations": ("gru", 1, {0: {"activations": ["Sigmoid", "Relu"]}}, False,
                        r"node rnn0: activations \['Sigmoid', 'Relu'\] are not a cuDNN cell's \(Sigmoid, Tanh\)"),
    "lstm-activations": ("lstm", 1, {0: {"activations": ["HardSigmoid", "Tanh", "Tanh"]}}, False,
                         r"activations \['HardSigmoid', 'Tanh', 'Tanh'\] are not a cuDNN cell's"),
    "rnn-activation": ("tanh", 1, {0: {"activations": ["Sigmoid"]}}, False,
                       r"node rnn0: activations \['Sigmoid'\] are not a cuDNN cell's \(Tanh or Relu\)"),
    "second-layer-textbook": ("gru", 2, {1: {"linear_before_reset": 0}}, False,
                              "node rnn1 computes a unidirectional 'classic_gru' layer, but the model is a "
                              "unidirectional 'gru' RNN"),
    "second-layer-relu": ("tanh", 2, {1: {"activations": ["Relu"]}}, False,
                          "node rnn1 computes a unidirectional 'relu' layer, but the model is a unidirectional 'tanh'"),
}


@pytest.mark.parametrize("case_name", FOREIGN_NODES)
def test_a_foreign_onnx_node_that_computes_another_function_is_refused(case_name):
    """Clipping, coupled gates, peepholes, other activations, or a layer unlike the first: onnxruntime computes
    another function than the plain graph's (checked here), so reading only W, R and B would give a model
    that silently disagrees with the file. Each is refused naming the node and what it carries."""
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    mode, layers, attrs, peephole, match = FOREIGN_NODES[case_name]
    cfg, case = _no_initial_state(RNNConfig(mode, num_layers=layers, num_units=4, input_size=3, seq_len=6, batch=2,
                                            weight_scale=3.0))
    plain, variant = _foreign_onnx(cfg, case), _foreign_onnx(cfg, case, attrs, peephole)
    error = error_stats(_onnxruntime(variant, case.x), _onnxruntime(plain, case.x).astype(np.float64))
    assert error.max_abs > 1e-3, "the variant computes what the plain graph does: not a test of the importer"
    with pytest.raises(ValueError, match=match):
        onnx_model.import_model(variant)


def _rewire_second_layer(proto, x: str, before: list | None = None, layer0_outputs: tuple[str, ...] = ("Y0",)):
    """``proto`` (``_foreign_onnx``'s 2-layer graph) with node rnn1 reading ``x``, ``before`` inserted ahead
    of rnn1, and rnn0 writing ``layer0_outputs``."""
    rnn0, rnn1 = (next(n for n in proto.graph.node if n.name == name) for name in ("rnn0", "rnn1"))
    del rnn0.output[:]
    rnn0.output.extend(layer0_outputs)
    rnn1.input[0] = x
    at = list(proto.graph.node).index(rnn1)
    for k, node in enumerate(before or []):
        proto.graph.node.insert(at + k, node)
    return proto


STACK_BREAKS = {  # rnn1's input X, nodes inserted before it, rnn0's outputs, what the refusal says
    "side-by-side": ("X", [], ("Y0",), "node rnn1 reads X from 'X', which no node computes, not from the output Y "
                                       "of the recurrent node before it, rnn0"),
    "computation-between": ("A0", [("Relu", ["S0"], ["A0"], "act")], ("Y0",),
                            "node rnn1 reads X from Relu node act's output 'A0', not from the output Y"),
    "layout-then-computation": ("I0", [("Relu", ["S0"], ["A0"], "act"), ("Identity", ["A0"], ["I0"], "copy")],
                                ("Y0",), "node rnn1 reads X from Relu node act's output 'A0' through Identity, not"),
    "final-state": ("Yh0", [], ("Y0", "Yh0"), "node rnn1 reads X from GRU node rnn0's output 'Yh0', not from the "
                                              "output Y of the recurrent node before it, rnn0"),
}


@pytest.mark.parametrize("case_name", STACK_BREAKS)
def test_recurrent_nodes_that_are_not_one_stack_are_refused(case_name):
    """Two recurrent nodes read as layers 0 and 1 only when the second reads the first's Y through layout
    ops alone. Each variant here runs in onnxruntime to something other than the stack (checked), so
    reading it as one would give a model that silently disagrees with the file."""
    pytest.importorskip("onnxruntime")
    from onnx import helper

    from compat_tests.interop import onnx_model

    x, before, outputs, match = STACK_BREAKS[case_name]
    cfg, case = _no_initial_state(RNNConfig("gru", num_layers=2, num_units=4, input_size=4, seq_len=5, batch=2,
                                            weight_scale=3.0))
    plain = _onnxruntime(_foreign_onnx(cfg, case), case.x)
    variant = _rewire_second_layer(_foreign_onnx(cfg, case), x, [helper.make_node(op, i, o, name=n)
                                                                 for op, i, o, n in before], outputs)
    got = _onnxruntime(variant, case.x)
    assert got.shape != plain.shape or error_stats(got, plain.astype(np.float64)).max_abs > 1e-3, \
        "the variant computes what the stack does: not a test of the importer"
    with pytest.raises(ValueError, match=re.escape(match)):
        onnx_model.import_model(variant)


def test_layout_ops_between_layers_and_anything_before_the_first_keep_a_stack():
    """The control: Identity and Dropout (inference) between the layers, and a Relu ahead of the first
    layer (outside the stack: the model's input is what the first node reads), still load as the stack."""
    from onnx import helper

    from compat_tests.interop import onnx_model

    cfg, case = _no_initial_state(RNNConfig("gru", num_layers=2, num_units=4, input_size=4, seq_len=5, batch=2))
    proto = _rewire_second_layer(_foreign_onnx(cfg, case), "D0", [helper.make_node("Identity", ["S0"], ["I0"]),
                                                                 helper.make_node("Dropout", ["I0"], ["D0"])])
    rnn0 = next(n for n in proto.graph.node if n.name == "rnn0")
    rnn0.input[0] = "XR"
    proto.graph.node.insert(0, helper.make_node("Relu", ["X"], ["XR"]))
    model, weights, biases = onnx_model.import_model(proto)
    assert repr(model) == repr(cfg.model())
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, case.weights + case.biases, strict=True))


def _bidirectional_stack(link: list[tuple], constants: dict[str, list] | None = None,
                         fixed: tuple[bool, bool] = (False, False), sizes: tuple[int, int] = (5, 2)):
    """A 2-layer bidirectional GRU (H=4; its case at ``sizes`` T, B) as ``export_model`` writes it, its output
    alone, with the layout ops from layer 0's ``Y0`` to layer 1's input ``layer0_output`` replaced by
    ``link`` (``(op, inputs, output, attributes)`` each) over ``constants``, and its input ``X`` fixed to
    the case's T and B where ``fixed`` says so instead of symbolic; with its config and case."""
    from onnx import helper, numpy_helper

    from compat_tests.interop import onnx_model

    cfg, case = _no_initial_state(RNNConfig("gru", num_layers=2, num_units=4, input_size=3, seq_len=sizes[0],
                                            batch=sizes[1], direction="bidirectional", weight_scale=3.0))
    proto = onnx_model.export_model(cfg.model(), case.weights, case.biases, with_lengths=False, with_states=False)
    graph = proto.graph
    old = [n for n in graph.node if n.output[0] in ("Yt0", "layer0_output")]
    at = list(graph.node).index(old[0])
    for n in old:
        graph.node.remove(n)
    for k, (op, inputs, output, attrs) in enumerate(link):
        graph.node.insert(at + k, helper.make_node(op, inputs, [output], name=f"link{k}", **attrs))
    dtypes = {bool: np.bool_, float: np.float32, int: np.int64}
    graph.initializer.extend(numpy_helper.from_array(np.array(v, dtypes[type(np.ravel(v)[0].item())]), k)
                             for k, v in (constants or {}).items())
    graph.node.remove(next(n for n in graph.node if n.output[0] == "output_h"))  # layer 1's batch may change
    graph.output.remove(next(o for o in graph.output if o.name == "output_h"))
    for dim, size, fix in zip(graph.input[0].type.tensor_type.shape.dim, case.x.shape, fixed):
        if fix:
            dim.dim_value = size
    return proto, cfg, case


_EXPORTED_LINK = [("Transpose", ["Y0"], "Yt0", {"perm": [0, 2, 1, 3]}), ("Reshape", ["Yt0", "y_shape"], "layer0_output", {})]
LINK_BREAKS = {  # layout ops from Y0 [T, D, B, H] to layer 1's X, the constants they read, what the refusal says
    "reshape-without-transpose": ([("Reshape", ["Y0", "y_shape"], "layer0_output", {})], {},
                                  "node layer1 reads the output Y of layer0 rearranged by Reshape into [3, 2, 8] "
                                  "(replayed at T=3, B=2, D=2, H=4), not as a stack's next layer reads it, "
                                  "[T, B, D*H] = [3, 2, 8]"),
    "time-and-batch-swapped": ([("Transpose", ["Y0"], "Yt0", {"perm": [2, 0, 1, 3]}), _EXPORTED_LINK[1]], {},
                               "rearranged by Transpose, Reshape into [2, 3, 8]"),
    "training-dropout": ([*_EXPORTED_LINK[:1], ("Reshape", ["Yt0", "y_shape"], "Yr0", {}),
                          ("Dropout", ["Yr0", "ratio", "training"], "layer0_output", {"seed": 1})],
                         {"ratio": 0.5, "training": True}, "Dropout node link2 between recurrent nodes layer0 and "
                                                          "layer1: its training_mode is true, so it drops elements"),
}


@pytest.mark.parametrize("case_name", LINK_BREAKS)
def test_layout_ops_that_move_steps_or_directions_out_of_place_are_refused(case_name):
    """Layout ops alone between two recurrent nodes do not make a stack: replayed on a Y whose elements
    carry their (time, batch, direction, hidden) index, they must hand the next node its input as the
    stack's next layer reads it. Each variant here runs in onnxruntime, unoptimized, to something other than
    the stack (checked), with shapes that fit, so reading it as one would silently disagree with the file."""
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    link, constants, match = LINK_BREAKS[case_name]
    plain, cfg, case = _bidirectional_stack(_EXPORTED_LINK)
    variant = _bidirectional_stack(link, constants)[0]
    want, got = _onnxruntime(plain, case.x, optimized=False), _onnxruntime(variant, case.x, optimized=False)
    assert got.shape != want.shape or error_stats(got, want.astype(np.float64)).max_abs > 1e-3, \
        "the variant computes what the stack does: not a test of the importer"
    with pytest.raises(ValueError, match=re.escape(match)):
        onnx_model.import_model(variant)


SIZE_BREAKS = {  # link, constants, the case's T and B, which of them X fixes, Y0's declared shape, the refusal
    "sizes-written-out-that-fit-the-replay-sizes": (
        [_EXPORTED_LINK[0], ("Reshape", ["Yt0", "sizes"], "layer0_output", {})], {"sizes": [-1, 2, 8]}, (4, 1),
        (True, True), None, "into [2, 2, 8] (replayed at T=4, B=1, D=2, H=4)"),
    "sizes-written-out-for-another-run": (
        [_EXPORTED_LINK[0], ("Reshape", ["Yt0", "sizes"], "layer0_output", {})], {"sizes": [3, -1, 8]}, (6, 4),
        (True, True), None, "into [3, 8, 8] (replayed at T=6, B=4, D=2, H=4)"),
    "a-batch-written-out-with-batch-free": (
        [_EXPORTED_LINK[0], ("Reshape", ["Yt0", "sizes"], "layer0_output", {})], {"sizes": [-1, 2, 8]}, (5, 4),
        (False, False), None, "into [9, 2, 8] (replayed at T=3, B=6, D=2, H=4)"),
    "a-squeeze-without-axes-at-one-step": (
        [_EXPORTED_LINK[0], ("Squeeze", ["Yt0"], "S0", {}), ("Reshape", ["S0", "sizes"], "layer0_output", {})],
        {"sizes": [0, -1, 8]}, (1, 2), (False, False), None, "into [2, 1, 8] (replayed at T=1, B=2, D=2, H=4)"),
    "sizes-declared-but-not-enforced": (
        [_EXPORTED_LINK[0], ("Reshape", ["Yt0", "sizes"], "layer0_output", {})], {"sizes": [5, 2, 8]}, (2, 5),
        (False, False), [5, 2, 2, 4], "shape [5, 2, 8] does not hold the 48 elements of [3, 2, 2, 4]"),
}


@pytest.mark.parametrize("case_name", SIZE_BREAKS)
def test_layout_ops_right_only_at_some_sizes_are_refused(case_name):
    """The replay runs at the sizes the graph's input fixes (onnxruntime enforces those; a shape the file
    merely declares for Y, it does not), and where a size is free at several, 1 among them: sizes written
    out in a Reshape that fit one replay, or a Squeeze without axes that drops time at T=1, would otherwise
    pass. Each variant runs in onnxruntime, at the case's sizes, to something other than the stack (checked)."""
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    from compat_tests.interop import onnx_model

    link, constants, sizes, fixed, declared, match = SIZE_BREAKS[case_name]
    plain, cfg, case = _bidirectional_stack(_EXPORTED_LINK, sizes=sizes)
    variant = _bidirectional_stack(link, constants, fixed, sizes)[0]
    if declared is not None:
        variant.graph.value_info.append(helper.make_tensor_value_info("Y0", TensorProto.FLOAT, declared))
    want, got = _onnxruntime(plain, case.x, optimized=False), _onnxruntime(variant, case.x, optimized=False)
    assert got.shape != want.shape or error_stats(got, want.astype(np.float64)).max_abs > 1e-3, \
        "the variant computes what the stack does: not a test of the importer"
    with pytest.raises(ValueError, match=re.escape(match)):
        onnx_model.import_model(variant)


def _tensor_of(value: float):
    """A one-element float32 TensorProto (a ConstantOfShape's value)."""
    from onnx import numpy_helper

    return numpy_helper.from_array(np.array([value], np.float32))


def _tensor(data_type: int, external: bool = False):
    """A 3-element int64-sized TensorProto of ``data_type``, its data in the file or, ``external``, in another."""
    from onnx import TensorProto

    t = TensorProto(data_type=data_type, dims=[3], raw_data=np.array([0, 0, -1], np.int64).tobytes())
    if external:
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value="shape.bin")
    return t


MALFORMED_LINKS = {  # link, constants, what the refusal says
    "perm-an-int": ([("Transpose", ["Y0"], "Yt0", {"perm": 2}), _EXPORTED_LINK[1]], {},
                    "Transpose node link0 between recurrent nodes layer0 and layer1: its perm must be a list of "
                    "integers, got 2"),
    "axis-a-float": ([_EXPORTED_LINK[0], ("Flatten", ["Yt0"], "F0", {"axis": 1.5}),
                      ("Reshape", ["F0", "y_shape"], "layer0_output", {})], {},
                     "Flatten node link1 between recurrent nodes layer0 and layer1: its axis must be an integer"),
    "shape-of-floats": ([_EXPORTED_LINK[0], ("Reshape", ["Yt0", "sizes"], "layer0_output", {})],
                        {"sizes": [5.0, 2.0, 8.0]}, "its shape must be a 1-D integer tensor, got float32 of shape [3]"),
    "constant-of-unknown-type": ([_EXPORTED_LINK[0], ("Constant", [], "c", {"value": _tensor(999)}),
                                  ("Reshape", ["Yt0", "c"], "layer0_output", {})], {},
                                 "Constant node link1 cannot be read"),
    "constant-in-another-file": ([_EXPORTED_LINK[0], ("Constant", [], "c", {"value": _tensor(7, external=True)}),
                                  ("Reshape", ["Yt0", "c"], "layer0_output", {})], {},
                                 "Constant node link1 cannot be read: it keeps its data in another file"),
}


@pytest.mark.parametrize("case_name", MALFORMED_LINKS)
def test_a_malformed_layout_op_is_a_value_error_naming_it(case_name):
    """Attributes and constants of the wrong type, or a constant kept in another file (never opened on the
    model's say-so), are a ValueError naming the node, not a TypeError or KeyError from deep inside."""
    from compat_tests.interop import onnx_model

    link, constants, match = MALFORMED_LINKS[case_name]
    with pytest.raises(ValueError, match=re.escape(match)):
        onnx_model.import_model(_bidirectional_stack(link, constants)[0])


def test_a_shape_a_caller_may_feed_and_a_foreign_domain_op_are_not_layout_ops_of_the_file():
    """An initializer that is also a graph input is a default a caller may override (onnxruntime then reads
    the fed value), and a Transpose of another domain is not ONNX's: neither tells what the link does."""
    from onnx import TensorProto, helper

    from compat_tests.interop import onnx_model

    fed = _bidirectional_stack(_EXPORTED_LINK)[0]
    fed.graph.input.append(helper.make_tensor_value_info("y_shape", TensorProto.INT64, [3]))
    with pytest.raises(ValueError, match=re.escape("Reshape node link1 between recurrent nodes layer0 and layer1: "
                                                   "its shape (input 1) is fed at run time (graph input 'y_shape'), "
                                                   "so what the op does to the layer's output cannot be told")):
        onnx_model.import_model(fed)
    foreign = _bidirectional_stack(_EXPORTED_LINK)[0]
    next(n for n in foreign.graph.node if n.name == "link0").domain = "com.example"
    with pytest.raises(ValueError, match=re.escape("node layer1 reads X from Transpose node link0's output 'Yt0' "
                                                   "through Reshape, not from the output Y")):
        onnx_model.import_model(foreign)


LINK_KEEPS = {  # layout ops that carry Y0 [T, D, B, H] to [T, B, D*H] some other way, their constants, static X
    "literal-sizes": ([_EXPORTED_LINK[0], ("Reshape", ["Yt0", "sizes"], "layer0_output", {})],
                      {"sizes": [5, 2, 8]}, (True, True)),
    "flatten-and-back": ([_EXPORTED_LINK[0], ("Flatten", ["Yt0"], "F0", {"axis": 2}),
                          ("Reshape", ["F0", "sizes"], "layer0_output", {})], {"sizes": [5, -1, 8]}, (True, True)),
    "unsqueeze-squeeze-identity": ([*_EXPORTED_LINK[:1], ("Reshape", ["Yt0", "y_shape"], "Yr0", {}),
                                    ("Unsqueeze", ["Yr0", "front"], "U0", {}), ("Squeeze", ["U0", "front"], "S0", {}),
                                    ("Identity", ["S0"], "layer0_output", {})], {"front": [0]}, (False, False)),
}


@pytest.mark.parametrize("case_name", LINK_KEEPS)
def test_layout_ops_that_keep_every_element_in_place_load_as_the_stack(case_name):
    """The control: other layout ops that hand layer 1 its input in place (sizes written out where the graph
    fixes them, a Flatten undone, an Unsqueeze undone) run in onnxruntime to the stack's output bit for bit,
    and load as the stack."""
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    link, constants, fixed = LINK_KEEPS[case_name]
    plain, cfg, case = _bidirectional_stack(_EXPORTED_LINK)
    variant = _bidirectional_stack(link, constants, fixed)[0]
    assert _onnxruntime(variant, case.x).tobytes() == _onnxruntime(plain, case.x).tobytes()
    model, weights, biases = onnx_model.import_model(variant)
    assert repr(model) == repr(cfg.model())
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, case.weights + case.biases, strict=True))


def test_sizes_too_large_to_replay_are_refused_before_any_is_allocated():
    """A graph that fixes huge sizes and writes them out in a Reshape (here T=10^7, B=10^3: 8*10^10 labels)
    is refused with advice instead of allocating the labels of a whole layer output."""
    from compat_tests.interop import onnx_model

    T, B = 10**7, 10**3
    proto = _bidirectional_stack([_EXPORTED_LINK[0], ("Reshape", ["Yt0", "sizes"], "layer0_output", {})],
                                 {"sizes": [T, B, 8]})[0]
    for dim, size in zip(proto.graph.input[0].type.tensor_type.shape.dim, (T, B)):
        dim.dim_value = size
    with pytest.raises(ValueError, match=re.escape(f"the sizes the graph fixes (T={T}, B={B}, D=2, H=4) are too "
                                                   f"many elements to replay them at; export with T and B free")):
        onnx_model.import_model(proto)


def _shape_of(tensor: str, out: str, start: int, end: int) -> list[tuple]:
    """Link ops computing ``out``: the dims ``[start, end)`` of ``tensor`` (Shape, then Slice)."""
    return [("Shape", [tensor], f"{out}_all", {}), ("Slice", [f"{out}_all", f"at{start}", f"at{end}"], out, {})]


_AT = {f"at{k}": [k] for k in range(5)}
_DYNAMO_LINK = [  # what PyTorch's dynamo exporter writes with dynamic axes: [T, B] of Yt0, then D*H by Mul
    _EXPORTED_LINK[0], *_shape_of("Yt0", "tb", 0, 2), *_shape_of("Yt0", "d", 2, 3), *_shape_of("Yt0", "h", 3, 4),
    ("Mul", ["d", "h"], "dh", {}), ("Concat", ["tb", "dh"], "computed", {"axis": 0}),
    ("Reshape", ["Yt0", "computed"], "layer0_output", {})]
SHAPE_KEEPS = {  # links whose Reshape's shape shape arithmetic computes, their constants: each the stack
    "dynamo-exporter": (_DYNAMO_LINK, _AT),
    "sliced-and-minus-one": ([_EXPORTED_LINK[0], *_shape_of("Yt0", "tb", 0, 2),
                              ("Concat", ["tb", "minus_one"], "computed", {"axis": 0}),
                              ("Reshape", ["Yt0", "computed"], "layer0_output", {})], {**_AT, "minus_one": [-1]}),
    "shapes-with-start-and-end": ([_EXPORTED_LINK[0], ("Shape", ["Yt0"], "tb", {"start": 0, "end": -2}),
                                   ("Shape", ["Yt0"], "d", {"start": 2, "end": 3}), ("Shape", ["Yt0"], "h", {"start": -1}),
                                   ("Mul", ["d", "h"], "dh", {}), ("Concat", ["tb", "dh"], "computed", {"axis": 0}),
                                   ("Reshape", ["Yt0", "computed"], "layer0_output", {})], {}),
    "gathered-cast-unsqueezed-from-y": ([("Shape", ["Y0"], "y_dims", {}),
                                         ("Gather", ["y_dims", "zero"], "t", {"axis": 0}),
                                         ("Gather", ["y_dims", "two"], "b", {"axis": 0}),
                                         ("Cast", ["t"], "t32", {"to": 6}), ("Cast", ["t32"], "t64", {"to": 7}),
                                         ("Unsqueeze", ["t64", "front"], "t1", {}), ("Unsqueeze", ["b", "front"], "b1", {}),
                                         ("Sub", ["dh_plus_one", "one"], "dh", {}),
                                         ("Concat", ["t1", "b1", "dh"], "computed", {"axis": 0}), _EXPORTED_LINK[0],
                                         ("Reshape", ["Yt0", "computed"], "layer0_output", {})],
                                        {"zero": 0, "two": 2, "front": [0], "one": [1], "dh_plus_one": [9]}),
}


@pytest.mark.parametrize("case_name", SHAPE_KEEPS)
def test_a_reshape_whose_shape_arithmetic_computes_the_stack_loads(case_name):
    """A Reshape's shape computed at run time from the shapes of the link's own tensors (``Shape``, then
    Slice, Gather, Cast, Unsqueeze, Sub, Mul, Concat), as PyTorch's dynamo exporter writes with dynamic
    axes, is evaluated at each size the replay runs at: these run in onnxruntime to the stack's output bit
    for bit (checked), and load as the stack."""
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    link, constants = SHAPE_KEEPS[case_name]
    plain, cfg, case = _bidirectional_stack(_EXPORTED_LINK)
    variant = _bidirectional_stack(link, constants)[0]
    assert _onnxruntime(variant, case.x).tobytes() == _onnxruntime(plain, case.x).tobytes()
    model, weights, biases = onnx_model.import_model(variant)
    assert repr(model) == repr(cfg.model())
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, case.weights + case.biases, strict=True))


SHAPE_BREAKS = {  # shape arithmetic that computes something other than the stack, constants, the case's T
    # and B, the refusal
    "computed-without-the-transpose": ([*_shape_of("Y0", "t", 0, 1), *_shape_of("Y0", "b", 2, 3),
                                        ("Concat", ["t", "b", "minus_one"], "computed", {"axis": 0}),
                                        ("Reshape", ["Y0", "computed"], "layer0_output", {})],
                                       {**_AT, "minus_one": [-1]}, (5, 2),
                                       "rearranged by Reshape into [3, 2, 8] (replayed at T=3, B=2, D=2, H=4), not as "
                                       "a stack's next"),
    "time-and-batch-read-swapped": ([_EXPORTED_LINK[0], *_shape_of("Yt0", "t", 0, 1), *_shape_of("Yt0", "b", 1, 2),
                                     ("Concat", ["b", "t", "minus_one"], "computed", {"axis": 0}),
                                     ("Reshape", ["Yt0", "computed"], "layer0_output", {})],
                                    {**_AT, "minus_one": [-1]}, (5, 2),
                                    "rearranged by Transpose, Reshape into [2, 3, 8] (replayed at T=3, B=2"),
    "right-only-at-some-sizes": ([_EXPORTED_LINK[0], *_shape_of("Yt0", "t", 0, 1), ("Sub", ["t", "at1"], "t_less", {}),
                                  ("Concat", ["minus_one", "t_less", "dh"], "computed", {"axis": 0}),
                                  ("Reshape", ["Yt0", "computed"], "layer0_output", {})],
                                 {**_AT, "minus_one": [-1], "dh": [8]}, (4, 6),
                                 "is computed by Sub node link3, which adds to or subtracts from a size"),
    # T + (T-1)(T-3)(T-4) is T at every T the check replays (3, 1, 4), and 4 at T=2: a helper's audit
    "a-polynomial-right-at-every-size-replayed": (
        [_EXPORTED_LINK[0], *_shape_of("Yt0", "t", 0, 1), *_shape_of("Yt0", "b", 1, 2),
         ("Sub", ["t", "at1"], "t1", {}), ("Sub", ["t", "at3"], "t3", {}), ("Sub", ["t", "at4"], "t4", {}),
         ("Mul", ["t1", "t3"], "p2", {}), ("Mul", ["p2", "t4"], "p3", {}), ("Add", ["t", "p3"], "tt", {}),
         ("Concat", ["tt", "minus_one", "dh"], "s1", {"axis": 0}), ("Reshape", ["Yt0", "s1"], "r1", {}),
         ("Transpose", ["r1"], "t_1", {"perm": [1, 0, 2]}), ("Concat", ["b", "t", "dh"], "s2", {"axis": 0}),
         ("Reshape", ["t_1", "s2"], "r2", {}), ("Transpose", ["r2"], "layer0_output", {"perm": [1, 0, 2]})],
        {**_AT, "minus_one": [-1], "dh": [8]}, (2, 2), "which adds to or subtracts from a size: such arithmetic can "
                                                      "be right at the sizes the check replays and wrong at others"),
    "a-size-as-an-index": ([_EXPORTED_LINK[0], ("Shape", ["Yt0"], "dims", {}), *_shape_of("Yt0", "t", 0, 1),
                            ("Gather", ["dims", "t"], "picked", {"axis": 0}),
                            ("Concat", ["picked", "minus_one", "dh"], "computed", {"axis": 0}),
                            ("Reshape", ["Yt0", "computed"], "layer0_output", {})],
                           {**_AT, "minus_one": [-1], "dh": [8]}, (3, 4),
                           "is computed by Gather node link4, whose indices, bounds, axes or shape derive from a size"),
}


@pytest.mark.parametrize("case_name", SHAPE_BREAKS)
def test_a_reshape_whose_shape_arithmetic_moves_elements_out_of_place_is_refused(case_name):
    """Shape arithmetic is replayed, not trusted: a shape computed without the Transpose (directions
    interleaved), or with time and batch read from each other's axes, runs in onnxruntime to something other
    than the stack (checked), and is refused at the replay's sizes; one that adds to a size, or indexes by
    one, which can be right at every size replayed and wrong at others (checked), is refused as such."""
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    link, constants, sizes, match = SHAPE_BREAKS[case_name]
    plain, cfg, case = _bidirectional_stack(_EXPORTED_LINK, sizes=sizes)
    variant = _bidirectional_stack(link, constants, sizes=sizes)[0]
    want, got = _onnxruntime(plain, case.x), _onnxruntime(variant, case.x)
    assert got.shape != want.shape or error_stats(got, want.astype(np.float64)).max_abs > 1e-3, \
        "the variant computes what the stack does: not a test of the importer"
    with pytest.raises(ValueError, match=re.escape(match)):
        onnx_model.import_model(variant)


_UNTOLD = "so what the op does to the layer's output cannot be told from the file"
SHAPE_UNKNOWNS = {  # a Reshape's shape that the replay cannot evaluate, constants, the refusal after "its shape (input 1) "
    "shape-of-the-graph-input": ([_EXPORTED_LINK[0], *_shape_of("X", "tb", 0, 2),
                                  ("Concat", ["tb", "minus_one"], "computed", {"axis": 0}),
                                  ("Reshape", ["Yt0", "computed"], "layer0_output", {})], {**_AT, "minus_one": [-1]},
                                 "is computed at run time from the shape of 'X', which is not a tensor of the link "
                                 f"(the Y before it or a layout op's output), {_UNTOLD}"),
    "computed-from-data": ([_EXPORTED_LINK[0], ("ReduceMax", ["Yt0"], "peak", {"keepdims": 0}),
                            ("Cast", ["peak"], "n", {"to": 7}), ("Unsqueeze", ["n", "at0"], "n1", {}),
                            ("Concat", ["minus_one", "n1", "dh"], "computed", {"axis": 0}),
                            ("Reshape", ["Yt0", "computed"], "layer0_output", {})],
                           {**_AT, "minus_one": [-1], "dh": [8]},
                           "is computed at run time by ReduceMax node link1, which is not shape arithmetic"),
    "a-fed-value-through-arithmetic": ([_EXPORTED_LINK[0], ("Concat", ["X_sizes"], "computed", {"axis": 0}),
                                        ("Reshape", ["Yt0", "computed"], "layer0_output", {})], {},
                                       f"is fed at run time (graph input 'X_sizes'), {_UNTOLD}"),
    "cast-to-float": ([_EXPORTED_LINK[0], *_shape_of("Yt0", "tb", 0, 2), ("Cast", ["tb"], "f", {"to": 1}),
                       ("Concat", ["f", "minus_one"], "computed", {"axis": 0}),
                       ("Reshape", ["Yt0", "computed"], "layer0_output", {})], {**_AT, "minus_one": [-1]},
                      "is computed by Cast node link3, which fails: it casts to type 1, not int32 or int64"),
    "float-constants": ([_EXPORTED_LINK[0], *_shape_of("Yt0", "tb", 0, 2), ("Mul", ["tb", "halves"], "f", {}),
                         ("Concat", ["f", "minus_one"], "computed", {"axis": 0}),
                         ("Reshape", ["Yt0", "computed"], "layer0_output", {})],
                        {**_AT, "minus_one": [-1], "halves": [0.5]},
                        f"is computed by Mul node link3 from float32 values, not from the integers of shape "
                        f"arithmetic, {_UNTOLD}"),
    "too-many-values": ([_EXPORTED_LINK[0], ("Concat", ["many", "many"], "computed", {"axis": 0}),
                         ("Reshape", ["Yt0", "computed"], "layer0_output", {})], {"many": list(range(600))},
                        "is computed by Concat node link1, which fails: it would make 1200 values, more than the "
                        "1024 of shape arithmetic"),
    "too-many-values-read": ([_EXPORTED_LINK[0], ("Identity", ["many"], "computed", {}),
                              ("Reshape", ["Yt0", "computed"], "layer0_output", {})], {"many": list(range(2000))},
                             f"is computed by Identity node link1 from 2000 values, not from the few integers of shape "
                             f"arithmetic, {_UNTOLD}"),
    "a-broadcast-too-large": ([_EXPORTED_LINK[0], ("Mul", ["column", "row"], "computed", {}),
                               ("Reshape", ["Yt0", "computed"], "layer0_output", {})],
                              {"column": [[k] for k in range(1000)], "row": [list(range(1000))]},
                              "is computed by Mul node link1, which fails: it would make 1000000 values"),
    "too-deep": ([_EXPORTED_LINK[0], *_shape_of("Yt0", "s0", 0, 3),
                  *[("Identity", [f"s{k}"], f"s{k + 1}", {}) for k in range(70)],
                  ("Concat", ["s70", "minus_one"], "computed", {"axis": 0}),
                  ("Reshape", ["Yt0", "computed"], "layer0_output", {})], {**_AT, "minus_one": [-1]},
                 f"is computed at run time by more than 64 chained ops, {_UNTOLD}"),
}


@pytest.mark.parametrize("case_name", SHAPE_UNKNOWNS)
def test_a_reshape_whose_shape_is_not_shape_arithmetic_is_refused(case_name):
    """A shape computed from anything but the link's own tensors' shapes by the few integer ops of shape
    arithmetic (from the graph's input, from data, from a value fed at run time, through or from floats, as
    more than a few values, or through an endless chain) cannot be told from the file, and is refused naming
    why."""
    from onnx import TensorProto, helper

    from compat_tests.interop import onnx_model

    link, constants, match = SHAPE_UNKNOWNS[case_name]
    proto = _bidirectional_stack(link, constants)[0]
    if case_name == "a-fed-value-through-arithmetic":
        proto.graph.input.append(helper.make_tensor_value_info("X_sizes", TensorProto.INT64, [3]))
    reshape = next(n.name for n in proto.graph.node if n.output[0] == "layer0_output")
    with pytest.raises(ValueError, match=re.escape(f"Reshape node {reshape} between recurrent nodes layer0 and "
                                                   f"layer1: its shape (input 1) {match}")):
        onnx_model.import_model(proto)


def _start_from(slot: int, source: list[tuple], constants: dict[str, np.ndarray]):
    """The 2-layer GRU of ``_foreign_onnx`` (T=5, B=2, H=4) whose second node reads input ``slot``
    (4 sequence_lens, 5 initial_h) from ``start``, computed by ``source`` (``(op, inputs, attributes)`` each,
    output ``s0``, ``s1``, ...; the last is ``start``) over ``constants`` (those named ``*_default`` also graph
    inputs, defaults a caller may override); with its config and case."""
    from onnx import TensorProto, helper, numpy_helper

    cfg, case = _no_initial_state(RNNConfig("gru", num_layers=2, num_units=4, input_size=4, seq_len=5, batch=2))
    proto = _foreign_onnx(cfg, case)
    names = [f"s{k}" for k in range(len(source) - 1)] + ["start"]
    at = [n.name for n in proto.graph.node].index("rnn1")
    for k, (op, inputs, attrs) in enumerate(source):
        proto.graph.node.insert(at + k, helper.make_node(op, inputs, [names[k]], name=f"start{k}", **attrs))
    proto.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in constants.items())
    proto.graph.input.extend(helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
                             for k, v in constants.items() if k.endswith("_default"))  # a caller may override it
    rnn1 = next(n for n in proto.graph.node if n.name == "rnn1")
    rnn1.input.extend([""] * (slot + 1 - len(rnn1.input)))
    rnn1.input[slot] = "start"
    return proto, cfg, case


_ZEROS = np.zeros((1, 2, 4), np.float32)
_SHAPE = np.array([1, 2, 4], np.int64)
STARTS_REFUSED = {  # slot, source ops, constants, what the refusal says after "node rnn1 reads its "
    "a-nonzero-initial-state": (5, [("Identity", ["h"], {})], {"h": _ZEROS + 0.5},
                                "initial_h from initializer 'h', which is not all zeros"),
    "constant-of-shape-of-another-value": (5, [("ConstantOfShape", ["shape"], {"value": _tensor_of(0.5)})],
                                           {"shape": _SHAPE}, "initial_h from ConstantOfShape node start0, whose "
                                                              "value is not zero"),
    "a-nonzero-default-of-a-graph-input": (5, [("Identity", ["h_default"], {})], {"h_default": _ZEROS + 0.5},
                                           "initial_h from initializer 'h_default', which is not all zeros"),
    "a-state-computed-from-zeros": (5, [("Sigmoid", ["zeros"], {})], {"zeros": _ZEROS},
                                    "initial_h from Sigmoid node start0"),
    "fixed-sequence-lengths": (4, [("Identity", ["lengths"], {})], {"lengths": np.array([3, 5], np.int32)},
                               "sequence_lens from initializer 'lengths', fixed in the file"),
}


@pytest.mark.parametrize("case_name", STARTS_REFUSED)
def test_a_node_that_starts_from_what_the_file_fixes_is_refused(case_name):
    """A layer whose initial state the file fixes to something other than zeros, or whose sequence lengths
    it fixes, runs in onnxruntime to something other than the stack (checked); the model read from the
    weights would start from the caller's states and lengths, so the file is refused."""
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    slot, source, constants, match = STARTS_REFUSED[case_name]
    plain = _foreign_onnx(*_no_initial_state(RNNConfig("gru", num_layers=2, num_units=4, input_size=4, seq_len=5,
                                                       batch=2)))
    variant, cfg, case = _start_from(slot, source, constants)
    want, got = _onnxruntime(plain, case.x), _onnxruntime(variant, case.x)
    assert error_stats(got, want.astype(np.float64)).max_abs > 1e-3, \
        "the variant computes what the stack does: not a test of the importer"
    with pytest.raises(ValueError, match=re.escape(f"node rnn1 reads its {match}: the model read from its weights "
                                                   f"starts from the caller's")):
        onnx_model.import_model(variant)


STARTS_KEPT = {  # zeros written out as exporters write them, and a state the caller feeds
    "expanded-zero": (5, [("Expand", ["zero", "shape"], {})], {"zero": np.zeros(1, np.float32), "shape": _SHAPE}),
    "constant-of-shape-zero-sliced": (5, [("ConstantOfShape", ["shape2"], {"value": _tensor_of(0.0)}),
                                          ("Slice", ["s0", "one", "two"], {})],
                                      {"shape2": np.array([2, 2, 4], np.int64), "one": np.array([1], np.int64),
                                       "two": np.array([2], np.int64)}),
    "negative-zeros": (5, [("Identity", ["h"], {})], {"h": -_ZEROS}),
}


@pytest.mark.parametrize("case_name", STARTS_KEPT)
def test_a_node_that_starts_from_zeros_the_file_writes_out_loads(case_name):
    """The control: zero states written out (Expand of a zero, a sliced ConstantOfShape of zero, -0.0) run in
    onnxruntime to the stack's output bit for bit (checked), and load as the stack."""
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    slot, source, constants = STARTS_KEPT[case_name]
    variant, cfg, case = _start_from(slot, source, constants)
    plain = _foreign_onnx(cfg, case)
    assert _onnxruntime(variant, case.x).tobytes() == _onnxruntime(plain, case.x).tobytes()
    model, weights, biases = onnx_model.import_model(variant)
    assert repr(model) == repr(cfg.model())


def test_a_layer_that_reads_a_dropout_mask_is_refused():
    """A Dropout's second output is its mask, not the tensor it passed on: a node reading it is not fed the
    layer before (onnxruntime would not even take the mask's bool as X), so the graph is not a stack."""
    from onnx import helper

    from compat_tests.interop import onnx_model

    proto = _bidirectional_stack([*_EXPORTED_LINK[:1], ("Reshape", ["Yt0", "y_shape"], "Yr0", {})])[0]
    at = [n.output[0] for n in proto.graph.node].index("Yr0") + 1
    proto.graph.node.insert(at, helper.make_node("Dropout", ["Yr0"], ["passed", "layer0_output"], name="drop"))
    with pytest.raises(ValueError, match=re.escape("node layer1 reads X from Dropout node drop's output "
                                                   "'layer0_output', not from the output Y")):
        onnx_model.import_model(proto)


def test_a_batch_major_stack_is_read_by_its_layout():
    """``layout=1`` (ONNX: X ``[B, T, I]``, Y ``[B, T, D, H]``; onnxruntime refuses it, so this reads the
    spec): batch-major nodes chained by a Reshape alone are a stack; a time-major node reading the same
    tensor would take batch for time, and is refused."""
    from onnx import helper

    from compat_tests.interop import onnx_model

    def batch_major(second: int):
        proto = _bidirectional_stack([("Reshape", ["Y0", "y_shape"], "layer0_output", {})])[0]
        for node, layout in zip([n for n in proto.graph.node if n.op_type == "GRU"], (1, second)):
            node.attribute.append(helper.make_attribute("layout", layout))
        return proto

    model = onnx_model.import_model(batch_major(1))[0]
    assert (model.num_layers, model.num_dirs) == (2, 2)
    with pytest.raises(ValueError, match=re.escape("rearranged by Reshape into [2, 3, 8] (replayed at T=3, B=2, "
                                                   "D=2, H=4), not as a stack's next layer reads it, [T, B, D*H]")):
        onnx_model.import_model(batch_major(0))


@pytest.mark.parametrize("mode, direction, batch_first", [
    ("relu", "bidirectional", False), ("lstm", "bidirectional", False), ("gru", "bidirectional", False),
    ("lstm", "unidirectional", False), ("gru", "bidirectional", True)], ids=lambda v: str(v))
def test_a_graph_pytorchs_exporter_wrote_loads_with_the_weights_pytorch_had(mode, direction, batch_first):
    """A real foreign exporter: ``torch.onnx.export`` (the TorchScript exporter) of a 2-layer nn.RNN/LSTM/GRU,
    whose layers it chains through Transpose and Reshape (bidirectional) or Squeeze (unidirectional) among
    its own shape arithmetic, with batch_first a Transpose before and after the stack, loads as that model
    with the weights PyTorch held, bit for bit."""
    torch = pytest.importorskip("torch")
    import warnings

    from compat_tests.interop import onnx_model

    cfg = RNNConfig(mode, num_layers=2, num_units=4, input_size=3, direction=direction, dtype="float32")
    case, model = make_case(cfg), cfg.model()
    kwargs = dict(bidirectional=direction == "bidirectional", batch_first=batch_first)
    module = {"relu": lambda: torch.nn.RNN(3, 4, 2, nonlinearity="relu", **kwargs),
              "lstm": lambda: torch.nn.LSTM(3, 4, 2, **kwargs), "gru": lambda: torch.nn.GRU(3, 4, 2, **kwargs)}[mode]()
    module.load_state_dict({k: torch.from_numpy(v) for k, v in
                            torch_format.to_state_dict(model, case.weights, case.biases).items()})
    stream, x = io.BytesIO(), case.x.transpose(1, 0, 2).copy() if batch_first else case.x
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter announces its deprecation
        torch.onnx.export(module, (torch.from_numpy(x),), stream, dynamo=False, opset_version=17)
    import onnx

    proto = onnx.load_from_string(stream.getvalue())
    assert len([n for n in proto.graph.node if n.op_type in ("RNN", "LSTM", "GRU")]) == 2
    got, weights, biases = onnx_model.import_model(proto)
    assert repr(got) == repr(model)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, case.weights + case.biases, strict=True))


def test_every_graph_of_a_sweep_of_pytorchs_exporter_loads_as_its_module():
    """The stack check refuses no graph PyTorch's exporter writes: 288 modules (RNN(relu), LSTM, GRU; 2 and 3
    layers; uni- and bidirectional; batch_first or not; with and without bias; opsets 11, 13 and 17, whose
    Squeeze takes its axes as an attribute or an input; static and dynamic axes), each loading as its
    module's config with the weights of its state_dict, bit for bit."""
    torch = pytest.importorskip("torch")
    import itertools
    import warnings

    import onnx

    from compat_tests.interop import onnx_model

    classes = {"relu": lambda *a, **kw: torch.nn.RNN(*a, nonlinearity="relu", **kw), "lstm": torch.nn.LSTM,
               "gru": torch.nn.GRU}
    torch.manual_seed(0)
    for mode, layers, bidirectional, batch_first, bias, opset, dynamic in itertools.product(
            classes, (2, 3), (False, True), (False, True), (False, True), (11, 13, 17), (False, True)):
        module = classes[mode](3, 4, layers, bidirectional=bidirectional, batch_first=batch_first, bias=bias)
        stream = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter announces its deprecation
            torch.onnx.export(module, (torch.zeros((2, 5, 3) if batch_first else (5, 2, 3)),), stream, dynamo=False,
                              opset_version=opset, input_names=["x"],
                              dynamic_axes={"x": {0: "a", 1: "b"}} if dynamic else None)
        got, weights, biases = onnx_model.import_model(onnx.load_from_string(stream.getvalue()))
        state = {k: v.detach().numpy() for k, v in module.state_dict().items()}
        want = torch_format.from_state_dict(got, state)
        assert (got.rnn_mode, got.num_layers, got.num_dirs) == (mode, layers, 2 if bidirectional else 1)
        assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, want[0] + want[1], strict=True)), \
            (mode, layers, bidirectional, batch_first, bias, opset, dynamic)


def test_every_graph_of_a_sweep_of_pytorchs_dynamo_exporter_loads_and_runs_as_its_module():
    """PyTorch 2.13's default exporter (``dynamo=True``, through onnxscript) writes a GRU or LSTM as ONNX
    nodes, and with dynamic axes computes the Reshape between layers by shape arithmetic. 16 modules (GRU,
    LSTM; uni- and bidirectional; batch_first or not; static and dynamic axes; 2 or 3 layers, with or without
    bias in turn) each load as the module's config with the weights of its state_dict, bit for bit, and a
    dynamic graph runs in onnxruntime at other sizes (T=7, B=3, where free) to the reference's outputs within
    the policy."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    import itertools

    from compat_tests.interop import onnx_model

    torch.manual_seed(0)
    for k, (mode, bidirectional, batch_first, dynamic) in enumerate(
            itertools.product(("gru", "lstm"), (False, True), (False, True), (False, True))):
        layers, bias = 2 + k % 2, k % 4 < 2
        module = {"gru": torch.nn.GRU, "lstm": torch.nn.LSTM}[mode](3, 4, layers, bias=bias, batch_first=batch_first,
                                                                   bidirectional=bidirectional).eval()
        example = torch.zeros((2, 5, 3) if batch_first else (5, 2, 3))
        dims = {0: torch.export.Dim("b"), 1: torch.export.Dim("t")} if batch_first else \
            {0: torch.export.Dim("t"), 1: torch.export.Dim("b")}
        proto = _dynamo_export(torch, module, example, dynamic_shapes=(dims,) if dynamic else None)
        label = (mode, bidirectional, batch_first, dynamic, layers, bias)
        got, weights, biases = onnx_model.import_model(proto)
        assert (got.rnn_mode, got.num_layers, got.num_dirs) == (mode, layers, 2 if bidirectional else 1), label
        want = torch_format.from_state_dict(got, {k: v.detach().numpy() for k, v in module.state_dict().items()})
        assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, want[0] + want[1], strict=True)), label
        if dynamic:  # at T=7, B=3 where the exporter left them free (it fixes a batch-first T)
            fixed = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim][:2]
            T, B = (fixed[::-1] if batch_first else fixed)
            cfg = RNNConfig(mode, num_layers=layers, num_units=4, input_size=3, seq_len=T or 7, batch=B or 3,
                            direction=got.direction, dtype="float32", initial_state=False)
            case = make_case(cfg)._replace(weights=weights, biases=biases)
            y = _onnxruntime(proto, case.x.transpose(1, 0, 2).copy() if batch_first else case.x)
            expected = run_reference(cfg, case)
            y = y.transpose(1, 0, 2) if batch_first else y
            assert_agree_within_policy(cfg, case, Outputs(y, expected.output_h, expected.output_c), expected,
                                       peer="onnxruntime")


def test_sizes_a_stack_fixes_hold_for_every_layer_after():
    """Two chained 2-layer modules exported with only B dynamic: onnx's shape inference loses T=5 behind the
    first module's computed Reshape, though the graph fixes it (onnxruntime refuses another T). The check
    carries the sizes a layer's output fixes to the layers after it, so the 4-layer stack loads, and runs in
    onnxruntime at another batch to the reference's outputs (a helper's audit found it refused)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    class Chained(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.GRU(3, 4, 2, bidirectional=True)
            self.b = torch.nn.GRU(8, 4, 2, bidirectional=True)

        def forward(self, x):
            return self.b(self.a(x)[0])[0]

    torch.manual_seed(0)
    proto = _dynamo_export(torch, Chained().eval(), torch.zeros(5, 2, 3), dynamic_shapes=({1: torch.export.Dim("b")},))
    model, weights, biases = onnx_model.import_model(proto)
    assert (model.rnn_mode, model.num_layers, model.num_dirs) == ("gru", 4, 2)
    cfg = RNNConfig("gru", num_layers=4, num_units=4, input_size=3, direction="bidirectional", seq_len=5, batch=3,
                    dtype="float32", initial_state=False)
    case = make_case(cfg)._replace(weights=weights, biases=biases)
    expected = run_reference(cfg, case)
    y = _onnxruntime(proto, case.x)
    assert_agree_within_policy(cfg, case, Outputs(y, expected.output_h, None), expected, peer="onnxruntime")


def test_an_initializer_a_caller_may_override_fixes_no_size():
    """An initializer that is also a graph input is a default: here the shape of a Reshape ahead of the stack,
    which would fix T=5, B=2 and so let a Reshape between the layers write those sizes out. Fed another
    shape, onnxruntime runs the graph to something other than the stack (checked), so it is refused
    (a helper's audit found it accepted)."""
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    from compat_tests.interop import onnx_model

    def reshaped_ahead(proto):
        graph = proto.graph
        next(n for n in graph.node if n.op_type == "GRU").input[0] = "X_r"
        graph.node.insert(0, helper.make_node("Reshape", ["X", "x_shape"], ["X_r"], name="ahead"))
        graph.initializer.append(numpy_helper.from_array(np.array([5, 2, 3], np.int64), "x_shape"))
        graph.input.append(helper.make_tensor_value_info("x_shape", TensorProto.INT64, [3]))
        return proto

    variant = reshaped_ahead(_bidirectional_stack([_EXPORTED_LINK[0], ("Reshape", ["Yt0", "sizes"], "layer0_output", {})],
                                                  {"sizes": [5, 2, 8]})[0])
    plain, cfg, case = _bidirectional_stack(_EXPORTED_LINK, sizes=(2, 5))
    plain = reshaped_ahead(plain)

    fed = {"x_shape": np.array(case.x.shape, np.int64)}
    want, got = _onnxruntime(plain, case.x, extra=fed), _onnxruntime(variant, case.x, extra=fed)
    assert got.shape != want.shape or error_stats(got, want.astype(np.float64)).max_abs > 1e-3
    with pytest.raises(ValueError, match=re.escape("shape [5, 2, 8] does not hold the 48 elements of [3, 2, 2, 4]")):
        onnx_model.import_model(variant)


def test_an_rnn_that_pytorchs_dynamo_exporter_unrolls_is_refused_with_advice():
    """PyTorch's dynamo exporter writes ``nn.RNN`` as MatMul, Add and Tanh per step, no RNN node: the refusal
    says so and how to export one that loads (the TorchScript exporter writes RNN nodes; checked)."""
    torch = pytest.importorskip("torch")
    import warnings

    import onnx

    from compat_tests.interop import onnx_model

    module, example = torch.nn.RNN(3, 4, 2).eval(), torch.zeros(5, 2, 3)
    unrolled = _dynamo_export(torch, module, example)
    stream = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter announces its deprecation
        torch.onnx.export(module, (example,), stream, dynamo=False)
    with pytest.raises(ValueError, match=re.escape("the ONNX graph has no GRU, LSTM or RNN node: it computes with "
                                                   "MatMul or Gemm, perhaps a recurrence unrolled into steps")):
        onnx_model.import_model(unrolled)
    assert onnx_model.import_model(onnx.load_from_string(stream.getvalue()))[0].rnn_mode == "tanh"


def test_an_exported_graph_whose_node_was_changed_no_longer_matches_its_config():
    """Our config in the metadata names the cell; a node edited to compute another (the GRU's
    linear_before_reset dropped: the textbook candidate) is refused rather than read by the config."""
    from compat_tests.interop import onnx_model

    cfg = RNNConfig("gru", num_layers=2, num_units=3, input_size=2, direction="bidirectional", dtype="float32")
    case = make_case(cfg)
    proto = onnx_model.export_model(cfg.model(), case.weights, case.biases)
    node = [n for n in proto.graph.node if n.op_type == "GRU"][1]
    node.attribute.remove(next(a for a in node.attribute if a.name == "linear_before_reset"))
    with pytest.raises(ValueError, match="computes a bidirectional 'classic_gru' layer, but the model is a "
                                         "bidirectional 'gru' RNN"):
        onnx_model.import_model(proto)


@pytest.mark.parametrize("cfg", [RNNConfig("gru", num_layers=2, num_units=4, input_size=3, direction="bidirectional"),
                                 RNNConfig("lstm", num_layers=2, num_units=4, input_size=3, num_proj=2),
                                 RNNConfig("relu", num_units=4, input_size=3)], ids=lambda c: c.mode)
def test_a_bias_free_torch_state_dict_loads_as_zero_biases(cfg):
    """``nn.GRU(bias=False)`` and kin: their state_dict has no bias at all, and the module computes the
    reference with zero biases (checked by running it); one that lacks only some biases is damaged."""
    torch = pytest.importorskip("torch")

    case = make_case(cfg)
    case = case._replace(biases=[np.zeros_like(b) for b in case.biases])
    model = cfg.model()
    state = {k: v for k, v in torch_format.to_state_dict(model, case.weights, case.biases).items()
             if not k.startswith("bias_")}
    found = torch_format.config_from_state_dict(state, cfg.mode if cfg.mode == "relu" else None)
    assert found["num_layers"] == cfg.num_layers and found["num_proj"] == cfg.num_proj
    weights, biases = torch_format.from_state_dict(model, state)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, case.weights + case.biases, strict=True))
    kind = {"gru": torch.nn.GRU, "lstm": torch.nn.LSTM, "relu": torch.nn.RNN}[cfg.mode]
    extra = {"proj_size": cfg.num_proj or 0} if cfg.mode == "lstm" else {"nonlinearity": "relu"} if cfg.mode == "relu" else {}
    module = kind(cfg.input_size, cfg.num_units, cfg.num_layers, bias=False, bidirectional=cfg.num_dirs == 2,
                  dtype=torch.float64, **extra)
    module.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    states = (torch.from_numpy(case.h0),) if cfg.mode != "lstm" else ((torch.from_numpy(case.h0), torch.from_numpy(case.c0)),)
    with torch.no_grad():
        y, h = module(torch.from_numpy(case.x), *states)
    h, c = (h, None) if cfg.mode != "lstm" else h
    got = Outputs(y.numpy(), h.numpy(), None if c is None else c.numpy())
    assert_agree_within_policy(cfg, case, got, run_reference(cfg, case), peer="torch-cpu")
    del state["weight_hh_l0"]
    state["bias_hh_l0"] = np.zeros(cfg.num_units * len(model.gates))
    with pytest.raises(ValueError, match="lacks 'weight_hh_l0'"):
        torch_format.from_state_dict(model, state)
    state["weight_hh_l0"] = np.zeros((cfg.num_units * len(model.gates), cfg.num_proj or cfg.num_units))
    with pytest.raises(ValueError, match="lacks 'bias_ih_l0'"):
        torch_format.from_state_dict(model, state)


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
    """What a foreign graph cannot tell (skip_input behind identity W and zero input biases) an option may."""
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


CELL_DAMAGE = {  # mode, tensor (under cell_0), what it becomes, the error; whether a cell alone can tell
    "gru-hidden-bias-of-one": ("gru", "candidate/hidden_projection/bias", lambda a: a[:1], ValueError,
                               r"has shape \[1\], \w+(\(.*\))? needs \[4\]", True),
    "lstm-kernel-column-short": ("lstm", "kernel", lambda a: a[:, :-1], ValueError, r"has shape \[7, 15\]", True),
    "lstm-kernel-row-short": ("lstm", "kernel", lambda a: a[:-1], ValueError, r"has shape \[6, 16\]", False),
    "tanh-bias-of-one": ("tanh", "bias", lambda a: a[:1], ValueError, r"has shape \[1\]", True),
    "classic-gru-float64-bias": ("classic_gru", "candidate/bias", lambda a: a.astype(np.float64), TypeError,
                                 "must be a float32 array, got float64", True),
}


@pytest.mark.parametrize("damage", CELL_DAMAGE)
def test_cells_refuse_a_tensor_of_the_wrong_shape_or_dtype_naming_it(damage):
    """A ``[1]`` bias would broadcast over every unit and run: the cells of a checkpoint are checked against
    the model (each tensor named in full), and a cell made by hand against its own other tensors (named by
    its TF name in the cell; a kernel's input rows only the model can tell)."""
    from reference import cells

    mode, name, change, error, match, cell_tells = CELL_DAMAGE[damage]
    cfg = RNNConfig(mode, num_units=4, input_size=3, dtype="float32")
    case, model = make_case(cfg), cfg.model()
    tensors = tf.to_tf(model, case.weights, case.biases)
    prefix = tf.cell_prefix(model, 0)
    tensors[f"{prefix}/{name}"] = change(tensors[f"{prefix}/{name}"])
    with pytest.raises(error, match=f"tensor '{re.escape(prefix)}/{re.escape(name)}' {match}"):
        cells_from_tf(model, tensors)
    cls, options = cells.TF_CELLS[mode]
    if cell_tells:
        with pytest.raises(error, match=f"{re.escape(prefix)}: {cls.__name__} {re.escape(name)} {match}"):
            cls.from_tf(tensors, prefix, **options)


# ---- behaviours a mutation run of the formats, cells and converters found unchecked -----------------------


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_a_foreign_state_dict_tells_its_dtype(dtype):
    cfg = RNNConfig("lstm", num_units=4, input_size=3, dtype=dtype)
    state = torch_format.to_state_dict(cfg.model(), *make_case(cfg)[:2])
    assert torch_format.config_from_state_dict(state)["dtype"] == dtype


@pytest.mark.parametrize(("mode", "input_mode", "match"), [("classic_gru", "linear_input", "no textbook GRU"),
                                                           ("gru", "skip_input", "no skip_input")])
def test_torch_formats_refuse_what_pytorch_cannot_compute(mode, input_mode, match):
    """``nn.GRU`` is the cuDNN GRU: a textbook GRU's weights would load into it and compute another function."""
    cfg = RNNConfig(mode, num_units=4, input_size=4, input_mode=input_mode, dtype="float32")
    model = cfg.model()
    with pytest.raises(ValueError, match=match):
        torch_format.to_state_dict(model, *make_case(cfg)[:2])
    state = torch_format.to_state_dict(RNNConfig("gru", num_units=4, input_size=4).model(),
                                       *make_case(RNNConfig("gru", num_units=4, input_size=4))[:2])
    with pytest.raises(ValueError, match=match):
        torch_format.from_state_dict(model, {k: v.astype(np.float32) for k, v in state.items()})


def test_a_multi_layer_skip_input_model_goes_through_onnx():
    """Only layer 0 of a skip_input model has identity input matrices; the others are ordinary."""
    from compat_tests.interop import onnx_model

    cfg = RNNConfig("gru", num_layers=3, num_units=3, input_size=3, input_mode="skip_input", direction="bidirectional",
                    dtype="float32")
    case, model = make_case(cfg), cfg.model()
    proto = onnx_model.export_model(model, case.weights, case.biases)
    back, weights, biases = onnx_model.import_model(proto)
    assert repr(back) == repr(model)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, case.weights + case.biases, strict=True))


def test_a_tf_file_with_a_unidirectional_and_a_bidirectional_rnn_in_one_scope_is_refused():
    uni, bi = (RNNConfig("gru", num_units=4, input_size=3, direction=d, dtype="float32")
               for d in ("unidirectional", "bidirectional"))
    tensors = {**tf.to_tf(uni.model(), *make_case(uni)[:2]), **tf.to_tf(bi.model(), *make_case(bi)[:2])}
    meta = {n: (a.dtype.name, a.shape) for n, a in tensors.items()}
    with pytest.raises(ValueError, match="mixed cells under scope None"):
        tf.config_from_tf(meta)


def test_a_tf_file_with_a_gap_in_its_layers_is_refused_saying_so():
    cfg = RNNConfig("gru", num_layers=3, num_units=4, input_size=4, dtype="float32")
    tensors = {n: a for n, a in tf.to_tf(cfg.model(), *make_case(cfg)[:2]).items() if "cell_1/" not in n}
    with pytest.raises(ValueError, match=re.escape("the checkpoint's layers are [0, 2], not 0..1")):
        tf.config_from_tf({n: (a.dtype.name, a.shape) for n, a in tensors.items()})


def test_safetensors_are_written_aligned_and_read_as_writeable_arrays_of_their_own(tmp_path):
    """The format asks for the data to start at a multiple of 8 (readers may map it); a loaded array is the
    caller's to change."""
    for names in (["a"], ["abc"], ["abcdefg", "x"]):
        tensors = {n: np.arange(3, dtype=np.float32) for n in names}
        safetensors.save(tmp_path / "t.safetensors", tensors, {"k": "v"})
        raw = (tmp_path / "t.safetensors").read_bytes()
        assert (8 + struct.unpack("<Q", raw[:8])[0]) % 8 == 0, names
        loaded, _ = safetensors.load(tmp_path / "t.safetensors")
        for a in loaded.values():
            assert a.flags.writeable and a.flags.owndata
            a += 1
    with pytest.raises(TypeError, match="metadata must map str to str"):
        safetensors.save(tmp_path / "m.safetensors", {"a": np.ones(2, np.float32)}, {"step": 3})


def test_a_float16_cell_called_directly_computes_in_float32():
    """Like the fused reference (and cuDNN's float16 math): a TF-style call with float16 values."""
    cfg = RNNConfig("gru", num_units=4, input_size=3, dtype="float16")
    case, model = make_case(cfg), cfg.model()
    (cell,) = cells_from_tf(model, tf.to_tf(model, case.weights, case.biases))
    h, _ = cell(case.x[0], case.h0[0])
    assert h.dtype == np.float32


@pytest.mark.parametrize(("attrs", "match"), [
    ({"direction": "reverse"}, "node rnn0: direction 'reverse' has no cuDNN equivalent"),
    ({"hidden_size": 7}, re.escape("node rnn0: hidden_size 7 disagrees with R's shape [1, 12, 4]")),
])
def test_a_foreign_onnx_node_that_disagrees_with_cudnn_in_shape_or_direction_is_refused(attrs, match):
    from compat_tests.interop import onnx_model

    cfg, case = _no_initial_state(RNNConfig("gru", num_units=4, input_size=3))
    with pytest.raises(ValueError, match=match):
        onnx_model.import_model(_foreign_onnx(cfg, case, {0: attrs}))


def test_a_foreign_onnx_rnn_node_without_activations_is_tanh():
    """ONNX's RNN defaults to Tanh."""
    from compat_tests.interop import onnx_model

    cfg, case = _no_initial_state(RNNConfig("tanh", num_units=4, input_size=3))
    proto = _foreign_onnx(cfg, case)
    node = next(n for n in proto.graph.node if n.op_type == "RNN")
    node.attribute.remove(next(a for a in node.attribute if a.name == "activations"))
    assert onnx_model.import_model(proto)[0].rnn_mode == "tanh"
