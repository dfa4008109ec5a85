"""Keras 3 layer weights (NumPy arrays): ``GRU(reset_after=True)`` for the cuDNN GRU, ``GRU(reset_after=
False)`` for the textbook GRU, ``LSTM`` and ``SimpleRNN``; one weight list per pseudo-layer, in the order a
stack of (``Bidirectional``) layers lists them: forward layer, then backward layer, layer by layer.

Keras stores ``kernel [in, G*H]`` and ``recurrent_kernel [H, G*H]`` (transposed), orders GRU gates
**z, r, h** (cuDNN: r, z, h) and LSTM gates i, f, c, o (as cuDNN). ``GRU(reset_after=True)`` keeps both
bias sets as ``bias [2, 3H]`` (row 0 input, row 1 recurrent); ``LSTM``, ``SimpleRNN`` and the textbook
``GRU`` have one summed bias, restored as two halves. A layer with ``use_bias=False`` has no bias weight:
``bias_mode="none"`` (its weights are ``[kernel, recurrent_kernel]``; read into a model with biases, zero
biases). Keras has no single bias modes, no LSTM projection and no skip_input.

tf.keras 2's GPU-only ``CuDNNLSTM`` and ``CuDNNGRU`` layers (``CUDNN_LAYERS``) hand their weights to cuDNN as
they are: ``kernel [in, G*H]`` and ``recurrent_kernel [H, G*H]`` in Keras's gate order, each gate's block
read by cuDNN as its ``[H, in]`` (``[H, H]``) matrix in row-major order (a reshape, not a transpose: Keras 2
calls it the Fortran layout), and ``bias [2*G*H]``: the input biases, then the recurrent ones, both kept
(``cudnn_layout=True``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .canonical import (PseudoLayerTensors, by_pseudo_layer, check_bias_mode, check_cell_clip, check_fits, check_layers,
                        check_model, check_tensor, flatten, zeros)
from .tf import halves

ORDER = {"relu": (0,), "tanh": (0,), "lstm": (0, 1, 2, 3), "gru": (1, 0, 2), "classic_gru": (1, 0, 2)}
# mode -> (Keras layer class, the constructor arguments that make it compute that mode)
KERAS_LAYERS = {"relu": ("SimpleRNN", {"activation": "relu"}), "tanh": ("SimpleRNN", {}), "lstm": ("LSTM", {}),
                "gru": ("GRU", {"reset_after": True}), "classic_gru": ("GRU", {"reset_after": False})}
# tf.keras 2's layers that run on cuDNN alone (tf.compat.v1.keras.layers) and the mode each computes
CUDNN_LAYERS = {"CuDNNLSTM": "lstm", "CuDNNGRU": "gru"}
# the same as the call that makes the layer, for messages: "GRU(reset_after=True)"
LAYERS = {mode: cls + (f"({', '.join(f'{k}={v!r}' for k, v in options.items())})" if options else "")
          for mode, (cls, options) in KERAS_LAYERS.items()}


HELD = ("double", "none")  # use_bias=True, use_bias=False


def _supported(model) -> None:
    check_model(model)
    check_bias_mode(model, "Keras's weights", HELD)
    check_cell_clip(model, "Keras's weights")
    if model.num_proj:
        raise ValueError("Keras LSTM has no projection")
    if model.input_mode == "skip_input":
        raise ValueError("Keras has no skip_input mode")


def to_keras(model, weights: list[np.ndarray], biases: list[np.ndarray]) -> list[list[np.ndarray]]:
    """``[kernel, recurrent_kernel, bias]`` per pseudo-layer (``[kernel, recurrent_kernel]`` under
    ``bias_mode="none"``: a layer with ``use_bias=False``)."""
    _supported(model)
    order = ORDER[model.rnn_mode]
    layers = []
    for t in by_pseudo_layer(model, weights, biases):
        kernel = np.concatenate([t.W[g] for g in order]).T
        recurrent = np.concatenate([t.R[g] for g in order]).T
        layers.append([np.ascontiguousarray(kernel), np.ascontiguousarray(recurrent)])
        if t.b_W is not None:
            b_in, b_rec = np.concatenate([t.b_W[g] for g in order]), np.concatenate([t.b_R[g] for g in order])
            layers[-1].append(np.stack([b_in, b_rec]) if model.rnn_mode == "gru" else b_in + b_rec)
    return layers


def from_keras(model, layers: list[list[np.ndarray]], gradients: bool = False,
               cudnn_layout: Sequence[bool] | None = None) -> tuple[list, list]:
    """The canonical lists of ``model`` from per-pseudo-layer Keras weights; errors name the weight.

    ``gradients``: ``layers`` hold the gradients of Keras's weights, so a summed bias's gradient is the
    gradient of each of its two canonical parts (rather than split in halves). ``cudnn_layout[pl]``: pseudo-layer
    ``pl``'s weights are a ``CuDNNLSTM``'s or ``CuDNNGRU``'s (``CUDNN_LAYERS``), in cuDNN's layout."""
    _supported(model)
    check_layers("layers", layers, Sequence, "list of Keras weights (one Keras layer's, a direction)")
    check_fits(model, sum(np.size(a) for layer in layers for a in layer), "the Keras weights")
    expected = to_keras(model, *zeros(model))
    if len(layers) != len(expected):
        raise ValueError(f"{model!r} has {len(expected)} Keras layers (directions), got {len(layers)}")
    cudnn_layout = [False] * len(layers) if cudnn_layout is None else list(cudnn_layout)
    if len(cudnn_layout) != len(layers):
        raise ValueError(f"cudnn_layout must have one flag per Keras layer (direction), {len(layers)}, got "
                         f"{len(cudnn_layout)}")
    if any(cudnn_layout) and model.rnn_mode not in CUDNN_LAYERS.values():
        raise ValueError(f"{model!r}: only {' and '.join(CUDNN_LAYERS)} weights come in cuDNN's layout")
    if any(cudnn_layout) and model.bias_mode == "none":
        raise ValueError(f"{model!r}: {' and '.join(CUDNN_LAYERS)} layers always have biases, not bias_mode 'none'")
    biased = model.bias_mode != "none"
    order, H = ORDER[model.rnn_mode], model.num_units
    groups = []
    for pl, (got, want, cudnn) in enumerate(zip(layers, expected, cudnn_layout)):
        what = f"{_cudnn_class(model.rnn_mode)} of {model!r}" if cudnn else f"{LAYERS[model.rnn_mode]} of {model!r}"
        if cudnn:  # always with both bias sets, one after the other
            want = [want[0], want[1], np.zeros(2 * want[0].shape[1], model.dtype)]
        elif biased and len(got) == 2:  # use_bias=False in a model with biases: zero biases, the same function
            got = [*got, np.zeros(want[2].shape, model.dtype)]
        if len(got) != len(want):
            expecting = ("[kernel, recurrent_kernel, bias]" + (f" (a {what} always has a bias)" if cudnn else
                                                                " (or, without bias, [kernel, recurrent_kernel])")
                         if biased else "[kernel, recurrent_kernel] (use_bias=False: bias_mode 'none')")
            raise ValueError(f"layer {pl}: expecting {expecting}, got {len(got)} weights")
        for name, a, b in zip(("kernel", "recurrent_kernel", "bias"), got, want):
            check_tensor(f"layer {pl} {name}", a, model.dtype, b.shape, what)
        kernel, recurrent, bias = got if biased else (*got, None)
        if not biased:
            b_in = b_rec = None
        elif cudnn:
            b_in, b_rec = bias[: bias.shape[0] // 2], bias[bias.shape[0] // 2 :]
        elif model.rnn_mode == "gru":  # both bias sets, as rows
            b_in, b_rec = bias
        else:  # one summed bias: its gradient is each part's; weights are split in two halves
            b_in, b_rec = (bias, bias) if gradients else halves(bias)
        W, R, bW, bR = ([None] * len(order) for _ in range(4))
        for k, g in enumerate(order):
            block = slice(k * H, (k + 1) * H)
            if cudnn:  # each block's row-major elements are cuDNN's matrix
                W[g], R[g] = kernel[:, block].reshape(H, -1).copy(), recurrent[:, block].copy()
            else:
                W[g], R[g] = kernel[:, block].T.copy(), recurrent[:, block].T.copy()
            if biased:
                bW[g], bR[g] = b_in[block].copy(), b_rec[block].copy()
        groups.append(PseudoLayerTensors(W=W, R=R, b_W=bW if biased else None, b_R=bR if biased else None, P=None))
    return flatten(model, groups)


def _cudnn_class(mode: str) -> str:
    return next(cls for cls, m in CUDNN_LAYERS.items() if m == mode)
