"""TF32: float32's sign and 8-bit exponent with 10 mantissa bits (float32 keeps 23), the format a GPU's tensor
cores read float32 GEMM operands in under TF32 math (cuDNN's ``CUDNN_DEFAULT_MATH`` on Ampere and later,
PyTorch's ``allow_tf32``). A TF32 value is held in a float32 whose 13 low mantissa bits are zero.

Three rules make a float32 a TF32 value, each an exact function of the float32's bits (:data:`RULES`):

- ``"truncate"``: drop the 13 low bits (toward zero);
- ``"rne"``: round to nearest, ties to the even neighbour (IEEE 754's default);
- ``"rna"``: round to nearest, ties away from zero (PTX's ``cvt.rna.tf32.f32``).

Which one cuDNN's kernels apply is a decision (``reference.precision.TF32_ROUNDING``). Under each, a NaN stays
a NaN (quiet, its sign kept: dropping a payload's low bits must not make an infinity), infinities and zeros stay
as they are, subnormals round like normals (the exponent range is float32's), and a value rounded up past the
largest TF32 magnitude, ``(2 - 2**-10) * 2**127``, becomes an infinity.
"""

from __future__ import annotations

import numpy as np

DROPPED = 13  # float32's mantissa bits that TF32 leaves out
LOW = np.uint32((1 << DROPPED) - 1)
HALF = np.uint32(1 << (DROPPED - 1))
EXPONENT = np.uint32(0x7F800000)
QUIET_NAN = np.uint32(0x7FC00000)
SIGN = np.uint32(0x80000000)


def _bits(x) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype != np.float32:
        raise TypeError(f"x must be float32 (TF32 rounds float32 operands), got {a.dtype}")
    return a.view(np.uint32)


def _finish(x, rounded: np.ndarray) -> np.ndarray:
    """``rounded`` (bits) as float32, NaNs of ``x`` made quiet NaNs of their sign."""
    bits = _bits(x)
    nan = ((bits & EXPONENT) == EXPONENT) & ((bits & np.uint32(0x007FFFFF)) != 0)
    out = np.where(nan, (bits & SIGN) | QUIET_NAN, rounded).astype(np.uint32)
    return out.view(np.float32)


def truncate(x) -> np.ndarray:
    """``x`` (float32) toward zero to TF32: its 13 low mantissa bits dropped."""
    return _finish(x, _bits(x) & ~LOW)


# (a NaN's bits may wrap past 2**32 as they are rounded; _finish replaces every NaN)


def round_nearest_even(x) -> np.ndarray:
    """``x`` (float32) to the nearest TF32 value, a tie to the one whose last mantissa bit is 0."""
    bits = _bits(x)
    odd = (bits >> np.uint32(DROPPED)) & np.uint32(1)
    with np.errstate(over="ignore"):
        return _finish(x, (bits + (HALF - np.uint32(1)) + odd) & ~LOW)


def round_nearest_away(x) -> np.ndarray:
    """``x`` (float32) to the nearest TF32 value, a tie to the one of larger magnitude."""
    with np.errstate(over="ignore"):
        return _finish(x, (_bits(x) + HALF) & ~LOW)


RULES = {"truncate": truncate, "rne": round_nearest_even, "rna": round_nearest_away}


__all__ = ["RULES", "round_nearest_away", "round_nearest_even", "truncate"]
