"""One direction over time, and the stack of layers and directions built from it.

Every mode, direction, layer and sequence-length case goes through :func:`run_direction`; the backward
direction is the forward recurrence run over each sequence reversed *within its valid length* (cuDNN's
and TensorFlow's ``reverse_sequence`` semantics), so padding never leaks into valid steps.

Steps run **feature-major**: states ``[width, B]`` and a direction's input projection ``[G*H, T, B]``, so a
time step is a ``[width, B]`` array whose gate blocks are contiguous rows and whose GEMM is ``R @ h`` (see
``modes.py``). Sequences cross between layers **sequence-major**, ``[T, B, width]`` as the user's data:
each layer's input projection is one GEMM ``W @ x_rows.T`` (BLAS reads the transposed operand in place, so
the user's input is never transposed, and every layer uses the same GEMM), and each step copies its output,
still in cache, into the layer's ``[T, B, width]`` output, so no sequence is ever transposed in bulk.
At batch 1 a step's ``[width, 1]`` slices of ``[T, 1, width]`` arrays are contiguous, so there the input
projection is stored time-outer (``x_rows @ W.T``) and each step writes its output straight into the
layer's output.
A projection larger than :data:`PROJECTION_CHUNK_BYTES` is made in chunks of steps, one GEMM each, just
before the steps that read it, so a long sequence takes memory for its output (and, in training, its trace)
but not for a projection ``G`` times its size.

A step's slice of a ``[G*H, T, B]`` projection is ``G*H`` rows of ``B`` elements, a strided read. Where
the mode allows it and the input is narrow (:func:`stacks_input`), a direction runs
**stacked** instead: its input goes, transposed in bulk, into a time-outer ``[T+1, in+1+Hr, B]`` buffer
whose slot ``t`` is ``[x_t; 1; h_t]``, each step's GEMM ``[W b R] @ [x_t; 1; h_t]`` makes its whole
pre-activation, biases included (no input projection at all), and each step writes its output straight into
the next slot. Why and where these layouts pay: ``benchmarks/NOTES.md`` (``recurrence.py``).

Float16 storage (``storage``, ``reference.precision.HALF_ROUNDS``): the input projection rounds ``W x`` to
float16 before it adds the biases, each step rounds ``R h`` before its biases and its new state
(``modes.py``), the LSTM projection's ``P m`` is rounded, and a stacked step, whose one GEMM sums ``W x``,
the biases and ``R h``, is not used where GEMM results are rounded.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Callable, Sequence

import numpy as np

from . import buffers
from .precision import rounding_dtype
from .contract import caller_layout  # noqa: F401  (moved to the contract; the old import path)
from .modes import CellMode, Workspace, round_in_place

Array = np.ndarray


@dataclass(frozen=True)
class PseudoLayerParams:
    """One pseudo-layer's parameters in the compute dtype, gate blocks stacked in canonical order.

    ``W [G*H, in_width]`` (``None`` in skip_input's layer 0: the identity), ``b_W [G*H]`` (``None``: none,
    as zeros), ``R [G*H, Hr]``, ``b_R [G*H]``, ``P [num_proj, H]`` or ``None``. A bias the model's bias mode
    lacks (``reference.layout.BIAS_MODES``) comes as zeros (``model._stacking_plan``), in skip_input's layer 0
    as in any other: ``v + 0`` is ``v``, so every bias mode runs the double bias's steps, and its gradient is
    computed and dropped.
    ``negated_gates``: the rows of the mode's sigmoid blocks are negated in ``W``, ``b_W``, ``R`` and ``b_R``
    (:func:`negated_gates`; inference only).
    """

    W: Array | None
    b_W: Array | None
    R: Array
    b_R: Array
    P: Array | None
    negated_gates: bool = False


def negated_gates(mode: CellMode, params: PseudoLayerParams) -> PseudoLayerParams:
    """``params`` with the rows of the mode's sigmoid blocks (``mode.sigmoid_blocks``) negated in ``W``,
    ``b_W``, ``R`` and ``b_R`` (copies), for ``mode.negated_step``: every pre-activation of those gates
    (GEMMs, bias sums, stacked or not) then comes out negated exactly, and the step saves the sigmoid's
    negation; its results are bit for bit those of ``params``. Inference only (:func:`fused_step` refuses
    a trace). ``params`` itself where the mode has no such step or the layer has no input matrix
    (skip_input: the projection copies the input into every gate, unnegated)."""
    if mode.negated_step is None or params.W is None or params.negated_gates:
        return params
    H = params.R.shape[0] // mode.num_gates
    rows = np.zeros(params.R.shape[0], bool)
    for block in mode.sigmoid_blocks:
        rows[block * H : (block + 1) * H] = True

    def negated(a: Array | None) -> Array | None:
        if a is None:
            return None
        a = np.array(a)
        a[rows] *= -1
        return a

    return PseudoLayerParams(W=negated(params.W), b_W=negated(params.b_W), R=negated(params.R),
                             b_R=negated(params.b_R), P=params.P, negated_gates=True)


def projection_buffer(GH: int, T: int, B: int, dtype: np.dtype) -> Array:
    """A buffer for :func:`input_projection`, ``[G*H, T, B]``: contiguous, or at batch 1 the transposed
    view of a contiguous ``[T, 1, G*H]``, so that each step's ``[G*H, 1]`` slice is contiguous."""
    if B == 1:
        return buffers.empty((T, B, GH), dtype).transpose(2, 0, 1)
    return buffers.empty((GH, T, B), dtype)


def input_projection(x: Array, params: PseudoLayerParams, bias: Array, out: Array,
                     storage: np.dtype | None = None) -> Array:
    """``W @ x + bias`` for all time steps in one GEMM: ``x [T, B, in]`` (contiguous) -> ``out [G*H, T, B]``
    (from :func:`projection_buffer`), which is returned; ``storage`` as :func:`projector`."""
    return projector(params, bias, out, storage=storage)(x)


def projector(params: PseudoLayerParams, bias: Array, out: Array, reused: bool = False,
              storage: np.dtype | None = None) -> Callable[[Array], Array]:
    """:func:`input_projection` into ``out`` with its layout worked out once: ``project(x [T, B, in])`` (contiguous,
    the ``T`` and ``B`` of ``out``) writes ``W @ x + bias`` into ``out`` and returns it. ``reused``: for a
    projector called many times (a streaming step, which may pass ``x [B, in]`` for ``T = 1``), the bias is
    repeated across the columns of a ``[G*H, T*B]`` projection once, here: adding a ``[G*H, 1]`` column to short
    rows took several times as long as adding the full array (``benchmarks/NOTES.md``, ``modes.py``); the
    same sums. One step's projection (``T = 1``, ``x [B, in]`` or ``[1, B, in]``) is ``W.dot(x.T, out)``, the
    same BLAS call and bits as ``np.matmul`` without its gufunc set-up (NOTES.md, "Streaming").
    ``storage``: the data's dtype; where it rounds GEMM results (float16), ``W @ x`` is rounded to it before
    the bias is added (skip_input's copied input is data, not rounded)."""
    GH, T, B = out.shape
    gemm_round = rounding_dtype(storage, "gemm_outputs") if storage is not None else None
    time_outer = out.transpose(1, 2, 0)
    if out.flags.c_contiguous:
        xw, xw_rows = out.reshape(GH, T * B), None
    elif time_outer.flags.c_contiguous:  # the same product, transposed
        xw_rows = time_outer.reshape(T * B, GH)
        xw = xw_rows.T
    else:
        raise ValueError(f"out must be a buffer from projection_buffer, got strides {out.strides}")
    W = params.W
    column_bias = np.repeat(bias[:, None], T * B, axis=1) if reused and xw_rows is None else None
    if W is not None and T == 1 and xw_rows is None:  # one step (a streaming step, a T = 1 call): ndarray.dot,
        column_bias = bias[:, None] if column_bias is None else column_bias  # the same BLAS call as matmul

        def project_step(x: Array) -> Array:
            W.dot((x if x.ndim == 2 else x.reshape(B, x.shape[-1])).T, xw)
            if gemm_round is not None:
                np.copyto(xw, xw.astype(gemm_round))
            np.add(xw, column_bias, xw)
            return out

        return project_step

    def project(x: Array) -> Array:
        x_rows = x.reshape(T * B, x.shape[-1])
        if W is None:  # skip_input: the input feeds every gate as is
            width = x_rows.shape[1]
            for g in range(GH // width):
                xw[g * width : (g + 1) * width] = x_rows.T
        elif xw_rows is None:
            np.matmul(W, x_rows.T, out=xw)
        else:
            np.matmul(x_rows, W.T, out=xw_rows)
        if W is not None and gemm_round is not None:
            np.copyto(xw, xw.astype(gemm_round))
        if xw_rows is None:
            np.add(xw, bias[:, None] if column_bias is None else column_bias, xw)
        else:
            np.add(xw_rows, bias, xw_rows)
        return out

    return project


STACKED_INPUT_MAX = 256
"""The widest input a stacked direction takes (:func:`stacks_input`)."""


def tf32_layer(params: PseudoLayerParams, operand: Callable[[Array], Array]) -> PseudoLayerParams:
    """``params`` as TF32 math's GEMMs read them: ``W``, ``R`` and ``P`` rounded by ``operand`` (copies), the
    biases as they are (they add outside the GEMMs)."""
    return replace(params, W=None if params.W is None else operand(params.W), R=operand(params.R),
                               P=None if params.P is None else operand(params.P))


def stacks_input(mode: CellMode, params: PseudoLayerParams, B: int, storage: np.dtype | None = None) -> bool:
    """Whether a direction runs stacked (module docstring): where the mode's step reads its state only
    through the recurrent GEMM (``mode.stackable_input``), the input has a matrix (not skip_input), the
    batch is over 1 (at batch 1 the projection's slices are contiguous already) and the input is no wider
    than the cell nor than :data:`STACKED_INPUT_MAX`. Stacking saves the strided read, ``G*H*B`` elements a
    step, and makes ``2*G*H*in*B`` flops a step in the per-step GEMM rather than the bulk one; where that
    breaks even (the rule's limits): ``benchmarks/NOTES.md`` (``recurrence.py``). Never where ``storage``
    rounds GEMM results (float16): the stacked GEMM cannot round ``W x`` and ``R h`` apart."""
    H = params.R.shape[0] // mode.num_gates
    if storage is not None and rounding_dtype(storage, "gemm_outputs") is not None:
        return False
    return (mode.stackable_input and params.W is not None and B > 1
            and params.W.shape[1] <= min(H, STACKED_INPUT_MAX))


def stacked_inputs(x_steps: Array, state_width: int) -> Array:
    """The ``prepare`` of :func:`run_direction` for stacked steps: ``x_steps [n, B, in]`` (in run order) as a
    time-outer ``[n+1, in+1+Hr, B]`` buffer whose slot ``k`` holds step ``k``'s input in rows ``:in`` and
    ones in row ``in`` (for the biases' column of :func:`stacked_matrix`); the last ``Hr = state_width`` rows
    take the recurrent state as the runner and the steps write it, and slot ``n``'s input is never read."""
    n, B, width = x_steps.shape
    stacked = buffers.empty((n + 1, width + 1 + state_width, B), x_steps.dtype)
    stacked[:n, :width] = x_steps.transpose(0, 2, 1)
    stacked[:, width] = 1
    return stacked


def stacked_matrix(params: PseudoLayerParams, bias: Array) -> Array:
    """``[W b R]``, ``[G*H, in+1+Hr]``: the GEMM of a stacked step, ``bias`` from :func:`projection_bias`."""
    width = params.W.shape[1]
    matrix = buffers.empty((params.R.shape[0], width + 1 + params.R.shape[1]), params.R.dtype)
    matrix[:, :width] = params.W
    matrix[:, width] = bias
    matrix[:, width + 1 :] = params.R
    return matrix


def run_steps(T: int, lengths: Array | None) -> int:
    """How many steps a direction runs: ``T``, or up to the longest sequence (in run order, each sequence's
    valid steps come first, so every later step is padding)."""
    return T if lengths is None else int(lengths.max())


def run_order(T: int, lengths: Array | None, reverse: bool) -> tuple:
    """Index of a sequence-major ``[T, B, ...]`` array that gives the steps a direction runs
    (:func:`run_steps`) in run order: as they are, or (``reverse``) each sequence reversed within its valid
    length with padding left in place (``lengths=None``: a plain time flip, a view). Those steps come from
    the array's first :func:`run_steps` steps, so the same index scatters run-order results back there.
    A feature-major ``[width, T, B]`` array takes ``(slice(None), *index)``."""
    steps = run_steps(T, lengths)
    if not reverse:
        return (slice(None, steps),)
    if lengths is None:
        return (slice(None, None, -1),)
    t = np.arange(steps)[:, None]
    time_index = np.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)
    return time_index, np.arange(lengths.shape[0])[None, :]


def padded_steps(T: int, lengths: Array) -> Array:
    """``[T, B]``: true where step ``t`` (in original or run order alike) is past sequence ``b``'s length."""
    return np.arange(T)[:, None] >= lengths[None, :]


def zero_padded(seq: Array, lengths: Array | None, feature_axis: int) -> Array:
    """``seq`` (``[T, B, width]`` with ``feature_axis=2``, ``[width, T, B]`` with ``0``) with padded steps
    zeroed, so they add nothing (not even NaN) to a GEMM."""
    if lengths is None:
        return seq
    T = seq.shape[1 if feature_axis == 0 else 0]
    return np.where(np.expand_dims(padded_steps(T, lengths), feature_axis), 0.0, seq)


@dataclass(frozen=True)
class DirectionTrace:
    """What one pseudo-layer's forward run keeps for backprop. Per step, in run order (the backward
    direction's steps reversed within each length) and **time-outer**, so that a step's slice is contiguous:
    the activations the step computed in place, ``acts [T, A*H, B]``, the cell state it wrote,
    ``c [T, H, B]`` (LSTM), and its output before the projection, ``h_raw [T, H, B]`` (LSTM with num_proj).
    The recurrent input of a step is the previous step's output, so it is not stored twice: ``h0 [Hr, B]``,
    ``c0 [H, B]`` (LSTM) and the direction's output ``y [T, B, Hr]`` (original time order) give it.
    Steps past the longest sequence (:func:`run_steps`) were not run: their slices hold anything."""

    acts: Array
    c: Array | None
    h_raw: Array | None
    h0: Array
    c0: Array | None
    y: Array


@dataclass(frozen=True)
class StackTrace:
    """A training forward pass, as the backward pass needs it: each pseudo-layer's parameters and trace,
    each layer's input ``[T, B, width]`` (after dropout), the dropout multipliers ``[T, B, D*Hr]`` and the
    lengths used."""

    layers: Sequence[PseudoLayerParams]
    inputs: Sequence[Array]
    directions: Sequence[DirectionTrace]
    dropout_scales: Sequence[Array]
    lengths: Array | None


Step = Callable[[int, Array, Array, "Array | None", Array], "tuple[Array, Array | None]"]
Prepare = Callable[[Array], Array]

PROJECTION_CHUNK_BYTES = buffers.MAX_CACHED_BYTES
"""The most bytes of step inputs (a direction's input projection, or its stacked ``[x; 1; h]`` buffer) made
at a time: a longer sequence is projected in chunks of steps, each one GEMM, so that memory does not grow
with ``T`` beyond the output, and each chunk fits a block of the buffer cache."""


def chunk_steps(T: int, step_bytes: int) -> int:
    """Steps per chunk for ``T`` steps of ``step_bytes`` inputs each: all ``T`` when they fit
    :data:`PROJECTION_CHUNK_BYTES`, else the fewest chunks that do (one step each where a step alone is
    larger), of equal length but for a shorter last one."""
    fit = max(PROJECTION_CHUNK_BYTES // step_bytes, 1)
    chunks = -(-T // fit)
    return -(-T // chunks)


def feature_major(x_steps: Array) -> Array:
    """The ``prepare`` of :func:`run_direction` for a step that takes its input as is: ``x_steps [n, B, in]``
    as ``[in, n, B]`` (a view)."""
    return x_steps.transpose(2, 0, 1)


def _step_inputs(prepare: Prepare, x: Array, index: tuple, reverse: bool, start: int, stop: int,
                 stacked: bool) -> Array:
    """``prepare``'s inputs for the steps ``start..stop-1`` in run order (``index`` from :func:`run_order`),
    ``[width, n, B]`` (or ``stacked``, :func:`stacked_inputs`'s buffer). ``prepare`` gets those steps' rows
    of ``x`` sequence-major: gathered per sequence when the backward direction runs within lengths, else a
    slice, contiguous and flipped after ``prepare`` (a view), so only ``x`` is ever reordered, never its
    ``G`` times wider projection; a stacked buffer's slots follow run order, so there the slice is flipped
    before ``prepare`` copies it."""
    if not reverse:
        return prepare(x[start:stop])
    if len(index) == 1:  # a plain time flip
        T = x.shape[0]
        if stacked:
            return prepare(x[T - stop : T - start][::-1])
        return prepare(x[T - stop : T - start])[:, ::-1]
    time_index, batch_index = index
    return prepare(x[time_index[start:stop], batch_index])


def last_steps(lengths: Array | None) -> dict[int, Array]:
    """The sequences whose last valid step each run-order step is: ``{t: indices into the batch}`` (empty
    for full-length sequences)."""
    if lengths is None:
        return {}
    return {int(t): np.flatnonzero(lengths == t + 1) for t in np.unique(lengths - 1)}


def run_direction(
    step: Step,
    prepare: Prepare,
    x: Array,
    h0: Array,
    c0: Array | None,
    lengths: Array | None,
    reverse: bool,
    y: Array,
    chunk: int | None = None,
    stacked: bool = False,
) -> tuple[Array, Array | None]:
    """Run one direction of one layer over time: the only place that knows about lengths and reversal.

    ``step(t, input_t, h, c, h_out) -> (h_out, c_new)`` advances every sequence by one step, writing the
    new output into ``h_out``; ``t`` counts steps in run order. ``prepare(x_steps [n, B, in]) -> [width, n, B]``
    makes the step inputs of ``n`` consecutive run-order steps (an input projection, or a view of ``x``) from
    their rows of ``x [T, B, in]`` (original time order); it is called once per ``chunk`` steps (default:
    once). ``h0 [Hr, B]``; ``c0 [H, B]`` or ``None``; ``lengths [B]`` (each in 1..T) or ``None`` for
    full-length sequences. The backward direction runs over each sequence reversed within its length.
    Writes ``y [T, B, Hr]`` (any strides; zero at padded steps) and returns the final ``h`` and ``c``, each
    taken at the sequence's last valid step (possibly the step's buffers: copy them).
    ``stacked`` (stacked steps, module docstring): ``prepare`` is :func:`stacked_inputs` and each step is
    called as ``step(t, None, [x_t; 1; h], c, h_out)``, ``h_out`` being the state rows of the next slot.

    Sequences never mix (every step is column-wise in the batch), so a sequence past its length runs on over
    the padding, whatever it holds, and nothing of it is kept: its final state is copied out at its last
    valid step and its padded outputs are zeroed at the end, where a select per step would cost three
    ``[H, B]`` passes. Steps past the longest sequence are not run at all (``step`` never sees them).
    """
    T = x.shape[0]
    steps = run_steps(T, lengths)
    chunk = T if chunk is None else chunk
    index = run_order(T, lengths, reverse)
    gathered = reverse and lengths is not None  # run order is a gather, not a view: outputs are scattered back
    direct = not stacked and lengths is None and y[0].T.flags.c_contiguous  # batch 1: outputs straight into y
    # ping-pong outputs of steps over a projection (h_out never aliases h); stacked and direct steps write theirs
    # into the next slot or into y
    h_buffers = None if stacked or direct else buffers.empty((2, *h0.shape), h0.dtype)
    h, c = h0, c0
    last = last_steps(lengths)
    h_last = None if lengths is None else np.empty_like(h0)
    c_last = None if lengths is None or c0 is None else np.empty_like(c0)
    for start in range(0, steps, chunk):
        stop = min(start + chunk, steps)
        inputs = x_t = None  # the previous chunk's (and its last step's view): its buffer is free for this one
        inputs = _step_inputs(prepare, x, index, reverse, start, stop, stacked)
        y_run = buffers.empty((stop - start, *y.shape[1:]), y.dtype) if gathered else y[index][start:stop]
        if direct:
            for x_t, y_t, t in zip(inputs.transpose(1, 0, 2), y_run.transpose(0, 2, 1), range(start, stop)):
                h, c = step(t, x_t, h, c, y_t)
        else:
            if stacked:  # step k reads [x; 1; h] from slot k and writes its h into slot k+1
                state_rows = slice(inputs.shape[1] - h.shape[0], None)
                inputs[0, state_rows] = h
            for t in range(start, stop):
                if stacked:
                    h, c = step(t, None, inputs[t - start], c, inputs[t - start + 1, state_rows])
                else:
                    h, c = step(t, inputs[:, t - start], h, c, h_buffers[t % 2])
                y_run[t - start] = h.T
                ends = last.get(t)
                if ends is not None:
                    h_last[:, ends] = h[:, ends]
                    if c is not None:
                        c_last[:, ends] = c[:, ends]
        if gathered:
            time_index, batch_index = index
            y[time_index[start:stop], batch_index] = y_run
    if lengths is None:
        return h, c
    y[padded_steps(T, lengths)] = 0
    return h_last, c_last


def projection_bias(mode: CellMode, params: PseudoLayerParams) -> Array:
    """``b_W + b_R`` per gate row, without the recurrent biases that sit inside a product
    (``mode.inner_bias_gates``): what the input projection adds once for all time steps."""
    H = params.R.shape[0] // mode.num_gates
    bias = params.b_R.copy()
    for g in mode.inner_bias_gates:
        bias[g * H : (g + 1) * H] = 0
    if params.b_W is not None:
        bias += params.b_W
    return bias


def fused_step(mode: CellMode, params: PseudoLayerParams, B: int, record: DirectionTrace | None,
               stacked_bias: Array | None = None, storage: np.dtype | None = None,
               operand: Callable[[Array], Array] | None = None) -> Step:
    """The step of a fused cuDNN cell (over an input projection made with :func:`projection_bias`) on
    buffers allocated once; with ``record``, the step computes in the trace's slice for its time step.
    ``stacked_bias`` (:func:`projection_bias`): the step of a stacked direction (:func:`stacks_input`),
    whose GEMM is ``[W b R]`` with these biases. ``storage``: the data's dtype, where the step rounds
    (``reference.precision.HALF_ROUNDS``: its GEMM results, ``P m`` included, and its new state).
    ``operand``: TF32 math (``params`` from :func:`tf32_layer`): the rounding of the state each GEMM reads."""
    if stacked_bias is not None and operand is not None:
        raise ValueError("a stacked step's GEMM holds the biases: under TF32 math it would round them (stacks_input)")
    if stacked_bias is not None and storage is not None and rounding_dtype(storage, "gemm_outputs") is not None:
        raise ValueError("a stacked step cannot round its GEMM's W x and R h apart (stacks_input)")
    if params.negated_gates and record is not None:
        raise ValueError("a pseudo-layer with negated gates is for inference: a trace needs the gates' own weights")
    GH = params.R.shape[0]
    H = GH // mode.num_gates
    dtype = params.R.dtype
    inner = [params.b_R[g * H : (g + 1) * H] for g in mode.inner_bias_gates]
    b_inner = np.repeat(np.concatenate(inner)[:, None], B, axis=1) if inner else None
    R = params.R if stacked_bias is None else stacked_matrix(params, stacked_bias)
    gemm_round = None if storage is None else rounding_dtype(storage, "gemm_outputs")
    state_round = None if storage is None else rounding_dtype(storage, "state")
    # with a projection the step's h_out is m = o * tanh(c), not the state: P m is rounded below
    ws = Workspace(R, b_inner, buffers.empty((GH, B), dtype), buffers.empty((H, B), dtype), gemm_round,
                   state_round if params.P is None else None, state_round, operand)
    read = (lambda a: a) if operand is None else operand  # what the projection's GEMM reads of m
    projection_round = gemm_round if gemm_round is not None else state_round
    c_buffers = buffers.empty((2, H, B), dtype) if mode.has_cell_state else None  # ping-pong: c_out != c
    h_raw = buffers.empty((H, B), dtype) if params.P is not None and record is None else None  # training: trace
    cell_step = mode.negated_step if params.negated_gates else mode.step

    if record is None and params.P is None:  # inference without a projection: the fewest calls a step

        def plain_step(t: int, xw_t: Array, h: Array, c: Array | None, h_out: Array):
            c_out = None if c_buffers is None else c_buffers[t % 2]
            cell_step(ws, xw_t, h, c, h_out, c_out)
            return h_out, c_out

        return plain_step

    def step(t: int, xw_t: Array, h: Array, c: Array | None, h_out: Array):
        if record is None:
            acts, c_out, raw = None, None if c_buffers is None else c_buffers[t % 2], h_raw
        else:
            acts, c_out = record.acts[t], None if record.c is None else record.c[t]
            raw = None if record.h_raw is None else record.h_raw[t]
        cell_step(ws, xw_t, h, c, h_out if raw is None else raw, c_out, acts)
        if raw is not None:
            round_in_place(raw, state_round)  # m = o * tanh(c), stored for the projection's GEMM to read
            np.matmul(params.P, read(raw), out=h_out)
            if projection_round is not None:  # a GEMM's result, and the state
                np.copyto(h_out, h_out.astype(projection_round))
        return h_out, c_out

    return step


def new_trace(mode: CellMode, params: PseudoLayerParams, h0: Array, c0: Array | None, y: Array) -> DirectionTrace:
    """An empty trace for one direction that starts from ``h0 [Hr, B]``, ``c0`` and writes ``y [T, B, Hr]``."""
    H = params.R.shape[0] // mode.num_gates
    T, B = y.shape[:2]
    return DirectionTrace(
        acts=buffers.empty((T, mode.saved_width * H, B), y.dtype),
        c=None if c0 is None else buffers.empty((T, H, B), y.dtype),
        h_raw=None if params.P is None else buffers.empty((T, H, B), y.dtype),
        h0=h0, c0=c0, y=y,
    )


def run_layers(
    mode: CellMode,
    x: Array,
    h0: Array,
    c0: Array | None,
    layers: Sequence[PseudoLayerParams],
    num_dirs: int,
    lengths: Array | None,
    layer_output_dtype: np.dtype | None,
    dropout_scales: Sequence[Array] = (),
    trace: bool = False,
    storage: np.dtype | None = None,
    operand: Callable[[Array], Array] | None = None,
) -> tuple[Array, Array, Array | None, StackTrace | None]:
    """Run the stack: layers in order, each direction of a layer over the previous layer's output.

    ``x [T, B, input_size]``; ``h0 [L*D, B, Hr]``; ``c0 [L*D, B, H]`` or ``None``; ``layers[pseudo_layer]``.
    ``dropout_scales[l]``: ``[T, B, D*Hr]`` multiplier (mask / keep probability) applied to layer ``l``'s
    output before layer ``l+1`` reads it; empty when there is no dropout.
    ``layer_output_dtype``: round each layer's (dropped-out) output through this dtype, as cuDNN stores it
    in a buffer of the data type (float16 storage), or ``None``.
    ``storage``: the data's dtype, for the rounding inside each layer (module docstring); ``None``: none.
    ``operand``: TF32 math (``reference.tf32``'s rounding of a float32 array): every GEMM reads its operands
    rounded by it (the weights, each layer's input, the states), nothing else changes; ``None``: FMA math.
    Returns ``y [T, B, D*Hr]``, ``h_n [L*D, B, Hr]``, ``c_n [L*D, B, H]`` or ``None``, and the
    :class:`StackTrace` for backprop when ``trace``. The trace keeps ``x`` and (when ``trace``) ``y`` as
    they are: a caller hands out neither without copying.
    """
    num_layers = len(layers) // num_dirs
    T, B = x.shape[:2]
    Hr = h0.shape[2]
    h_n = np.empty_like(h0)
    c_n = None if c0 is None else np.empty_like(c0)
    layer_input = np.ascontiguousarray(x)
    inputs, directions = [], []
    GH = layers[0].R.shape[0]
    if operand is not None:  # (a trace keeps these: the backward pass's GEMMs read the same rounded weights)
        layers = [tf32_layer(p, operand) for p in layers]
    for layer in range(num_layers):
        inputs.append(layer_input)
        caller_s = layer == num_layers - 1 and not trace  # the caller's output: a fresh array (else the trace's)
        y = (np.empty if caller_s else buffers.empty)((T, B, num_dirs * Hr), x.dtype)
        for direction in range(num_dirs):
            pl = layer * num_dirs + direction
            params = layers[pl]
            bias = projection_bias(mode, params)
            stacked = operand is None and stacks_input(mode, params, B, storage)

            def project(x_steps: Array, params: PseudoLayerParams = params, bias: Array = bias) -> Array:
                out = projection_buffer(GH, x_steps.shape[0], B, x.dtype)
                read = np.ascontiguousarray(x_steps) if operand is None or params.W is None else operand(x_steps)
                return input_projection(read, params, bias, out, storage)

            h_start = np.ascontiguousarray(h0[pl].T)
            c_start = None if c0 is None else np.ascontiguousarray(c0[pl].T)
            y_dir = y[:, :, direction * Hr : (direction + 1) * Hr]
            record = new_trace(mode, params, h_start, c_start, y_dir) if trace else None
            prepare = partial(stacked_inputs, state_width=Hr) if stacked else project
            step_rows = layer_input.shape[2] + 1 + Hr if stacked else GH  # of a step's input, prepared
            chunk = chunk_steps(T, step_rows * B * x.dtype.itemsize)
            step = fused_step(mode, params, B, record, bias if stacked else None, storage, operand)
            h_end, c_end = run_direction(step, prepare, layer_input, h_start, c_start, lengths, direction == 1,
                                         y_dir, chunk, stacked)
            h_n[pl] = h_end.T
            if c_n is not None:
                c_n[pl] = c_end.T
            directions.append(record)
        layer_input = y  # kept by the trace as it is: dropout and rounding make new arrays
        if layer < len(dropout_scales):
            layer_input = layer_input * dropout_scales[layer]
        if layer_output_dtype is not None:
            layer_input = layer_input.astype(layer_output_dtype).astype(x.dtype)
    stack = StackTrace(layers, inputs, directions, dropout_scales, lengths) if trace else None
    return layer_input, h_n, c_n, stack
