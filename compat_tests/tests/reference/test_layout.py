"""Parameters: canonical shapes, the opaque layout, and round trips between them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compat_tests.config import BIAS_MODE_NAMES
from compat_tests.strategies import rnn_configs
from compat_tests.tests.helpers import random_bits
from reference.layout import PROJECTION_LIN_LAYER_ID, bias_slots

GATES = {"relu": 1, "tanh": 1, "lstm": 4, "gru": 3, "classic_gru": 3}


# cuDNN's cudnnRNNBiasMode_t as its documentation reads: (an input bias per gate, a recurrent bias per gate)
BIASES = {"double": (True, True), "single_inp": (True, False), "single_rec": (False, True), "none": (False, False)}


EVERY_BIAS_MODE = dict(bias_modes_=BIAS_MODE_NAMES)


def expected_canonical_shapes(cfg):
    """The canonical shapes as TensorFlow's CudnnRNNParamsToCanonical(V2) documents them, with the biases of
    the bias mode only; skip_input's layer 0 has no input matrices but every bias of the bias mode (as cuDNN
    9.19.0 reports it: reports/gpu/nvidia-h200-cudnn9.19.0/capture)."""
    G, H, D = GATES[cfg.mode], cfg.num_units, cfg.num_dirs
    Hr = cfg.num_proj or H
    has_input, has_recurrent = BIASES[cfg.bias_mode]
    weights, biases = [], []
    for layer in range(cfg.num_layers):
        in_width = cfg.input_size if layer == 0 else D * Hr
        skipped = cfg.input_mode == "skip_input" and layer == 0
        for _ in range(D):
            weights += ([] if skipped else [(H, in_width)] * G) + [(H, Hr)] * G
            if cfg.num_proj:
                weights.append((cfg.num_proj, H))
            biases += [(H,)] * G * has_input + [(H,)] * G * has_recurrent
    return weights, biases


@given(cfg=rnn_configs(**EVERY_BIAS_MODE))
def test_canonical_shapes_follow_tensorflow(cfg):
    assert cfg.model().canonical_shapes() == expected_canonical_shapes(cfg)


@given(cfg=rnn_configs(**EVERY_BIAS_MODE))
def test_params_size_is_the_sum_of_canonical_sizes(cfg):
    weights, biases = cfg.model().canonical_shapes()
    assert cfg.model().params_size() == sum(int(np.prod(s)) for s in weights + biases)


@given(cfg=rnn_configs(**EVERY_BIAS_MODE), seed=st.integers(0, 2**32 - 1))
def test_canonical_to_params_to_canonical_is_bit_exact(cfg, seed):
    model = cfg.model()
    rng = np.random.default_rng(seed)
    w_shapes, b_shapes = model.canonical_shapes()
    weights = [random_bits(rng, s, model.dtype) for s in w_shapes]
    biases = [random_bits(rng, s, model.dtype) for s in b_shapes]
    back_w, back_b = model.params_to_canonical(model.canonical_to_params(weights, biases))
    for got, sent in zip(back_w + back_b, weights + biases):
        assert got.dtype == sent.dtype and got.shape == sent.shape
        assert got.tobytes() == sent.tobytes()


@given(cfg=rnn_configs(**EVERY_BIAS_MODE), seed=st.integers(0, 2**32 - 1))
def test_params_to_canonical_to_params_is_bit_exact(cfg, seed):
    model = cfg.model()
    params = random_bits(np.random.default_rng(seed), model.params_size(), model.dtype)
    again = model.canonical_to_params(*model.params_to_canonical(params))
    assert again.tobytes() == params.tobytes()


@given(cfg=rnn_configs(**EVERY_BIAS_MODE))
def test_opaque_regions_tile_the_buffer(cfg):
    model = cfg.model()
    regions = model.opaque_layout()
    offset = 0
    for r in regions:
        assert r.offset == offset, f"gap or overlap at {r}"
        assert len(r.shape) == (2 if r.kind == "weight" else 1)
        offset += r.size
    assert offset == model.params_size()
    w_regions, b_regions = model.canonical_regions()
    assert sorted(w_regions + b_regions, key=lambda r: r.offset) == regions


@given(cfg=rnn_configs(**EVERY_BIAS_MODE))
def test_each_pseudo_layer_groups_its_input_and_recurrent_tensors(cfg):
    """PyTorch's cuDNN path asserts this: per pseudo-layer, the input matrices (ids 0..G-1) are one
    contiguous block in id order, the recurrent ones (G..2G-1) another, and likewise the biases."""
    G = GATES[cfg.mode]
    by_key = {(r.kind, r.pseudo_layer, r.lin_layer_id): r for r in cfg.model().opaque_layout()}
    for kind in ("weight", "bias"):
        for pl in range(cfg.num_layers * cfg.num_dirs):
            for ids in (range(G), range(G, 2 * G)):
                block = [by_key.get((kind, pl, i)) for i in ids]
                if block[0] is None:
                    assert all(r is None for r in block)
                    continue
                for a, b in zip(block, block[1:]):
                    assert b.offset == a.offset + a.size


@given(cfg=rnn_configs(**EVERY_BIAS_MODE), seed=st.integers(0, 2**32 - 1))
def test_opaque_buffer_is_all_matrices_then_all_biases(cfg, seed):
    """Keras builds a 1-layer cuDNN buffer as the weights then the biases, each flattened row-major;
    JAX found the same for multi-layer LSTMs on cuDNN 8/9 ("through trial-and-error and testing")."""
    model = cfg.model()
    rng = np.random.default_rng(seed)
    w_shapes, b_shapes = model.canonical_shapes()
    tensors = [rng.standard_normal(s).astype(model.dtype) for s in w_shapes + b_shapes]
    params = model.canonical_to_params(tensors[: len(w_shapes)], tensors[len(w_shapes):])
    np.testing.assert_array_equal(params, np.concatenate([t.reshape(-1) for t in tensors]))


@pytest.mark.parametrize("direction", ["unidirectional", "bidirectional"])
def test_projection_is_lin_layer_8_after_each_pseudo_layers_matrices(direction):
    from compat_tests.config import RNNConfig

    cfg = RNNConfig("lstm", num_layers=2, num_units=5, input_size=3, direction=direction, num_proj=2)
    regions = cfg.model().opaque_layout()
    for pl in range(2 * cfg.num_dirs):
        mats = [r for r in regions if r.kind == "weight" and r.pseudo_layer == pl]
        assert [r.lin_layer_id for r in mats] == list(range(8)) + [PROJECTION_LIN_LAYER_ID]
        assert mats[-1].shape == (2, 5)
        assert all(r.shape[1] == 2 for r in mats[4:8]), "recurrent matrices act on the projected state"


def test_skip_input_has_no_layer0_input_matrices_but_has_its_input_biases():
    """As cuDNN 9.19.0 reports it (reports/gpu/nvidia-h200-cudnn9.19.0/capture): no input matrices in layer 0,
    every bias there."""
    from compat_tests.config import RNNConfig

    cfg = RNNConfig("gru", num_layers=2, num_units=4, input_size=4, direction="bidirectional",
                    input_mode="skip_input")
    regions = cfg.model().opaque_layout()
    for pl in (0, 1):
        ids = {r.lin_layer_id for r in regions if r.kind == "weight" and r.pseudo_layer == pl}
        assert ids == {3, 4, 5}
        bias_ids = {r.lin_layer_id for r in regions if r.kind == "bias" and r.pseudo_layer == pl}
        assert bias_ids == {0, 1, 2, 3, 4, 5}
    for pl in (2, 3):
        ids = {r.lin_layer_id for r in regions if r.pseudo_layer == pl}
        assert ids == set(range(6))


def test_skip_input_layout_is_the_one_cudnn_reported():
    """What cudnnGetRNNWeightSpaceSize and cudnnGetRNNWeightParams reported on NVIDIA H200, cuDNN 9.19.0
    (reports/gpu/nvidia-h200-cudnn9.19.0/capture, config c002), written out: R of layer 0, then layer 1's
    matrices, then layer 0's b_W and b_R and layer 1's."""
    from compat_tests.config import RNNConfig

    model = RNNConfig("relu", num_layers=2, num_units=8, input_size=8, input_mode="skip_input").model()
    assert model.params_size() == 224
    assert [(r.kind, r.pseudo_layer, r.lin_layer_id, r.offset, r.shape) for r in model.opaque_layout()] == [
        ("weight", 0, 1, 0, (8, 8)), ("weight", 1, 0, 64, (8, 8)), ("weight", 1, 1, 128, (8, 8)),
        ("bias", 0, 0, 192, (8,)), ("bias", 0, 1, 200, (8,)), ("bias", 1, 0, 208, (8,)), ("bias", 1, 1, 216, (8,))]
    one = RNNConfig("relu", num_units=1, input_size=1, input_mode="skip_input").model()
    assert one.params_size() == 3 and one.canonical_shapes() == ([(1, 1)], [(1,), (1,)])  # R; b_W, b_R


@given(cfg=rnn_configs(**EVERY_BIAS_MODE))
def test_each_pseudo_layers_biases_are_where_the_decision_puts_them(cfg):
    """Per pseudo-layer, its biases in buffer order are :func:`reference.layout.bias_slots`' (the one place of
    that decision, confirmed on a GPU: docs/decisions.md), after every matrix of every pseudo-layer; a single mode's
    biases are those of one side (ids ``0..G-1`` or ``G..2G-1``), ``"none"`` has none."""
    G = GATES[cfg.mode]
    regions = cfg.model().opaque_layout()
    last_matrix = max((r.offset + r.size for r in regions if r.kind == "weight"), default=0)
    has_input, has_recurrent = BIASES[cfg.bias_mode]
    for pl in range(cfg.num_layers * cfg.num_dirs):
        ids = [r.lin_layer_id for r in regions if r.kind == "bias" and r.pseudo_layer == pl]
        assert ids == [s.lin_layer_id for s in bias_slots(cfg.bias_mode, G)]  # skip_input's layer 0 as any other
        assert ids == [*range(G)] * has_input + [*range(G, 2 * G)] * has_recurrent
    assert all(r.offset >= last_matrix for r in regions if r.kind == "bias")
