"""Large intermediate arrays reused across calls, so that repeated calls do not page-fault fresh memory.

glibc returns large freed blocks to the operating system (``mmap``/trim), so an array of a few hundred
KiB or more that a call allocates and drops is faulted in again, page by page, by the next call (what
that cost: ``benchmarks/NOTES.md``, ``buffers.py``). :func:`empty` hands out such arrays from a per-thread
cache instead.

A cached block is reused only when nothing but the cache references it: every array :func:`empty`
returns is a view whose ``base`` is the block, so while the caller (or anything derived from the array:
views, a ``ForwardResult``'s reserve) holds it, the block's reference count says it is in use. The
reference hands out cached arrays for its intermediates and training traces only; arrays returned to
the caller (outputs, final states, gradients) are ordinary fresh arrays.

Arrays from 128 KiB to 64 MiB are cached. The cache keeps at most :func:`limit` bytes per thread
(default 512 MiB, blocks in use included), is off where reference counts cannot be trusted (interpreters
other than CPython, free-threaded builds), and :func:`release` drops this thread's free blocks.
"""

from __future__ import annotations

import math
import sys
import threading

import numpy as np

from . import checks

MIN_CACHED_BYTES = 1 << 17  # smaller arrays come from malloc's heap, which keeps them
MAX_CACHED_BYTES = 1 << 26  # larger arrays cost far more to compute than to fault in, and are big to keep
_DEFAULT_LIMIT = 512 << 20

_ENABLED = sys.implementation.name == "cpython" and getattr(sys, "_is_gil_enabled", lambda: True)()
_limit = _DEFAULT_LIMIT
_local = threading.local()


def _refcounts(blocks: list[np.ndarray]) -> list[int]:
    """Each block's reference count, taken in this one place so the count of a free block is calibrated
    on the same code path (:data:`_FREE_REFS`)."""
    return [sys.getrefcount(block) for block in blocks]


_FREE_REFS = _refcounts([np.empty(1, np.uint8)])[0]  # a block referenced by its list alone


def _bucket(nbytes: int) -> int:
    """``nbytes`` rounded up to one of 8 sizes per power of two, so that nearby sizes (another ``T``) share
    blocks and at most 1/8 of a block is unused."""
    step = 1 << max(nbytes.bit_length() - 4, 0)
    return -(-nbytes // step) * step


def _blocks() -> dict[int, list[np.ndarray]]:
    blocks = getattr(_local, "blocks", None)
    if blocks is None:
        blocks = _local.blocks = {}
    return blocks


def _held(blocks: dict[int, list[np.ndarray]]) -> int:
    return sum(size * len(group) for size, group in blocks.items())


def _drop_free(blocks: dict[int, list[np.ndarray]], excess: float) -> None:
    """Drop free blocks, ``excess`` bytes' worth or more (or until none is free)."""
    for size in list(blocks):
        if excess <= 0:
            return
        group = blocks[size]
        keep = [block for block, refs in zip(group, _refcounts(group)) if refs != _FREE_REFS]
        excess -= size * (len(group) - len(keep))
        if keep:
            blocks[size] = keep
        else:
            del blocks[size]


def empty(shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """An uninitialised C-contiguous array, like ``np.empty(shape, dtype)``, from this thread's cache when
    it is large enough to be worth it. Its memory is not reused while anything references it."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(map(int, shape)) * dtype.itemsize
    if not _ENABLED or not MIN_CACHED_BYTES <= nbytes <= MAX_CACHED_BYTES or _limit == 0:
        return np.empty(shape, dtype)
    size = _bucket(nbytes)
    blocks = _blocks()
    group = blocks.setdefault(size, [])
    for block, refs in zip(group, _refcounts(group)):
        if refs == _FREE_REFS:
            return block[:nbytes].view(dtype).reshape(shape)
    if _held(blocks) + size > _limit:
        _drop_free(blocks, _held(blocks) + size - _limit)
        if _held(blocks) + size > _limit:
            return np.empty(shape, dtype)
    block = np.empty(size, np.uint8)
    blocks.setdefault(size, []).append(block)
    return block[:nbytes].view(dtype).reshape(shape)


def set_limit(nbytes: int) -> None:
    """Keep at most ``nbytes`` in each thread's cache (0 turns the cache off); free blocks over it go."""
    global _limit
    _limit = checks.int_at_least("nbytes", nbytes, 0)
    _drop_free(_blocks(), _held(_blocks()) - _limit)


def limit() -> int:
    """The cache's limit in bytes per thread."""
    return _limit


def release() -> None:
    """Drop this thread's free blocks (blocks still in use stay until they are dropped by their users)."""
    _drop_free(_blocks(), float("inf"))
