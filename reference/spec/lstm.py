"""``CUDNN_LSTM``: gates i, f, c (written g here), o in canonical order, no peepholes, an optional projection.

    i = σ(W_i x + b_Wi + R_i h + b_Ri)        f = σ(W_f x + b_Wf + R_f h + b_Rf)
    g = tanh(W_c x + b_Wc + R_c h + b_Rc)     o = σ(W_o x + b_Wo + R_o h + b_Ro)
    c' = f * c + i * g                        h' = o * tanh(c')
    with a projection: h' = P (o * tanh(c')), and h (the recurrent state) is that projected h'.

Cell clipping (``cudnnRNNSetClip_v9``, ``CUDNN_RNN_CLIP_MINMAX``; TensorFlow 1's ``LSTMCell(cell_clip=...)``):
    c' = clip(f * c + i * g, lclip, rclip)    h' = o * tanh(c')
the clipped ``c'`` is what ``tanh`` reads, what the step carries and what the network returns as ``output_c``;
NaN stays NaN. Its gradient passes where ``lclip <= f * c + i * g <= rclip`` (the ends included) and is zero
outside.

Precision (``cell.py``): with float16 storage each GEMM's result (the projection's too) is rounded before
its bias, and so are the new ``h`` and the new ``c`` the step carries to the next, and with a projection
``o * tanh(c')``, which the projection's GEMM reads; ``h'`` itself reads ``tanh(c')`` of the unrounded ``c'``.

Bias modes (``cell.py``): ``single_inp`` keeps the ``b_W`` terms only (i = σ(W_i x + b_Wi + R_i h), ...),
``single_rec`` the ``b_R`` terms only (i = σ(W_i x + R_i h + b_Ri), ...), ``none`` neither; each bias present
takes its gate's pre-activation gradient summed over the batch.
"""

from __future__ import annotations

import numpy as np

from .cell import (Array, CellParams, affine_backward, gemm, input_term, matmul, recurrent_term, sigmoid,
                   stored_state)

I, F, G, O = range(4)


def step(p: CellParams, x: Array, h: Array, c: Array, storage: np.dtype | None = None,
         clip: tuple[float, float] | None = None) -> tuple[Array, Array, tuple]:
    """``x [B, in]``, ``h [B, Hr]``, ``c [B, H]`` -> ``(h' [B, Hr], c' [B, H], cache)``; ``storage``: the data's
    dtype; ``clip``: ``(lclip, rclip)`` or ``None``."""
    a = [input_term(p, k, x, storage) + recurrent_term(p, k, h, storage) for k in range(4)]
    i, f, g, o = sigmoid(a[I]), sigmoid(a[F]), np.tanh(a[G]), sigmoid(a[O])
    c_sum = f * c + i * g
    passes = np.ones_like(c_sum) if clip is None else (c_sum >= clip[0]) & (c_sum <= clip[1])
    c_new = c_sum if clip is None else np.clip(c_sum, clip[0], clip[1])
    tanh_c = np.tanh(c_new)
    m = o * tanh_c
    if p.P is not None:
        m = stored_state(m, storage)  # stored for the projection's GEMM to read
    h_new = stored_state(m if p.P is None else gemm(m, p.P, storage), storage)
    return h_new, stored_state(c_new, storage), (x, h, c, i, f, g, o, tanh_c, m, passes)


def step_backward(p: CellParams, cache: tuple, dh_new: Array, dc_new: Array,
                  clip: tuple[float, float] | None = None) -> tuple[Array, Array, Array, CellParams]:
    """Gradients of ``x``, ``h``, ``c`` and the parameters from ``dh_new`` (of ``h'``) and ``dc_new`` (of ``c'``);
    ``clip`` as the step's (its cache says where the clip passed the gradient)."""
    x, h, c, i, f, g, o, tanh_c, m, passes = cache
    dm = dh_new if p.P is None else matmul(dh_new, p.P)
    d_P = None if p.P is None else matmul(dh_new.T, m)
    do = dm * tanh_c
    dc_total = (dc_new + dm * o * (1.0 - tanh_c * tanh_c)) * passes
    di, df, dg, dc = dc_total * g, dc_total * c, dc_total * i, dc_total * f
    da = [di * i * (1.0 - i), df * f * (1.0 - f), dg * (1.0 - g * g), do * o * (1.0 - o)]
    dx, du, grads = affine_backward(p, x, [h] * 4, da, da, d_P)
    return dx, sum(du), dc, grads
