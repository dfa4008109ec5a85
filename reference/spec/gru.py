"""``CUDNN_GRU`` (the reset gate applied after the recurrent product) and the textbook GRU, gates r, z, h
(written n here) in canonical order, the same weights for both:

    r = σ(W_r x + b_Wr + R_r h + b_Rr)        z = σ(W_z x + b_Wz + R_z h + b_Rz)
    cuDNN:     n = tanh(W_h x + b_Wh + r * (R_h h + b_Rh))
    textbook:  n = tanh(W_h x + b_Wh + R_h (r * h) + b_Rh)
    h' = (1 - z) * n + z * h

Bias modes (``cell.py``): the terms a mode lacks are left out. For cuDNN's GRU that changes the function,
since ``b_Rh`` sits inside the reset gate's product:

    single_inp:  r = σ(W_r x + b_Wr + R_r h)      n = tanh(W_h x + b_Wh + r * (R_h h))
    single_rec:  r = σ(W_r x + R_r h + b_Rr)      n = tanh(W_h x + r * (R_h h + b_Rh))
    none:        r = σ(W_r x + R_r h)             n = tanh(W_h x + r * (R_h h))

(z as r). Backward: a gate's ``b_W`` and ``b_R`` take its pre-activation's gradient, but cuDNN's ``b_Rh``
takes ``r *`` the candidate's (``d_hn``), and ``b_Wh`` the candidate's own.
"""

from __future__ import annotations

import numpy as np

from .cell import Array, CellParams, affine_backward, input_term, matmul, recurrent_term, sigmoid, stored_state

R, Z, N = range(3)


def step(p: CellParams, x: Array, h: Array, c: None, reset_after: bool,
         storage: np.dtype | None = None) -> tuple[Array, None, tuple]:
    """``x [B, in]``, ``h [B, H]`` -> ``(h' [B, H], None, cache)``; ``reset_after``: cuDNN's GRU, else the
    textbook one; ``storage``: the data's dtype (``cell.py``, "Precision": ``R_h u_n`` is rounded before
    ``b_Rh`` is added, and so before the reset gate scales it)."""
    r = sigmoid(input_term(p, R, x, storage) + recurrent_term(p, R, h, storage))
    z = sigmoid(input_term(p, Z, x, storage) + recurrent_term(p, Z, h, storage))
    u_n = h if reset_after else r * h  # what R_h multiplies
    hn = recurrent_term(p, N, u_n, storage)
    n = np.tanh(input_term(p, N, x, storage) + (r * hn if reset_after else hn))
    h_new = stored_state((1.0 - z) * n + z * h, storage)
    return h_new, None, (x, h, r, z, u_n, hn, n)


def step_backward(p: CellParams, cache: tuple, dh_new: Array, dc_new: None,
                  reset_after: bool) -> tuple[Array, Array, None, CellParams]:
    """Gradients of ``x``, ``h`` and the parameters from ``dh_new`` (of ``h'``)."""
    x, h, r, z, u_n, hn, n = cache
    dn = dh_new * (1.0 - z)
    da_z = dh_new * (h - n) * z * (1.0 - z)
    da_n = dn * (1.0 - n * n)  # of n's pre-activation
    if reset_after:  # the pre-activation reads r * hn
        d_hn, dr = da_n * r, da_n * hn
    else:  # hn = R_h (r * h) + b_Rh
        d_hn = da_n
        dr = matmul(d_hn, p.R[N]) * h
    da_r = dr * r * (1.0 - r)
    dx, du, grads = affine_backward(p, x, [h, h, u_n], [da_r, da_z, da_n], [da_r, da_z, d_hn])
    du_n_to_h = du[N] if reset_after else du[N] * r  # through u_n = h, or u_n = r * h
    return dx, du[R] + du[Z] + du_n_to_h + dh_new * z, None, grads
