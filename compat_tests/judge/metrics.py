"""Error metrics of one quantity (an output, a state, later a gradient) against the float64 truth.

``scale = max(1, max|expected|)`` over the finite expected values: errors are relative to the tensor's
magnitude, and absolute for tensors smaller than 1 (an all-zero relu output must not divide by zero).
``max_eps`` and ``rms_eps`` are in units of the tested dtype's machine epsilon times that scale (the
MIOpen-style normalisation); ``max_ulp`` counts representable numbers between the result and the truth
rounded to the tested dtype.

Values past the dtype's range are an outcome, not an error: where the truth overflows the tested dtype
the result must be non-finite, and where the truth is finite and representable it must be finite; every
disagreement counts in ``nonfinite_mismatch`` and is excluded from the other metrics.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class ErrorStats:
    max_abs: float
    max_rel: float
    max_eps: float
    rms_eps: float
    max_ulp: float
    scale: float
    nonfinite_mismatch: int
    count: int
    per_step: tuple[float, ...] | None = None  # max error per time step, in eps x scale (drift)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


_SIGNED = {2: np.int16, 4: np.int32, 8: np.int64}


def _ordered(a: np.ndarray) -> np.ndarray:
    """Map floats to int64 so that the order is kept and neighbouring floats differ by 1 (-0 == +0)."""
    width = _SIGNED[a.dtype.itemsize]
    ints = np.ascontiguousarray(a).view(width).astype(np.int64)
    return np.where(ints < 0, np.iinfo(width).min - ints, ints)


def ulp_distance(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Per-element count of ``actual.dtype`` values between ``actual`` and ``expected`` rounded to it."""
    with np.errstate(over="ignore"):
        rounded = expected.astype(actual.dtype)
    return np.abs(_ordered(actual) - _ordered(rounded)).astype(np.float64)


def error_stats(actual: np.ndarray, expected: np.ndarray, time_axis: int | None = None) -> ErrorStats:
    """Compare ``actual`` (the tested dtype) with ``expected`` (float64 truth) of the same shape.

    With ``time_axis``, also the largest error at each time step (``per_step``, same units as ``max_eps``;
    0 where a step has nothing comparable)."""
    if actual.shape != expected.shape:
        raise ValueError(f"shape mismatch: actual {actual.shape}, expected {expected.shape}")
    finfo = np.finfo(actual.dtype)
    expected = expected.astype(np.float64)
    representable = np.isfinite(expected) & (np.abs(expected) <= finfo.max)
    finite = np.isfinite(actual)
    both = representable & finite
    mismatch = int(np.count_nonzero(representable != finite))
    # the truth's own scale: a peer's NaN at the truth's largest value must not shrink it
    scale = max(1.0, float(np.abs(expected[representable]).max())) if representable.any() else 1.0
    if not both.any():
        return ErrorStats(0.0, 0.0, 0.0, 0.0, 0.0, scale, mismatch, 0)
    a = actual[both].astype(np.float64)
    e = expected[both]
    diff = np.abs(a - e)
    eps = float(finfo.eps)
    per_step = None
    if time_axis is not None:
        full = np.where(both, np.abs(actual.astype(np.float64) - np.where(both, expected, 0.0)), 0.0)
        steps = np.moveaxis(full, time_axis, 0).reshape(full.shape[time_axis], -1).max(axis=1)
        per_step = tuple(float(v) for v in steps / (eps * scale))
    with np.errstate(over="ignore"):  # a relative error near a zero of the truth may overflow
        max_rel = float((diff / np.maximum(np.abs(e), float(finfo.tiny))).max())
    return ErrorStats(
        max_abs=float(diff.max()),
        max_rel=max_rel,
        max_eps=float(diff.max() / (eps * scale)),
        rms_eps=float(np.sqrt(np.mean(diff**2)) / (eps * scale)),
        max_ulp=float(ulp_distance(actual[both], e).max()),
        scale=scale,
        nonfinite_mismatch=mismatch,
        count=int(both.sum()),
        per_step=per_step,
    )


def tf32_share(actual: np.ndarray, fma_truth: np.ndarray, tf32_truth: np.ndarray, least_cost: float,
               fitted: np.ndarray | None = None) -> float | None:
    """How far a TF32 result is from the TF32 truth (or from ``fitted``, the truth of TF32 in some of the GEMMs
    only), as a share of what TF32 costs there: ``rms(actual - tf32_truth) / rms(tf32_truth - fma_truth)`` over the
    elements finite in all of them (same shapes; ``actual`` in float32, the truths float64). About 0 for a result
    that computes TF32 as the truth does, 1 for one that computes without TF32 (it follows the FMA truth), above 1
    for another rounding rule. ``None`` where TF32 costs less than ``least_cost`` float32 eps of the truth's own
    size (both in rms), or nothing: there the share would measure float32 rounding (a result rounded to float32
    is off by about 0.3 eps of itself in rms), not TF32."""
    fitted = tf32_truth if fitted is None else fitted
    if not actual.shape == fma_truth.shape == tf32_truth.shape == fitted.shape:
        raise ValueError(f"shape mismatch: actual {actual.shape}, FMA truth {fma_truth.shape}, "
                         f"TF32 truth {tf32_truth.shape}, fitted {fitted.shape}")
    a, f, t, s = (v.astype(np.float64) for v in (actual, fma_truth, tf32_truth, fitted))
    finite = np.isfinite(a) & np.isfinite(f) & np.isfinite(t) & np.isfinite(s)
    if not finite.any():
        return None
    size = float(np.sqrt(np.mean(t[finite] ** 2)))
    cost = float(np.sqrt(np.mean((t[finite] - f[finite]) ** 2)))
    if cost == 0.0 or cost < least_cost * float(np.finfo(np.float32).eps) * size:
        return None
    return float(np.sqrt(np.mean((a[finite] - s[finite]) ** 2))) / cost
