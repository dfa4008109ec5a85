"""The cell modes as a table: one row per cuDNN ``cudnnRNNMode_t`` (plus the textbook GRU).

Every row names its gates in canonical (cuDNN ``lin_layer_id``) order and carries one step function.
A step receives the input projection of the current time step, already including the input-side biases
(``xw = x @ W.T + b_W``, shape ``[B, G*H]``, gate blocks in canonical order), the previous recurrent
state ``h [B, Hr]`` (``Hr`` = num_proj or num_units), the previous cell state ``c [B, H]`` or ``None``,
the stacked recurrent matrices ``R [G*H, Hr]`` and recurrent biases ``b_R [G*H]``. It returns the new
hidden output *before* any LSTM projection, ``[B, H]``, and the new cell state (or ``None``).

When ``acts`` (a ``[B, mode.saved_width * H]`` buffer) is given, the step writes there the activations a
backward pass needs (see ``saved`` in each row).

Equations (rows are vectors; ``σ`` logistic sigmoid), from the cuDNN ``cudnnRNNMode_t`` documentation:

- relu / tanh: ``h' = act(xw + h R^T + b_R)``
- lstm (gates i, f, c, o): ``c' = σ(f)*c + σ(i)*tanh(g_c)``, ``h' = σ(o)*tanh(c')``
- gru (cuDNN, gates r, z, h): ``r = σ(xw_r + hR_r^T + b_Rr)``, ``z = σ(...)``,
  ``n = tanh(xw_h + r*(h R_h^T + b_Rh))``, ``h' = (1-z)*n + z*h``
- classic_gru (textbook, same weights): ``n = tanh(xw_h + (r*h) R_h^T + b_Rh)``
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

Array = np.ndarray
StepFn = Callable[[Array, Array, Optional[Array], Array, Array, Optional[Array]], tuple[Array, Optional[Array]]]


def sigmoid(x: Array, out: Array | None = None) -> Array:
    """Logistic sigmoid ``1 / (1 + exp(-x))``, relatively accurate everywhere (no ``tanh`` cancellation).

    Negation is a multiply: NumPy 2.4.6's float32 ``np.negative(v, out=v)`` on a strided view (a gate
    block of ``[B, G*H]``) reads with the wrong stride and returns wrong values (found by this suite).
    """
    out = np.multiply(x, -1.0, out=out)
    np.exp(out, out=out)
    out += 1
    return np.reciprocal(out, out=out)


def relu(x: Array, out: Array | None = None) -> Array:
    """``max(x, 0)``; NaN propagates (``np.maximum`` keeps NaN)."""
    return np.maximum(x, 0, out=out)


def _recurrent(h: Array, R: Array, b_R: Array) -> Array:
    out = h @ R.T
    out += b_R
    return out


def _simple_step(activation: Callable[..., Array]) -> StepFn:
    def step(xw, h, c, R, b_R, acts=None):
        pre = _recurrent(h, R, b_R)
        pre += xw
        h_new = activation(pre, out=pre)
        if acts is not None:
            acts[...] = h_new
        return h_new, None

    return step


def _lstm_step(xw, h, c, R, b_R, acts=None):
    H = c.shape[1]
    z = _recurrent(h, R, b_R)
    z += xw
    i, f, g, o = z[:, :H], z[:, H : 2 * H], z[:, 2 * H : 3 * H], z[:, 3 * H :]
    sigmoid(i, out=i)
    sigmoid(f, out=f)
    np.tanh(g, out=g)
    sigmoid(o, out=o)
    c_new = f * c
    c_new += i * g
    tanh_c = np.tanh(c_new)
    h_new = o * tanh_c
    if acts is not None:
        acts[:, : 4 * H] = z
        acts[:, 4 * H :] = tanh_c
    return h_new, c_new


def _gru_step(reset_after: bool) -> StepFn:
    def step(xw, h, c, R, b_R, acts=None):
        H = R.shape[0] // 3
        if reset_after:  # cuDNN: the reset gate scales the biased recurrent product
            hr = _recurrent(h, R, b_R)
            rz = xw[:, : 2 * H] + hr[:, : 2 * H]
            sigmoid(rz, out=rz)
            r, z = rz[:, :H], rz[:, H:]
            hn = hr[:, 2 * H :]
            n = r * hn
        else:  # textbook: the reset gate scales the state before the recurrent product
            rz = _recurrent(h, R[: 2 * H], b_R[: 2 * H])
            rz += xw[:, : 2 * H]
            sigmoid(rz, out=rz)
            r, z = rz[:, :H], rz[:, H:]
            hn = None
            n = _recurrent(r * h, R[2 * H :], b_R[2 * H :])
        n += xw[:, 2 * H :]
        np.tanh(n, out=n)
        h_new = h - n
        h_new *= z
        h_new += n
        if acts is not None:
            acts[:, : 2 * H] = rz
            acts[:, 2 * H : 3 * H] = n
            if hn is not None:
                acts[:, 3 * H :] = hn
        return h_new, None

    return step


@dataclass(frozen=True)
class CellMode:
    """One cell mode: its gates in canonical order, its state, its step function.

    ``saved``: names of the ``[B, H]`` blocks a step records for backprop, in ``acts`` order.
    """

    name: str
    cudnn_mode: int  # cudnnRNNMode_t; the textbook GRU has none and reuses CUDNN_GRU's layout
    gates: tuple[str, ...]
    has_cell_state: bool
    step: StepFn
    saved: tuple[str, ...]
    supports_projection: bool = False

    @property
    def num_gates(self) -> int:
        """G: 1 relu/tanh, 3 GRU, 4 LSTM; a pseudo-layer has 2G matrices and 2G biases."""
        return len(self.gates)

    @property
    def saved_width(self) -> int:
        return len(self.saved)


MODES: dict[str, CellMode] = {
    m.name: m
    for m in (
        CellMode("relu", 0, ("h",), False, _simple_step(relu), saved=("h",)),
        CellMode("tanh", 1, ("h",), False, _simple_step(np.tanh), saved=("h",)),
        CellMode(
            "lstm", 2, ("i", "f", "c", "o"), True, _lstm_step,
            saved=("i", "f", "c", "o", "tanh_c"), supports_projection=True,
        ),
        CellMode("gru", 3, ("r", "z", "h"), False, _gru_step(reset_after=True), saved=("r", "z", "n", "hn")),
        CellMode("classic_gru", 3, ("r", "z", "h"), False, _gru_step(reset_after=False), saved=("r", "z", "n")),
    )
}
