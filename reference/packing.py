"""Packed sequences: cuDNN's ``CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED``, the ``data`` and ``batch_sizes`` of
PyTorch's ``PackedSequence``.

A batch of ``B`` sequences sorted by non-increasing length is stored time step by time step, each step holding
only the sequences still running, in batch order: ``data [sum(lengths), width]`` and ``batch_sizes [T]``,
``batch_sizes[t]`` the number of sequences longer than ``t``. There is no padding, so no ``paddingFill``.
Sequences of equal length are a packed batch too (every ``batch_sizes[t] == B``). cuDNN documents the order
("sequence length sorted and packed as in basic RNN api"); an unsorted batch is refused, not reordered: sort it
first (PyTorch's ``enforce_sorted=False`` sorts and remembers the permutation, which is the caller's here).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import checks


class PackedSequence(NamedTuple):
    """``data [sum(lengths), width]`` and ``batch_sizes [T]`` (int64, non-increasing, each >= 1): see the module.
    States beside a packed sequence are ``[L*D, B, width]`` with ``B = batch_sizes[0]``, in batch order."""

    data: np.ndarray
    batch_sizes: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        """``[B]``: each sequence's length (non-increasing)."""
        return lengths_of(self.batch_sizes)


def batch_sizes_of(lengths) -> np.ndarray:
    """``batch_sizes [T]`` of sorted ``lengths [B]`` (non-increasing, each >= 1): ``batch_sizes[t]`` counts
    those above ``t``."""
    lengths = np.asarray(lengths)
    return (lengths[None, :] > np.arange(int(lengths[0]))[:, None]).sum(axis=1).astype(np.int64)


def lengths_of(batch_sizes) -> np.ndarray:
    """The inverse of :func:`batch_sizes_of`: ``lengths[b]`` counts the steps with more than ``b`` sequences."""
    batch_sizes = np.asarray(batch_sizes)
    return (batch_sizes[None, :] > np.arange(int(batch_sizes[0]))[:, None]).sum(axis=1).astype(np.int64)


def check_batch_sizes(name: str, value: object) -> np.ndarray:
    """``batch_sizes`` as a read-only int64 ``[T]`` array of its own: integers (bools refused), at least one,
    each >= 1, non-increasing."""
    checks.not_masked(name, value)
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray of integers [T], got {type(value).__name__}")
    if value.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got dtype {value.dtype}")
    if value.ndim != 1 or value.size < 1:
        raise ValueError(f"{name} must be 1-D with shape [T], T >= 1, got shape {value.shape}")
    if value.min() < 1 or (np.diff(value.astype(np.int64)) > 0).any():
        raise ValueError(f"{name} must be non-increasing with every entry >= 1 (sequences sorted by decreasing "
                         f"length), got {checks.shown(value.tolist())}")
    sizes = value.astype(np.int64)
    sizes.flags.writeable = False
    return sizes


def check(name: str, value: object, dtype: np.dtype, width: int, kinds: tuple[type, ...] = (np.ndarray,)
          ) -> PackedSequence:
    """A :class:`PackedSequence` whose ``data`` is an array of ``kinds`` of exactly ``dtype``, shape
    ``[sum(batch_sizes), width]``, and whose ``batch_sizes`` pass :func:`check_batch_sizes`."""
    if not isinstance(value, PackedSequence):
        raise TypeError(f"{name} must be a reference.PackedSequence, got {type(value).__name__}")
    sizes = check_batch_sizes(f"{name}.batch_sizes", value.batch_sizes)
    doc = "[sum(batch_sizes), width]"
    data = checks.array(f"{name}.data", value.data, dtype, 2, doc, kinds)
    checks.shape(f"{name}.data", data, (int(sizes.sum()), width), doc)
    return PackedSequence(data, sizes)


def pack(x: np.ndarray, lengths=None, *, time_major: bool = True) -> PackedSequence:
    """``x [T, B, width]`` (``[B, T, width]`` unless ``time_major``) packed: the steps below each of
    ``lengths [B]`` (``None``: all ``T``), which must be non-increasing, each in ``1..T``. The data is a copy."""
    time_major = checks.flag("time_major", time_major)
    doc = "[T, B, width]" if time_major else "[B, T, width]"
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x must be a numpy.ndarray with shape {doc}, got {type(x).__name__}")
    checks.not_masked("x", x)
    if x.ndim != 3 or min(x.shape[:2]) < 1:
        raise ValueError(f"x must be 3-D with shape {doc}, T >= 1, B >= 1, got shape {x.shape}")
    steps = x if time_major else x.transpose(1, 0, 2)
    T, B = steps.shape[:2]
    lengths = np.full(B, T, dtype=np.int64) if lengths is None else checks.sequence_lengths(lengths, B, T)
    if (np.diff(lengths) > 0).any():
        raise ValueError(f"lengths must be non-increasing to pack (cuDNN's packed layout holds sequences sorted by "
                         f"decreasing length): sort the batch first, got {checks.shown(lengths.tolist())}")
    sizes = batch_sizes_of(lengths)
    data = np.concatenate([steps[t, :n] for t, n in enumerate(sizes)])
    sizes.flags.writeable = False
    return PackedSequence(data, sizes)


def unpack(packed: PackedSequence, *, padding_fill: float = 0.0, time_major: bool = True,
           total_length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(x [T, B, width], lengths [B])`` of a packed sequence (``[B, T, width]`` unless ``time_major``), the
    steps past each length holding ``padding_fill`` (``checks.padding_fill``: a number ``data``'s dtype holds);
    ``T`` is the longest length, or ``total_length`` (at least that), as PyTorch's ``pad_packed_sequence``."""
    if not isinstance(packed, PackedSequence):
        raise TypeError(f"packed must be a reference.PackedSequence, got {type(packed).__name__}")
    time_major = checks.flag("time_major", time_major)
    sizes = check_batch_sizes("packed.batch_sizes", packed.batch_sizes)
    T = len(sizes) if total_length is None else checks.int_at_least("total_length", total_length, len(sizes))
    data = packed.data
    if not isinstance(data, np.ndarray) or data.dtype.kind != "f" or data.ndim != 2 or data.shape[0] != sizes.sum():
        raise ValueError(f"packed.data must be a float numpy.ndarray [sum(batch_sizes), width] = [{sizes.sum()}, "
                         f"width], got {getattr(data, 'shape', type(data).__name__)} "
                         f"{getattr(data, 'dtype', '')}".rstrip())
    fill = checks.padding_fill(padding_fill, data.dtype)
    x = np.full((T, int(sizes[0]), data.shape[1]), fill, dtype=data.dtype)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    for t, n in enumerate(sizes):
        x[t, :n] = data[starts[t] : starts[t + 1]]
    return (x if time_major else np.ascontiguousarray(x.transpose(1, 0, 2))), lengths_of(sizes)
