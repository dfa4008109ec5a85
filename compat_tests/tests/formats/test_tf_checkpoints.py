"""TensorFlow checkpoints and names: TF-named tensors both ways, configs told by names and shapes, and
the TF compatible cells (``reference.cells``) run against the fused reference."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compat_tests import cli
from compat_tests.config import Outputs, RNNConfig, make_case
from compat_tests.judge.compare import assert_agree_within_policy
from compat_tests.run import run_reference
from compat_tests.strategies import SMALL, rnn_configs
from reference import checkpoint
from reference.cells import cells_from_tf, run_cells
from reference.formats import tf


def bias_sums(model, biases):
    """Per pseudo-layer and gate, b_W + b_R (b_R alone where b_W does not exist): what TF saves."""
    w_regions, b_regions = model.canonical_regions()
    by = {(r.pseudo_layer, r.lin_layer_id): b for r, b in zip(b_regions, biases)}
    G = len(model.gates)
    return [by.get((pl, g), 0) + by[(pl, G + g)] for pl in range(model.num_layers * model.num_dirs) for g in range(G)]


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


@given(cfg=rnn_configs(dtypes_=("float32", "float64"), bias_modes_=("single_inp", "single_rec", "none"), **SMALL),
       suffix=st.sampled_from([".safetensors", ".npz"]))
def test_checkpoint_round_trip_under_every_bias_mode(cfg, suffix, tmp_path_factory):
    """A single mode's one bias per gate, saved under TF's summed-bias names, comes back bit for bit (it is not
    halved), as do the weights; the bias mode comes back from the checkpoint's config."""
    case, model = make_case(cfg), cfg.model()
    path = tmp_path_factory.mktemp("ck") / f"model{suffix}"
    checkpoint.save(path, model, case.weights, case.biases)
    ck = checkpoint.load(path)
    assert repr(ck.model) == repr(model) and ck.model.bias_mode == cfg.bias_mode
    for got, sent in zip(ck.weights + ck.biases, case.weights + case.biases, strict=True):
        assert got.tobytes() == sent.tobytes()


@pytest.mark.parametrize(("bias_mode", "candidate_biases"), [
    ("double", ["hidden_projection/bias", "input_projection/bias"]), ("single_inp", ["input_projection/bias"]),
    ("single_rec", ["hidden_projection/bias"]), ("none", [])])
def test_tf_names_hold_the_biases_of_the_bias_mode(bias_mode, candidate_biases):
    """TF's names extended to the bias modes: a gate's summed bias is the single mode's one bias, the cuDNN GRU's
    candidate keeps the projection bias of the mode's side only, and ``"none"`` has no bias tensor."""
    cfg = RNNConfig("gru", num_units=2, input_size=1, bias_mode=bias_mode)
    model, case = cfg.model(), make_case(cfg)
    p = tf.cell_prefix(model, 0)
    saved = tf.to_tf(model, case.weights, case.biases)
    assert sorted(n[len(p) + len("/candidate/"):] for n in saved if "candidate" in n and n.endswith("bias")) == \
        candidate_biases
    assert (f"{p}/gates/bias" in saved) == (bias_mode != "none")
    if bias_mode in ("single_inp", "single_rec"):  # canonical biases: r, z, h of the mode's side
        np.testing.assert_array_equal(saved[f"{p}/gates/bias"], np.concatenate(case.biases[:2]))
        side = "input" if bias_mode == "single_inp" else "hidden"
        np.testing.assert_array_equal(saved[f"{p}/candidate/{side}_projection/bias"], case.biases[2])
    lstm = RNNConfig("lstm", num_units=2, input_size=1, bias_mode="single_rec")
    lmodel, lcase = lstm.model(), make_case(lstm)
    lsaved = tf.to_tf(lmodel, lcase.weights, lcase.biases)[f"{tf.cell_prefix(lmodel, 0)}/bias"]
    np.testing.assert_array_equal(lsaved, np.concatenate([lcase.biases[g] for g in (0, 2, 1, 3)]))  # i, c, f, o


def test_a_tf_named_file_of_another_bias_mode_loads_with_the_mode_given(tmp_path):
    """TF's names do not tell a single bias mode (a file without our config and with biases reads as the double
    bias): given as an override, it reads a file with the biases of that mode; without it, the missing biases
    are named. A file without any cell's bias tells ``"none"`` itself."""
    cfg = RNNConfig("gru", num_layers=2, num_units=3, input_size=2, bias_mode="single_rec")
    model, case = cfg.model(), make_case(cfg)
    checkpoint.write_tensors(tmp_path / "m.npz", tf.to_tf(model, case.weights, case.biases), None)
    with pytest.raises(ValueError, match=r"lacks .* tensor\(s\).*input_projection/bias"):
        checkpoint.load(tmp_path / "m.npz")
    ck = checkpoint.load(tmp_path / "m.npz", {"bias_mode": "single_rec"})
    assert ck.model.bias_mode == "single_rec"
    assert all(a.tobytes() == b.tobytes() for a, b in zip(ck.weights + ck.biases, case.weights + case.biases,
                                                          strict=True))
    none = cfg.with_(bias_mode="none")
    model, case = none.model(), make_case(none)
    checkpoint.write_tensors(tmp_path / "n.npz", tf.to_tf(model, case.weights, case.biases), None)
    ck = checkpoint.load(tmp_path / "n.npz")
    assert ck.model.bias_mode == "none" and ck.biases == []
    assert all(a.tobytes() == b.tobytes() for a, b in zip(ck.weights, case.weights, strict=True))
    checkpoint.save(tmp_path / "c.npz", model, case.weights, case.biases)
    with pytest.raises(ValueError, match=r"bias_mode is 'none', not 'double'"):
        checkpoint.load(tmp_path / "c.npz", {"bias_mode": "double"})


def linear_input_twin(cfg, case):
    """The linear_input model of a skip_input ``cfg``, and its canonical lists: ``case``'s with the identity for
    each of layer 0's input matrices, which skip_input lacks (the biases are the same)."""
    twin = cfg.with_(input_mode="linear_input")
    given_tensors = {(r.kind, r.pseudo_layer, r.lin_layer_id): t
                     for r, t in zip(sum(cfg.model().canonical_regions(), []), case.weights + case.biases)}
    w_regions, b_regions = twin.model().canonical_regions()
    weights = [given_tensors.get((r.kind, r.pseudo_layer, r.lin_layer_id), np.eye(*r.shape, dtype=cfg.dtype))
               for r in w_regions]
    return twin, weights, [given_tensors[(r.kind, r.pseudo_layer, r.lin_layer_id)] for r in b_regions]


@pytest.mark.parametrize("bias_mode", ["double", "single_inp", "single_rec", "none"])
@pytest.mark.parametrize("mode", ["relu", "lstm", "gru", "classic_gru"])
def test_a_skip_input_model_is_saved_as_linear_input_with_identity_input_matrices(mode, bias_mode):
    """Layer 0 of a skip_input model has its input biases (as cuDNN 9.19.0 reports them:
    reports/gpu/nvidia-h200-cudnn9.19.0/capture), so its TF tensors are those of the linear_input model with
    identity input matrices and the same biases, under every bias mode, and they come back: a single mode's
    biases bit for bit, the double bias's as halves of the saved sums."""
    cfg = RNNConfig(mode, num_layers=2, num_units=3, input_size=3, input_mode="skip_input", bias_mode=bias_mode)
    model, case = cfg.model(), make_case(cfg)
    twin, weights, biases = linear_input_twin(cfg, case)
    tensors = tf.to_tf(model, case.weights, case.biases)
    assert {n: a.tobytes() for n, a in tensors.items()} == \
        {n: a.tobytes() for n, a in tf.to_tf(twin.model(), weights, biases).items()}
    got_weights, got_biases = tf.from_tf(model, tensors)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(got_weights, case.weights, strict=True))
    if bias_mode == "double":
        got_biases, want = bias_sums(model, got_biases), bias_sums(model, case.biases)
    else:
        want = case.biases
    assert all(np.asarray(a).tobytes() == np.asarray(b).tobytes() for a, b in zip(got_biases, want, strict=True))


def test_a_skip_input_gru_s_candidate_input_bias_is_its_layer0_b_Wh():
    """The cuDNN GRU's candidate keeps its input bias apart (``candidate/input_projection/bias``); with skip_input
    it is layer 0's ``b_Wh``, which cuDNN has, and restores as such."""
    cfg = RNNConfig("gru", num_units=2, input_size=2, input_mode="skip_input", dtype="float64")
    model, case = cfg.model(), make_case(cfg)
    tensors = tf.to_tf(model, case.weights, case.biases)
    name = f"{tf.cell_prefix(model, 0)}/candidate/input_projection/bias"
    region = next(k for k, r in enumerate(model.canonical_regions()[1]) if (r.pseudo_layer, r.lin_layer_id) == (0, 2))
    assert tensors[name].tobytes() == case.biases[region].tobytes()
    tensors[name] = tensors[name] + 0.5
    assert tf.from_tf(model, tensors)[1][region].tobytes() == (case.biases[region] + 0.5).tobytes()


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
    """A float16 stack stores each layer's output in float16 (``reference.precision``: the state each step
    stores, and each GEMM's result before its bias); here layer 0's float16 output, times 5 in layer 1's GEMM,
    lands on another float16 than its float32 value would. Every product below is exact in float32, so the
    expected value does not depend on the order of any GEMM."""
    model = RNNConfig("relu", num_layers=2, num_units=1, input_size=1, dtype="float16").model()
    f16, f32 = np.float16, np.float32
    weights = [np.full((1, 1), v, f16) for v in (0.1, 0.0, 5.0, 0.0)]  # W0, R0, W1, R1
    biases = [np.full(1, 0.0, f16) for _ in range(4)]  # b_W0, b_R0, b_W1, b_R1
    x = np.full((1, 1, 1), 0.9, f16)
    layer0 = f16(max(f32(weights[0][0, 0]) * f32(x[0, 0, 0]), 0))  # stored in float16 between the layers
    expected = f16(max(f32(f16(f32(weights[2][0, 0]) * f32(layer0))) + f32(biases[2][0]), 0))  # W1 x rounded
    unrounded = f16(max(f32(f16(f32(weights[2][0, 0]) * (f32(weights[0][0, 0]) * f32(x[0, 0, 0]))))
                        + f32(biases[2][0]), 0))
    assert expected != unrounded, "the rounding between the layers must show in the output for this test to mean anything"
    fused, _ = model(x, None, model.canonical_to_params(weights, biases))
    cells = cells_from_tf(model, tf.to_tf(model, weights, biases))
    stepped, _, _ = run_cells(cells, model.num_dirs, x)
    assert fused[0, 0, 0] == stepped[0, 0, 0] == expected, (fused, stepped, expected)


@pytest.mark.parametrize(("mode", "tensor", "change", "match"), [
    ("gru", "candidate/input_projection/kernel", lambda k: 2 * k, "gate 'h' is not the identity"),
    ("gru", "gates/kernel", lambda k: np.concatenate([k[:2][:, ::-1], k[2:]]), "gate 'r' is not the identity"),
    ("lstm", "kernel", lambda k: np.concatenate([k[:2] * 0, k[2:]]), "gate 'i' is not the identity"),
])
def test_a_skip_input_tf_checkpoint_the_layout_cannot_hold_is_refused(mode, tensor, change, match):
    """With skip_input, cuDNN has no input matrices in layer 0 (its input biases it has): a TF checkpoint whose
    input kernels are not the identity computes something else, so it is refused rather than silently
    changed."""
    cfg = RNNConfig(mode, num_units=2, input_size=2, input_mode="skip_input", dtype="float64")
    model, case = cfg.model(), make_case(cfg)
    tensors = tf.to_tf(model, case.weights, case.biases)
    tf.from_tf(model, tensors)  # as written: accepted
    name = f"{tf.cell_prefix(model, 0)}/{tensor}"
    tensors[name] = change(tensors[name])
    with pytest.raises(ValueError, match=re.escape(match)):
        tf.from_tf(model, tensors)


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


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_restored_bias_halves_sum_to_the_saved_bias_exactly(dtype):
    finfo = np.finfo(dtype)
    saved = np.array([3 * finfo.smallest_subnormal, finfo.max, -finfo.tiny, 1 / 3, 0.0], dtype=dtype)
    a, b = tf.halves(saved)
    assert (a + b).tobytes() == saved.tobytes()


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


def test_a_float16_cell_called_directly_computes_in_float32():
    """Like the fused reference (and cuDNN's float16 math): a TF-style call with float16 values."""
    cfg = RNNConfig("gru", num_units=4, input_size=3, dtype="float16")
    case, model = make_case(cfg), cfg.model()
    (cell,) = cells_from_tf(model, tf.to_tf(model, case.weights, case.biases))
    h, _ = cell(case.x[0], case.h0[0])
    assert h.dtype == np.float32
