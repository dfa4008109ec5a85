"""The cell equations, written out independently from cuDNN's documentation, and dropout between layers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compat_tests.config import BIAS_MODE_NAMES, Case, Outputs, RNNConfig, make_case
from compat_tests.judge.compare import assert_agree_within_policy
from compat_tests.judge.tolerances import DROPOUT_RATE_SIGMAS
from compat_tests.run import forward_case, run_reference
from reference.formats.canonical import by_pseudo_layer
from reference.layout import BIAS_MODES


def sig(v):
    return 1.0 / (1.0 + np.exp(-v))


def textbook_step(mode, x, h, c, W, R, bW, bR, P):
    """One step of one pseudo-layer for one sequence, gate by gate (lists in canonical gate order); ``bW`` or
    ``bR`` ``None`` where the bias mode has no such bias (the term is left out)."""
    pre = [W[g] @ x for g in range(len(W))] if W is not None else [x + 0.0 for _ in R]
    pre = pre if bW is None else [p + b for p, b in zip(pre, bW)]
    rec = [R[g] @ h if bR is None else R[g] @ h + bR[g] for g in range(len(R))]
    if mode == "relu":
        return np.maximum(pre[0] + rec[0], 0.0), None
    if mode == "tanh":
        return np.tanh(pre[0] + rec[0]), None
    if mode == "lstm":
        i, f = sig(pre[0] + rec[0]), sig(pre[1] + rec[1])
        g, o = np.tanh(pre[2] + rec[2]), sig(pre[3] + rec[3])
        c_new = f * c + i * g
        h_new = o * np.tanh(c_new)
        return (h_new if P is None else P @ h_new), c_new
    r, z = sig(pre[0] + rec[0]), sig(pre[1] + rec[1])
    if mode == "gru":  # cuDNN: h' = tanh(W_h x + r .* (R_h h + b_Rh) + b_Wh)
        n = np.tanh(pre[2] + r * rec[2])
    else:  # textbook: h' = tanh(W_h x + R_h (r .* h) + b_Wh + b_Rh)
        n = np.tanh(pre[2] + R[2] @ (r * h) + (0.0 if bR is None else bR[2]))
    return (1.0 - z) * n + z * h, None


@pytest.mark.parametrize("bias_mode", BIAS_MODE_NAMES)
@pytest.mark.parametrize(("mode", "variant"), [(m, v) for m in ("relu", "tanh", "lstm", "gru", "classic_gru")
                                                 for v in ("plain", "skip_input")] + [("lstm", "projection")])
def test_reference_follows_the_documented_equations(mode, variant, bias_mode):
    cfg = RNNConfig(mode, num_units=5, input_size=5 if variant == "skip_input" else 3, seq_len=4, batch=3,
                    input_mode="skip_input" if variant == "skip_input" else "linear_input",
                    num_proj=2 if variant == "projection" else None, weight_scale=2.0, seed=3, bias_mode=bias_mode)
    case = make_case(cfg)
    t = by_pseudo_layer(cfg.model(), case.weights, case.biases)[0]
    assert (t.W is None) == (variant == "skip_input")  # skip_input's layer 0: no input matrices, ...
    assert (t.b_W is not None) == BIAS_MODES[bias_mode].input  # ... its input biases as any layer's
    output = np.zeros((cfg.seq_len, cfg.batch, cfg.state_width))
    h_n, c_n = np.zeros_like(case.h0), None if case.c0 is None else np.zeros_like(case.c0)
    for b in range(cfg.batch):
        h = case.h0[0, b]
        c = None if case.c0 is None else case.c0[0, b]
        for step in range(cfg.seq_len):
            h, c = textbook_step(mode, case.x[step, b], h, c, t.W, t.R, t.b_W, t.b_R, t.P)
            output[step, b] = h
        h_n[0, b] = h
        if c is not None:
            c_n[0, b] = c
    assert_agree_within_policy(cfg, case, run_reference(cfg, case), Outputs(output, h_n, c_n))


def dropout_setup(p, seed=7, mode="gru", direction="bidirectional"):
    cfg = RNNConfig(mode, num_layers=3, num_units=4, input_size=3, direction=direction, seq_len=5, batch=3,
                    lengths=(5, 2, 4), seed=2)
    case = make_case(cfg)
    model = cfg.model(dropout=p, seed=seed)
    params = model.canonical_to_params(case.weights, case.biases)
    return cfg, case, model, params


@pytest.mark.parametrize("mode", ["lstm", "gru"])
@pytest.mark.parametrize("p", [0.3, 0.5, 1.0])
def test_dropout_masks_replay_layer_by_layer(mode, p):
    """Rebuild the stack from 1-layer models: each layer's output times its recorded mask / (1 - p)
    (zero when p == 1) is the next layer's input; the last layer gets no dropout."""
    cfg, case, model, params = dropout_setup(p, mode=mode)
    result = forward_case(model, cfg, case, True, params)
    masks = result.reserve.dropout_masks
    assert len(masks) == cfg.num_layers - 1
    tensors = by_pseudo_layer(model, case.weights, case.biases)
    layer_input = case.x
    for layer in range(cfg.num_layers):
        one = cfg.with_(num_layers=1, input_size=layer_input.shape[2])
        pls = tensors[2 * layer: 2 * layer + 2]
        weights = [w for t in pls for w in t.W + t.R]
        biases = [b for t in pls for b in t.b_W + t.b_R]
        sl = slice(2 * layer, 2 * layer + 2)
        out = run_reference(one, Case(weights, biases, layer_input, case.h0[sl],
                                      None if case.c0 is None else case.c0[sl], case.lengths))
        np.testing.assert_array_equal(result.output_h[sl], out.output_h)
        layer_input = out.output
        if layer < cfg.num_layers - 1:
            layer_input = layer_input * masks[layer] * (1.0 / (1.0 - p) if p < 1 else 0.0)
    np.testing.assert_array_equal(result.output, layer_input)


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0])
def test_inference_ignores_dropout(p):
    cfg, case, model, params = dropout_setup(p)
    _, _, no_dropout, _ = dropout_setup(0.0)
    a = forward_case(model, cfg, case, False, params)
    b = forward_case(no_dropout, cfg, case, False, params)
    assert a.reserve.dropout_masks == ()
    np.testing.assert_array_equal(a.output, b.output)
    np.testing.assert_array_equal(a.output_h, b.output_h)


def test_one_layer_has_no_dropout():
    cfg = RNNConfig("tanh", num_layers=1, seq_len=4, batch=2)
    model = cfg.model(dropout=0.9)
    case = make_case(cfg)
    result = forward_case(model, cfg, case, True)
    assert result.reserve.dropout_masks == ()


@given(p=st.sampled_from([0.1, 0.25, 0.5, 0.8]), seed=st.integers(0, 2**32 - 1))
def test_dropout_keep_rate(p, seed):
    cfg = RNNConfig("relu", num_layers=2, num_units=64, input_size=3, seq_len=50, batch=20)
    model = cfg.model(dropout=p, seed=seed)
    case = make_case(cfg)
    (mask,) = forward_case(model, cfg, case, True).reserve.dropout_masks
    n = mask.size
    kept = mask.mean()
    bound = DROPOUT_RATE_SIGMAS * np.sqrt(p * (1 - p) / n)
    assert abs(kept - (1 - p)) <= bound, f"kept {kept:.4f} of {n}, expected {1 - p}"


def test_dropout_is_seeded_and_advances():
    cfg, case, a, params = dropout_setup(0.5, seed=123)
    _, _, b, _ = dropout_setup(0.5, seed=123)
    _, _, c, _ = dropout_setup(0.5, seed=124)
    first_a = forward_case(a, cfg, case, True, params).reserve.dropout_masks
    first_b = forward_case(b, cfg, case, True, params).reserve.dropout_masks
    first_c = forward_case(c, cfg, case, True, params).reserve.dropout_masks
    second_a = forward_case(a, cfg, case, True, params).reserve.dropout_masks
    assert all(np.array_equal(x, y) for x, y in zip(first_a, first_b)), "same seed, same masks"
    assert not all(np.array_equal(x, y) for x, y in zip(first_a, first_c)), "another seed, other masks"
    assert not all(np.array_equal(x, y) for x, y in zip(first_a, second_a)), "each call draws new masks"


def test_batch_major_masks_are_in_the_calls_layout_and_are_the_ones_applied():
    cfg, case, _, params = dropout_setup(0.5, seed=99)
    bm = cfg.with_(time_major=False)
    bm_case = case._replace(x=np.ascontiguousarray(case.x.transpose(1, 0, 2)),
                            h0=np.ascontiguousarray(case.h0.transpose(1, 0, 2)))
    time_major = forward_case(dropout_setup(0.5, seed=99)[2], cfg, case, True, params)
    batch_major = forward_case(dropout_setup(0.5, seed=99)[2], bm, bm_case, True, params)
    for tm_mask, bm_mask in zip(time_major.reserve.dropout_masks, batch_major.reserve.dropout_masks):
        assert bm_mask.shape == (cfg.batch, cfg.seq_len, 2 * cfg.num_units)
        np.testing.assert_array_equal(bm_mask, tm_mask.transpose(1, 0, 2))
    np.testing.assert_array_equal(batch_major.output, time_major.output.transpose(1, 0, 2))
