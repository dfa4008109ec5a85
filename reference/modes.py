"""The cell modes as a table: one row per cuDNN ``cudnnRNNMode_t`` (plus the textbook GRU).

Every row names its gates in canonical (cuDNN ``lin_layer_id``) order and carries one step function.
A row may compute with its gate blocks in another order, ``compute_order`` (canonical gate ids, in the
order their blocks are stacked in ``W``, ``R``, biases, ``xw`` and gradients): the LSTM stacks
i, f, o, c so that its three sigmoid gates are one contiguous block.
Steps work **feature-major**: a state is ``[width, B]`` (features down, batch across), so each gate block
is a contiguous block of rows and the per-step GEMM is ``R @ h`` (``[G*H, Hr] @ [Hr, B]``), made as
``R.dot(h, out)``: the same BLAS call as ``np.matmul``, bit for bit. The forward steps pass ``out``
positionally and their constants as 0-d arrays of the data's dtype (:func:`sigmoid`), the same numbers as
Python floats would be. Why these forms: ``benchmarks/NOTES.md`` (``modes.py``).

``step(ws, xw, h, c, h_out, c_out, acts)`` receives the :class:`Workspace` of its pseudo-layer (``R``,
the inner recurrent biases, scratch buffers), the input projection of the current time step
``xw [G*H, B]`` (gate blocks in compute order), which already holds the input-side biases *and* every
recurrent bias that adds outside a product (``W x + b_W + b_R``, except the gates listed in the row's
``inner_bias_gates``), the previous recurrent state ``h [Hr, B]`` (``Hr`` = num_proj or num_units) and
cell state ``c [H, B]`` or ``None``. It writes the new hidden output *before* any LSTM projection into
``h_out [H, B]`` and the new cell state into ``c_out`` (LSTM); neither aliases an input. A row with
``stackable_input`` also takes ``xw=None`` with ``R = [W b R]`` and ``h = [x_t; 1; h]``.
When ``acts`` (a contiguous ``[mode.saved_width * H, B]`` buffer, one time step of a training trace) is
given, the step computes its gates in it rather than in the workspace, so the activations a backward pass
needs (``saved`` in each row) are left there without a copy.

A row's ``step_backward(g, gc, acts, h_prev, c_prev, RT, d_xw, d_rec[, operand])`` takes the gradients of the step's
outputs (``g`` of the new hidden output before projection, ``gc`` of the new cell state or ``None``) and
``RT = R.T`` (contiguous, ``[Hr, G*H]``), writes the gradients of the input projection ``xw`` into ``d_xw``
and of the recurrent pre-activation (``R @ recurrent_input + b_R``) into ``d_rec`` (both ``[G*H, B]``; the
same array unless the row has ``separate_rec_grad``: they differ only in the ``inner_bias_gates``, where a
gate scales the recurrent product, as the cuDNN GRU's candidate) and returns
``(dh_prev, dc_prev)``. ``recurrent_inputs(h_prev, acts, H)`` names, per block of rows of ``R``, the tensor
that block multiplies (``h_prev`` for every mode but the textbook GRU's candidate, which multiplies
``r * h_prev``); it works on whole sequences, ``h_prev [T, B, Hr]`` and the trace's ``acts [T, A*H, B]``,
and returns ``[T, B, width]`` tensors, so the weight gradient is one GEMM over all time steps.

Equations (column vectors; ``σ`` logistic sigmoid), from the cuDNN ``cudnnRNNMode_t`` documentation:

- relu / tanh: ``h' = act(xw + R h + b_R)``
- lstm (gates i, f, c, o): ``c' = σ(f)*c + σ(i)*tanh(g_c)``, ``h' = σ(o)*tanh(c')``; with a cell clip
  (:func:`clipped_lstm`) ``c'`` is clipped to ``[lclip, rclip]`` first
- gru (cuDNN, gates r, z, h): ``r = σ(xw_r + R_r h + b_Rr)``, ``z = σ(...)``,
  ``n = tanh(xw_h + r*(R_h h + b_Rh))``, ``h' = (1-z)*n + z*h``
- classic_gru (textbook, same weights): ``n = tanh(xw_h + R_h (r*h) + b_Rh)``

Every bias mode (``cudnnRNNBiasMode_t``) runs these steps: a bias the mode lacks arrives as zeros
(``recurrence.PseudoLayerParams``), which the equations above add as ``v + 0 == v``.

Float16 storage (``reference.precision.HALF_ROUNDS``): a step rounds its recurrent GEMM's result to
``ws.gemm_round`` in place before any bias is added to it (``xw`` holds the input GEMM's result rounded
likewise, ``recurrence.projector``), its new ``h_out`` to ``ws.state_round`` and the LSTM's new ``c_out``,
after ``h_out`` has read it, to ``ws.cell_round`` (:func:`round_in_place`);
``None`` (float32, float64) rounds nothing and changes no bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

Array = np.ndarray


@dataclass(frozen=True)
class Workspace:
    """What a pseudo-layer's step reuses at every time step: ``R [G*H, Hr]`` (or ``[W b R]``, see
    ``CellMode.stackable_input``), the recurrent biases of the row's ``inner_bias_gates`` repeated across the
    batch, ``[n*H, B]`` (or ``None``), and scratch ``z [G*H, B]``, ``tmp [H, B]``; the dtypes the step rounds
    its GEMM results, its new ``h_out`` and (LSTM) the new ``c_out`` it carries to the next step to (``None``:
    not rounded; module docstring); ``operand``: under TF32 math, the rounding of the state a GEMM reads
    (:func:`gemm_operand`; ``R`` is TF32 already), else ``None``."""

    R: Array
    b_inner: Array | None
    z: Array
    tmp: Array
    gemm_round: np.dtype | None = None
    state_round: np.dtype | None = None
    cell_round: np.dtype | None = None
    operand: Callable[[Array], Array] | None = None  # TF32 math: what a GEMM reads of its state operand


def read(operand: Callable[[Array], Array] | None, a: Array) -> Array:
    """``a`` as a GEMM of a backward step reads it: itself, or under TF32 math (``operand``) its rounding."""
    return a if operand is None else operand(a)


def gemm_operand(ws: Workspace, a: Array) -> Array:
    """``a`` as the step's recurrent GEMM reads it: ``a`` itself, or under TF32 math its TF32 rounding (a copy:
    the state itself keeps its float32 bits for the step's elementwise math)."""
    return a if ws.operand is None else ws.operand(a)


def round_in_place(a: Array, dtype: np.dtype | None) -> Array:
    """``a`` rounded to ``dtype``'s precision in place (kept in its own dtype); ``None``: left as it is."""
    if dtype is not None:
        np.copyto(a, a.astype(dtype))
    return a


StepFn = Callable[[Workspace, Array, Array, Optional[Array], Array, Optional[Array], Optional[Array]], None]
BackwardFn = Callable[[Array, Optional[Array], Array, Array, Optional[Array], Array, Array, Array],
                      tuple[Array, Optional[Array]]]
RecurrentInputsFn = Callable[[Array, Array, int], list[tuple[slice, Array]]]


def sigmoid(x: Array, out: Array | None = None) -> Array:
    """Logistic sigmoid ``1 / (1 + exp(-x))`` of ``x`` into ``out`` (may be ``x``), relatively accurate
    everywhere (no ``tanh`` cancellation); returns ``out``.

    Negation is a multiply, never ``np.negative`` with ``out``, which returned wrong values on a strided
    float32 view in a NumPy release (README, "Findings"). The last step is ``np.divide(1, v)``: bit for bit
    ``np.reciprocal(v)`` (every float dtype, denormals, signed zeros, infinities and NaN). The constants
    are 0-d arrays of ``x``'s dtype, bit for bit the numbers Python's ``-1.0`` and ``1`` would be there.
    Why these forms: ``benchmarks/NOTES.md`` (``modes.py``).
    """
    minus_one, one = _UNIT.get(x.dtype, (-1.0, 1))  # other dtypes: NumPy's promotion, as before
    out = np.multiply(x, minus_one, out)
    np.exp(out, out)
    np.add(out, one, out)
    return np.divide(one, out, out)


# -1, 0 and 1 of each float dtype as 0-d arrays, for :func:`sigmoid`, :func:`relu` and the backward steps.
_FLOATS = (np.float16, np.float32, np.float64)
_UNIT = {np.dtype(t): (np.array(-1, t), np.array(1, t)) for t in _FLOATS}
_ZERO = {np.dtype(t): np.array(0, t) for t in _FLOATS}


def _one(x: Array) -> Array | float:
    """1 of ``x``'s dtype as a 0-d array (the backward steps' ``1 - v``: bit for bit what a Python ``1.0``
    gives); other dtypes a Python float."""
    return _UNIT[x.dtype][1] if x.dtype in _UNIT else 1.0


def sigmoid_of_negated(u: Array, out: Array | None = None) -> Array:
    """``sigmoid(-u) = 1 / (1 + exp(u))`` into ``out`` (may be ``u``); returns ``out``. Where ``u`` is exactly
    ``-x`` (a pre-activation made with negated weights and biases: round-to-nearest, NumPy's and the BLAS's
    rounding, is symmetric in sign), it is :func:`sigmoid` of ``x`` bit for bit, one call fewer
    (``CellMode.negated_step``)."""
    one = _one(u)
    out = np.exp(u, out)
    np.add(out, one, out)
    return np.divide(one, out, out)


def relu(x: Array, out: Array | None = None) -> Array:
    """``max(x, 0)``; NaN propagates (``np.maximum`` keeps NaN). ``out`` goes by keyword here: NumPy
    deprecates a third positional argument of ``np.maximum``."""
    return np.maximum(x, _ZERO.get(x.dtype, 0), out=out)


def _simple_step(activation: Callable[..., Array]) -> StepFn:
    def step(ws, xw, h, c, h_out, c_out, acts=None):
        z = round_in_place(ws.R.dot(gemm_operand(ws, h), ws.z), ws.gemm_round)
        if xw is not None:
            np.add(z, xw, z)
        activation(z, h_out)
        round_in_place(h_out, ws.state_round)
        if acts is not None:
            acts[...] = h_out

    return step


def _simple_step_backward(derivative: Callable[[Array, Array, Array], None]) -> BackwardFn:
    """``derivative(g, h, out)``: the gradient of the pre-activation from the output's gradient and the output."""

    def step_backward(g, gc, acts, h_prev, c_prev, RT, d_xw, d_rec, operand=None):
        derivative(g, acts, d_xw)
        return RT @ read(operand, d_xw), None

    return step_backward


def _tanh_backward(g: Array, h: Array, out: Array) -> None:
    np.multiply(h, h, out)
    np.subtract(_one(h), out, out)
    np.multiply(out, g, out)


def _relu_backward(g: Array, h: Array, out: Array) -> None:
    np.copyto(out, np.where(h > 0, g, 0.0))  # the subgradient 0 at 0, as PyTorch's threshold_backward


def _lstm_step(gate: Callable[[Array, Array], Array], clip: tuple[float, float] | None = None) -> StepFn:
    """The LSTM step; ``gate`` the sigmoid of its i, f and o pre-activations (:func:`sigmoid_of_negated` for
    the negated step); ``clip``: the new cell state clipped to ``[lclip, rclip]`` before ``tanh`` reads it."""

    def step(ws, xw, h, c, h_out, c_out, acts=None):
        H = c.shape[0]
        z = round_in_place(ws.R.dot(gemm_operand(ws, h), ws.z if acts is None else acts[: 4 * H]), ws.gemm_round)
        if xw is not None:
            np.add(z, xw, z)
        sig = z[: 3 * H]
        gate(sig, sig)  # i, f and o: one block in compute order
        i, f, o, g = z[:H], z[H : 2 * H], sig[2 * H :], z[3 * H :]
        np.tanh(g, g)
        np.multiply(f, c, c_out)
        tanh_c = np.multiply(i, g, ws.tmp if acts is None else acts[4 * H :])
        np.add(c_out, tanh_c, c_out)
        if clip is not None:
            np.clip(c_out, clip[0], clip[1], out=c_out)  # NaN stays NaN
        np.tanh(c_out, tanh_c)
        np.multiply(o, tanh_c, h_out)
        round_in_place(h_out, ws.state_round)  # None before a projection (recurrence.fused_step rounds P m)
        round_in_place(c_out, ws.cell_round)  # the carried cell, after h_out read it unrounded

    return step


def _lstm_step_backward(g, gc, acts, h_prev, c_prev, RT, d_xw, d_rec, clip: tuple[float, float] | None = None,
                        operand=None):
    H = c_prev.shape[0]
    one = _one(acts)
    i, f, o, gg, tanh_c = acts[:H], acts[H : 2 * H], acts[2 * H : 3 * H], acts[3 * H : 4 * H], acts[4 * H :]
    di, df, do, dg = d_xw[:H], d_xw[H : 2 * H], d_xw[2 * H : 3 * H], d_xw[3 * H :]
    np.multiply(g, tanh_c, do)  # the gradient of each sigmoid gate's output: o gets g * tanh_c
    dc = np.multiply(tanh_c, tanh_c)  # dc = g * o * (1 - tanh_c^2) + gc
    np.subtract(one, dc, dc)
    np.multiply(dc, o, dc)
    np.multiply(dc, g, dc)
    if gc is not None:
        np.add(dc, gc, dc)
    if clip is not None:  # through the clip where the unclipped state was within [lclip, rclip] (its ends too)
        unclipped = np.add(np.multiply(f, c_prev), np.multiply(i, gg))  # the forward's own sums, bit for bit
        np.multiply(dc, (unclipped >= clip[0]) & (unclipped <= clip[1]), dc)
    np.multiply(dc, gg, di)  # i gets dc * g, f gets dc * c_prev
    np.multiply(dc, c_prev, df)
    sig = acts[: 3 * H]  # i, f, o: sigmoid' = s * (1 - s), one block for the three gates
    deriv = np.subtract(one, sig)
    np.multiply(deriv, sig, deriv)
    np.multiply(d_xw[: 3 * H], deriv, d_xw[: 3 * H])
    np.multiply(gg, gg, dg)  # c: dc * i * (1 - g^2)
    np.subtract(one, dg, dg)
    np.multiply(dg, i, dg)
    np.multiply(dg, dc, dg)
    np.multiply(dc, f, dc)
    return RT.dot(read(operand, d_xw)), dc


def _gru_step_backward(reset_after: bool) -> BackwardFn:
    def step_backward(g, gc, acts, h_prev, c_prev, RT, d_xw, d_rec, operand=None):
        H = RT.shape[1] // 3
        r, z = acts[:H], acts[H : 2 * H]
        n = acts[3 * H :] if reset_after else acts[2 * H :]
        dr, dz, dn = d_xw[:H], d_xw[H : 2 * H], d_xw[2 * H :]
        one = _one(acts)
        one_minus_z = np.subtract(one, z)
        np.multiply(n, n, dn)  # candidate pre-activation: g * (1 - z) * (1 - n^2)
        np.subtract(one, dn, dn)
        np.multiply(dn, one_minus_z, dn)
        np.multiply(dn, g, dn)
        np.subtract(h_prev, n, dz)  # update gate: g * (h - n) * z * (1 - z)
        np.multiply(dz, g, dz)
        np.multiply(dz, z, dz)
        np.multiply(dz, one_minus_z, dz)
        dh_prev = np.multiply(g, z)
        one_minus_r = np.subtract(one, r, one_minus_z)
        if reset_after:  # n = tanh(xw_n + r * hn), hn = R_n h + b_Rn
            np.multiply(dn, acts[2 * H : 3 * H], dr)  # hn
            np.multiply(dr, r, dr)
            np.multiply(dr, one_minus_r, dr)
            d_rec[: 2 * H] = d_xw[: 2 * H]
            np.multiply(dn, r, d_rec[2 * H :])
            dh_prev += RT.dot(read(operand, d_rec))
        else:  # n = tanh(xw_n + R_n (r * h) + b_Rn); d_rec is d_xw
            d_rh = RT[:, 2 * H :] @ read(operand, dn)
            np.multiply(d_rh, h_prev, out=dr)
            dr *= r
            dr *= one_minus_r
            dh_prev += RT[:, : 2 * H] @ read(operand, d_xw[: 2 * H])
            d_rh *= r
            dh_prev += d_rh
        return dh_prev, None

    return step_backward


def _plain_recurrent_input(h_prev: Array, acts: Array, H: int) -> list[tuple[slice, Array]]:
    return [(slice(None), h_prev)]


def _reset_scaled_candidate_input(h_prev: Array, acts: Array, H: int) -> list[tuple[slice, Array]]:
    reset = acts[:, :H].transpose(0, 2, 1)  # [T, B, H]
    return [(slice(0, 2 * H), h_prev), (slice(2 * H, 3 * H), np.multiply(reset, h_prev, out=np.empty_like(h_prev)))]


def _gru_step(reset_after: bool, gate: Callable[[Array, Array], Array]) -> StepFn:
    """The GRU step (``reset_after``: cuDNN's); ``gate`` the sigmoid of its r and z pre-activations
    (:func:`sigmoid_of_negated` for the negated step)."""

    def step(ws, xw, h, c, h_out, c_out, acts=None):
        H = ws.tmp.shape[0]
        z = ws.z if acts is None else acts[: 3 * H]  # r, z, then hn (cuDNN) or n (textbook)
        rz = z[: 2 * H]
        if reset_after:  # cuDNN: the reset gate scales the biased recurrent product, b_Rh inside
            round_in_place(ws.R.dot(gemm_operand(ws, h), z), ws.gemm_round)  # R_h h rounded before b_Rh, before r scales it
            hn = z[2 * H :]
            np.add(hn, ws.b_inner, hn)
            n = ws.tmp if acts is None else acts[3 * H :]
        else:  # textbook: the reset gate scales the state before the recurrent product
            round_in_place(ws.R[: 2 * H].dot(gemm_operand(ws, h), rz), ws.gemm_round)
            n = z[2 * H :]
        np.add(rz, xw[: 2 * H], rz)
        gate(rz, rz)
        r, update = rz[:H], rz[H:]
        if reset_after:
            np.multiply(r, hn, n)
        else:
            round_in_place(ws.R[2 * H :].dot(gemm_operand(ws, np.multiply(r, h, ws.tmp)), n), ws.gemm_round)
        np.add(n, xw[2 * H :], n)
        np.tanh(n, n)
        np.subtract(h, n, h_out)  # h' = z * (h - n) + n
        np.multiply(h_out, update, h_out)
        np.add(h_out, n, h_out)
        round_in_place(h_out, ws.state_round)

    return step


@dataclass(frozen=True)
class CellMode:
    """One cell mode: its gates in canonical order, its state, its step function and that step's backward.

    ``saved``: names of the ``[H, B]`` blocks a step records for backprop, in ``acts`` order.
    ``compute_order``: the canonical gate ids in the order the step stacks their blocks (``None``: canonical).
    ``sigmoid_blocks``: the blocks (compute order) that go through a sigmoid. ``negated_step``: the step for
    a pseudo-layer whose weights and biases of those blocks are negated (``recurrence.negated_gates``), so
    that the pre-activations arrive negated, exactly, and the sigmoid needs no negation
    (:func:`sigmoid_of_negated`): bit for bit ``step``, one call fewer; inference only (the backward steps
    read the gates' own weights). ``None`` where no gate is a sigmoid.
    ``stackable_input``: every gate's pre-activation is ``W x + R h`` plus biases, and the step reads ``h``
    only through ``R @ h`` (not the GRUs: a gate scales the candidate's recurrent product, and ``h'`` mixes
    in ``h``), so the step may be given ``[W b R]`` as ``R``, the stacked ``[x_t; 1; h]`` as ``h`` and
    ``xw=None``: its one GEMM then makes the whole pre-activation (``recurrence.stacks_input``).
    """

    name: str
    cudnn_mode: int  # cudnnRNNMode_t; the textbook GRU has none and reuses CUDNN_GRU's layout
    gates: tuple[str, ...]
    has_cell_state: bool
    step: StepFn
    step_backward: BackwardFn
    saved: tuple[str, ...]
    recurrent_inputs: RecurrentInputsFn = _plain_recurrent_input
    inner_bias_gates: tuple[int, ...] = ()  # blocks (compute order) whose recurrent bias sits inside a product
    supports_projection: bool = False
    compute_order: tuple[int, ...] | None = None
    stackable_input: bool = False
    sigmoid_blocks: tuple[int, ...] = ()
    negated_step: StepFn | None = None

    @property
    def gate_order(self) -> tuple[int, ...]:
        """The canonical gate id of each stacked block, in compute order."""
        return self.compute_order or tuple(range(self.num_gates))

    @property
    def separate_rec_grad(self) -> bool:
        """Whether the recurrent pre-activation's gradient differs from the input projection's: only in the
        ``inner_bias_gates``, whose recurrent product (and bias) another gate scales."""
        return bool(self.inner_bias_gates)

    @property
    def num_gates(self) -> int:
        """G: 1 relu/tanh, 3 GRU, 4 LSTM; a pseudo-layer has 2G matrices and 2G biases."""
        return len(self.gates)

    @property
    def saved_width(self) -> int:
        return len(self.saved)


def clipped_lstm(lclip: float, rclip: float) -> CellMode:
    """The LSTM's row with its cell state clipped to ``[lclip, rclip]`` (cuDNN's ``cudnnRNNSetClip_v9``)."""
    from dataclasses import replace
    from functools import partial

    clip = (lclip, rclip)
    lstm = MODES["lstm"]
    return replace(lstm, step=_lstm_step(sigmoid, clip), step_backward=partial(_lstm_step_backward, clip=clip),
                   negated_step=_lstm_step(sigmoid_of_negated, clip))


MODES: dict[str, CellMode] = {
    m.name: m
    for m in (
        CellMode("relu", 0, ("h",), False, _simple_step(relu), _simple_step_backward(_relu_backward),
                 saved=("h",), stackable_input=True),
        CellMode("tanh", 1, ("h",), False, _simple_step(np.tanh), _simple_step_backward(_tanh_backward),
                 saved=("h",), stackable_input=True),
        CellMode("lstm", 2, ("i", "f", "c", "o"), True, _lstm_step(sigmoid), _lstm_step_backward,
                 saved=("i", "f", "o", "c", "tanh_c"), supports_projection=True, compute_order=(0, 1, 3, 2),
                 stackable_input=True, sigmoid_blocks=(0, 1, 2), negated_step=_lstm_step(sigmoid_of_negated)),
        CellMode("gru", 3, ("r", "z", "h"), False, _gru_step(True, sigmoid),
                 _gru_step_backward(reset_after=True), saved=("r", "z", "hn", "n"), inner_bias_gates=(2,),
                 sigmoid_blocks=(0, 1), negated_step=_gru_step(True, sigmoid_of_negated)),
        CellMode("classic_gru", 3, ("r", "z", "h"), False, _gru_step(False, sigmoid),
                 _gru_step_backward(reset_after=False), saved=("r", "z", "n"),
                 recurrent_inputs=_reset_scaled_candidate_input, sigmoid_blocks=(0, 1),
                 negated_step=_gru_step(False, sigmoid_of_negated)),
    )
}
