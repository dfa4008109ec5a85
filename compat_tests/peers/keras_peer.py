"""Keras 3 on its torch backend, on the CPU: ``SimpleRNN``, ``LSTM``, ``GRU(reset_after=True)`` (the cuDNN
GRU) and ``GRU(reset_after=False)`` (the textbook GRU), one Keras layer per layer of the config, wrapped in
``Bidirectional`` for two directions; weights through ``reference.formats.keras``.

Keras is batch-major, so time-major configs are transposed at the edge (states are ``[B, H]`` per
direction and layer). Sequence lengths become a mask (``t < length``); Keras carries the state through
masked steps, so the final state is the last valid step's, and with ``zero_output_for_mask=True`` (which
``Bidirectional`` sets itself) padded steps output zeros, cuDNN's semantics. Gradients come from torch
autograd through the Keras layers: the torch backend's variables are ``torch.nn.Parameter``. float16
layers compute in half precision, not cuDNN's float32 math on half storage: a tolerance override with its
measurement (``compat_tests/judge/tolerances.py``).

Not run here: LSTM projection and skip_input (Keras has neither); float64, because Keras 3 computes
``keras.ops.matmul`` of two float64 tensors in float32 on every backend but TensorFlow (``result_type``
maps 64-bit to 32-bit dtypes, JAX's default). ``SimpleRNN`` and ``GRU(reset_after=False)`` always step
through that op, ``LSTM`` and ``GRU(reset_after=True)`` whenever a mask is given (unmasked, the torch
backend runs them in float64), so a float64 Keras RNN is mostly float32-accurate: ledgered in
``compat_tests/judge/known_divergences.py`` and tested by strict xfails.
"""

from __future__ import annotations

import os

import numpy as np

from reference.formats.keras import KERAS_LAYERS, from_keras, to_keras

from ..config import Case, GradOutputs, Outputs, RNNConfig
from .base import Capabilities, Peer

BACKEND = "torch"  # the gradients go through torch autograd


def import_keras():
    """``keras`` on the torch backend (chosen before its first import unless the caller chose already)."""
    os.environ.setdefault("KERAS_BACKEND", BACKEND)
    import keras

    return keras


def keras_layers(cfg: RNNConfig, weights: list[np.ndarray], biases: list[np.ndarray], **options) -> list:
    """One built Keras layer per layer of ``cfg`` (``Bidirectional`` for two directions) holding the canonical
    weights; ``options`` go to each recurrent layer (e.g. ``return_state=True``)."""
    keras = import_keras()
    name, extra = KERAS_LAYERS[cfg.mode]
    options = {"kernel_initializer": "zeros", "recurrent_initializer": "zeros", **extra,  # set below
               "use_bias": cfg.bias_mode != "none", **options}

    def make(units: int, **kw):
        return getattr(keras.layers, name)(units, **options, **kw)

    per_layer = to_keras(cfg.model(), weights, biases)
    layers, width = [], cfg.input_size
    for layer in range(cfg.num_layers):
        if cfg.num_dirs == 1:
            net = make(cfg.num_units, zero_output_for_mask=True, dtype=cfg.dtype)
        else:
            net = keras.layers.Bidirectional(make(cfg.num_units, dtype=cfg.dtype), dtype=cfg.dtype)
        net.build((cfg.batch, cfg.seq_len, width))
        net.set_weights([w for pl in per_layer[layer * cfg.num_dirs:(layer + 1) * cfg.num_dirs] for w in pl])
        layers.append(net)
        width = cfg.num_dirs * cfg.num_units
    return layers


class KerasPeer(Peer):
    name = "keras"
    capabilities = Capabilities(
        dtypes=("float16", "float32"),
        skip_input=False,
        projection=False,
        bias_modes=("double", "none"),
        notes=(
            ("dtype", "Keras 3 computes float64 matmuls in float32 on its torch backend (see "
                      "known_divergences.py)"),
            ("bias_mode", "a Keras layer has both biases of every gate (use_bias=True; summed but for the "
                          "reset-after GRU's) or none (use_bias=False), never one set"),
            ("skip_input", "Keras has no skip_input mode"),
            ("projection", "Keras LSTM has no projection"),
            ("padding_fill", "a masked Keras RNN outputs zeros at masked steps (zero_output_for_mask); no "
                             "layer option sets another value"),
            ("cell_clip", "Keras's LSTM has no cell clipping (TensorFlow 1's LSTMCell(cell_clip=...) had)"),
            ("packed", "a Keras RNN takes a padded batch [batch, timesteps, features] with a mask; it has no "
                       "packed layout"),
        ),
    )

    def available(self) -> tuple[bool, str]:
        try:
            keras = import_keras()
        except ImportError as exc:  # pragma: no cover - depends on the environment
            return False, f"keras (with torch as its backend) is not installed ({exc})"
        if keras.backend.backend() != BACKEND:
            return False, f"keras {keras.__version__} runs on {keras.backend.backend()}, this peer needs {BACKEND}"
        return True, f"keras {keras.__version__} on torch"

    def forward(self, cfg: RNNConfig, case: Case) -> Outputs:
        import torch

        with torch.no_grad():
            return _numpy(cfg, *_run(cfg, case, requires_grad=False)[:3])

    def backward(self, cfg: RNNConfig, case: Case) -> GradOutputs:
        """Autograd of ``sum(y * dy) + sum(h_n * dh) + sum(c_n * dc)``: the gradients cuDNN's backward returns."""
        y, h, c, inputs, layers = _run(cfg, case, requires_grad=True)
        dy, dh, dc = (None if a is None else _batch_major(cfg, a, is_state) for a, is_state in
                      ((case.dy, False), (case.dh, True), (case.dc, True)))
        loss = (y * dy).sum() + (h * dh).sum()
        if c is not None:
            loss = loss + (c * dc).sum()
        loss.backward()
        model = cfg.model()
        grads = [v.value.grad.numpy() for net in layers for v in net.weights]  # per pseudo-layer, in order
        n = 2 if cfg.bias_mode == "none" else 3  # kernel, recurrent_kernel[, bias]
        per_pseudo_layer = [grads[k:k + n] for k in range(0, len(grads), n)]
        d_params = model.canonical_to_params(*from_keras(model, per_pseudo_layer, gradients=True))
        x, h0, c0 = (None if t is None else t.grad for t in inputs)
        d_input, d_h, d_c = _numpy(cfg, x, h0, c0)
        return GradOutputs(d_input, d_h, d_c, d_params)


def _batch_major(cfg: RNNConfig, a: np.ndarray, is_state: bool):
    """A NumPy array of the config's layout as a torch tensor in Keras's: sequences ``[B, T, width]``,
    states ``[L*D, B, width]``."""
    import torch

    if cfg.time_major != is_state:
        a = a.transpose(1, 0, 2)
    return torch.from_numpy(np.ascontiguousarray(a))


def _numpy(cfg: RNNConfig, y, h, c) -> Outputs:
    def back(t, is_state):
        if t is None:
            return None
        a = t.detach().numpy()
        return np.ascontiguousarray(a.transpose(1, 0, 2)) if cfg.time_major != is_state else a

    return Outputs(back(y, False), back(h, True), back(c, True))


def _run(cfg: RNNConfig, case: Case, requires_grad: bool):
    """Forward ``case`` through the Keras stack: ``(y [B, T, D*H], h_n [L*D, B, H], c_n or None, (x, h0, c0)
    leaf tensors, layers)``."""
    import torch

    torch.set_num_threads(1)  # OpenBLAS and torch's pools spin against each other on 2 cores
    layers = keras_layers(cfg, case.weights, case.biases, return_sequences=True, return_state=True)
    LD, B = cfg.num_layers * cfg.num_dirs, cfg.batch

    def leaf(a, is_state, width):
        t = (torch.zeros((LD, B, width), dtype=getattr(torch, cfg.dtype)) if a is None
             else _batch_major(cfg, a, is_state))
        return t.requires_grad_(requires_grad)

    x = leaf(case.x, False, None)
    h0 = leaf(case.h0, True, cfg.num_units)
    c0 = leaf(case.c0, True, cfg.num_units) if cfg.has_cell_state else None
    mask = None
    if case.lengths is not None:
        mask = torch.from_numpy(np.arange(cfg.seq_len)[None, :] < case.lengths[:, None])
    y, h_n, c_n = x, [], []
    for layer, net in enumerate(layers):
        state = []
        for pl in range(layer * cfg.num_dirs, (layer + 1) * cfg.num_dirs):
            state += [h0[pl]] if c0 is None else [h0[pl], c0[pl]]
        y, *final = net(y, mask=mask, initial_state=state)
        per_direction = len(final) // cfg.num_dirs  # Keras returns each direction's states in turn
        for d in range(cfg.num_dirs):
            h_n.append(final[d * per_direction])
            if c0 is not None:
                c_n.append(final[d * per_direction + 1])
    return y, torch.stack(h_n), torch.stack(c_n) if c_n else None, (x, h0, c0), layers
