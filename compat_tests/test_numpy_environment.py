"""The NumPy the reference runs on: the strided, in-place ufunc patterns the step functions rely on.

The suite found that NumPy 2.4.6's float32 ``np.negative(v, out=v)`` on a small strided view (a gate
block of ``[B, G*H]``) reads with the wrong stride; the reference negates with a multiply instead. These
tests pin the patterns the reference does use, on gate-block-shaped views, so a NumPy regression in them
fails here with a clear name instead of as an unexplained numerical divergence.
"""

from __future__ import annotations

import numpy as np
import pytest

UFUNCS = {
    "multiply(v, -1)": lambda v, out: np.multiply(v, -1.0, out=out),
    "subtract(1, v)": lambda v, out: np.subtract(1.0, v, out=out),
    "exp": lambda v, out: np.exp(v, out=out),
    "divide(1, v)": lambda v, out: np.divide(1.0, v, out=out),
    "tanh": lambda v, out: np.tanh(v, out=out),
    "multiply(v, v)": lambda v, out: np.multiply(v, v, out=out),
    "maximum(v, 0)": lambda v, out: np.maximum(v, 0, out=out),
    "add(v, 1)": lambda v, out: np.add(v, 1.0, out=out),
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
