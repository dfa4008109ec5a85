"""Properties the reference must have whatever the weights: consistency of batching, padding, layout,
direction and input mode, and the relation between the two GRU variants."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reference
from compat_tests.config import Case, Outputs, RNNConfig, make_case
from compat_tests.judge.compare import assert_agree_within_policy
from compat_tests.judge.tolerances import GRU_VARIANTS_DIFFER_BY
from compat_tests.run import forward_case, ground_truth, run_reference
from compat_tests.strategies import rnn_configs
from reference import precision, spec
from reference.formats.canonical import by_pseudo_layer
from reference.modes import MODES

REFERENCE_DTYPES = ("float32", "float64")


def one_sequence(cfg: RNNConfig, case: Case, batched: Outputs, b: int, steps: int | None = None):
    """Sequence ``b`` alone (its first ``steps`` steps, unpadded), and the matching slice of ``batched``."""
    batch_axis, time_axis = (1, 0) if cfg.time_major else (0, 1)  # states share the batch axis

    def seq(a):
        a = np.take(a, [b], axis=batch_axis)
        return a if steps is None else np.take(a, range(steps), axis=time_axis)

    def state(a):
        return None if a is None else np.take(a, [b], axis=batch_axis)

    lengths = None if steps is not None or case.lengths is None else case.lengths[[b]]
    one = cfg.with_(batch=1, seq_len=steps or cfg.seq_len, lengths=None if lengths is None else tuple(lengths))
    single = Case(case.weights, case.biases, seq(case.x), state(case.h0), state(case.c0), lengths)
    return one, single, Outputs(seq(batched.output), state(batched.output_h), state(batched.output_c))


@given(cfg=rnn_configs(dtypes_=REFERENCE_DTYPES))
def test_batch_equals_per_sequence_runs(cfg):
    case = make_case(cfg)
    whole = run_reference(cfg, case)
    for b in range(cfg.batch):
        one, single, expected = one_sequence(cfg, case, whole, b)
        assert_agree_within_policy(one, single, run_reference(one, single), expected)


@given(cfg=rnn_configs(dtypes_=("float16", "float32", "float64")))
def test_inference_leaves_params_untouched_and_unshared(cfg):
    """Inference reads ``params`` in place where its blocks already lie in compute order: it must neither
    write them nor hand back an array that shares their memory."""
    model = cfg.model()
    case = make_case(cfg).astype(model.dtype)
    params = model.canonical_to_params(case.weights, case.biases)
    before = params.copy()
    results = forward_case(model, cfg, case, is_training=False, params=params)
    assert params.tobytes() == before.tobytes()
    for name, result in zip(("output", "output_h", "output_c"), results):
        assert result is None or not np.shares_memory(result, params), name


@given(cfg=rnn_configs(dtypes_=REFERENCE_DTYPES), data=st.data())
def test_padded_batch_equals_unpadded_runs(cfg, data):
    lengths = data.draw(st.lists(st.integers(1, cfg.seq_len), min_size=cfg.batch, max_size=cfg.batch), label="lengths")
    cfg = cfg.with_(lengths=tuple(lengths))
    case = make_case(cfg)
    padded = run_reference(cfg, case)
    for b, n in enumerate(lengths):
        one, single, expected = one_sequence(cfg, case, padded, b, steps=n)
        past = np.take(np.take(padded.output, [b], axis=1 if cfg.time_major else 0),
                       range(n, cfg.seq_len), axis=0 if cfg.time_major else 1)
        assert not past.any(), "outputs past a sequence's length must be exactly zero"
        assert_agree_within_policy(one, single, run_reference(one, single), expected)


@given(cfg=rnn_configs(dtypes_=REFERENCE_DTYPES), data=st.data())
def test_padding_content_never_reaches_valid_steps(cfg, data):
    lengths = data.draw(st.lists(st.integers(1, cfg.seq_len), min_size=cfg.batch, max_size=cfg.batch), label="lengths")
    cfg = cfg.with_(time_major=True, lengths=tuple(lengths))
    case = make_case(cfg)
    clean = run_reference(cfg, case)
    x = case.x.copy()
    for b, n in enumerate(lengths):
        x[n:, b] = np.nan
    with np.errstate(invalid="ignore"):
        dirty = run_reference(cfg, case._replace(x=x))
    for got, want in zip(dirty, clean):
        if want is not None:
            assert got.tobytes() == want.tobytes()


@given(cfg=rnn_configs(dtypes_=REFERENCE_DTYPES))
def test_time_major_equals_batch_major(cfg):
    tm = cfg.with_(time_major=True)
    case = make_case(tm)
    bm_case = case._replace(**{k: None if getattr(case, k) is None else np.ascontiguousarray(getattr(case, k).transpose(1, 0, 2))
                               for k in ("x", "h0", "c0")})
    a = run_reference(tm, case)
    b = run_reference(cfg.with_(time_major=False), bm_case)
    for got, want in zip(b, a):
        if want is not None:
            np.testing.assert_array_equal(got.transpose(1, 0, 2), want)


def reverse_within_lengths(x: np.ndarray, lengths) -> np.ndarray:
    out = x.copy()
    for b, n in enumerate(lengths):
        out[:n, b] = x[:n, b][::-1]
    return out


@given(cfg=rnn_configs(dtypes_=("float64",)))
def test_bidirectional_equals_forward_run_plus_reversed_run(cfg):
    """Layer by layer: the backward direction is a unidirectional run over each sequence reversed within
    its length, re-reversed; the layer output is [forward | backward]."""
    cfg = cfg.with_(direction="bidirectional", time_major=True)
    case = make_case(cfg)
    got = run_reference(cfg, case)
    lengths = cfg.lengths or (cfg.seq_len,) * cfg.batch
    tensors = by_pseudo_layer(cfg.model(), case.weights, case.biases)
    layer_input, h_n, c_n = case.x, [], []
    for layer in range(cfg.num_layers):
        outputs = []
        for direction in (0, 1):
            t = tensors[2 * layer + direction]
            uni = cfg.with_(num_layers=1, direction="unidirectional", input_size=layer_input.shape[2],
                            input_mode=cfg.input_mode if layer == 0 else "linear_input")
            weights = (t.W or []) + t.R + ([] if t.P is None else [t.P])
            biases = (t.b_W or []) + t.b_R
            pl = slice(2 * layer + direction, 2 * layer + direction + 1)
            x = layer_input if direction == 0 else reverse_within_lengths(layer_input, lengths)
            single = Case(weights, biases, x, None if case.h0 is None else case.h0[pl],
                          None if case.c0 is None else case.c0[pl], case.lengths)
            out = run_reference(uni, single)
            outputs.append(out.output if direction == 0 else reverse_within_lengths(out.output, lengths))
            h_n.append(out.output_h)
            c_n.append(out.output_c)
        layer_input = np.concatenate(outputs, axis=2)
    expected = Outputs(layer_input, np.concatenate(h_n), None if c_n[0] is None else np.concatenate(c_n))
    assert_agree_within_policy(cfg, case, got, expected)


@given(cfg=rnn_configs(dtypes_=REFERENCE_DTYPES))
def test_training_forward_equals_inference_forward(cfg):
    """Without dropout, a training pass (each step computing in its slice of the trace) and an inference
    pass (each step computing in reused scratch) agree."""
    case = make_case(cfg)
    model = cfg.model()
    train = forward_case(model, cfg, case, is_training=True)
    infer = forward_case(model, cfg, case, is_training=False)
    assert_agree_within_policy(cfg, case, Outputs(*infer[:3]), Outputs(*train[:3]))


@given(cfg=rnn_configs(dtypes_=REFERENCE_DTYPES))
def test_no_initial_state_equals_zero_initial_state(cfg):
    zero = cfg.with_(initial_state=True)
    case = make_case(zero)
    zeros = case._replace(h0=np.zeros_like(case.h0), c0=None if case.c0 is None else np.zeros_like(case.c0))
    for got, want in zip(run_reference(zero, case._replace(h0=None, c0=None)), run_reference(zero, zeros)):
        if want is not None:
            np.testing.assert_array_equal(got, want)


@given(cfg=rnn_configs(dtypes_=("float64",)))
def test_skip_input_equals_linear_input_with_identity_matrices(cfg):
    """skip_input feeds the layer input to every gate as is: linear_input with identity input matrices and the
    same biases, layer 0's input biases included (cuDNN 9.19.0 has them: reports/gpu/nvidia-h200-cudnn9.19.0/
    capture; the GPU suite checks that it adds them)."""
    skip = cfg.with_(input_mode="skip_input", input_size=cfg.num_units)
    case = make_case(skip)
    linear = skip.with_(input_mode="linear_input")
    skip_regions = skip.model().canonical_regions()
    given_tensors = dict(zip([(r.kind, r.pseudo_layer, r.lin_layer_id) for r in skip_regions[0] + skip_regions[1]],
                             case.weights + case.biases))
    w_regions, b_regions = linear.model().canonical_regions()

    def tensor(r):
        if (r.kind, r.pseudo_layer, r.lin_layer_id) in given_tensors:
            return given_tensors[(r.kind, r.pseudo_layer, r.lin_layer_id)]
        assert r.kind == "weight", f"skip_input lacks a bias linear_input has: {r}"
        return np.eye(*r.shape)

    linear_case = case._replace(weights=[tensor(r) for r in w_regions], biases=[tensor(r) for r in b_regions])
    assert_agree_within_policy(linear, linear_case, run_reference(linear, linear_case), ground_truth(skip, case))


@given(cfg=rnn_configs(modes_=("gru",), dtypes_=("float64",)))
def test_gru_variants_agree_when_the_reset_gate_is_one(cfg):
    """With r == 1 both candidates reduce to tanh(W_h x + b_Wh + R_h h + b_Rh)."""
    case = make_case(cfg)
    biases = [b.copy() for b in case.biases]
    _, b_regions = cfg.model().canonical_regions()
    for i, r in enumerate(b_regions):
        if r.lin_layer_id == 3:  # b_Rr (present in every input mode): sigmoid(1e4) == 1.0 exactly
            biases[i][:] = 1e4
    forced = case._replace(biases=biases)
    cudnn = ground_truth(cfg, forced)
    classic = ground_truth(cfg.with_(mode="classic_gru"), forced)
    assert_agree_within_policy(cfg, forced, classic, cudnn)


def test_gru_variants_differ_in_general():
    """Same weights, different candidate: the difference is far above rounding once h != 0."""
    cfg = RNNConfig("gru", num_layers=2, num_units=6, input_size=4, seq_len=8, batch=3, seed=5)
    case = make_case(cfg)
    cudnn = ground_truth(cfg, case)
    classic = ground_truth(cfg.with_(mode="classic_gru"), case)
    assert np.abs(cudnn.output - classic.output).max() > GRU_VARIANTS_DIFFER_BY


def _f16(v) -> np.float32:
    """``v`` rounded to float16, as a float32."""
    return np.float32(np.float16(v))


def test_float16_rounds_gemm_results_before_their_biases_and_the_state():
    """The float16 rule (``precision.HALF_ROUNDS``, confirmed on an H200 with cuDNN 9.19.0), stated on a
    one-unit tanh RNN with numbers made by hand: ``W x`` is rounded to float16 before its bias is added, as
    is ``R h`` before its own, and the state each step stores is float16. Step 1: ``W x = 1 + 2^-11`` (exact in
    float32) rounds to 1 (a tie, to even), so with ``b_W = -0.875`` the pre-activation is 0.125, not
    0.125 + 2^-11, four float16 ulps of tanh apart. Step 2 reads ``R h`` with ``R = 7`` from the stored
    (rounded) ``h``; each rounding point left out changes the output."""
    W, R, b_W, b_R = np.float16([[1.0, 1.0]]), np.float16([[7.0]]), np.float16([-0.875]), np.float16([0.0])
    x = np.float16([[[1.0, 2.0**-11]], [[0.5, 0.0]]])  # [T=2, B=1, 2]

    def by_hand(gemm: bool, state: bool) -> np.ndarray:
        rnd = _f16
        h, out = np.float32(0.0), []
        for x_t in x[:, 0].astype(np.float32):
            wx = np.float32(x_t[0] * np.float32(W[0, 0]) + x_t[1] * np.float32(W[0, 1]))  # exact in float32
            rh = np.float32(np.float32(R[0, 0]) * h)
            if gemm:
                wx, rh = rnd(wx), rnd(rh)
            h_new = np.tanh(np.float32(wx + np.float32(b_W[0])) + np.float32(rh + np.float32(b_R[0])))
            h = rnd(h_new) if state else np.float32(h_new)
            out.append(np.float16(h_new))
        return np.array(out, np.float16)

    want = by_hand(gemm=True, state=True)
    np.testing.assert_array_equal(want, np.float16([0.1243, 0.4583]))
    assert by_hand(gemm=False, state=True)[0] != want[0] and by_hand(gemm=False, state=False)[0] != want[0]
    assert by_hand(gemm=True, state=False)[1] != want[1] and by_hand(gemm=False, state=True)[1] != want[1]

    model = reference.CudnnRNNTanh(1, 1, 2, dtype=np.float16)
    params = model.canonical_to_params([W, R], [b_W, b_R])
    for training in (False, True):
        got = model.forward(x, None, params, is_training=training)
        np.testing.assert_array_equal(got.output[:, 0, 0], want)
        np.testing.assert_array_equal(got.output_h[0, 0, 0], want[-1])
    net = spec.Network.of(model)
    np.testing.assert_array_equal(spec.forward(net, [W, R], [b_W, b_R], x).output[:, 0, 0], want)
    bound, h = model.bind(params), None
    for t in range(2):
        y, h = bound.step(x[t], h)
        assert y[0, 0] == want[t]
    # float32 data rounds nowhere: the same numbers give the unrounded values
    f32 = reference.CudnnRNNTanh(1, 1, 2, dtype=np.float32)
    got32 = f32.forward(x.astype(np.float32), None, f32.canonical_to_params(
        [W.astype(np.float32), R.astype(np.float32)], [b_W.astype(np.float32), b_R.astype(np.float32)]),
        is_training=False).output[:, 0, 0]
    assert np.float16(got32[0]) == by_hand(gemm=False, state=False)[0]


@given(cfg=rnn_configs(dtypes_=("float16",)))
def test_float16_engine_rounds_where_the_spec_cells_round(cfg):
    """The engine's float16 results are the spec cells' float16 forward pass (``reference.spec``, which rounds
    each GEMM's result before its bias, each step's state and each layer's output as visible steps), up to
    the order in which the engine adds its biases in float32 (it folds ``b_W + b_R`` into the input
    projection): every element within two float16 epsilons (relative above 1), and most of them equal."""
    case = make_case(cfg)
    half = run_reference(cfg, case)
    want = spec.forward(spec.Network.of(cfg.model()), case.weights, case.biases, case.x, case.h0, case.c0,
                        lengths=case.lengths, time_major=cfg.time_major)
    eps = float(np.finfo(np.float16).eps)
    equal = total = 0
    for name, got, expected in zip(("output", "output_h", "output_c"), half, want):
        if expected is None:
            assert got is None, name
            continue
        g, e = got.astype(np.float64), expected.astype(np.float64)
        assert np.array_equal(np.isnan(g), np.isnan(e)), name
        finite = np.isfinite(g) & np.isfinite(e)
        assert np.array_equal(g[~finite & ~np.isnan(g)], e[~finite & ~np.isnan(e)]), name
        g, e = g[finite], e[finite]
        assert (np.abs(g - e) <= 2 * eps * np.maximum(1.0, np.abs(e))).all(), (name, np.abs(g - e).max())
        equal, total = equal + int((g == e).sum()), total + g.size
    assert total == 0 or equal >= 0.75 * total, f"only {equal} of {total} elements equal"


@given(cfg=rnn_configs(dtypes_=("float16",)))
def test_float16_between_layers_is_float32_math_rounded(cfg):
    """Between layers, exactly: with no rounding inside a layer (``precision.HALF_ROUNDS`` emptied), a
    float16 model is the float32 computation of the same (float16) values with each layer's output rounded
    to float16 before the next layer reads it, the results rounded once."""
    with mock.patch.object(precision, "HALF_ROUNDS", frozenset()):
        case = make_case(cfg)
        half = run_reference(cfg, case)
        layer_input = case.x.astype(np.float32)
        tensors = by_pseudo_layer(cfg.model(), case.weights, case.biases)
        h_n, c_n = [], []
        for layer in range(cfg.num_layers):
            one = cfg.with_(num_layers=1, dtype="float32", input_size=layer_input.shape[2],
                            input_mode=cfg.input_mode if layer == 0 else "linear_input")
            pls = tensors[layer * cfg.num_dirs:(layer + 1) * cfg.num_dirs]
            sl = slice(layer * cfg.num_dirs, (layer + 1) * cfg.num_dirs)
            states = (lambda a: None if a is None else (a[sl] if cfg.time_major else a[:, sl]).astype(np.float32))
            out = run_reference(one, Case([w.astype(np.float32) for t in pls
                                           for w in (t.W or []) + t.R + ([] if t.P is None else [t.P])],
                                          [b.astype(np.float32) for t in pls for b in (t.b_W or []) + t.b_R],
                                          layer_input, states(case.h0), states(case.c0), case.lengths))
            layer_input = out.output.astype(np.float16).astype(np.float32)
            h_n.append(out.output_h)
            c_n.append(out.output_c)
    axis = 0 if cfg.time_major else 1
    np.testing.assert_array_equal(half.output, layer_input.astype(np.float16))
    np.testing.assert_array_equal(half.output_h, np.concatenate(h_n, axis=axis).astype(np.float16))
    if half.output_c is not None:
        np.testing.assert_array_equal(half.output_c, np.concatenate(c_n, axis=axis).astype(np.float16))


@pytest.mark.parametrize("mode", sorted(MODES))
def test_float32_arithmetic_is_float32(mode):
    """A float32 model computes in float32 (cuDNN's FLOAT math), not in float64 rounded at the end: on the
    same float32 values, float32 rounding leaves some of 2,560 outputs off the rounded float64 answer.
    (Every comparison against the float64 ground truth would pass a float64 computation too.) One layer,
    so that no rounding between layers is what tells them apart."""
    cfg = RNNConfig(mode, num_units=16, input_size=8, seq_len=40, batch=4, dtype="float32", seed=3)
    case = make_case(cfg)
    single = run_reference(cfg, case)
    assert single.output.dtype == np.float32
    assert (single.output != ground_truth(cfg, case).output.astype(np.float32)).any()


@pytest.mark.parametrize("mode", ["tanh", "gru", "lstm"])
def test_a_float16_sequence_in_one_call_is_one_step_a_call_from_the_float16_states(mode):
    """What cuDNN 9.19.0 does on the H200 (probe 9, ``reports/gpu/nvidia-h200-cudnn9.19.0-2/probe9.md``): a
    float16 sequence in one call equals one call per step, each from the float16 states (``hy`` and the LSTM's
    ``cy``) the one before returned, on every output, since every state a step carries is rounded to float16.
    Held here for the plain spec cells, which compute each step alike in either case."""
    cfg = RNNConfig(mode, num_units=16, input_size=8, seq_len=12, batch=4, dtype="float16")
    case = make_case(cfg)
    net = spec.Network.of(cfg.model())
    whole = spec.forward(net, case.weights, case.biases, case.x, case.h0, case.c0)[0]
    h, c, steps = case.h0, case.c0, []
    for t in range(cfg.seq_len):
        y, h, c = spec.forward(net, case.weights, case.biases, case.x[t:t + 1], h, c)
        steps.append(y)
    np.testing.assert_array_equal(whole, np.concatenate(steps))
