"""What every cell shares: its parameters, the logistic sigmoid, and the affine terms ``W x + b_W`` and
``R u + b_R`` of each gate with their gradients.

Row form: a batch of vectors is ``[B, width]``, so ``W x`` is ``x @ W.T``. A gate ``g`` reads its input
term ``W_g x + b_Wg`` and its recurrent term ``R_g u_g + b_Rg``, where ``u_g`` is the recurrent state
``h`` (the textbook GRU's candidate reads ``r * h``).

Bias modes (cuDNN's ``cudnnRNNBiasMode_t``): a bias the mode lacks is absent from its term, not a zero
added: ``double`` has both, ``single_inp`` only ``b_W`` (the input GEMM's), ``single_rec`` only ``b_R`` (the
recurrent GEMM's), ``none`` neither; the cells' equations are written with both, and read without the
absent one.

Precision (``reference.precision``): the cells compute in the dtype of their arrays (float32 for float16
data) and take the data's ``storage`` dtype; with float16 storage they round to float16 where
``precision.HALF_ROUNDS`` says, each a visible step: :func:`gemm` rounds a GEMM's result before its bias
is added (``"gemm_outputs"``), :func:`stored_state` the new hidden state (``"state"``). ``storage=None``
(or float32, float64) rounds nowhere.

Math type (cuDNN's ``cudnnMathType_t``, for float32 data; :func:`math`): under ``"fma"`` (the default) a GEMM
multiplies its operands as they are; under ``"tf32"`` every GEMM of the forward and backward pass (``W x``,
``R u``, the projection ``P m``, and the gradients' products) reads each operand rounded to TF32
(:func:`operand`: to float32, then by ``precision.TF32_ROUNDING``) and accumulates in the arrays' dtype: with
float64 arrays, the TF32 truth. Nothing else changes: biases, gates and states keep their precision. TF32 math
as a GPU's default math may compute it (:func:`tf32_variant`): by another candidate rule, or with the forward
pass's input GEMMs (``W x``) or its recurrent ones (``R u``) alone on TF32 operands, the other as under FMA math.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterable, Iterator, NamedTuple

import numpy as np

from .. import precision, tf32
from ..precision import rounds_at

Array = np.ndarray

MATH_TYPES = ("fma", "tf32")
_MATH: ContextVar[str] = ContextVar("math_type", default="fma")


@contextmanager
def math(math_type: str) -> Iterator[None]:
    """Run the block's cells under ``math_type`` (one of :data:`MATH_TYPES`)."""
    token = _MATH.set(math_type)
    try:
        yield
    finally:
        _MATH.reset(token)


FORWARD_GEMMS = ("input", "recurrent")


class _Variant(NamedTuple):
    gemms: frozenset
    rule: str | None  # None: precision.TF32_ROUNDING, read at each call


_TF32_VARIANT: ContextVar[_Variant] = ContextVar("tf32_variant", default=_Variant(frozenset(FORWARD_GEMMS), None))


@contextmanager
def tf32_variant(gemms: Iterable[str] = FORWARD_GEMMS, rule: str | None = None) -> Iterator[None]:
    """In the block, TF32 math rounds by ``rule`` (one of ``reference.tf32.RULES``; ``None``: the decided
    ``precision.TF32_ROUNDING``) and reads TF32 operands in these of the forward pass's :data:`FORWARD_GEMMS` only
    (``"input"``: ``W x``, ``"recurrent"``: ``R u``), the others as under FMA math; the projection and the backward
    pass's GEMMs in TF32 as ever. (The truth of a GPU whose default math ran some GEMMs on TF32 tensor cores, not
    all, or rounded by another rule than the decided one.)"""
    chosen = frozenset(gemms)
    if not chosen <= set(FORWARD_GEMMS):
        raise ValueError(f"gemms must be among {FORWARD_GEMMS}, got {sorted(chosen)}")
    if rule is not None and rule not in tf32.RULES:
        raise ValueError(f"rule must be one of {sorted(tf32.RULES)} or None, got {rule!r}")
    token = _TF32_VARIANT.set(_Variant(chosen, rule))
    try:
        yield
    finally:
        _TF32_VARIANT.reset(token)


def operand(a: Array) -> Array:
    """``a`` as a GEMM reads it: under TF32 math rounded to TF32 (through float32, by the decided rule or
    :func:`tf32_variant`'s), in ``a``'s dtype; under FMA math ``a`` itself."""
    if _MATH.get() == "fma":
        return a
    rule = _TF32_VARIANT.get().rule or precision.TF32_ROUNDING
    with np.errstate(over="ignore"):  # (a float64 past float32's range is an infinity to the device too)
        return tf32.RULES[rule](np.asarray(a).astype(np.float32)).astype(a.dtype)


def matmul(a: Array, b: Array, forward_gemm: str | None = None) -> Array:
    """``a @ b`` as a GEMM of the current math type computes it (:func:`operand` of each); ``forward_gemm``: which
    of :data:`FORWARD_GEMMS` it is, exact where :func:`tf32_variant` leaves that one out."""
    if forward_gemm is not None and forward_gemm not in _TF32_VARIANT.get().gemms:
        return a @ b
    return operand(a) @ operand(b)


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


def round_to_storage(v: Array, storage: np.dtype | None, point: str) -> Array:
    """``v`` rounded to ``storage`` (kept in ``v``'s dtype) where the storage rounds at ``point``
    (``precision.rounds_at``), else ``v`` itself."""
    return v.astype(storage).astype(v.dtype) if storage is not None and rounds_at(storage, point) else v


def gemm(u: Array, M: Array, storage: np.dtype | None = None, forward_gemm: str | None = None) -> Array:
    """``M u`` for a batch of rows ``u [B, k]`` and ``M [n, k]`` -> ``[B, n]``: the GEMM's result, rounded to
    ``storage`` as the GEMM writes it (``"gemm_outputs"``), before any bias is added (``forward_gemm``:
    :func:`matmul`'s)."""
    return round_to_storage(matmul(u, M.T, forward_gemm), storage, "gemm_outputs")


def stored_state(h: Array, storage: np.dtype | None = None) -> Array:
    """The new hidden state ``h`` as a step stores it, rounded to ``storage`` (``"state"``): what the next
    step's recurrent GEMM reads and the layer outputs."""
    return round_to_storage(h, storage, "state")


def input_term(p: CellParams, g: int, x: Array, storage: np.dtype | None = None) -> Array:
    """``W_g x + b_Wg`` for ``x [B, in]`` -> ``[B, H]``; without ``W`` the input itself (not rounded: it is
    data), without ``b_W`` no bias."""
    term = x if p.W is None else gemm(x, p.W[g], storage, "input")
    return term if p.b_W is None else term + p.b_W[g]


def recurrent_term(p: CellParams, g: int, u: Array, storage: np.dtype | None = None) -> Array:
    """``R_g u + b_Rg`` for ``u [B, Hr]`` -> ``[B, H]``; without ``b_R`` no bias."""
    term = gemm(u, p.R[g], storage, "recurrent")
    return term if p.b_R is None else term + p.b_R[g]


def affine_backward(p: CellParams, x: Array, u: list[Array], d_in: list[Array], d_rec: list[Array],
                    d_P: Array | None = None) -> tuple[Array, list[Array], CellParams]:
    """Gradients through every gate's two terms, given ``d_in[g]`` (of ``W_g x + b_Wg``) and ``d_rec[g]``
    (of ``R_g u[g] + b_Rg``), each ``[B, H]``.

    Returns ``dx [B, in]`` (summed over the gates), ``du[g] [B, Hr]`` and the parameter gradients as a
    :class:`CellParams` (``P`` is ``d_P``, which the caller computes)."""
    dx = sum(d if p.W is None else matmul(d, p.W[g]) for g, d in enumerate(d_in))
    du = [matmul(d, p.R[g]) for g, d in enumerate(d_rec)]
    grads = CellParams(
        W=None if p.W is None else [matmul(d.T, x) for d in d_in],
        b_W=None if p.b_W is None else [d.sum(axis=0) for d in d_in],
        R=[matmul(d.T, ug) for d, ug in zip(d_rec, u)],
        b_R=None if p.b_R is None else [d.sum(axis=0) for d in d_rec],
        P=d_P,
    )
    return dx, du, grads
