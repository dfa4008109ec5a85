"""The reference's buffer cache (``reference.buffers``): memory is reused only once nothing references it,
and results kept across calls stay intact."""

from __future__ import annotations

import threading
import weakref

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reference
from reference import buffers


@pytest.fixture
def cache():
    """A clean cache for this thread, with the suite's limit restored afterwards."""
    buffers.release()
    old = buffers.limit()
    yield buffers
    buffers.set_limit(old)
    buffers.release()


def test_memory_is_reused_once_dropped(cache):
    a = cache.empty((300, 200), np.float32)
    address = a.__array_interface__["data"][0]
    del a
    b = cache.empty((300, 200), np.float32)
    assert b.__array_interface__["data"][0] == address
    assert b.shape == (300, 200) and b.dtype == np.float32 and b.flags.c_contiguous


def test_memory_in_use_is_never_handed_out(cache):
    a = cache.empty((300, 200), np.float32)
    view = a.T[5:]  # a view keeps the block in use after its parent is gone
    del a
    b = cache.empty((300, 200), np.float32)
    assert not np.shares_memory(view, b)
    saved = np.asarray(memoryview(b))  # so does anything that exports its buffer
    del b
    c = cache.empty((300, 200), np.float32)
    assert not np.shares_memory(saved, c) and not np.shares_memory(view, c)


def test_nearby_sizes_share_a_block(cache):
    a = cache.empty((100, 1000), np.float64)
    address = a.__array_interface__["data"][0]
    del a
    b = cache.empty((99, 1000), np.float64)  # within the same 1/8 size class
    assert b.__array_interface__["data"][0] == address


def test_limit_bounds_what_is_kept(cache):
    cache.set_limit(1 << 20)
    held = [cache.empty((1 << 18,), np.uint8) for _ in range(6)]  # 1.5 MiB asked, 1 MiB may be cached
    cached = {h.__array_interface__["data"][0] for h in held if h.base is not None}
    assert len(cached) == 4  # the rest are plain arrays
    del held
    again = [cache.empty((1 << 18,), np.uint8) for _ in range(6)]
    assert {a.__array_interface__["data"][0] for a in again if a.base is not None} == cached


def test_limit_zero_and_release_drop_free_blocks(cache):
    a = cache.empty((1 << 16,), np.float32)
    block = weakref.ref(a.base)
    del a
    assert block() is not None  # kept by the cache
    cache.release()
    assert block() is None  # dropped
    b = cache.empty((1 << 16,), np.float32)
    assert b.base is not None  # a fresh block of the cache again
    cache.set_limit(0)
    c = cache.empty((1 << 16,), np.float32)
    assert c.base is None and c.flags.owndata  # the cache is off: a plain np.empty


@pytest.mark.parametrize(("nbytes", "error"), [(-1, ValueError), (1.5, TypeError), (True, TypeError),
                                               ("1", TypeError)])
def test_set_limit_refuses_bad_values(cache, nbytes, error):
    with pytest.raises(error, match="nbytes must be an int >= 0"):
        cache.set_limit(nbytes)


def test_threads_have_their_own_blocks(cache):
    a = cache.empty((300, 200), np.float32)
    address = a.__array_interface__["data"][0]
    del a
    seen = []
    thread = threading.Thread(target=lambda: seen.append(cache.empty((300, 200), np.float32).__array_interface__["data"][0]))
    thread.start()
    thread.join()
    assert seen and seen[0] != address


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_training_results_survive_later_calls(cache, mode):
    """A ForwardResult kept while other forward and backward calls run (which reuse the cache) still gives
    the gradients of its own forward pass."""
    rng = np.random.default_rng(7)
    model = reference.make_model(mode, 2, 16, 8, direction="bidirectional", dtype=np.float64)
    params = rng.standard_normal(model.params_size()) * 0.3
    x1, x2 = rng.standard_normal((2, 6, 3, 8))
    dy = rng.standard_normal((6, 3, 32))
    expected = model.backward(model.forward(x1, None, params, is_training=True), dy)
    kept = model.forward(x1, None, params, is_training=True)
    for _ in range(2):  # other work in between, on other data
        model.backward(model.forward(x2, None, params, is_training=True), dy)
        model.forward(x2, None, params, is_training=False)
    got = model.backward(kept, dy)
    for e, g in zip(expected, got):
        if e is not None:
            np.testing.assert_array_equal(g, e)


def test_arrays_outside_the_cached_sizes_are_plain(cache):
    big = cache.empty((cache.MAX_CACHED_BYTES + 1,), np.uint8)
    assert big.base is None and big.flags.owndata


@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 7), st.sampled_from(["float32", "float64", "int16"])),
                    max_size=40))
def test_live_arrays_never_overlap(cache, ops):
    """Any interleaving of allocations and drops: every array handed out is disjoint from every array still
    alive, and keeps what was written into it until it is dropped."""
    cache.set_limit(1 << 16)  # small, so eviction and plain arrays take part too
    live: list[tuple[np.ndarray, int]] = []
    for stamp, (allocate, k, dtype) in enumerate(ops):
        if allocate or not live:
            a = cache.empty((k + 1, 37 * (k % 3 + 1)), dtype)
            assert not any(np.shares_memory(a, other) for other, _ in live)
            a[...] = stamp % 100
            live.append((a, stamp % 100))
        else:
            del live[k % len(live)]
        for other, value in live:
            assert (other == value).all()


def test_threads_running_models_at_once_get_their_own_results(cache):
    """Several threads running forward and backward passes at once (each with its own cache, NumPy and BLAS
    releasing the GIL) get the results of running alone without the cache."""
    rng = np.random.default_rng(3)
    model = reference.make_model("gru", 1, 24, 8, direction="bidirectional", dtype=np.float64)
    params = rng.standard_normal(model.params_size()) * 0.3
    xs = rng.standard_normal((4, 9, 5, 8))
    dy = rng.standard_normal((9, 5, 48))

    def run(x):
        fwd = model.forward(x, None, params, is_training=True)
        return fwd.output, model.backward(fwd, dy).params

    limit = cache.limit()
    cache.set_limit(0)  # the expected results come from plain arrays
    alone = [run(x) for x in xs]
    cache.set_limit(limit)
    results: list = [None] * len(xs)

    def worker(k):
        for _ in range(5):
            results[k] = run(xs[k])

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(len(xs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for (out, d_params), (want_out, want_d) in zip(results, alone):
        np.testing.assert_array_equal(out, want_out)
        np.testing.assert_array_equal(d_params, want_d)
