"""A model bound to its parameters (``reference.BoundRNN``): whole sequences as the model computes them, bit for
bit, and streaming one step at a time (``docs/streaming.md``)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import event, given

import reference
from compat_tests.config import Outputs, RNNConfig
from compat_tests.judge.compare import assert_agree_within_policy
from compat_tests.peers.base import Capabilities
from compat_tests.run import forward_case
from compat_tests.strategies import rnn_configs
from compat_tests.tests.helpers import bound_case, run_stream, same_bits
from reference import streaming
from reference.modes import MODES
from reference.precision import compute_dtype
from reference.recurrence import stacks_input

STREAMABLE = Capabilities(bidirectional=False, lengths=False, batch_major=False)  # what a step takes


def stream(bound, case, state_dtype):
    """``case.x [T, B, in]`` step by step from its initial states in ``state_dtype``, updating them in place:
    ``Outputs`` in the model's dtype."""
    T, B = case.x.shape[:2]
    h, c = bound.zero_state(B, state_dtype)
    if case.h0 is not None:
        h[...] = case.h0
    if c is not None and case.c0 is not None:
        c[...] = case.c0
    outputs = []
    for x_t in case.x:
        result = bound.step(x_t, h, c, out_h=h, out_c=c) if c is not None else bound.step(x_t, h, out_h=h)
        assert result[1] is h and (c is None or result[2] is c)
        outputs.append(result[0])
    dtype = bound.dtype
    return Outputs(np.stack(outputs), h.astype(dtype), None if c is None else c.astype(dtype))


def steps_as_whole_call(model, params, B: int, T: int) -> bool:
    """Whether the whole call's arithmetic per step is the step's: ``T = 1``, or every layer stacked
    (``recurrence.stacks_input``) or without an input matrix (skip_input's first layer)."""
    mode = MODES[model.rnn_mode]
    return T == 1 or all(p.W is None or stacks_input(mode, p, B, model.dtype)
                         for p in model._pseudo_layers(params, copy=True))


@given(cfg=rnn_configs())
def test_bound_forward_is_the_models_bit_for_bit(cfg):
    model, params, bound, case = bound_case(cfg)
    want = forward_case(model, cfg, case, is_training=False, params=params)
    got = bound.forward(case.x, case.h0, case.c0, sequence_lengths=case.lengths, time_major=cfg.time_major)
    assert same_bits(got[:3], want[:3])
    assert not got.reserve.is_training
    states = (case.h0, case.c0) if cfg.has_cell_state else (case.h0,)
    called = bound(case.x, *states, sequence_lengths=case.lengths, time_major=cfg.time_major)
    assert same_bits(called, want[:3] if cfg.has_cell_state else want[:2])


def test_binding_copies_params():
    cfg = RNNConfig("lstm", num_layers=2, num_units=5, input_size=3, seq_len=4, batch=2, dtype="float32")
    model, params, bound, case = bound_case(cfg)
    before = bound(case.x, case.h0, case.c0)
    params *= 2  # the caller's buffer changes after binding: the bound model does not
    assert same_bits(bound(case.x, case.h0, case.c0), before)
    assert not same_bits(model(case.x, case.h0, case.c0, params), before)
    for layer in bound._layers:
        assert not any(np.shares_memory(a, params) for a in vars(layer).values() if isinstance(a, np.ndarray))
        assert not any(a.flags.writeable for a in vars(layer).values() if isinstance(a, np.ndarray))
    h, c = bound.zero_state(2)
    output, output_h, output_c = model(case.x[:1], h, c, params / 2)  # the values bound
    assert same_bits(bound.step(case.x[0], h, c), (output[0], output_h, output_c))


def test_bind_checks_params():
    model = reference.CudnnGRU(1, 4, 3)
    with pytest.raises(ValueError, match="params"):
        model.bind(np.zeros(model.params_size() + 1, np.float32))
    with pytest.raises(TypeError, match="params"):
        model.bind(np.zeros(model.params_size(), np.float64))
    assert "BoundRNN" in reference.__all__ and isinstance(model.bind(np.zeros(model.params_size(), np.float32)),
                                                           reference.BoundRNN)


@given(cfg=rnn_configs(STREAMABLE))
def test_step_is_a_one_step_forward_bit_for_bit(cfg):
    """Every step, states carried in the model's dtype, is the model's forward of that one step."""
    model, params, bound, case = bound_case(cfg)
    h, c = case.h0, case.c0
    for x_t in case.x:
        got = bound.step(x_t, h, c) if cfg.has_cell_state else bound.step(x_t, h)
        want = model.forward(x_t[None], h, params, c, is_training=False)
        assert same_bits(got, (want.output[0], want.output_h, want.output_c)[: len(got)])
        h, c = got[1], got[2] if cfg.has_cell_state else None


@given(cfg=rnn_configs(STREAMABLE))
def test_streaming_equals_the_whole_sequence(cfg):
    """``T`` steps, states carried in the compute dtype (the precision the whole call keeps them in), against
    the whole call: bit for bit where its arithmetic per step is the step's, else within the policy's budget
    (the input GEMM of all steps at once against one step's: another summation order)."""
    model, params, bound, case = bound_case(cfg)
    streamed = stream(bound, case, compute_dtype(model.dtype))
    whole = forward_case(model, cfg, case, is_training=False, params=params)
    whole = Outputs(*whole[:3])
    exact = steps_as_whole_call(model, params, cfg.batch, cfg.seq_len)
    event("bit for bit" if exact else "within the policy")
    if exact:
        assert same_bits(streamed, whole)
    else:
        assert_agree_within_policy(cfg, case, streamed, whole)


@pytest.mark.parametrize("mode", ["gru", "lstm", "tanh"])
@pytest.mark.parametrize(("B", "H"), [(1, 128), (16, 128), (1, 512), (16, 512)])
def test_step_at_benchmark_sizes(mode, B, H):
    """The benchmark's sizes (larger BLAS kernels than the property tests'): a step is the one-step forward bit
    for bit, and at batch 16 (stacked: tanh and LSTM) streaming is the whole call bit for bit."""
    cfg = RNNConfig(mode, num_layers=2, num_units=H, input_size=64, seq_len=3, batch=B, dtype="float32", seed=3)
    model, params, bound, case = bound_case(cfg)
    h, c = case.h0, case.c0
    got = bound.step(case.x[0], h, c) if c is not None else bound.step(case.x[0], h)
    want = model.forward(case.x[:1], h, params, c, is_training=False)
    assert same_bits(got, (want.output[0], want.output_h, want.output_c)[: len(got)])
    whole = Outputs(*forward_case(model, cfg, case, is_training=False, params=params)[:3])
    streamed = stream(bound, case, np.float32)
    if steps_as_whole_call(model, params, B, cfg.seq_len):
        assert mode != "gru" and B == 16
        assert same_bits(streamed, whole)
    else:
        assert_agree_within_policy(cfg, case, streamed, whole)


def test_float16_states_round_every_step():
    """float16 states (``c`` too) are rounded at every step as repeated one-step calls round them; with float32
    states only ``h`` is, as the whole-sequence call rounds it (``precision.HALF_ROUNDS``)."""
    cfg = RNNConfig("lstm", num_layers=2, num_units=6, input_size=6, input_mode="skip_input", seq_len=5, batch=1,
                    dtype="float16")
    model, params, bound, case = bound_case(cfg)
    whole = Outputs(*forward_case(model, cfg, case, is_training=False, params=params)[:3])
    assert not steps_as_whole_call(model, params, 1, 5)  # layer 2 has an input matrix, batch 1 does not stack
    streamed32 = stream(bound, case, np.float32)
    assert_agree_within_policy(cfg, case, streamed32, whole)
    h = c = None
    for x_t in case.x:
        _, h, c = bound.step(x_t, case.h0 if h is None else h, case.c0 if c is None else c)
        assert h.dtype == c.dtype == np.float16


def test_in_place_states_and_aliasing():
    cfg = RNNConfig("lstm", num_layers=3, num_units=5, input_size=4, seq_len=1, batch=3, dtype="float64")
    model, params, bound, case = bound_case(cfg)
    fresh = bound.step(case.x[0], case.h0, case.c0)
    h, c = case.h0.copy(), case.c0.copy()
    in_place = bound.step(case.x[0], h, c, out_h=h, out_c=c)
    assert in_place[1] is h and in_place[2] is c and same_bits(in_place, fresh)
    both = np.concatenate([case.h0.ravel(), case.c0.ravel()])  # outputs overlapping inputs anyhow
    h_view, c_view = both[: case.h0.size].reshape(case.h0.shape), both[case.h0.size :].reshape(case.c0.shape)
    swapped = bound.step(case.x[0], h_view, c_view, out_h=both[-case.h0.size :].reshape(case.h0.shape),
                         out_c=both[: case.c0.size].reshape(case.c0.shape))
    assert same_bits(swapped, fresh)
    shared = np.zeros(case.c0.size + 1)
    with pytest.raises(ValueError, match="overlap"):
        bound.step(case.x[0], case.h0, case.c0, out_h=shared[: case.h0.size].reshape(case.h0.shape),
                   out_c=shared[1:].reshape(case.c0.shape))
    frozen = np.zeros_like(case.h0)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        bound.step(case.x[0], case.h0, case.c0, out_h=frozen)


def test_step_refuses_what_it_cannot_do():
    bidi = reference.CudnnGRU(1, 4, 3, direction="bidirectional")
    with pytest.raises(ValueError, match="unidirectional"):
        bidi.bind(np.zeros(bidi.params_size(), np.float32)).step(np.zeros((1, 3), np.float32))
    model = reference.CudnnGRU(2, 4, 3, dtype=np.float16)
    bound = model.bind(np.zeros(model.params_size(), np.float16))
    x, h = np.zeros((2, 3), np.float16), np.zeros((2, 2, 4), np.float16)
    assert bound.step(x)[1].dtype == np.float16 and bound.step(x, h.astype(np.float32))[1].dtype == np.float32
    for bad, error, match in [
        (dict(x=x.astype(np.float32)), TypeError, "float16"),
        (dict(x=x[:, :2]), ValueError, "input_size"),
        (dict(x=x[None]), ValueError, "2-D"),
        (dict(x=x.tolist()), TypeError, "numpy"),
        (dict(h=h[:, :1]), ValueError, r"\(2, 2, 4\)"),
        (dict(h=h.astype(np.float64)), TypeError, "float16 or float32"),
        (dict(h=np.ma.masked_array(h)), TypeError, "masked"),
        (dict(c=h), ValueError, "no cell state"),
        (dict(h=h, out_h=h.astype(np.float32)), TypeError, "states' dtype"),
        (dict(h=h, out_h=h[:1]), ValueError, "shape"),
    ]:
        with pytest.raises(error, match=match):
            bound.step(**{"x": x, **bad})
    lstm = reference.CudnnLSTM(1, 4, 3)
    bound = lstm.bind(np.zeros(lstm.params_size(), np.float32))
    h, c = bound.zero_state(2)
    with pytest.raises(TypeError, match="float32"):
        bound.step(x.astype(np.float32), h, c.astype(np.float64))
    with pytest.raises(TypeError, match="dtype"):
        bound.zero_state(2, np.float64)


@given(cfg=rnn_configs(STREAMABLE))
def test_a_stream_is_the_step_bit_for_bit(cfg):
    """A stream's steps are :meth:`BoundRNN.step`'s with the states carried in the compute dtype, bit for bit,
    its ``state()`` those states, and ``reset`` starts it again."""
    model, params, bound, case = bound_case(cfg)
    cdt = compute_dtype(model.dtype)
    s = bound.stream(cfg.batch, case.h0, case.c0)
    h, c = bound.zero_state(cfg.batch, cdt)
    if case.h0 is not None:
        h[...] = case.h0
    if c is not None and case.c0 is not None:
        c[...] = case.c0
    first = bound.step(case.x[0], h, c) if c is not None else bound.step(case.x[0], h)
    for x_t in case.x:
        want = bound.step(x_t, h, c) if c is not None else bound.step(x_t, h)
        assert same_bits([s.step(x_t)], want[:1])
        h, c = want[1], want[2] if c is not None else None
        assert same_bits(s.state(), (h, c))
    s.reset(case.h0, case.c0)
    assert same_bits([s.step(case.x[0])], first[:1])


def test_stream_states_are_its_own():
    cfg = RNNConfig("lstm", num_layers=2, num_units=5, input_size=4, seq_len=6, batch=1, dtype="float32")
    model, params, bound, case = bound_case(cfg)
    h0, c0 = case.h0.copy(), case.c0.copy()
    s = bound.stream(1, h0, c0)
    want = run_stream(bound, case)
    h0[...] = 7  # the caller's initial states change after the stream took them: the stream does not
    s.step(case.x[0])
    h, c = s.state()
    h[...] = 0  # nor does a change to the copies it returned
    for x_t in case.x[1:]:
        s.step(x_t)
    assert same_bits(s.state(), want[1:])
    assert same_bits(s.state(), s.state()) and s.state()[0] is not s.state()[0]
    zero = bound.stream(1)
    assert same_bits(zero.state(), bound.zero_state(1, np.float32))


def test_stream_refuses_what_it_cannot_do():
    bidi = reference.CudnnLSTM(1, 4, 3, direction="bidirectional")
    with pytest.raises(ValueError, match="unidirectional"):
        bidi.bind(np.zeros(bidi.params_size(), np.float32)).stream(1)
    model = reference.CudnnGRU(2, 4, 3, dtype=np.float16)
    bound = model.bind(np.zeros(model.params_size(), np.float16))
    s = bound.stream(2)
    assert isinstance(s, reference.Stream) and "batch_size=2" in repr(s)
    x = np.zeros((2, 3), np.float16)
    assert s.step(x).dtype == np.float16 and s.state()[0].dtype == np.float32 and s.state()[1] is None
    for bad, error, match in [
        (x.astype(np.float32), TypeError, "float16"),
        (x[:1], ValueError, "batch_size"),
        (x[:, :2], ValueError, "input_size"),
        (x[None], ValueError, "2-D"),
        (x.tolist(), TypeError, "numpy"),
    ]:
        with pytest.raises(error, match=match):
            s.step(bad)
    for kwargs, error, match in [
        (dict(batch_size=0), ValueError, "batch_size"),
        (dict(batch_size=2, h=np.zeros((2, 1, 4), np.float16)), ValueError, r"\(2, 2, 4\)"),
        (dict(batch_size=2, c=np.zeros((2, 2, 4), np.float16)), ValueError, "no cell state"),
    ]:
        with pytest.raises(error, match=match):
            bound.stream(**kwargs)
    before = s.state()
    with pytest.raises(ValueError, match="no cell state"):
        s.reset(c=np.zeros((2, 2, 4), np.float16))
    assert same_bits(s.state(), before)  # a refused reset changes nothing


@pytest.mark.skipif(not streaming._ERRSTATE_IN_CONTEXT, reason="NumPy 1 keeps its error state per thread")
def test_a_stream_is_entered_once_at_a_time():
    """A stream's step runs in a context of its own, which refuses a second entry while one runs (a stream
    shared between threads) instead of mixing two steps' buffers."""
    model = reference.CudnnGRU(1, 4, 3)
    s = model.bind(np.zeros(model.params_size(), np.float32)).stream(1)
    x = np.zeros((1, 3), np.float32)
    with pytest.raises(RuntimeError, match="already entered"):
        s._layers.enter(s.step, x)


def test_a_streams_error_state_is_its_own():
    """Gates driven into saturation overflow the sigmoid's exp: a stream steps through that silently wherever
    it was made and whatever error state its maker had, in any thread (RuntimeWarnings are errors in this
    suite), and making one leaves the maker's error state as it was."""
    cfg = RNNConfig("lstm", num_layers=2, num_units=4, input_size=3, seq_len=1, batch=2, dtype="float32",
                    weight_scale=4.0)
    model, params, bound, case = bound_case(cfg)
    bound = model.bind(params * np.float32(1e4))
    x = case.x[0] * np.float32(100)
    want = bound.step(x, case.h0, case.c0)[0]
    before = np.geterr()
    with np.errstate(all="raise"):
        s = bound.stream(2, case.h0, case.c0)
        assert same_bits([s.step(x)], [want])
    assert np.geterr() == before
    made = []
    maker = threading.Thread(target=lambda: made.append(bound.stream(2, case.h0, case.c0)))
    maker.start()
    maker.join()
    assert same_bits([made[0].step(x)], [want])  # made in another thread, stepped in this one


def test_threads_share_a_bound_model():
    cfg = RNNConfig("gru", num_layers=2, num_units=16, input_size=8, seq_len=40, batch=2, dtype="float32")
    model, params, bound, case = bound_case(cfg)
    want = stream(bound, case, np.float32)
    results = [None] * 4

    def run(k):
        results[k] = stream(bound, case, np.float32)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(same_bits(r, want) for r in results)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_saturating_steps_warn_no_more_than_forward(dtype):
    """Gates driven far into saturation overflow the sigmoid's exp: the model's forward computes through that
    silently (RuntimeWarnings are errors in this suite), and so does a step."""
    cfg = RNNConfig("lstm", num_layers=2, num_units=4, input_size=3, seq_len=1, batch=2, dtype=dtype,
                    weight_scale=4.0)
    model, params, bound, case = bound_case(cfg)
    params = (params.astype(np.float64) * 1e4).astype(model.dtype)
    bound = model.bind(params)
    x = (case.x[0].astype(np.float64) * 100).astype(model.dtype)
    got = bound.step(x, case.h0, case.c0)
    want = model.forward(x[None], case.h0, params, case.c0, is_training=False)
    assert same_bits(got, (want.output[0], want.output_h, want.output_c))
