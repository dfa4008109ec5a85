"""Argument checks shared by the public classes: each error names the argument and what was expected."""

from __future__ import annotations

import reprlib
from typing import Sequence

import numpy as np


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 60


def shown(value: object) -> str:
    """``repr(value)`` cut short (an array passed by mistake would fill the message)."""
    return _SHOWN.repr(value)


def int_at_least(name: str, value: object, minimum: int) -> int:
    """``value`` as an int; ``TypeError`` unless an integer (bools and floats, finite or not, refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= {minimum}, got {shown(value)} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value}")
    return int(value)


def one_of(name: str, value: object, options: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"Invalid {name}: {shown(value)}, expecting one of {', '.join(map(repr, options))}")
    return value


def flag(name: str, value: object) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {shown(value)} ({type(value).__name__})")
    return bool(value)


def array(name: str, value: object, dtype: np.dtype, ndim: int, dims_doc: str,
          kinds: tuple[type, ...] = (np.ndarray,)) -> np.ndarray:
    """An array of one of ``kinds`` (NumPy's by default), of exactly ``dtype`` and rank ``ndim``;
    ``dims_doc`` names the expected axes."""
    if not isinstance(value, kinds):
        names = " or ".join(f"{k.__module__.split('.')[0]}.{k.__name__}" for k in kinds)
        raise TypeError(f"{name} must be a {names} of {dtype} with shape {dims_doc}, got {type(value).__name__}")
    not_masked(name, value)
    if value.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype} (the model's dtype), got {value.dtype}")
    if value.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D with shape {dims_doc}, got shape {value.shape}")
    return value


def shape(name: str, value: np.ndarray, expected: tuple[int, ...], dims_doc: str) -> None:
    if value.shape != expected:
        raise ValueError(f"{name} must have shape {dims_doc} = {expected}, got {value.shape}")


def no_cell_state(name: str, value: object, rnn_mode: str) -> None:
    """``None``, the only cell state a mode without one accepts."""
    if value is not None:
        raise ValueError(f"{name} must be None for rnn_mode={rnn_mode!r} (no cell state)")
    return None


def not_masked(name: str, value: object) -> None:
    """Refuse a NumPy masked array: every computation here would read its masked values and drop its mask."""
    if isinstance(value, np.ma.MaskedArray):
        raise TypeError(f"{name} must be a plain numpy.ndarray, got a masked array (its mask would be ignored; "
                        f"pass .filled(...) or select the valid entries)")


def sequence_lengths(value: object, batch: int, max_time: int) -> np.ndarray:
    """Lengths as a read-only int64 ``[B]`` array of its own, each in ``1..T``: integers (bools refused, in a
    list too, where NumPy would read ``True`` as 1)."""
    not_masked("sequence_lengths", value)
    try:
        lengths = np.asarray(value)  # ragged nesting raises here
        # A list's elements as given: NumPy reads a list mixing int64 and uint64 values as float64.
        elements = lengths if isinstance(value, np.ndarray) else np.asarray(value, dtype=object)
    except (ValueError, TypeError, OverflowError) as exc:  # ragged nesting, unconvertible elements
        raise ValueError(f"sequence_lengths must be integers of shape [B] = ({batch},): {exc}") from None
    if lengths.shape != (batch,):
        raise ValueError(f"sequence_lengths must have shape [B] = ({batch},), got {lengths.shape}")
    if elements.dtype == object:  # Python ints (some maybe beyond int64) are range-checked as they are
        for v in elements:
            if isinstance(v, (bool, np.bool_)):
                raise TypeError("sequence_lengths must be integers, got a bool among them")
            if not isinstance(v, (int, np.integer)):
                raise TypeError(f"sequence_lengths must be integers, got {type(v).__name__} {v!r} among them")
    elif elements.dtype.kind not in "iu":
        raise TypeError(f"sequence_lengths must be integers, got dtype {elements.dtype}")
    low, high = (elements.min(), elements.max()) if batch else (1, max_time)
    if low < 1 or high > max_time:
        raise ValueError(f"sequence_lengths must each be in 1..T = 1..{max_time}, got values in {low}..{high}")
    lengths = elements.astype(np.int64)  # a copy of the caller's: a forward result keeps it for backward
    lengths.flags.writeable = False
    return lengths


def padding_fill(value: object, dtype: np.dtype) -> np.generic:
    """cuDNN's ``paddingFill``: a real number (int or float, not a bool; NaN and infinities are values too) as
    a scalar of ``dtype``, which it must fit: a finite value that would round to an infinity is refused."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"padding_fill must be a real number (int or float), got {shown(value)} "
                        f"({type(value).__name__})")
    try:
        with np.errstate(over="ignore"):
            fill, wide = np.dtype(dtype).type(value), np.float64(value)
    except OverflowError:  # a Python int beyond float64
        fill, wide = np.dtype(dtype).type(np.inf), np.float64(0.0)
    if np.isinf(fill) and np.isfinite(wide):
        raise ValueError(f"padding_fill must fit the model's dtype {np.dtype(dtype)} (at most "
                         f"{np.finfo(dtype).max:g} in magnitude), got {shown(value)}")
    return fill


def fills(fill: object) -> bool:
    """Whether a padding fill (a number, as :func:`padding_fill` returns it) is other than the default +0.0:
    -0.0 is a fill of its own (its bits differ), NaN too."""
    return not (fill == 0 and not np.signbit(fill))


def cell_clip(value: object) -> tuple[float, float]:
    """cudnnRNNSetClip_v9's ``(lclip, rclip)``: two real numbers (not bools; an infinity leaves that side
    open), neither NaN, ``lclip <= rclip`` (cuDNN's ``CUDNN_STATUS_BAD_PARAM`` otherwise), as floats."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"cell_clip must be None or a pair (lclip, rclip) of numbers, got {shown(value)}")
    for v in value:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"cell_clip must be a pair (lclip, rclip) of real numbers, got {shown(value)}")
    try:
        lclip, rclip = float(value[0]), float(value[1])
    except OverflowError:  # a Python int beyond float64
        raise ValueError(f"cell_clip's bounds must be float64 numbers, got {shown(value)}") from None
    if np.isnan(lclip) or np.isnan(rclip) or lclip > rclip:
        raise ValueError(f"cell_clip must be (lclip, rclip) with lclip <= rclip, neither NaN, got {shown(value)}")
    return lclip, rclip
