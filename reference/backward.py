"""Backpropagation through time, driven by the same mode table and the same direction logic as the
forward pass (``recurrence.py``): one direction runner, reused by layers, directions and lengths.

Semantics (TensorFlow ``CudnnRNNBackpropV3``, cuDNN ``BackwardData`` + ``BackwardWeights``): no gradient
flows from or into padded steps; the gradient of a final state enters at each sequence's last valid
step; gradients of a layer's output flow through the dropout mask of the forward pass; rounding to
float16 between layers is treated as the identity. The per-step loop only carries the recurrent
gradient; the weight gradients are one GEMM over all time steps per matrix block.

Shapes are time-major: sequences ``[T, B, width]``, states ``[B, width]`` per pseudo-layer.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .modes import CellMode
from .recurrence import DirectionTrace, PseudoLayerParams, StackTrace, reversal_index

Array = np.ndarray


def _rows(a: Array) -> Array:
    return a.reshape(-1, a.shape[-1])


def backprop_direction(
    mode: CellMode,
    trace: DirectionTrace,
    params: PseudoLayerParams,
    dy: Array,
    dh_n: Array,
    dc_n: Array | None,
    lengths: Array | None,
    reverse: bool,
) -> tuple[Array, Array, Array | None, PseudoLayerParams]:
    """Backprop one pseudo-layer.

    ``dy [T, B, Hr]`` is the gradient of its outputs (original time order), ``dh_n [B, Hr]`` and
    ``dc_n [B, H]`` (or ``None``) of its final states. Returns the gradient of its input projection
    ``d_xw [T, B, G*H]`` (original order, zero at padded steps), of its initial states ``dh0``, ``dc0``,
    and its recurrent parameter gradients as ``PseudoLayerParams(W=None, b_W=None, R, b_R, P)``.
    """
    T, B = dy.shape[:2]
    GH = params.R.shape[0]
    H = GH // mode.num_gates
    index = reversal_index(T, lengths) if reverse else slice(None)
    dy = dy[index]
    d_xw = np.empty((T, B, GH), dtype=dy.dtype)
    d_rec = np.empty((T, B, GH), dtype=dy.dtype) if mode.separate_rec_grad else d_xw
    g_out = None if params.P is None else np.empty_like(dy)
    dh, dc = dh_n, dc_n
    for t in range(T - 1, -1, -1):
        g = dh + dy[t]
        gc = dc
        valid = None if lengths is None else (t < lengths)[:, None]
        if valid is not None:  # a padded step passed its state through unchanged and output a constant 0
            g = np.where(valid, g, 0.0)
            gc = None if dc is None else np.where(valid, dc, 0.0)
        if params.P is not None:
            g_out[t] = g
            g = g @ params.P
        c_prev = None if trace.c_prev is None else trace.c_prev[t]
        dh_prev, dc_prev = mode.step_backward(g, gc, trace.acts[t], trace.h_prev[t], c_prev, params.R,
                                              d_xw[t], d_rec[t])
        if valid is not None:  # select, never multiply: padded steps may hold NaN from padded input
            d_xw[t] = np.where(valid, d_xw[t], 0.0)
            if d_rec is not d_xw:
                d_rec[t] = np.where(valid, d_rec[t], 0.0)
            dh_prev = np.where(valid, dh_prev, dh)
            dc_prev = None if dc is None else np.where(valid, dc_prev, dc)
        dh, dc = dh_prev, dc_prev

    dR = np.empty_like(params.R)
    for rows, inputs in mode.recurrent_inputs(trace.h_prev, trace.acts, H):
        dR[rows] = _rows(d_rec[..., rows]).T @ _rows(_zero_padded(inputs, lengths))
    dP = None
    if params.P is not None:
        dP = _rows(g_out).T @ _rows(_zero_padded(trace.h_raw, lengths))
    grads = PseudoLayerParams(W=None, b_W=None, R=dR, b_R=_rows(d_rec).sum(axis=0), P=dP)
    return d_xw[index], dh, dc, grads


def _zero_padded(seq: Array, lengths: Array | None) -> Array:
    """``seq [T, B, ...]`` with padded steps zeroed, so they add nothing (not even NaN) to a GEMM."""
    if lengths is None:
        return seq
    valid = (np.arange(seq.shape[0])[:, None] < lengths[None, :])[..., None]
    return np.where(valid, seq, 0.0)


def backprop_layers(
    mode: CellMode,
    stack: StackTrace,
    num_dirs: int,
    dy: Array,
    dh_n: Array,
    dc_n: Array | None,
) -> tuple[Array, Array, Array | None, list[PseudoLayerParams]]:
    """Backprop the stack recorded by ``run_layers(..., trace=True)``.

    ``dy [T, B, D*Hr]``, ``dh_n [L*D, B, Hr]``, ``dc_n [L*D, B, H]`` or ``None``.
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
        x = stack.inputs[layer]
        x_rows = _rows(_zero_padded(x, stack.lengths))
        d_in = np.zeros_like(x)
        width = d_out.shape[2] // num_dirs
        for direction in range(num_dirs):
            pl = layer * num_dirs + direction
            p = layers[pl]
            d_xw, dh0[pl], dc_start, g = backprop_direction(
                mode, stack.directions[pl], p, d_out[..., direction * width : (direction + 1) * width],
                dh_n[pl], None if dc_n is None else dc_n[pl], stack.lengths, direction == 1)
            if dc0 is not None:
                dc0[pl] = dc_start
            d_rows = _rows(d_xw)
            if p.W is None:  # skip_input: the input fed every gate as is
                d_in += d_xw.reshape(*d_xw.shape[:2], G, -1).sum(axis=2)
                dW = None
            else:
                d_in += (d_rows @ p.W).reshape(d_in.shape)
                dW = d_rows.T @ x_rows
            grads[pl] = PseudoLayerParams(W=dW, b_W=None if p.b_W is None else d_rows.sum(axis=0),
                                          R=g.R, b_R=g.b_R, P=g.P)
        d_out = d_in if layer == 0 or not stack.dropout_scales else d_in * stack.dropout_scales[layer - 1]
    return d_out, dh0, dc0, grads  # type: ignore[return-value]
