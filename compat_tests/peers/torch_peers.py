"""PyTorch's ``nn.RNN`` / ``nn.LSTM`` / ``nn.GRU``: on the CPU (``torch-cpu``) and on a CUDA GPU through
PyTorch's own cuDNN path (``torch-cuda``, a second GPU opinion next to ``cudnn``).

Gate orders coincide with cuDNN's (GRU r,z,n; LSTM i,f,g,o), so ``weight_ih_l{k}`` is the canonical input
matrices stacked, ``weight_hh_l{k}`` the recurrent ones, ``bias_ih``/``bias_hh`` the two bias sets and
``weight_hr_l{k}`` the projection. PyTorch keeps states ``[L*D, B, H]`` even with ``batch_first``; the
adapter transposes them for batch-major configs. Sequence lengths go through packed sequences.

float16 runs on the CPU in torch 2.13 and stays within the float16 budget, though with up to 3x the
reference's error on GRUs (0.75 vs 0.26 conditioned eps on a 16-unit GRU, T=20): PyTorch's CPU path
rounds more intermediates to half precision than cuDNN's HALF-data/FLOAT-math contract does.
``torch-cuda`` runs with TF32 disabled (``torch.backends.cudnn.allow_tf32 = False``), i.e. true FP32;
``torch-cuda-tf32`` with PyTorch's default, TF32 allowed (float32 only), judged by the TF32 budget.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

import reference
from reference.formats.torch import from_state_dict, to_state_dict

from ..config import Case, GradOutputs, Outputs, RNNConfig
from ..run import padded
from .base import Capabilities, Peer

_CAPABILITIES = Capabilities(
    modes=("relu", "tanh", "lstm", "gru"),
    skip_input=False,
    bias_modes=("double", "none"),
    padding_fill=True,  # pad_packed_sequence(padding_value=...)
    packed=True,  # a PackedSequence made of reference.pack's data and batch_sizes
    notes=(
        ("mode", "PyTorch has only the cuDNN (reset-after) GRU, no textbook GRU"),
        ("bias_mode", "PyTorch's modules have both biases of every gate (bias=True) or none (bias=False), "
                      "never one set"),
        ("skip_input", "PyTorch has no skip_input mode"),
        ("cell_clip", "PyTorch's nn.LSTM has no cell clipping (its cuDNN path never calls cudnnRNNSetClip)"),
    ),
)


_TF32_CAPABILITIES = dataclasses.replace(
    _CAPABILITIES, dtypes=("float32",),
    notes=_CAPABILITIES.notes + (("dtype", "TF32 math reads float32 GEMM operands: float32 only"),))


class TorchPeer(Peer):
    capabilities = _CAPABILITIES

    def __init__(self, name: str, device: str, tf32: bool = False) -> None:
        """``tf32``: PyTorch's default on a GPU, ``torch.backends.cudnn.allow_tf32`` (and matmul's) left on."""
        self.name, self.device, self.needs_gpu, self.tf32 = name, device, device == "cuda", tf32
        if tf32:
            self.capabilities = _TF32_CAPABILITIES

    def available(self) -> tuple[bool, str]:
        try:
            import torch
        except ImportError as exc:  # pragma: no cover - depends on the environment
            return False, f"torch is not installed ({exc})"
        if self.device == "cuda":
            if not torch.cuda.is_available():
                return False, f"torch {torch.__version__} sees no CUDA GPU"
            if not torch.backends.cudnn.is_available():
                return False, f"torch {torch.__version__} has no cuDNN"
            return True, (f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
                          f"{torch.cuda.get_device_name()}")
        return True, f"torch {torch.__version__}"

    def forward(self, cfg: RNNConfig, case: Case) -> Outputs:
        import torch

        with torch.no_grad():
            run = _Run(cfg, case, requires_grad=False, device=self.device, tf32=self.tf32)
        return Outputs(run.sequence(run.y), *(None if a is None else _numpy(cfg, a, True) for a in (run.h, run.c)))

    def backward(self, cfg: RNNConfig, case: Case) -> GradOutputs:
        """Autograd of ``sum(y * dy) + sum(h_n * dh) + sum(c_n * dc)``: the gradients cuDNN's backward returns."""
        run = _Run(cfg, case, requires_grad=True, device=self.device, tf32=self.tf32)
        dy = reference.pack(case.dy, case.lengths).data if cfg.packed else case.dy
        loss = (run.y * _tensor(cfg, dy, False, self.device)).sum() + \
            (run.h * _tensor(cfg, case.dh, True, self.device)).sum()
        if run.c is not None:
            loss = loss + (run.c * _tensor(cfg, case.dc, True, self.device)).sum()
        loss.backward()
        model = cfg.model()
        grads = {name: p.grad.cpu().numpy() for name, p in run.module.named_parameters()}
        d_params = model.canonical_to_params(*from_state_dict(model, grads))
        return GradOutputs(run.sequence(run.x.grad), _numpy(cfg, run.h0.grad, True),
                           None if run.c0 is None else _numpy(cfg, run.c0.grad, True), d_params)


def _tensor(cfg: RNNConfig, a: np.ndarray, is_state: bool, device: str = "cpu"):
    """A NumPy array of the config's layout as a torch tensor of torch's (states are never batch-first)."""
    import torch

    a = np.ascontiguousarray(a.transpose(1, 0, 2)) if is_state and not cfg.time_major else a
    return torch.from_numpy(a).to(device)


def _numpy(cfg: RNNConfig, t, is_state: bool) -> np.ndarray:
    a = t.detach().cpu().numpy()
    return np.ascontiguousarray(a.transpose(1, 0, 2)) if is_state and not cfg.time_major else a


class _Run:
    """One forward pass of ``case`` through an ``nn.RNN``/``LSTM``/``GRU`` holding the canonical weights (or
    ``state_dict``, torch tensors by name as ``torch.load`` gives them, loaded instead). ``x`` and ``y`` are
    padded sequences, or a packed config's packed data (``batch_sizes`` beside them; ``None`` otherwise)."""

    def __init__(self, cfg: RNNConfig, case: Case, requires_grad: bool, device: str,
                 state_dict: dict | None = None, tf32: bool = False) -> None:
        import torch

        torch.set_num_threads(1)  # OpenBLAS and torch's pools spin against each other on 2 cores
        torch.backends.cudnn.allow_tf32 = tf32  # torch-cuda: true FP32, judged by the FP32 budget (tf32: TF32's)
        torch.backends.cuda.matmul.allow_tf32 = tf32
        dtype = getattr(torch, cfg.dtype)
        self.module = _module(cfg, dtype)
        if state_dict is None:
            state = to_state_dict(cfg.model(), case.weights, case.biases)
            state_dict = {k: torch.from_numpy(v) for k, v in state.items()}
        self.module.load_state_dict(state_dict)
        self.module.to(device)

        def state(a: np.ndarray | None, width: int):
            if a is None:
                a = np.zeros((cfg.num_layers * cfg.num_dirs, cfg.batch, width), cfg.dtype)
                return torch.from_numpy(a).to(device).requires_grad_(requires_grad)
            return _tensor(cfg, a, True, device).clone().requires_grad_(requires_grad)

        self.cfg, self.batch_sizes = cfg, None
        x = case.x
        if cfg.packed:
            x, self.batch_sizes = reference.pack(case.x, case.lengths)
        self.x = torch.from_numpy(x).to(device).clone().requires_grad_(requires_grad)
        self.h0 = state(case.h0, cfg.state_width)
        self.c0 = state(case.c0, cfg.num_units) if cfg.has_cell_state else None
        hx = self.h0 if self.c0 is None else (self.h0, self.c0)
        batch_first = not cfg.time_major
        with warnings.catch_warnings():  # "LSTM with projections is not supported with oneDNN": expected
            warnings.filterwarnings("ignore", "LSTM with projections is not supported with oneDNN")
            if cfg.packed:  # the packed layout as reference.pack makes it, handed to torch as it is
                sizes = torch.from_numpy(np.array(self.batch_sizes))
                y, states = self.module(torch.nn.utils.rnn.PackedSequence(self.x, sizes), hx)
                self.y = y.data
            elif case.lengths is None:
                self.y, states = self.module(self.x, hx)
            else:
                packed = torch.nn.utils.rnn.pack_padded_sequence(
                    self.x, torch.from_numpy(case.lengths), batch_first=batch_first, enforce_sorted=False)
                y, states = self.module(packed, hx)
                self.y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=batch_first,
                                                                   padding_value=cfg.padding_fill,
                                                                   total_length=cfg.seq_len)
        self.h, self.c = states if cfg.has_cell_state else (states, None)

    def sequence(self, t) -> np.ndarray:
        """A tensor laid out as ``x`` or ``y`` (or their gradients) as a padded NumPy sequence of the config's
        layout (zeros past each length of a packed one)."""
        a = t.detach().cpu().numpy()
        return a if self.batch_sizes is None else padded(self.cfg, reference.PackedSequence(a, self.batch_sizes))


# mode -> (torch class name, extra constructor arguments)
_MODULES = {
    "relu": ("RNN", {"nonlinearity": "relu"}),
    "tanh": ("RNN", {"nonlinearity": "tanh"}),
    "lstm": ("LSTM", {}),
    "gru": ("GRU", {}),
}


def _module(cfg: RNNConfig, dtype):
    import torch

    name, extra = _MODULES[cfg.mode]
    if cfg.num_proj:
        extra = {**extra, "proj_size": cfg.num_proj}
    return getattr(torch.nn, name)(cfg.input_size, cfg.num_units, num_layers=cfg.num_layers,
                                   bias=cfg.bias_mode != "none",
                                   batch_first=not cfg.time_major, bidirectional=cfg.num_dirs == 2,
                                   dtype=dtype, **extra)
