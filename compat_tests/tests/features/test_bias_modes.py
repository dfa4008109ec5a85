"""cuDNN's bias modes (``cudnnRNNBiasMode_t``: ``bias_mode="double" | "single_inp" | "single_rec" | "none"``).

- the plain cells of ``reference.spec`` under each mode: small cases computed by hand from cuDNN's documented
  equations (for cuDNN's GRU the single modes are different functions: ``b_Rh`` sits inside the reset gate's
  product), PyTorch's modules on the same weights (``bias=False`` is ``CUDNN_RNN_NO_BIAS``), and central finite
  differences of every gradient;
- the engine (and a model bound to its parameters, step by step) against those cells, forward and backward,
  over drawn configs of the three modes beside the default; a bug planted in the engine's bias handling fails
  there;
- the default ``"double"`` is what every other test runs; the bias mode is refused by name where it is bad.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reference
from compat_tests.config import BIAS_MODE_NAMES, Case, Outputs, RNNConfig, make_case
from compat_tests.judge.compare import assert_agree_within_policy, assert_peer_agrees
from compat_tests.peers.base import Capabilities
from compat_tests.run import forward_case, ground_truth
from compat_tests.strategies import rnn_configs
from compat_tests.tests.helpers import (
    TINY,
    assert_caught_in_the_engine,
    bound_case,
    engine_against_spec,
    failures,
    finite_difference_failures,
    random_masks,
    run_stream,
    same_bits,
)
from reference import layout, spec
from reference.model import _CudnnRNN

SINGLE_OR_NONE = tuple(m for m in BIAS_MODE_NAMES if m != "double")  # the default is every other test's


def sig(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v))


def one_unit_case(cfg: RNNConfig, weights: dict[int, float], bias: float, x: float = 1.0, h: float = 1.0,
                  c: float = 1.0) -> Case:
    """A case of a one-unit, one-step, one-sequence network: ``weights[lin_layer_id]`` (0 where not given), every
    bias the mode has ``bias``."""
    model = cfg.model()
    w_regions, b_regions = model.canonical_regions()
    W = [np.full(r.shape, weights.get(r.lin_layer_id, 0.0)) for r in w_regions]
    B = [np.full(r.shape, bias) for r in b_regions]
    state = np.full((1, 1, 1), h)
    return Case(W, B, np.full((1, 1, 1), x), state, np.full((1, 1, 1), c) if cfg.has_cell_state else None, None)


def hand_outputs(h_new: float, c_new: float | None = None) -> Outputs:
    return Outputs(np.full((1, 1, 1), h_new), np.full((1, 1, 1), h_new),
                   None if c_new is None else np.full((1, 1, 1), c_new))


# The bias a mode adds to a gate whose two biases are both 0.75: what the documented equations read.
BOTH_BIASES = {"double": 1.5, "single_inp": 0.75, "single_rec": 0.75, "none": 0.0}


def by_hand(mode: str, bias_mode: str, skip_input: bool = False) -> Outputs:
    """One step of a one-unit cell from cuDNN's equations, x = h = c = 1, every bias the mode has 0.75, written
    out here with ``math``: relu/tanh ``W = 0.5, R = 0.25``; the LSTM's matrices 0; the GRUs' reset and update
    matrices 0 (so r and z are the sigmoid of their biases), ``W_h = 0.5``, ``R_h = 0.25``. With
    ``skip_input`` there is no ``W``: x enters every gate as it is (``W x`` is 1), and the input biases the
    mode has are added as under linear_input."""
    b = BOTH_BIASES[bias_mode]
    wx = 1.0 if skip_input else 0.0  # W x of the gates whose W is 0 here
    if mode in ("relu", "tanh"):
        a = (1.0 if skip_input else 0.5) + 0.25 + b
        return hand_outputs(max(a, 0.0) if mode == "relu" else math.tanh(a))
    if mode == "lstm":  # every gate's pre-activation is W x + b
        g = wx + b
        c_new = sig(g) * 1.0 + sig(g) * math.tanh(g)
        return hand_outputs(sig(g) * math.tanh(c_new), c_new)
    r = z = sig(wx + b)
    b_W = 0.75 if layout.BIAS_MODES[bias_mode].input else 0.0
    b_R = 0.75 if layout.BIAS_MODES[bias_mode].recurrent else 0.0
    w_h = 1.0 if skip_input else 0.5
    if mode == "gru":  # cuDNN: n = tanh(W_h x + b_Wh + r * (R_h h + b_Rh))
        n = math.tanh(w_h + b_W + r * (0.25 + b_R))
    else:  # textbook: n = tanh(W_h x + b_Wh + R_h (r * h) + b_Rh)
        n = math.tanh(w_h + b_W + 0.25 * r + b_R)
    return hand_outputs((1.0 - z) * n + z * 1.0)


HAND_WEIGHTS = {"relu": {0: 0.5, 1: 0.25}, "tanh": {0: 0.5, 1: 0.25}, "lstm": {},
                "gru": {2: 0.5, 5: 0.25}, "classic_gru": {2: 0.5, 5: 0.25}}


@pytest.mark.parametrize("input_mode", ["linear_input", "skip_input"])
@pytest.mark.parametrize("bias_mode", BIAS_MODE_NAMES)
@pytest.mark.parametrize("mode", list(HAND_WEIGHTS))
def test_the_spec_cells_follow_cudnns_equations_by_hand(mode, bias_mode, input_mode):
    """The truth and the engine on a one-unit step whose value is worked out by hand from the equations above;
    skip_input's layer 0 has no input matrices but adds its input biases (cuDNN 9.19.0 has them:
    reports/gpu/nvidia-h200-cudnn9.19.0/capture)."""
    cfg = RNNConfig(mode, num_units=1, input_size=1, seq_len=1, batch=1, bias_mode=bias_mode, input_mode=input_mode)
    case = one_unit_case(cfg, HAND_WEIGHTS[mode], 0.75)
    want = by_hand(mode, bias_mode, input_mode == "skip_input")
    assert_agree_within_policy(cfg, case, Outputs(*ground_truth(cfg, case)), want)
    model = cfg.model()
    engine = forward_case(model, cfg, case, is_training=False)
    assert_agree_within_policy(cfg, case, Outputs(*engine[:3]), want)


def test_the_single_modes_make_cudnns_gru_another_function_but_not_the_textbook_one():
    """By hand: cuDNN's GRU gives four values under the four modes (``b_Rh`` is scaled by r, ``b_Wh`` is not);
    the textbook GRU one value under both single modes (its two candidate biases add alike)."""
    values = {(mode, m): by_hand(mode, m).output.item() for mode in ("gru", "classic_gru") for m in BIAS_MODE_NAMES}
    assert len({values["gru", m] for m in BIAS_MODE_NAMES}) == 4
    assert values["classic_gru", "single_inp"] == values["classic_gru", "single_rec"]


TORCH_CONFIGS = [RNNConfig(mode, num_layers=2, num_units=4, input_size=3, direction="bidirectional", seq_len=5,
                           batch=3, weight_scale=2.0, bias_mode=bias_mode, seed=11)
                 for mode in ("relu", "tanh", "lstm", "gru") for bias_mode in BIAS_MODE_NAMES]


def double_bias_lists(cfg: RNNConfig, biases: list[np.ndarray]) -> list[np.ndarray]:
    """``biases`` of ``cfg``'s bias mode as the double bias's canonical list, zeros for the biases it lacks."""
    mine = {(r.pseudo_layer, r.lin_layer_id): b for r, b in zip(cfg.model().canonical_regions()[1], biases)}
    return [mine.get((r.pseudo_layer, r.lin_layer_id), np.zeros(r.shape))
            for r in cfg.with_(bias_mode="double").model().canonical_regions()[1]]


@pytest.mark.parametrize("cfg", TORCH_CONFIGS, ids=lambda c: f"{c.mode}-{c.bias_mode}")
def test_the_spec_cells_are_pytorchs_modules_with_the_absent_biases_zero(cfg):
    """PyTorch's RNN, LSTM and GRU (reset-after, as cuDNN's) with ``bias_ih`` zero compute the recurrent single
    bias, with ``bias_hh`` zero the input one, and with ``bias=False`` no bias: the truth of each mode."""
    torch = pytest.importorskip("torch")
    from reference.formats import torch as torch_format

    case = make_case(cfg)
    double = cfg.with_(bias_mode="double")
    state = torch_format.to_state_dict(double.model(), case.weights, double_bias_lists(cfg, case.biases))
    if cfg.bias_mode == "none":
        state = {k: v for k, v in state.items() if not k.startswith("bias_")}
    kind = {"gru": torch.nn.GRU, "lstm": torch.nn.LSTM, "relu": torch.nn.RNN, "tanh": torch.nn.RNN}[cfg.mode]
    extra = {"nonlinearity": cfg.mode} if cfg.mode in ("relu", "tanh") else {}
    module = kind(cfg.input_size, cfg.num_units, cfg.num_layers, bias=cfg.bias_mode != "none", bidirectional=True,
                  dtype=torch.float64, **extra)
    module.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    h0 = torch.from_numpy(case.h0)
    with torch.no_grad():
        y, h = module(torch.from_numpy(case.x), (h0, torch.from_numpy(case.c0)) if cfg.mode == "lstm" else h0)
    h, c = h if cfg.mode == "lstm" else (h, None)
    got = Outputs(y.numpy(), h.numpy(), None if c is None else c.numpy())
    assert_agree_within_policy(cfg, case, got, Outputs(*ground_truth(cfg, case)), peer="torch-cpu")


@given(cfg=rnn_configs(dtypes_=("float64",), bias_modes_=SINGLE_OR_NONE, **TINY), dropout=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_spec_gradients_match_central_finite_differences_under_every_bias_mode(cfg, dropout, seed):
    """Each new gradient (and every other one) of the spec under the single modes and none, against central
    finite differences of the spec's own forward pass."""
    masks = random_masks(cfg, seed) if dropout and cfg.num_layers > 1 else ()
    bad = finite_difference_failures(cfg, make_case(cfg), 0.5 if masks else 0.0, masks, seed=seed)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("bias_mode", SINGLE_OR_NONE)
@pytest.mark.parametrize("mode", ["relu", "tanh", "lstm", "gru", "classic_gru"])
def test_every_bias_gradient_is_probed_by_finite_differences(mode, bias_mode):
    """Every bias of a small network, each along its own coordinate (the drawn test probes a few)."""
    cfg = RNNConfig(mode, num_layers=2, num_units=2, input_size=2, direction="bidirectional", seq_len=3, batch=2,
                    lengths=(3, 2), weight_scale=2.0, bias_mode=bias_mode, seed=5)
    case = make_case(cfg)
    probes = sum(b.size for b in case.biases)
    bad = finite_difference_failures(cfg, case, probes=max(probes, 1))
    assert not bad, "\n".join(bad)


@given(cfg=rnn_configs(bias_modes_=SINGLE_OR_NONE), dropout=st.sampled_from([0.0, 0.5]),
       seed=st.integers(0, 2**32 - 1))
def test_engine_matches_the_spec_cells_under_every_bias_mode(cfg, dropout, seed):
    """Every mode, dtype, layout, length, direction, projection and skip_input the strategies draw, under the
    single modes and none: the engine's inference and training outputs and every gradient are the spec's
    within the reference peer's budgets."""
    bad = failures(engine_against_spec(cfg, make_case(cfg), dropout, seed))
    assert not bad, "\n".join(bad)


def input_bias_read_as_recurrent(mp: pytest.MonkeyPatch) -> None:
    """The engine's unpacking puts a single input bias where the recurrent one goes (``b_R``), as if cuDNN's
    single bias were one vector whichever GEMM it belongs to."""
    original = _CudnnRNN._pseudo_layers

    def planted(self, params, copy):
        layers = original(self, params, copy)
        if self.bias_mode != "single_inp":
            return layers
        return [type(p)(W=p.W, b_W=None if p.b_W is None else np.zeros_like(p.b_W), R=p.R,
                        b_R=p.b_R if p.b_W is None else p.b_W, P=p.P) for p in layers]

    mp.setattr(_CudnnRNN, "_pseudo_layers", planted)


def recurrent_bias_gradient_left_out(mp: pytest.MonkeyPatch) -> None:
    """The engine scatters no gradient into a single recurrent bias (as if the absent input one's were all)."""
    original = _CudnnRNN._scatter

    def planted(self, grads):
        params = original(self, grads)
        if self.bias_mode == "single_rec":
            for r in self._bias_regions:
                params[r.offset:r.offset + r.size] = 0
        return params

    mp.setattr(_CudnnRNN, "_scatter", planted)


@pytest.mark.parametrize(("cfg", "plant"), [
    (RNNConfig("gru", num_layers=2, num_units=3, input_size=2, seq_len=4, batch=2, bias_mode="single_inp", seed=2),
     input_bias_read_as_recurrent),
    (RNNConfig("lstm", num_units=3, input_size=2, seq_len=3, batch=2, bias_mode="single_rec", seed=3),
     recurrent_bias_gradient_left_out),
], ids=["gru-single_inp-forward", "lstm-single_rec-gradient"])
def test_a_bias_bug_planted_in_the_engine_is_caught_there(cfg, plant):
    assert_caught_in_the_engine(cfg, plant)


STREAMABLE = Capabilities(bidirectional=False, lengths=False, batch_major=False, bias_modes=BIAS_MODE_NAMES)


@given(cfg=rnn_configs(STREAMABLE, bias_modes_=SINGLE_OR_NONE))
def test_a_bound_model_and_its_streams_keep_the_bias_mode(cfg):
    """``model.bind(params)``: its forward is the model's bit for bit, and a stream of ``T`` steps is the spec
    within the policy (and each step the model's one-step forward, bit for bit)."""
    model, params, bound, case = bound_case(cfg)
    want = forward_case(model, cfg, case, is_training=False, params=params)
    assert same_bits(bound.forward(case.x, case.h0, case.c0)[:3], want[:3])
    h, c = case.h0, case.c0
    for x_t in case.x[:2]:
        got = bound.step(x_t, h, c) if cfg.has_cell_state else bound.step(x_t, h)
        one = model.forward(x_t[None], h, params, c, is_training=False)
        assert same_bits(got, (one.output[0], one.output_h, one.output_c)[: len(got)])
        h, c = got[1], got[2] if cfg.has_cell_state else None
    assert_agree_within_policy(cfg, case, run_stream(bound, case), Outputs(*ground_truth(cfg, case)))


@pytest.mark.parametrize("bias_mode", BIAS_MODE_NAMES)
@pytest.mark.parametrize("mode", ["relu", "lstm", "gru"])
def test_the_canonical_biases_are_the_modes_and_none_is_invented(mode, bias_mode):
    """One bias per gate for a single mode, at its GEMM's lin layers; none at all for ``"none"``; and the
    engine's gradient has exactly those (the opaque buffer holds nothing else)."""
    model = reference.make_model(mode, 2, 3, 2, direction="bidirectional", dtype=np.float64, bias_mode=bias_mode)
    G = len(model.gates)
    _, biases = model.canonical_regions()
    lin_ids = {"double": range(2 * G), "single_inp": range(G), "single_rec": range(G, 2 * G), "none": range(0)}
    assert [(r.pseudo_layer, r.lin_layer_id) for r in biases] == [(pl, lin) for pl in range(4)
                                                                   for lin in lin_ids[bias_mode]]
    weights, _ = model.canonical_shapes()
    assert model.params_size() == sum(math.prod(s) for s in weights) + 3 * len(biases)
    assert model.bias_mode == bias_mode and spec.Network.of(model).bias_mode == bias_mode


@pytest.mark.parametrize("bad", ["single", "DOUBLE", None, 2])
def test_a_bad_bias_mode_is_refused_naming_it(bad):
    allowed = r"'double', 'single_inp', 'single_rec', 'none'"
    with pytest.raises(ValueError, match=rf"bias_mode: .*expecting one of {allowed}"):
        reference.CudnnGRU(1, 4, 3, bias_mode=bad)
    with pytest.raises(ValueError, match=r"bias_mode"):
        reference.make_model("lstm", 1, 4, 3, bias_mode=bad)
    with pytest.raises(ValueError, match=rf"bias_mode: .*expecting one of {allowed}"):
        spec.Network("gru", 1, 4, 3, bias_mode=bad)
    with pytest.raises(ValueError, match=r"bias_mode must be one of"):
        RNNConfig("gru", bias_mode=bad)


def test_the_default_is_the_double_bias_and_is_written_as_before():
    """``bias_mode`` defaults to ``"double"``, which a model's repr, a config's JSON and a checkpoint's config
    leave out, as before the option; another mode is shown."""
    from reference import checkpoint

    model = reference.CudnnLSTM(1, 4, 3)
    assert model.bias_mode == "double" and "bias_mode" not in repr(model)
    assert "bias_mode" not in RNNConfig("lstm").to_json() and "bias_mode" not in checkpoint.model_config(model)
    single = reference.CudnnLSTM(1, 4, 3, bias_mode="single_rec")
    assert repr(single).endswith("bias_mode='single_rec')")
    assert RNNConfig.from_json(RNNConfig("lstm", bias_mode="none").to_json()).bias_mode == "none"
    assert checkpoint.model_config(single)["bias_mode"] == "single_rec"


@pytest.mark.parametrize("fmt", ["torch", "keras", "onnx", "tf cells"])
def test_formats_that_cannot_hold_a_single_bias_refuse_it_naming_it(fmt):
    """PyTorch, Keras and ONNX hold both biases of every gate or none; TensorFlow's cells both."""
    from reference import cells
    from reference.formats import keras, onnx
    from reference.formats import torch as torch_format

    model = reference.CudnnGRU(1, 4, 3, bias_mode="single_rec")
    weights = [np.zeros(s, np.float32) for s in model.canonical_shapes()[0]]
    biases = [np.zeros(s, np.float32) for s in model.canonical_shapes()[1]]
    write = {"torch": lambda: torch_format.to_state_dict(model, weights, biases),
             "keras": lambda: keras.to_keras(model, weights, biases),
             "onnx": lambda: onnx.to_onnx(model, weights, biases),
             "tf cells": lambda: cells.cells_from_tf(model, {})}[fmt]
    with pytest.raises(ValueError, match=r"bias_mode must be 'double' .*bias_mode 'single_rec'"):
        write()


@pytest.mark.laddered
@given(data=st.data())
def test_every_peer_agrees_under_each_bias_mode_it_declares(peer, data):
    """Each peer under the bias modes it declares beside the double bias (``Capabilities.bias_modes``: torch-cpu,
    onnxruntime and keras ``"none"``, the reference all four), forward and, where the peer has them, gradients,
    against the float64 truth of the spec cells. (cuDNN's: the GPU ladder's ``bias_modes`` rung.)"""
    others = tuple(m for m in peer.capabilities.bias_modes if m != "double")
    if not others:
        pytest.skip(f"{peer.name} declares only the double bias")
    cfg = data.draw(rnn_configs(peer.capabilities, bias_modes_=others), label="config")
    assert_peer_agrees(peer, cfg)


def test_the_peers_declare_what_their_frameworks_have_with_the_reason():
    """A framework's module has both biases or none (torch ``bias=False``, Keras ``use_bias=False``, an ONNX node
    without ``B``); the strategies never draw another mode for it, and ``rnn-compat peers`` says why."""
    from compat_tests.cli import peer_summary
    from compat_tests.peers import PEERS

    for name in ("torch-cpu", "onnxruntime", "keras"):
        caps = PEERS[name].capabilities
        assert caps.bias_modes == ("double", "none"), name
        why = dict(caps.notes)["bias_mode"]
        assert "both biases of every gate" in why and "no B" in why or "never one" in why, (name, why)
        assert caps.unsupported(RNNConfig("gru", bias_mode="single_rec", dtype="float32")) == why
        assert peer_summary(PEERS[name])["lacks"]["bias_mode single_inp, single_rec"] == why
        with pytest.raises(ValueError, match="names no bias mode the capabilities"):
            rnn_configs(caps, bias_modes_=("single_inp",)).example()
    assert PEERS["reference"].capabilities.bias_modes == BIAS_MODE_NAMES


NONE_CONFIGS = [RNNConfig(mode, num_layers=2, num_units=3, input_size=2, direction="bidirectional", seq_len=3,
                          batch=2, bias_mode="none", dtype="float32", seed=4) for mode in ("tanh", "lstm", "gru")]


@pytest.mark.parametrize("cfg", NONE_CONFIGS, ids=lambda c: c.mode)
def test_a_bias_free_file_of_each_format_reads_as_bias_mode_none_and_back(cfg, tmp_path):
    """``rnn-compat convert``'s formats under ``"none"``: each file written holds no bias (a state_dict without
    ``bias_*``, Keras layers of two weights, ONNX nodes without ``B``, a TF checkpoint without ``bias``) and reads
    back as the same model, ``bias_mode="none"``, bit for bit; a file of each format told only by its tensors (no
    config of ours) says ``"none"`` too."""
    from compat_tests.interop import convert
    from reference import checkpoint
    from reference.formats import torch as torch_format

    model, case = cfg.model(), make_case(cfg)
    files = {"torch": "m.pt", "checkpoint": "m.safetensors", "tf": "m.ckpt", "keras": "m.npz", "onnx": "m.onnx"}
    for fmt, name in files.items():
        if fmt == "onnx":
            pytest.importorskip("onnx")
        convert.write(fmt, tmp_path / name, model, case.weights, case.biases)
        back = convert.read(fmt, tmp_path / name, {"rnn_mode": cfg.mode} if fmt == "tf" else None)
        assert back.model.bias_mode == "none" and back.biases == [], fmt
        assert all(a.tobytes() == b.tobytes() for a, b in zip(back.weights, case.weights, strict=True)), fmt
    state = torch_format.to_state_dict(model, case.weights, case.biases)
    assert not [k for k in state if "bias" in k]
    checkpoint.write_tensors(tmp_path / "foreign.safetensors", state, None)  # PyTorch's names, no config of ours
    told = {"rnn_mode": "tanh"} if cfg.mode == "tanh" else {}  # relu and tanh weights look alike
    foreign = convert.read("auto", tmp_path / "foreign.safetensors", told)
    assert foreign.model.bias_mode == "none" and repr(foreign.model) == repr(model)
    with pytest.raises(ValueError, match="bias_mode is 'none', not 'double'"):
        convert.read("auto", tmp_path / "foreign.safetensors", {**told, "bias_mode": "double"})
    with pytest.raises(ValueError, match=r"lacks 'bias_ih_l0'.*no bias at all.*bias=False, bias_mode 'none'"):
        torch_format.from_state_dict(cfg.with_(bias_mode="double").model(), state)


@pytest.mark.parametrize("target", ["torch", "keras", "onnx"])
def test_convert_refuses_a_single_bias_mode_a_format_cannot_hold_naming_it(target, tmp_path, capsys):
    """A ``single_rec`` model converts to the TF-named formats (which name every bias), and is refused, by name,
    for the formats that hold both biases or none, before anything is written."""
    from compat_tests.cli import main
    from compat_tests.interop import convert

    cfg = RNNConfig("gru", num_units=3, input_size=2, bias_mode="single_rec", dtype="float32")
    model, case = cfg.model(), make_case(cfg)
    convert.write("checkpoint", tmp_path / "m.safetensors", model, case.weights, case.biases)
    out = tmp_path / {"torch": "m.pt", "keras": "m.keras", "onnx": "m.onnx"}[target]
    assert main(["convert", str(tmp_path / "m.safetensors"), str(out), "--to", target]) != 0
    err = capsys.readouterr().err
    assert "bias_mode must be 'double' or 'none'" in err and "bias_mode 'single_rec'" in err, err
    assert not out.exists()
