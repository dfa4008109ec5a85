"""The PyTorch, Keras 3 and ONNX converters: weights converted both ways and run by the framework, and the
foreign weights and configs each converter refuses."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from compat_tests.config import Outputs, RNNConfig, make_case
from compat_tests.judge.compare import assert_agree_within_policy
from compat_tests.judge.conditioning import sensitivity
from compat_tests.judge.metrics import error_stats
from compat_tests.judge.tolerances import judge
from compat_tests.peers import PEERS
from compat_tests.peers.keras_peer import import_keras, keras_layers
from compat_tests.run import run_reference
from compat_tests.strategies import SMALL, rnn_configs
from reference.formats import keras as keras_format
from reference.formats import onnx as onnx_format
from reference.formats import torch as torch_format


def test_a_skip_input_onnx_model_the_layout_cannot_hold_is_refused():
    """ONNX always has input matrices: with skip_input layer 0's must be the identity."""
    cfg = RNNConfig("gru", num_units=2, input_size=2, input_mode="skip_input", dtype="float32")
    model, case = cfg.model(), make_case(cfg)
    (layer,) = onnx_format.to_onnx(model, case.weights, case.biases)
    onnx_format.from_onnx(model, [layer])  # as written: accepted
    layer = {**layer, "W": layer["W"].copy()}
    layer["W"].reshape(-1)[1] += 0.5  # off the identity's diagonal of ONNX's first gate, z
    with pytest.raises(ValueError, match="layer 0 W: skip_input needs identity input matrices, gate 'z' is not"):
        onnx_format.from_onnx(model, [layer])


def test_a_skip_input_onnx_model_s_input_biases_are_its_layer0_b_W():
    """Layer 0 of a skip_input model has its input biases (as cuDNN 9.19.0 reports them:
    reports/gpu/nvidia-h200-cudnn9.19.0/capture): ONNX's ``B`` holds them as any layer's and gives them back."""
    cfg = RNNConfig("gru", num_units=2, input_size=2, input_mode="skip_input", dtype="float32")
    model, case = cfg.model(), make_case(cfg)
    (layer,) = onnx_format.to_onnx(model, case.weights, case.biases)
    z = 1  # b_Wz, the bias of cuDNN's second gate (r, z, h) on layer 0's input
    assert [(r.pseudo_layer, r.lin_layer_id) for r in model.canonical_regions()[1]] == [(0, g) for g in range(6)]
    assert layer["B"][0, :2].tobytes() == case.biases[z].tobytes()  # ONNX's first gate, z: b_Wz
    layer = {**layer, "B": layer["B"].copy()}
    layer["B"][0, 1] += 0.5
    _, biases = onnx_format.from_onnx(model, [layer])
    want = case.biases[z].copy()
    want[1] += 0.5
    assert biases[z].tobytes() == want.tobytes()
    assert all(a.tobytes() == b.tobytes() for k, (a, b) in enumerate(zip(biases, case.biases, strict=True)) if k != z)


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


@pytest.mark.parametrize("cfg", [RNNConfig("gru", num_layers=2, num_units=4, input_size=3, direction="bidirectional"),
                                 RNNConfig("lstm", num_layers=2, num_units=4, input_size=3, num_proj=2),
                                 RNNConfig("relu", num_units=4, input_size=3)], ids=lambda c: c.mode)
def test_a_bias_free_torch_state_dict_reads_as_bias_mode_none(cfg):
    """``nn.GRU(bias=False)`` and kin: their state_dict has no bias at all, which tells ``bias_mode="none"``
    (cuDNN's ``CUDNN_RNN_NO_BIAS``), and the module computes that reference (checked by running it); one that
    lacks only some biases is damaged."""
    torch = pytest.importorskip("torch")

    cfg = cfg.with_(bias_mode="none")
    case = make_case(cfg)
    model = cfg.model()
    state = torch_format.to_state_dict(model, case.weights, case.biases)
    assert not [k for k in state if k.startswith("bias_")]
    found = torch_format.config_from_state_dict(state, cfg.mode if cfg.mode == "relu" else None)
    assert found["num_layers"] == cfg.num_layers and found["num_proj"] == cfg.num_proj
    assert found["bias_mode"] == "none"
    weights, biases = torch_format.from_state_dict(model, state)
    assert biases == [] and all(a.tobytes() == b.tobytes() for a, b in zip(weights, case.weights, strict=True))
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
    double = cfg.with_(bias_mode="double").model()
    with pytest.raises(ValueError, match="lacks 'weight_hh_l0'"):
        torch_format.from_state_dict(double, state)
    state["weight_hh_l0"] = np.zeros((cfg.num_units * len(model.gates), cfg.num_proj or cfg.num_units))
    with pytest.raises(ValueError, match="lacks 'bias_ih_l0'"):
        torch_format.from_state_dict(double, state)
    with pytest.raises(ValueError, match="has tensors .* does not: \\['bias_hh_l0'\\]"):
        torch_format.from_state_dict(model, state)


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
