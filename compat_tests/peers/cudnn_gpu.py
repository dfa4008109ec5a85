"""cuDNN itself, through ``cudnn_backend`` (ctypes over libcudnn.so.9): ``cudnn`` with each data type's
documented math (float32: ``CUDNN_FMA_MATH``, true FP32; float16: tensor ops with FLOAT math; float64:
default), ``cudnn-tf32`` with ``CUDNN_DEFAULT_MATH`` in float32, which permits TF32 tensor-core math on
Ampere and later (PyTorch's default, ``allow_tf32=True``, is the same setting; ``CUDNN_TENSOR_OP_MATH`` is not
among the math types documented for FLOAT data, so ``test_gpu.py`` only records whether cuDNN takes it), so
the TF32 divergence is measured and shown rather than hidden inside a loose tolerance; ``cudnn-persist`` with the
documented math through ``CUDNN_RNN_ALGO_PERSIST_STATIC``, whose kernels compute tanh and the sigmoid with an
approximation (``reports/gpu/nvidia-h200-cudnn9.19.0/probes.md``), judged by a budget of its own."""

from __future__ import annotations

from ..config import BIAS_MODE_NAMES, Case, GradOutputs, Outputs, RNNConfig
from ..run import forward_case, packed_like, padded
from .base import Capabilities, Peer

_NOTES = (("mode", "cuDNN has only the reset-after GRU; the textbook GRU is the reference's"),)


class CudnnPeer(Peer):
    needs_gpu = True

    def __init__(self, name: str, math_type: str | None, dtypes: tuple[str, ...], algo: str = "standard") -> None:
        self.name, self.math_type, self.algo = name, math_type, algo
        self.tf32 = math_type == "default"  # cuDNN's default math: TF32 tensor cores for float32 on Ampere and later
        notes = _NOTES + ((("dtype", "TF32 exists only for float32 data"),) if math_type == "default" else ())
        if algo != "standard":
            notes += (("projection", "cuDNN runs a recurrent projection with the standard algorithm only"),
                      ("dtype", "cuDNN runs float64 with the standard and persist_dynamic algorithms only"))
        self.capabilities = Capabilities(modes=("relu", "tanh", "lstm", "gru"), dtypes=dtypes, notes=notes,
                                         projection=algo == "standard", bias_modes=BIAS_MODE_NAMES,
                                         padding_fill=True, cell_clip=True, packed=True)

    def available(self) -> tuple[bool, str]:
        import cudnn_backend

        return cudnn_backend.available()

    def _forward(self, cfg: RNNConfig, case: Case, training: bool):
        import cudnn_backend

        model = cfg.model(models=cudnn_backend.MODELS, math_type=self.math_type, algo=self.algo)
        return model, forward_case(model, cfg, case, training)

    def forward(self, cfg: RNNConfig, case: Case) -> Outputs:
        import cupy

        model, fwd = self._forward(cfg, case, training=False)
        model.close()
        return Outputs(padded(cfg, fwd.output, cupy.asnumpy),
                       *(None if a is None else cupy.asnumpy(a) for a in fwd[1:3]))

    def backward(self, cfg: RNNConfig, case: Case) -> GradOutputs:
        model, fwd = self._forward(cfg, case, training=True)
        result = gradients(cfg, model, model.backward(fwd, packed_like(cfg, case, case.dy), case.dh, case.dc))
        model.close()
        return result


def gradients(cfg: RNNConfig, model, grads) -> GradOutputs:
    """A cuDNN model's ``Gradients`` as NumPy ``GradOutputs``, the parameter gradient repacked in the
    reference's opaque layout through the canonical tensors."""
    import cupy

    weights, biases = model.params_to_canonical(grads.params)
    d_params = cfg.model().canonical_to_params([cupy.asnumpy(w) for w in weights], [cupy.asnumpy(b) for b in biases])
    return GradOutputs(padded(cfg, grads.input, cupy.asnumpy),
                       *(None if a is None else cupy.asnumpy(a) for a in grads[1:3]), d_params)
