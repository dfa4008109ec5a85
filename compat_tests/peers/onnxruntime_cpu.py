"""ONNX Runtime on the CPU, running the model exported by ``compat_tests.interop.onnx_model`` (one ONNX
``GRU``/``LSTM``/``RNN`` node per layer; weights through ``reference.formats.onnx``).

What ONNX Runtime rejects or lacks (checked with onnxruntime 1.31 on CPU): ``layout=1`` (batch-major)
at session creation, so the adapter transposes batch-major data itself; double ("GRU/LSTM operator does
not support double yet"); LSTM projection (no such ONNX attribute); skip_input (no such ONNX mode).
float16 runs with ORT's own Cast to float32 around each node, i.e. float16 between layers.
"""

from __future__ import annotations

import numpy as np

from ..config import Case, Outputs, RNNConfig
from .base import Capabilities, Peer


class OnnxRuntimeCPU(Peer):
    name = "onnxruntime"
    capabilities = Capabilities(
        dtypes=("float16", "float32"),
        skip_input=False,
        projection=False,
        backward=False,
        bias_modes=("double", "none"),
        notes=(
            ("bias_mode", "ONNX's B holds both biases of every gate, or the node has no B (no bias)"),
            ("dtype", "onnxruntime's GRU/LSTM/RNN CPU kernels reject double"),
            ("skip_input", "ONNX recurrent ops have no skip_input mode"),
            ("projection", "ONNX LSTM has no projection"),
            ("padding_fill", "ONNX's recurrent ops define Y past each sequence_lens entry as zeros; no "
                             "attribute sets another value"),
            ("cell_clip", "ONNX's LSTM clip attribute clips the gates' pre-activations, not the cell state: "
                          "another function, never mapped onto cuDNN's cell clip"),
            ("packed", "ONNX's recurrent ops take a padded X [seq_length, batch_size, input_size] with "
                       "sequence_lens; they have no packed layout"),
        ),
    )

    def available(self) -> tuple[bool, str]:
        try:
            import onnx  # noqa: F401
            import onnxruntime
        except ImportError as exc:  # pragma: no cover - depends on the environment
            return False, f"onnx/onnxruntime is not installed ({exc})"
        return True, f"onnxruntime {onnxruntime.__version__}"

    def forward(self, cfg: RNNConfig, case: Case) -> Outputs:
        from ..interop import onnx_model

        def time_major(a):
            return a if a is None or cfg.time_major else np.ascontiguousarray(a.transpose(1, 0, 2))

        proto = onnx_model.export_model(cfg.model(), case.weights, case.biases)
        y, h, c = onnx_model.run(proto, time_major(case.x), case.lengths, time_major(case.h0), time_major(case.c0))
        return Outputs(*(None if a is None else time_major(a) for a in (y, h, c)))
