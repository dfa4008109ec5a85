"""The NumPy the reference runs on: the strided, in-place ufunc patterns the step functions rely on.

The suite found that NumPy 2.4.6's float32 ``np.negative(v, out=v)`` on a small strided view (a gate
block of ``[B, G*H]``) reads with the wrong stride; the reference negates with a multiply instead. These
tests pin the patterns the reference does use, on gate-block-shaped views, so a NumPy regression in them
fails here with a clear name instead of as an unexplained numerical divergence. The forward steps pass
their constants as 0-d arrays of the data's dtype (half the call overhead of a Python float) and ``out``
positionally, but to ``np.maximum`` (NumPy 2.4 deprecates a third positional argument there); the backward
steps use Python floats.
"""

from __future__ import annotations

import numpy as np
import pytest

from reference import modes


def _c(v: np.ndarray, value: float) -> np.ndarray:
    """``value`` as the forward steps pass it: a 0-d array of ``v``'s dtype."""
    return np.array(value, v.dtype)


UFUNCS = {
    "multiply(v, -1)": lambda v, out: np.multiply(v, _c(v, -1), out),
    "subtract(1.0, v)": lambda v, out: np.subtract(1.0, v, out=out),
    "exp": lambda v, out: np.exp(v, out),
    "divide(1, v)": lambda v, out: np.divide(_c(v, 1), v, out),
    "tanh": lambda v, out: np.tanh(v, out),
    "multiply(v, v)": lambda v, out: np.multiply(v, v, out=out),
    "maximum(v, 0)": lambda v, out: np.maximum(v, _c(v, 0), out=out),
    "add(v, 1)": lambda v, out: np.add(v, _c(v, 1), out),
}


SHAPES = [((2, 4), 1), ((4, 4), 2), ((3, 5), 2), ((32, 12), 4)]  # (array, leading columns = one gate block)


def _check(name, f, dtype, shape, cols):
    base = (np.arange(np.prod(shape), dtype=np.float64).reshape(shape) / np.prod(shape) + 0.25).astype(dtype)
    expected = f(base[:, :cols].copy(), None)
    inplace = base.copy()
    view = inplace[:, :cols]
    f(view, view)
    np.testing.assert_array_equal(view, expected, err_msg=f"in-place {name} on a strided {dtype.__name__} view")
    out = np.empty((shape[0], cols), dtype)
    f(base[:, :cols], out)
    np.testing.assert_array_equal(out, expected, err_msg=f"{name} from a strided {dtype.__name__} view")


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("name", sorted(UFUNCS))
def test_strided_ufuncs_the_reference_uses(name, dtype, shape):
    _check(name, UFUNCS[name], dtype, *shape)


@pytest.mark.xfail(np.__version__ == "2.4.6", reason="NumPy 2.4.6: float32 in-place np.negative on a small "
                   "strided view is wrong; the reference does not use it", strict=False)
def test_strided_inplace_negative():
    _check("negative", lambda v, out: np.negative(v, out=out), np.float32, (2, 4), 1)


def _python_scalar_sigmoid(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    out = np.multiply(x, -1.0, out=out)
    np.exp(out, out=out)
    out += 1
    return np.divide(1.0, out, out=out)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=lambda d: d.__name__)
def test_zero_d_constants_give_what_python_floats_give(dtype):
    """The forward steps' 0-d constants are a speed choice only: ``modes.sigmoid`` and ``modes.relu`` equal
    the same formulas with Python floats bit for bit (dtype, signed zeros, infinities, NaN, subnormals),
    out of place and in place on one time step of a ``[width, T, B]`` sequence."""
    specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40, -1e-40, 90.0, -90.0, 1e4, -1e4], np.float64)
    rng = np.random.default_rng(0)
    seq = np.concatenate([specials, rng.standard_normal(2 * 3 * 17 - specials.size) * 8]).astype(dtype)
    seq = seq.reshape(2 * 17, 3, 1).repeat(2, axis=2)  # [width, T, B]
    with np.errstate(all="ignore"):
        for t in range(seq.shape[1]):
            step = seq[:, t]
            for name, got, want in (
                ("sigmoid", modes.sigmoid(step), _python_scalar_sigmoid(step)),
                ("relu", modes.relu(step), np.maximum(step, 0)),
            ):
                assert got.dtype == want.dtype == dtype, name
                np.testing.assert_array_equal(got, want, err_msg=name)
                np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=f"{name}: signed zeros")
            inplace, expected = seq.copy(), seq.copy()
            modes.sigmoid(inplace[:, t], inplace[:, t])
            _python_scalar_sigmoid(expected[:, t], expected[:, t])
            np.testing.assert_array_equal(inplace, expected, err_msg="in-place sigmoid on a strided time step")
