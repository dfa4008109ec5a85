"""The NumPy reference engine itself (the public classes), in the config's dtype: an implementation under test, judged
like every other against the float64 truth of ``reference.spec``."""

from __future__ import annotations

import numpy as np

from reference import precision

from ..config import BIAS_MODE_NAMES, Case, GradOutputs, Outputs, RNNConfig
from ..run import run_reference, run_reference_backward
from .base import Capabilities, Peer


class ReferencePeer(Peer):
    name = "reference"
    capabilities = Capabilities(
        dtypes=("float16", "float32"),
        bias_modes=BIAS_MODE_NAMES,
        padding_fill=True,
        cell_clip=True,
        packed=True,
        notes=(("dtype", "the engine's float64 is held against the float64 truth (the plain cells of reference/spec) "
                          "by compat_tests/tests/reference/test_spec.py"),),
    )

    def available(self) -> tuple[bool, str]:
        return True, f"numpy {np.__version__}"

    def forward(self, cfg: RNNConfig, case: Case) -> Outputs:
        return run_reference(cfg, case)

    def backward(self, cfg: RNNConfig, case: Case) -> GradOutputs:
        return run_reference_backward(cfg, case)


class ReferenceTF32Peer(Peer):
    """The reference engine under TF32 math (``math_type="tf32"``, float32): what a GPU's tensor cores under
    cuDNN's default math (PyTorch's ``allow_tf32``) compute, predicted on the CPU. Judged against the float64
    FMA truth by the TF32 budget, its errors are what TF32 costs on each config."""

    name = "reference-tf32"
    tf32 = True
    tf32_in_every_gemm = True
    capabilities = Capabilities(
        dtypes=("float32",),
        bias_modes=BIAS_MODE_NAMES,
        padding_fill=True,
        cell_clip=True,
        packed=True,
        notes=(("dtype", "TF32 math reads float32 GEMM operands (float16 data has float32 math, float64 its own)"),),
    )

    def available(self) -> tuple[bool, str]:
        return True, f"numpy {np.__version__}, TF32 rounding {precision.TF32_ROUNDING!r}"

    def forward(self, cfg: RNNConfig, case: Case) -> Outputs:
        return run_reference(cfg, case, math_type="tf32")

    def backward(self, cfg: RNNConfig, case: Case) -> GradOutputs:
        return run_reference_backward(cfg, case, math_type="tf32")
