"""Storage and arithmetic precision of the reference, decided in one place.

cuDNN runs half-precision RNNs with HALF data and FLOAT math (``dataType=HALF, mathPrec=FLOAT``, what
PyTorch and TensorFlow request). The reference mirrors that: float16 models store inputs, parameters,
outputs and final states in float16 and compute in float32, rounding to float16 inside the fused op at
the points :data:`HALF_ROUNDS` names (confirmed on a GPU), and between layers, where the layer's output
lies in a buffer of the data type; nowhere else. float32 and float64 models round nowhere.
"""

from __future__ import annotations

import numpy as np

STORAGE_DTYPES: tuple[np.dtype, ...] = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))

ROUNDING_POINTS: frozenset[str] = frozenset({"gemm_outputs", "state"})
"""Where a float16 forward may round to float16 inside a layer: ``"gemm_outputs"``, the result of each GEMM
(``W x``, ``R h``, the textbook GRU's ``R_h (r * h)``, the LSTM projection ``P m``) *before* its bias is
added (biases add in float32); ``"state"``, the states each step carries to the next: the hidden state ``h``,
which the next step's recurrent GEMM reads (and which is the layer's output), and the LSTM's cell state
``c`` (the step's own ``h = o * tanh(c)`` reads ``c`` before it is rounded), and with an LSTM projection
``o * tanh(c)``, which the projection's GEMM reads."""

HALF_ROUNDS: frozenset[str] = frozenset({"gemm_outputs", "state"})
"""The rounding points (:data:`ROUNDING_POINTS`) of float16 storage: both. Confirmed on NVIDIA H200,
cuDNN 9.19.0 (HALF data, FLOAT math, tensor ops; ``reports/gpu/nvidia-h200-cudnn9.19.0/probes.md``,
probes 4 and 5 of ``scripts/gpu_probe.py``): one step from a given state, rounding ``W x`` and ``R h`` to
float16 before their biases matches 99.9-100% of cuDNN's outputs exactly (relu, tanh) against 60-84% for
every other model tried; over 30 steps (H64 I32 B16) rounding ``W x``, ``R h`` and the state ``h`` matches
96.7% (tanh) and 99.3% (GRU) exactly against 56-60% with nothing rounded and at most 84% with any two of
the three. The LSTM's cell state is carried in float16 too: cuDNN's LSTM over 30 steps in one call equals
30 calls of one step, each from the float16 ``hy``, ``cy`` the last returned, on every output (probe 9,
``reports/gpu/nvidia-h200-cudnn9.19.0-2/probe9.md``; tanh and GRU likewise); with a projection ``o * tanh(c)``
is stored in float16 for the projection's GEMM. So ruled, every float16 result of both committed captures is
the reference's bit for bit (``compat_tests/tests/gpu/test_gpu_capture.py``). The GPU ladder's rung 08
(``compat_tests/tests/gpu/test_gpu_ladder.py::test_float16_rounding``) checks it on every GPU run. With the state
rounded each layer's output is float16 already; a layer's output after dropout is rounded again before the
next layer reads it."""


TF32_ROUNDING = "rna"
"""How a float32 GEMM operand becomes TF32 under TF32 math (one of ``reference.tf32.RULES``): to nearest, ties
away from zero, as PTX's ``cvt.rna.tf32.f32`` converts (the conversion to TF32 that every PTX version since
TF32's first offers). A provisional decision (docs/decisions.md): cuDNN does not document how its RNN kernels
read float32 operands in TF32, and no GPU capture has settled it yet; truncation and ties-to-even are the
other candidates, each exact in ``reference.tf32``."""

TF32_ROUNDING_SETTLED = False
"""Whether a GPU run has settled :data:`TF32_ROUNDING` (docs/decisions.md). Until it has, a GPU's TF32 result may
fit the truth of any of the candidate rules (``compat_tests.judge.compare.first_step_fit``), which it names."""


def rounds_at(storage: object, point: str) -> bool:
    """Whether a forward pass over data of dtype ``storage`` rounds to it at ``point`` (one of
    :data:`ROUNDING_POINTS`): float16 at the points of :data:`HALF_ROUNDS`, read at each call."""
    if point not in ROUNDING_POINTS:
        raise ValueError(f"point must be one of {sorted(ROUNDING_POINTS)}, got {point!r}")
    return np.dtype(storage) == np.float16 and point in HALF_ROUNDS  # type: ignore[call-overload]


def rounding_dtype(storage: object, point: str) -> np.dtype | None:
    """``storage`` as a dtype where :func:`rounds_at` ``point``, else ``None`` (round nowhere)."""
    return np.dtype(storage) if rounds_at(storage, point) else None  # type: ignore[call-overload]


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
