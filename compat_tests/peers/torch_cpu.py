"""PyTorch on the CPU (``nn.RNN`` / ``nn.LSTM`` / ``nn.GRU``): the cuDNN GRU variant, packed sequences.

Gate orders coincide with cuDNN's (GRU r,z,n; LSTM i,f,g,o), so ``weight_ih_l{k}`` is the canonical input
matrices stacked, ``weight_hh_l{k}`` the recurrent ones, ``bias_ih``/``bias_hh`` the two bias sets and
``weight_hr_l{k}`` the projection. PyTorch keeps states ``[L*D, B, H]`` even with ``batch_first``; the
adapter transposes them for batch-major configs.

float16 runs on the CPU in torch 2.13 and stays within the float16 budget, though with up to 3x the
reference's error on GRUs (0.75 vs 0.26 conditioned eps on a 16-unit GRU, T=20): PyTorch's CPU path
rounds more intermediates to half precision than cuDNN's HALF-data/FLOAT-math contract does.
"""

from __future__ import annotations

import numpy as np

from ..config import Case, Outputs, RNNConfig
from .base import Capabilities, Peer
from .canonical import by_pseudo_layer


class TorchCPU(Peer):
    name = "torch-cpu"
    capabilities = Capabilities(
        modes=("relu", "tanh", "lstm", "gru"),
        skip_input=False,
        notes=(
            ("mode", "PyTorch has only the cuDNN (reset-after) GRU, no textbook GRU"),
            ("skip_input", "PyTorch has no skip_input mode"),
        ),
    )

    def available(self) -> tuple[bool, str]:
        try:
            import torch
        except ImportError as exc:  # pragma: no cover - depends on the environment
            return False, f"torch is not installed ({exc})"
        return True, f"torch {torch.__version__}"

    def forward(self, cfg: RNNConfig, case: Case) -> Outputs:
        import torch

        torch.set_num_threads(1)  # OpenBLAS and torch's pools spin against each other on 2 cores
        dtype = getattr(torch, cfg.dtype)
        module = _module(cfg, dtype)
        model = cfg.model()
        with torch.no_grad():
            for pl, t in enumerate(by_pseudo_layer(model, case.weights, case.biases)):
                layer, direction = divmod(pl, cfg.num_dirs)
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                getattr(module, "weight_ih" + suffix).copy_(torch.from_numpy(np.concatenate(t.W)))
                getattr(module, "weight_hh" + suffix).copy_(torch.from_numpy(np.concatenate(t.R)))
                getattr(module, "bias_ih" + suffix).copy_(torch.from_numpy(np.concatenate(t.b_W)))
                getattr(module, "bias_hh" + suffix).copy_(torch.from_numpy(np.concatenate(t.b_R)))
                if t.P is not None:
                    getattr(module, "weight_hr" + suffix).copy_(torch.from_numpy(t.P))

            def state(a: np.ndarray | None, width: int):
                if a is None:
                    return torch.zeros(cfg.num_layers * cfg.num_dirs, cfg.batch, width, dtype=dtype)
                return torch.from_numpy(a if cfg.time_major else np.ascontiguousarray(a.transpose(1, 0, 2)))

            hx = state(case.h0, cfg.state_width)
            if cfg.has_cell_state:
                hx = (hx, state(case.c0, cfg.num_units))
            x = torch.from_numpy(case.x)
            batch_first = not cfg.time_major
            if case.lengths is None:
                y, states = module(x, hx)
            else:
                packed = torch.nn.utils.rnn.pack_padded_sequence(
                    x, torch.from_numpy(case.lengths), batch_first=batch_first, enforce_sorted=False)
                y, states = module(packed, hx)
                y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=batch_first, total_length=cfg.seq_len)

        h, c = states if cfg.has_cell_state else (states, None)

        def back(a):
            a = a.numpy()
            return a if cfg.time_major else np.ascontiguousarray(a.transpose(1, 0, 2))

        return Outputs(y.numpy(), back(h), None if c is None else back(c))


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
    return getattr(torch.nn, name)(cfg.input_size, cfg.num_units, num_layers=cfg.num_layers, bias=True,
                                   batch_first=not cfg.time_major, bidirectional=cfg.num_dirs == 2,
                                   dtype=dtype, **extra)
