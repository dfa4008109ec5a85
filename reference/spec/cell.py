"""What every cell shares: its parameters, the logistic sigmoid, and the affine terms ``W x + b_W`` and
``R u + b_R`` of each gate with their gradients.

Row form: a batch of vectors is ``[B, width]``, so ``W x`` is ``x @ W.T``. A gate ``g`` reads its input
term ``W_g x + b_Wg`` and its recurrent term ``R_g u_g + b_Rg``, where ``u_g`` is the recurrent state
``h`` (the textbook GRU's candidate reads ``r * h``).

Bias modes (cuDNN's ``cudnnRNNBiasMode_t``): a bias the mode lacks is absent from its term, not a zero
added: ``double`` has both, ``single_inp`` only ``b_W`` (the input GEMM's), ``single_rec`` only ``b_R`` (the
recurrent GEMM's), ``none`` neither; the cells' equations are written with both, and read without the
absent one.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

Array = np.ndarray


class CellParams(NamedTuple):
    """One pseudo-layer's parameters (or their gradients), per gate in canonical order.

    ``W[g] [H, in]`` (``None`` where the layer has none: skip_input, layer 0, whose input enters every gate
    as it is), ``b_W[g] [H]`` (``None`` where the bias mode has no input bias), ``R[g] [H, Hr]``,
    ``b_R[g] [H]`` (``None`` where the bias mode has no recurrent bias); ``P [num_proj, H]`` or ``None``.
    """

    W: list[Array] | None
    b_W: list[Array] | None
    R: list[Array]
    b_R: list[Array] | None
    P: Array | None


def sigmoid(v: Array) -> Array:
    """The logistic function ``1 / (1 + exp(-v))``."""
    return 1.0 / (1.0 + np.exp(-v))


def input_term(p: CellParams, g: int, x: Array) -> Array:
    """``W_g x + b_Wg`` for ``x [B, in]`` -> ``[B, H]``; without ``W`` the input itself, without ``b_W`` no bias."""
    term = x if p.W is None else x @ p.W[g].T
    return term if p.b_W is None else term + p.b_W[g]


def recurrent_term(p: CellParams, g: int, u: Array) -> Array:
    """``R_g u + b_Rg`` for ``u [B, Hr]`` -> ``[B, H]``; without ``b_R`` no bias."""
    term = u @ p.R[g].T
    return term if p.b_R is None else term + p.b_R[g]


def affine_backward(p: CellParams, x: Array, u: list[Array], d_in: list[Array], d_rec: list[Array],
                    d_P: Array | None = None) -> tuple[Array, list[Array], CellParams]:
    """Gradients through every gate's two terms, given ``d_in[g]`` (of ``W_g x + b_Wg``) and ``d_rec[g]``
    (of ``R_g u[g] + b_Rg``), each ``[B, H]``.

    Returns ``dx [B, in]`` (summed over the gates), ``du[g] [B, Hr]`` and the parameter gradients as a
    :class:`CellParams` (``P`` is ``d_P``, which the caller computes)."""
    dx = sum(d if p.W is None else d @ p.W[g] for g, d in enumerate(d_in))
    du = [d @ p.R[g] for g, d in enumerate(d_rec)]
    grads = CellParams(
        W=None if p.W is None else [d.T @ x for d in d_in],
        b_W=None if p.b_W is None else [d.sum(axis=0) for d in d_in],
        R=[d.T @ ug for d, ug in zip(d_rec, u)],
        b_R=None if p.b_R is None else [d.sum(axis=0) for d in d_rec],
        P=d_P,
    )
    return dx, du, grads
