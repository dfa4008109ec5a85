"""How the reference steps through time (``reference.recurrence``): the input projection made in chunks of
steps (``PROJECTION_CHUNK_BYTES``; chunk sizes, agreement with one projection, the memory a long sequence
takes), stacked steps (``[W b R] @ [x_t; 1; h]``: which directions take them, agreement with steps over a
projection) and the steps a direction runs."""

from __future__ import annotations

import tracemalloc
from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reference
from compat_tests.config import make_case
from compat_tests.judge.compare import Recorded, compare_peer
from compat_tests.run import run_reference, run_reference_backward
from compat_tests.strategies import rnn_configs
from reference import buffers, recurrence
from reference.modes import MODES


@given(T=st.integers(1, 500), step_bytes=st.integers(1, 1 << 12), limit=st.integers(1, 1 << 16))
def test_chunks_are_the_fewest_that_fit_the_limit(T, step_bytes, limit):
    with mock.patch.object(recurrence, "PROJECTION_CHUNK_BYTES", limit):
        steps = recurrence.chunk_steps(T, step_bytes)
    chunks = -(-T // steps)
    assert 1 <= steps <= T
    assert steps * step_bytes <= limit or steps == 1, "a chunk of several steps over the limit"
    fit = max(limit // step_bytes, 1)  # steps that fit the limit
    assert chunks == -(-T // fit), "more chunks than the limit needs"
    assert T - (chunks - 1) * steps <= steps, "the last chunk is the only shorter one"


@given(cfg=rnn_configs(dtypes_=("float32", "float64")), limit=st.integers(1, 1 << 12))
def test_projection_in_chunks_agrees_with_one_projection(cfg, limit):
    """Forward and backward with the projection made a few steps at a time (down to one step per chunk,
    through both directions, lengths and every layer) are judged against the float64 truth made in one
    projection, as a peer's run would be."""
    case = make_case(cfg)
    with mock.patch.object(recurrence, "PROJECTION_CHUNK_BYTES", limit):
        outputs = run_reference(cfg, case)
        gradients = run_reference_backward(cfg, case)
    for comparison in (compare_peer(Recorded("reference", outputs=outputs), cfg, case),
                       compare_peer(Recorded("reference", gradients=gradients), cfg, case, backward=True)):
        assert comparison.passed, comparison.explain()


def _stacked(on: bool):
    """``stacks_input`` forced on wherever a direction can run stacked at all (whatever its widths and batch),
    or off everywhere."""
    return mock.patch.object(recurrence, "stacks_input",
                             lambda mode, params, B, storage=None: on and mode.stackable_input and params.W is not None)


STACKABLE = tuple(name for name, mode in MODES.items() if mode.stackable_input)


@given(cfg=rnn_configs(modes_=STACKABLE, dtypes_=("float32", "float64")), limit=st.sampled_from([1, 1 << 30]))
def test_stacked_steps_agree_with_steps_over_a_projection(cfg, limit):
    """Forward and backward with every direction that can run stacked running so (any widths, batch 1,
    both directions, lengths, projection, in one chunk or one step per chunk) are judged against the float64
    truth made by steps over an input projection, as a peer's run would be."""
    case = make_case(cfg)
    with _stacked(True), mock.patch.object(recurrence, "PROJECTION_CHUNK_BYTES", limit):
        outputs = run_reference(cfg, case)
        gradients = run_reference_backward(cfg, case)
    with _stacked(False):
        comparisons = (compare_peer(Recorded("reference", outputs=outputs), cfg, case),
                       compare_peer(Recorded("reference", gradients=gradients), cfg, case, backward=True))
    for comparison in comparisons:
        assert comparison.passed, comparison.explain()


@pytest.mark.parametrize("mode", sorted(MODES))
def test_which_directions_run_stacked(mode):
    """Stacked where the mode's step reads its state only through its GEMM, the input has a matrix, the batch
    is over 1 and the input is no wider than the cell nor ``STACKED_INPUT_MAX``; else over a projection."""
    row = MODES[mode]
    G, H, cap = row.num_gates, 64, recurrence.STACKED_INPUT_MAX

    def params(width: int | None, units: int = H):
        W = None if width is None else np.zeros((G * units, width))
        return recurrence.PseudoLayerParams(W, None, np.zeros((G * units, units)), np.zeros(G * units), None)

    assert recurrence.stacks_input(row, params(H), 2) == row.stackable_input
    assert recurrence.stacks_input(row, params(1), 32) == row.stackable_input
    assert not recurrence.stacks_input(row, params(H), 1), "batch 1"
    assert not recurrence.stacks_input(row, params(None), 8), "skip_input"
    assert not recurrence.stacks_input(row, params(H + 1), 8), "an input wider than the cell"
    assert recurrence.stacks_input(row, params(cap, 2 * cap), 8) == row.stackable_input
    assert not recurrence.stacks_input(row, params(cap + 1, 2 * cap), 8), "an input wider than the cap"
    assert recurrence.stacks_input(row, params(H), 2, np.dtype(np.float32)) == row.stackable_input
    assert not recurrence.stacks_input(row, params(H), 2, np.dtype(np.float16)), \
        "float16: the stacked GEMM cannot round W x and R h apart (precision.HALF_ROUNDS)"


@pytest.mark.parametrize("lengths", [False, True], ids=["full", "lengths"])
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_a_long_sequence_takes_memory_for_its_output_not_its_projection(mode, lengths):
    """Inference on a sequence whose input projection is 4x its output (an LSTM, one direction) or 3x
    (GRU) allocates little beyond its output: the projection is made in chunks, and the backward direction
    within lengths reorders the input, not the projection. Before chunking, the whole projection (and, with
    lengths, a reordered copy of it) was allocated at once."""
    T, B, I, H = 2000, 4, 8, 32
    cls = {"lstm": reference.CudnnLSTM, "gru": reference.CudnnGRU}[mode]
    model = cls(1, H, I, direction="bidirectional", dtype=np.float64)
    rng = np.random.default_rng(0)
    params = rng.standard_normal(model.params_size()) * 0.1
    x = rng.standard_normal((T, B, I))
    h = np.zeros((2, B, H))
    args = (x, h, h, params) if mode == "lstm" else (x, h, params)
    seq_lengths = np.array([T, T // 2, 3, T - 1]) if lengths else None
    projection = MODES[mode].num_gates * H * T * B * 8  # one direction's, float64
    limit = buffers.limit()
    buffers.set_limit(0)  # every array allocated by the call, none taken from blocks allocated before it
    tracemalloc.start()
    try:
        with mock.patch.object(recurrence, "PROJECTION_CHUNK_BYTES", projection // 16):
            start = tracemalloc.get_traced_memory()[0]
            output = model(*args, sequence_lengths=seq_lengths)[0]
            peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
        buffers.set_limit(limit)
    assert output.nbytes < peak < output.nbytes + projection // 2, (
        f"peak {peak / 2**20:.2f} MiB for an output of {output.nbytes / 2**20:.2f} MiB "
        f"and a projection of {projection / 2**20:.2f} MiB")


@given(T=st.integers(1, 12), lengths=st.lists(st.integers(1, 12), min_size=1, max_size=4),
       reverse=st.booleans(), chunk=st.integers(1, 12))
def test_a_direction_runs_no_step_past_the_longest_sequence(T, lengths, reverse, chunk):
    """In run order every sequence's valid steps come first, so the steps past the longest one are padding
    for every sequence: they are not run, and their outputs are zero."""
    lengths = np.minimum(np.array(lengths), T)
    B = len(lengths)
    seen = []

    def step(t, x_t, h, c, h_out):
        seen.append(t)
        h_out[...] = h + x_t
        return h_out, None

    x = np.ones((T, B, 1))
    y = np.full((T, B, 1), np.nan)
    h, _ = recurrence.run_direction(step, recurrence.feature_major, x, np.zeros((1, B)), None, lengths, reverse,
                                    y, chunk)
    assert seen == list(range(lengths.max()))
    np.testing.assert_array_equal(h, lengths[None, :].astype(float))  # one added per valid step
    valid = np.arange(T)[:, None] < lengths
    np.testing.assert_array_equal(y[..., 0], np.where(valid, (np.arange(T)[:, None] + 1 if not reverse
                                                               else lengths - np.arange(T)[:, None]), 0.0))


@given(bits=st.lists(st.integers(0, (1 << 32) - 1), min_size=1, max_size=64),
       dtype=st.sampled_from(["float16", "float32", "float64"]))
def test_the_sigmoid_of_a_negated_input_is_the_sigmoid_bit_for_bit(bits, dtype):
    """``sigmoid_of_negated(-x)`` is ``sigmoid(x)`` bit for bit, for any bit pattern (denormals, signed zeros,
    infinities; NaN stays NaN), which is what lets a bound model negate its sigmoid gates' weights."""
    from reference.modes import sigmoid, sigmoid_of_negated

    width = np.dtype(dtype).itemsize
    raw = np.array(bits, np.uint64).astype(f"u{width}")  # the low bits of each draw: every pattern of the width
    x = raw.view(dtype)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, 1e-40, -1e-40, 88.8, -88.8, 710.0, -710.0], dtype)
    x = np.concatenate([x, specials])
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        want = sigmoid(x.copy())
        got = sigmoid_of_negated(np.negative(x))
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert got[~nan].tobytes() == want[~nan].tobytes()


@pytest.mark.parametrize("mode", sorted(MODES))
def test_negated_gates_negate_the_sigmoid_rows_and_refuse_training(mode):
    row = MODES[mode]
    model = reference.make_model(mode, 2, 3, 3, input_mode="skip_input", dtype=np.float64)
    params = np.random.default_rng(0).standard_normal(model.params_size())
    first, second = model._pseudo_layers(params, copy=True)
    assert recurrence.negated_gates(row, first) is first  # skip_input: the projection copies x, unnegated
    negated = recurrence.negated_gates(row, second)
    if row.negated_step is None:
        assert negated is second and not row.sigmoid_blocks
        return
    H = second.R.shape[0] // row.num_gates
    sign = np.ones(second.R.shape[0])
    for block in row.sigmoid_blocks:
        sign[block * H : (block + 1) * H] = -1
    assert negated.negated_gates and recurrence.negated_gates(row, negated) is negated
    for name in ("W", "b_W", "R", "b_R"):
        a, b = getattr(second, name), getattr(negated, name)
        assert np.array_equal(b, a * (sign[:, None] if a.ndim == 2 else sign)) and not np.shares_memory(a, b)
    assert negated.P is second.P
    trace = recurrence.new_trace(row, second, np.zeros((H, 2)), np.zeros((H, 2)) if row.has_cell_state else None,
                                 np.empty((1, 2, H)))
    with pytest.raises(ValueError, match="inference"):
        recurrence.fused_step(row, negated, 2, trace)


@given(GH=st.integers(1, 700), width=st.integers(1, 300), B=st.integers(1, 33),
       dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 2**16))
def test_a_one_step_projection_is_the_bulk_projections_product_bit_for_bit(GH, width, B, dtype, seed):
    """A one-step projection (``T = 1``: a streaming step, a ``T = 1`` call) runs ``W.dot(x.T, out)`` where the
    bulk one runs ``np.matmul``: the same BLAS call, so the same bits as ``np.matmul`` of the same operands."""
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((GH, width)).astype(dtype)
    bias = rng.standard_normal(GH).astype(dtype)
    x = rng.standard_normal((B, width)).astype(dtype)
    params = recurrence.PseudoLayerParams(W=W, b_W=None, R=np.zeros((GH, 1), dtype), b_R=bias, P=None)
    for reused in (False, True):
        got = recurrence.projector(params, bias, recurrence.projection_buffer(GH, 1, B, np.dtype(dtype)),
                                   reused=reused)(x[None])[:, 0]
        want = np.matmul(W, x.T)
        np.add(want, bias[:, None], want)
        assert got.tobytes() == np.ascontiguousarray(want).tobytes()
