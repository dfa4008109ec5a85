"""One direction over time, and the stack of layers and directions built from it.

Every mode, direction, layer and sequence-length case goes through :func:`run_direction`; the backward
direction is the forward recurrence run over each sequence reversed *within its valid length* (cuDNN's
and TensorFlow's ``reverse_sequence`` semantics), so padding never leaks into valid steps.

Shapes are time-major throughout: sequences ``[T, B, width]``, states ``[B, width]`` per pseudo-layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .modes import CellMode

Array = np.ndarray


@dataclass(frozen=True)
class PseudoLayerParams:
    """One pseudo-layer's parameters in the compute dtype, gate blocks stacked in canonical order.

    ``W [G*H, in_width]`` (``None`` with skip_input: the identity), ``b_W [G*H]`` (``None`` where absent),
    ``R [G*H, Hr]``, ``b_R [G*H]``, ``P [num_proj, H]`` or ``None``.
    """

    W: Array | None
    b_W: Array | None
    R: Array
    b_R: Array
    P: Array | None


def input_projection(x: Array, params: PseudoLayerParams, num_gates: int) -> Array:
    """``x @ W.T + b_W`` for all time steps in one GEMM: ``[T, B, in] -> [T, B, G*H]``."""
    T, B, width = x.shape
    if params.W is None:  # skip_input: the input feeds every gate as is
        xw = np.tile(x, (1, 1, num_gates))
    else:
        xw = (x.reshape(T * B, width) @ params.W.T).reshape(T, B, -1)
    if params.b_W is not None:
        xw += params.b_W
    return xw


def reversal_index(T: int, lengths: Array | None) -> tuple[Array, Array] | slice:
    """Index that reverses each sequence within its valid length and leaves padding in place.

    It is an involution, so the same index maps outputs back. ``lengths=None``: a plain time flip.
    """
    if lengths is None:
        return slice(None, None, -1)
    t = np.arange(T)[:, None]
    time_index = np.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)
    return time_index, np.arange(lengths.shape[0])[None, :]


@dataclass(frozen=True)
class DirectionTrace:
    """What one pseudo-layer's forward run keeps for backprop, in run order (the backward direction's
    steps reversed within each length): per step the mode's saved activations ``acts [T, B, A*H]``, the
    recurrent input ``h_prev [T, B, Hr]``, the previous cell state ``c_prev [T, B, H]`` (LSTM) and the
    output before the projection ``h_raw [T, B, H]`` (LSTM with num_proj)."""

    acts: Array
    h_prev: Array
    c_prev: Array | None
    h_raw: Array | None


@dataclass(frozen=True)
class StackTrace:
    """A training forward pass, as the backward pass needs it: each pseudo-layer's parameters and trace,
    each layer's input ``[T, B, width]`` (after dropout), the dropout multipliers and the lengths used."""

    layers: Sequence[PseudoLayerParams]
    inputs: Sequence[Array]
    directions: Sequence[DirectionTrace]
    dropout_scales: Sequence[Array]
    lengths: Array | None


Step = Callable[[int, Array, Array, "Array | None"], "tuple[Array, Array | None]"]


def run_direction(
    step: Step,
    inputs: Array,
    h0: Array,
    c0: Array | None,
    lengths: Array | None,
    reverse: bool,
    out_width: int | None = None,
) -> tuple[Array, Array, Array | None]:
    """Run one direction of one layer over time: the only place that knows about lengths and reversal.

    ``step(t, input_t, h, c) -> (h_new, c_new)`` advances every sequence by one step; ``t`` counts steps
    in run order. ``inputs [T, B, ...]`` (original time order); ``h0 [B, Hr]``; ``c0 [B, H]`` or ``None``;
    ``lengths [B]`` (each in 1..T) or ``None`` for full-length sequences. The backward direction runs
    over each sequence reversed within its length (padding stays at the end).
    Returns ``y [T, B, Hr]`` (zero at padded steps), the final ``h`` and ``c``, each taken at the
    sequence's last valid step.
    """
    T, B = inputs.shape[:2]
    index = reversal_index(T, lengths) if reverse else slice(None)
    inputs = inputs[index]
    y = np.empty((T, B, out_width or h0.shape[1]), dtype=h0.dtype)
    h, c = h0, c0
    for t in range(T):
        h_new, c_new = step(t, inputs[t], h, c)
        if lengths is not None:
            valid = (t < lengths)[:, None]
            h_new = np.where(valid, h_new, h)
            if c is not None:
                c_new = np.where(valid, c_new, c)
            y[t] = np.where(valid, h_new, 0)
        else:
            y[t] = h_new
        h, c = h_new, c_new
    return y[index], h, c


def fused_step(mode: CellMode, params: PseudoLayerParams, xw: Array, record: DirectionTrace | None) -> Step:
    """The step of a fused cuDNN cell over its input projection ``xw [T, B, G*H]`` (which it completes with
    the recurrent biases that add outside a product), recording the trace when ``record`` is given."""
    H = params.R.shape[0] // mode.num_gates
    RT = np.ascontiguousarray(params.R.T)  # the per-step GEMM h @ RT reads a contiguous operand
    inner = [slice(g * H, (g + 1) * H) for g in mode.inner_bias_gates]
    outer_bias = params.b_R.copy()
    for block in inner:
        outer_bias[block] = 0
    xw += outer_bias  # recurrent biases that add outside any product join the input projection once
    b_inner = np.concatenate([params.b_R[block] for block in inner]) if inner else None
    P_T = None if params.P is None else np.ascontiguousarray(params.P.T)

    def step(t: int, xw_t: Array, h: Array, c: Array | None):
        if record is not None:
            record.h_prev[t] = h
            if c is not None:
                record.c_prev[t] = c
        h_new, c_new = mode.step(xw_t, h, c, RT, b_inner, None if record is None else record.acts[t])
        if P_T is not None:
            if record is not None:
                record.h_raw[t] = h_new
            h_new = h_new @ P_T
        return h_new, c_new

    return step


def new_trace(mode: CellMode, params: PseudoLayerParams, T: int, B: int, Hr: int, dtype: np.dtype,
              has_cell: bool) -> DirectionTrace:
    H = params.R.shape[0] // mode.num_gates
    return DirectionTrace(
        acts=np.empty((T, B, mode.saved_width * H), dtype=dtype),
        h_prev=np.empty((T, B, Hr), dtype=dtype),
        c_prev=np.empty((T, B, H), dtype=dtype) if has_cell else None,
        h_raw=None if params.P is None else np.empty((T, B, H), dtype=dtype),
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
) -> tuple[Array, Array, Array | None, StackTrace | None]:
    """Run the stack: layers in order, each direction of a layer over the previous layer's output.

    ``x [T, B, input_size]``; ``h0 [L*D, B, Hr]``; ``c0 [L*D, B, H]`` or ``None``; ``layers[pseudo_layer]``.
    ``dropout_scales[l]``: ``[T, B, D*Hr]`` multiplier (mask / keep probability) applied to layer ``l``'s
    output before layer ``l+1`` reads it; empty when there is no dropout.
    ``layer_output_dtype``: round each layer's (dropped-out) output through this dtype, as cuDNN stores it
    in a buffer of the data type (float16 storage), or ``None``.
    Returns ``y [T, B, D*Hr]``, ``h_n [L*D, B, Hr]``, ``c_n [L*D, B, H]`` or ``None``, and the
    :class:`StackTrace` for backprop when ``trace``.
    """
    num_layers = len(layers) // num_dirs
    h_n = np.empty_like(h0)
    c_n = None if c0 is None else np.empty_like(c0)
    layer_input = x
    inputs, directions = [], []
    for layer in range(num_layers):
        outputs = []
        inputs.append(layer_input)
        for direction in range(num_dirs):
            pl = layer * num_dirs + direction
            xw = input_projection(layer_input, layers[pl], mode.num_gates)
            c_start = None if c0 is None else c0[pl]
            T, B = xw.shape[:2]
            record = new_trace(mode, layers[pl], T, B, h0.shape[2], xw.dtype, c0 is not None) if trace else None
            y, h_n[pl], c_end = run_direction(fused_step(mode, layers[pl], xw, record), xw, h0[pl], c_start,
                                              lengths, direction == 1)
            if c_n is not None:
                c_n[pl] = c_end
            outputs.append(y)
            directions.append(record)
        layer_input = outputs[0] if num_dirs == 1 else np.concatenate(outputs, axis=2)
        if layer < len(dropout_scales):
            layer_input = layer_input * dropout_scales[layer]
        if layer_output_dtype is not None:
            layer_input = layer_input.astype(layer_output_dtype).astype(x.dtype)
    stack = StackTrace(layers, inputs, directions, dropout_scales, lengths) if trace else None
    return layer_input, h_n, c_n, stack
