"""``CUDNN_RNN_RELU`` and ``CUDNN_RNN_TANH``: one gate, ``h' = act(W x + b_W + R h + b_R)``.

Bias modes (``cell.py``): ``single_inp`` ``act(W x + b_W + R h)``, ``single_rec`` ``act(W x + R h + b_R)``,
``none`` ``act(W x + R h)``; the gradient of each bias present is ``da`` summed over the batch.
"""

from __future__ import annotations

import numpy as np

from .cell import Array, CellParams, affine_backward, input_term, recurrent_term, stored_state

ACTIVATIONS = {
    # name: (act(a), act'(a) from a and act(a))
    "relu": (lambda a: np.maximum(a, 0.0), lambda a, h: (a > 0).astype(a.dtype)),  # 0 at the kink, as cuDNN
    "tanh": (np.tanh, lambda a, h: 1.0 - h * h),
}


def step(p: CellParams, x: Array, h: Array, c: None, activation: str,
         storage: np.dtype | None = None) -> tuple[Array, None, tuple]:
    """``x [B, in]``, ``h [B, H]`` -> ``(h' [B, H], None, cache)``; ``storage``: the data's dtype (``cell.py``,
    "Precision")."""
    act, _ = ACTIVATIONS[activation]
    a = input_term(p, 0, x, storage) + recurrent_term(p, 0, h, storage)
    h_new = stored_state(act(a), storage)
    return h_new, None, (x, h, a, h_new)


def step_backward(p: CellParams, cache: tuple, dh_new: Array, dc_new: None,
                  activation: str) -> tuple[Array, Array, None, CellParams]:
    """Gradients of ``x``, ``h`` and the parameters from ``dh_new`` (of ``h'``): ``da = dh' * act'(a)``."""
    x, h, a, h_new = cache
    _, derivative = ACTIVATIONS[activation]
    da = dh_new * derivative(a, h_new)
    dx, (dh,), grads = affine_backward(p, x, [h], [da], [da])
    return dx, dh, None, grads
