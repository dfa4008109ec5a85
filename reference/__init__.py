"""Pure-NumPy reference of cuDNN's recurrent networks (relu/tanh RNN, LSTM, GRU) and the textbook GRU.

Imports NumPy only. The public names are documented in ``docs/api.md``; see ``reference.model`` for semantics.
"""

from .layout import BIAS_MODES, Region
from .packing import PackedSequence, pack, unpack
from .streaming import BoundRNN, Stream
from .model import (
    ClassicGRU,
    CudnnGRU,
    CudnnLSTM,
    CudnnRNNRelu,
    CudnnRNNTanh,
    ForwardResult,
    Gradients,
    MODELS,
    Reserve,
    make_model,
)

__all__ = [
    "BIAS_MODES",
    "BoundRNN",
    "Stream",
    "ClassicGRU",
    "CudnnGRU",
    "CudnnLSTM",
    "CudnnRNNRelu",
    "CudnnRNNTanh",
    "ForwardResult",
    "Gradients",
    "MODELS",
    "PackedSequence",
    "Region",
    "Reserve",
    "make_model",
    "pack",
    "unpack",
]
