"""Storage and arithmetic precision of the reference, decided in one place.

cuDNN runs half-precision RNNs with HALF data and FLOAT math (``dataType=HALF, mathPrec=FLOAT``, what
PyTorch and TensorFlow request). The reference mirrors that: float16 models store inputs, parameters,
outputs and final states in float16 and compute in float32. What cuDNN keeps in half precision *inside*
the fused op is not documented; the reference rounds exactly where cuDNN must hold data in a tensor of
the data type (see :data:`ROUND_LAYER_OUTPUTS_TO_STORAGE`), and nowhere else.
"""

from __future__ import annotations

import numpy as np

STORAGE_DTYPES: tuple[np.dtype, ...] = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))

# The layer-to-layer activations of a multi-layer cuDNN RNN live in a buffer of the data type, so with
# float16 storage each layer's output is rounded to float16 before the next layer reads it. The
# recurrent state inside a layer stays in the math precision (float32). UNCONFIRMED on a GPU: the GPU
# suite's float16 comparison is what settles it.
ROUND_LAYER_OUTPUTS_TO_STORAGE = True


def storage_dtype(dtype: object) -> np.dtype:
    """The model dtype as a NumPy dtype; ``TypeError`` unless it is float16, float32 or float64."""
    if dtype is None:  # np.dtype(None) is float64: a default nobody asked for
        raise TypeError("dtype must be float16, float32 or float64, got None")
    try:
        resolved = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError as exc:
        raise TypeError(f"dtype must be float16, float32 or float64, got {dtype!r}") from exc
    if resolved not in STORAGE_DTYPES:
        raise TypeError(f"dtype must be float16, float32 or float64, got {resolved}")
    return resolved


def compute_dtype(storage: np.dtype) -> np.dtype:
    """The arithmetic precision for a storage dtype: float32 for float16, the dtype itself otherwise."""
    return np.dtype(np.float32) if storage == np.float16 else storage
