"""Backpropagation through time, driven by the same mode table and the same direction logic as the
forward pass (``recurrence.py``): one direction runner, reused by layers, directions and lengths.

Semantics (TensorFlow ``CudnnRNNBackpropV3``, cuDNN ``BackwardData`` + ``BackwardWeights``): no gradient
flows from or into padded steps; the gradient of a final state enters at each sequence's last valid
step; gradients of a layer's output flow through the dropout mask of the forward pass; rounding to
float16 between layers is treated as the identity. The per-step loop only carries the recurrent
gradient; the weight gradients are one GEMM over all time steps per matrix block.

Layouts as in ``recurrence.py``: states and a step's gradients are feature-major ``[width, B]``, a
direction's input-projection gradient ``[G*H, T, B]``; sequences between layers (the gradients of a
layer's output and input, the outputs and inputs kept by the trace) are sequence-major ``[T, B, width]``.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from . import buffers
from .modes import CellMode, read
from .recurrence import (DirectionTrace, PseudoLayerParams, StackTrace, last_steps, padded_steps, run_order,
                         run_steps, zero_padded)

Array = np.ndarray


def _rows(a: Array) -> Array:
    """``[width, T, B]`` -> ``[width, T*B]`` (a copy only where ``a`` is not contiguous)."""
    return a.reshape(a.shape[0], -1)


def _row_sums(a: Array) -> Array:
    """``a.sum(axis=1)`` of a ``[rows, T*B]`` gradient as one GEMV against ones (``[rows]``): the same kind
    of accumulation as the weight gradients' GEMMs beside it (why not ``sum``: ``benchmarks/NOTES.md``)."""
    return a @ np.ones(a.shape[1], a.dtype)


def _transposed(a: Array) -> Array:
    """``a.T`` as a contiguous array (from the buffer cache)."""
    out = buffers.empty(a.shape[::-1], a.dtype)
    out[...] = a.T
    return out


def previous_outputs(trace: DirectionTrace, index: tuple) -> Array:
    """Each step's recurrent input ``h_prev [S, B, Hr]`` in run order (``index`` from :func:`run_order`, the
    ``S`` steps run): ``h0``, then the outputs of the steps before. A sequence's valid steps come first in
    run order, so this is exact at every valid step; at padded steps, where no gradient flows, it holds
    zeros or the last valid output rather than the carried state."""
    y_run = trace.y[index]
    h_prev = buffers.empty(y_run.shape, y_run.dtype)
    h_prev[0] = trace.h0.T
    h_prev[1:] = y_run[:-1]
    return h_prev


def backprop_direction(
    mode: CellMode,
    trace: DirectionTrace,
    params: PseudoLayerParams,
    dy: Array,
    dh_n: Array,
    dc_n: Array | None,
    lengths: Array | None,
    reverse: bool,
    operand: Callable[[Array], Array] | None = None,
) -> tuple[Array, tuple | None, Array, Array | None, PseudoLayerParams]:
    """Backprop one pseudo-layer (``operand``: TF32 math, every GEMM's operands rounded by it; ``params`` are the
    forward's, TF32 already).

    ``dy [T, B, Hr]`` (any strides) is the gradient of its outputs (original time order), ``dh_n [Hr, B]`` and
    ``dc_n [H, B]`` (or ``None``) of its final states. Returns the gradient of its input projection
    ``d_xw [G*H, S, B]`` (zero at padded steps) and its ``order``, of its initial states ``dh0``, ``dc0``,
    and its recurrent parameter gradients as ``PseudoLayerParams(W=None, b_W=None, R, b_R, P)``.
    ``S`` is :func:`run_steps`: the gradient of the input past the longest sequence is zero, and not made.
    ``order`` is ``None`` where ``d_xw`` holds the first ``S`` steps in original time order; where the
    backward direction ran within lengths, ``d_xw`` is left in run order and ``order`` (from
    :func:`run_order`) puts the first ``S`` steps of a sequence-major ``[T, B, width]`` array in that order:
    the caller reorders the layer's input and its gradient, rows of ``width``, rather than ``d_xw`` element
    by element.
    """
    T, B = dy.shape[:2]
    S = run_steps(T, lengths)
    GH = params.R.shape[0]
    H = GH // mode.num_gates
    index = run_order(T, lengths, reverse)
    dy = dy[index]  # padded steps' values (NaN, maybe) reach only padded steps' gradients, zeroed below
    h_prev = previous_outputs(trace, index)
    d_xw = buffers.empty((GH, S, B), dy.dtype)
    d_rec = buffers.empty((GH, S, B), dy.dtype) if mode.separate_rec_grad else d_xw
    g_out = None if params.P is None else buffers.empty((dy.shape[2], S, B), dy.dtype)
    RT = _transposed(params.R)
    PT = None if params.P is None else _transposed(params.P)
    # A step's many elementwise ops run on contiguous scratch: one strided copy out per array.
    d_xw_t = buffers.empty((GH, B), dy.dtype)
    d_rec_t = buffers.empty((GH, B), dy.dtype) if mode.separate_rec_grad else d_xw_t
    # As in the forward pass, sequences never mix: a sequence's padded steps (run order t >= its length) are
    # backpropagated like any other, their gradients discarded below, and its final states' gradients enter
    # at its last valid step, replacing whatever came back from the padding.
    last = last_steps(lengths)
    dh, dc = dh_n, dc_n
    for t in range(S - 1, -1, -1):  # the steps the forward pass ran
        g = dh + dy[t].T
        gc = dc
        ends = last.get(t)
        if ends is not None:
            g[:, ends] = dh_n[:, ends] + dy[t, ends].T
            if dc is not None:
                gc = dc.copy()
                gc[:, ends] = dc_n[:, ends]
        if PT is not None:
            g_out[:, t] = g
            g = PT @ read(operand, g)
        c_prev = None if trace.c is None else (trace.c0 if t == 0 else trace.c[t - 1])
        dh, dc = mode.step_backward(g, gc, trace.acts[t], h_prev[t].T, c_prev, RT, d_xw_t, d_rec_t,
                                    operand=operand)
        d_xw[:, t] = d_xw_t
        if d_rec is not d_xw:
            d_rec[:, t] = d_rec_t
    if lengths is not None:  # exact zeros: padded steps' gradients may hold NaN
        padded = padded_steps(S, lengths)
        d_xw[:, padded] = 0
        if d_rec is not d_xw:
            d_rec[:, padded] = 0
        if g_out is not None:
            g_out[:, padded] = 0

    dR = buffers.empty(params.R.shape, params.R.dtype)
    d_rec_rows = _rows(d_rec)
    for rows, inputs in mode.recurrent_inputs(h_prev, trace.acts[:S], H):
        dR[rows] = read(operand, d_rec_rows[rows]) @ read(operand, zero_padded(inputs, lengths, 2).reshape(S * B, -1))
    dP = None
    if params.P is not None:  # h_raw is time-outer: the reshape copies it feature-major for the GEMM
        dP = read(operand, _rows(g_out)) @ read(operand, _rows(zero_padded(trace.h_raw[:S].transpose(1, 0, 2),
                                                                               lengths, 0))).T
    grads = PseudoLayerParams(W=None, b_W=None, R=dR, b_R=_row_sums(d_rec_rows), P=dP)
    if reverse and lengths is not None:  # per element, this reorder would cost more than the step loop
        return d_xw, index, dh, dc, grads
    return d_xw[(slice(None), *index)], None, dh, dc, grads


def backprop_layers(
    mode: CellMode,
    stack: StackTrace,
    num_dirs: int,
    dy: Array,
    dh_n: Array,
    dc_n: Array | None,
    operand: Callable[[Array], Array] | None = None,
) -> tuple[Array, Array, Array | None, list[PseudoLayerParams]]:
    """Backprop the stack recorded by ``run_layers(..., trace=True)`` (with ``operand``: of a TF32 forward pass,
    every GEMM of the backward pass reading its operands rounded by it).

    ``dy [T, B, D*Hr]`` (any strides), ``dh_n [L*D, B, Hr]``, ``dc_n [L*D, B, H]`` or ``None``.
    Returns ``dx [T, B, input_size]``, ``dh0 [L*D, B, Hr]``, ``dc0`` and per pseudo-layer gradients
    (``PseudoLayerParams`` of gradients; ``W``/``b_W`` ``None`` where the parameter does not exist).
    """
    layers: Sequence[PseudoLayerParams] = stack.layers
    num_layers = len(layers) // num_dirs
    G = mode.num_gates
    dh0 = np.empty_like(dh_n)
    dc0 = None if dc_n is None else np.empty_like(dc_n)
    grads: list[PseudoLayerParams | None] = [None] * len(layers)
    d_out = dy
    for layer in range(num_layers - 1, -1, -1):
        x = stack.inputs[layer]  # [T, B, width]
        x_padded = zero_padded(x, stack.lengths, 2)
        d_in = (np.empty if layer == 0 else buffers.empty)(x.shape, x.dtype)  # layer 0's is the caller's
        d_part = buffers.empty(x.shape, x.dtype) if num_dirs > 1 else None
        width = d_out.shape[2] // num_dirs
        for direction in range(num_dirs):
            pl = layer * num_dirs + direction
            p = layers[pl]
            d_xw, order, dh, dc_start, g = backprop_direction(
                mode, stack.directions[pl], p, d_out[:, :, direction * width : (direction + 1) * width],
                dh_n[pl].T, None if dc_n is None else dc_n[pl].T, stack.lengths, direction == 1, operand)
            dh0[pl] = dh.T
            if dc0 is not None:
                dc0[pl] = dc_start.T
            S, steps = d_xw.shape[1], d_xw.shape[1] * d_xw.shape[2]  # past S the input's gradient is zero
            d_rows = _rows(d_xw)
            target = d_in if direction == 0 else d_part  # the first direction's input gradient is assigned
            target[S:] = 0
            d_x = target[:S] if order is None else buffers.empty((S, *x.shape[1:]), x.dtype)  # in d_xw's order
            if p.W is None:  # skip_input: the input fed every gate as is
                np.sum(d_rows.reshape(G, -1, d_rows.shape[1]), axis=0, out=d_x.reshape(steps, -1).T)
                dW = None
            else:  # BLAS reads d_rows transposed in place: the gradient comes out sequence-major
                d_read = read(operand, d_rows)
                np.matmul(d_read.T, p.W, out=d_x.reshape(steps, -1))
                x_rows = (x_padded[:S] if order is None else x_padded[order]).reshape(steps, -1)
                dW = np.matmul(d_read, read(operand, x_rows), out=buffers.empty(p.W.shape, p.W.dtype))
            if order is not None:
                target[order] = d_x
            if direction > 0:
                d_in += d_part
            # The input bias shares the recurrent bias's gradient unless the mode separates d_rec from d_xw.
            d_b_W = None if p.b_W is None else _row_sums(d_rows) if mode.separate_rec_grad else g.b_R
            grads[pl] = PseudoLayerParams(W=dW, b_W=d_b_W, R=g.R, b_R=g.b_R, P=g.P)
        if layer > 0 and stack.dropout_scales:
            d_in *= stack.dropout_scales[layer - 1]
        d_out = d_in
    return d_out, dh0, dc0, grads  # type: ignore[return-value]
