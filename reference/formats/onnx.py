"""ONNX ``GRU`` / ``LSTM`` / ``RNN`` weights per layer (NumPy arrays, no onnx needed): ``W [D, G*H, in]``,
``R [D, G*H, H]``, ``B [D, 2*G*H] = [b_W | b_R]``, directions stacked forward then backward.

ONNX orders GRU gates **z, r, h** (cuDNN r, z, h) and LSTM gates **i, o, f, c** (cuDNN i, f, c, o). The
cuDNN GRU is ``linear_before_reset=1``, the textbook GRU ``linear_before_reset=0``; relu and tanh RNNs
differ only in ``activations``. ONNX has no projection; skip_input's layer 0 (no input matrices, its input
biases as any layer's) is written with identity ``W`` (the same function), which reading checks. A node
without ``B`` has no bias: ``bias_mode="none"`` (ONNX's ``B`` holds both biases of every gate or is absent).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .canonical import (PseudoLayerTensors, by_pseudo_layer, check_bias_mode, check_cell_clip, check_fits, check_layers,
                        check_model, check_tensor, flatten, input_matrices, skipped_input_matrices, zeros)

ORDER = {"relu": (0,), "tanh": (0,), "lstm": (0, 3, 1, 2), "gru": (1, 0, 2), "classic_gru": (1, 0, 2)}
OPS = {"relu": "RNN", "tanh": "RNN", "lstm": "LSTM", "gru": "GRU", "classic_gru": "GRU"}
ATTRIBUTES = {"relu": {"activations": ["Relu"]}, "tanh": {"activations": ["Tanh"]}, "lstm": {},
              "gru": {"linear_before_reset": 1}, "classic_gru": {"linear_before_reset": 0}}
# The activations (one direction's) under which each ONNX op computes a cuDNN mode; any others compute
# another function.
ACTIVATIONS = {"relu": ("Relu",), "tanh": ("Tanh",), "lstm": ("Sigmoid", "Tanh", "Tanh"), "gru": ("Sigmoid", "Tanh"),
               "classic_gru": ("Sigmoid", "Tanh")}


HELD = ("double", "none")  # B, or no B


def to_onnx(model, weights: list[np.ndarray], biases: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
    """``{"W", "R", "B"}`` per layer (``{"W", "R"}`` under ``bias_mode="none"``)."""
    check_model(model)
    check_bias_mode(model, "ONNX's W, R and B", HELD)
    check_cell_clip(model, "ONNX's W, R and B")
    if model.num_proj:
        raise ValueError("ONNX LSTM has no projection")
    order, D = ORDER[model.rnn_mode], model.num_dirs
    groups = by_pseudo_layer(model, weights, biases)
    layers = []
    for layer in range(model.num_layers):
        pls = groups[layer * D:(layer + 1) * D]
        layers.append({
            "W": np.stack([np.concatenate([w[g] for g in order]) for w in (input_matrices(model, t) for t in pls)]),
            "R": np.stack([np.concatenate([t.R[g] for g in order]) for t in pls]),
        })
        if model.bias_mode == "double":
            layers[-1]["B"] = np.stack([np.concatenate([t.b_W[g] for g in order] + [t.b_R[g] for g in order])
                                        for t in pls])
    return layers


def from_onnx(model, layers: list[dict[str, np.ndarray]]) -> tuple[list, list]:
    """The canonical lists of ``model`` from per-layer ``W``/``R``/``B``; errors name the tensor."""
    check_model(model)
    check_bias_mode(model, "ONNX's W, R and B", HELD)
    check_cell_clip(model, "ONNX's W, R and B")
    check_layers("layers", layers, Mapping, "dict of ONNX W, R and B")
    check_fits(model, sum(np.size(a) for layer in layers for a in layer.values()), "the ONNX W, R and B")
    expected = to_onnx(model, *zeros(model))
    if len(layers) != len(expected):
        raise ValueError(f"{model!r} has {len(expected)} ONNX recurrent nodes, got {len(layers)}")
    order, H, D = ORDER[model.rnn_mode], model.num_units, model.num_dirs
    groups = []
    for layer, (got, want) in enumerate(zip(layers, expected)):
        for name, b in want.items():
            if name not in got:
                raise ValueError(f"layer {layer} lacks {name} (expected shape {list(b.shape)}) for {model!r}")
        if set(got) - set(want):
            raise ValueError(f"layer {layer} has {sorted(set(got) - set(want))}, which {model!r} has not")
        for name, b in want.items():
            check_tensor(f"layer {layer} {name}", got[name], model.dtype, b.shape,
                         f"ONNX {OPS[model.rnn_mode]} of {model!r}")
        for d in range(D):
            W, R, bW, bR = ([None] * len(order) for _ in range(4))
            for k, g in enumerate(order):
                block = slice(k * H, (k + 1) * H)
                W[g], R[g] = got["W"][d, block].copy(), got["R"][d, block].copy()
                if "B" in want:
                    bW[g] = got["B"][d, block].copy()
                    bR[g] = got["B"][d, len(order) * H + k * H:len(order) * H + (k + 1) * H].copy()
            groups.append(PseudoLayerTensors(W=skipped_input_matrices(model, layer, W, f"layer {layer} W"), R=R,
                                             b_W=bW if "B" in want else None, b_R=bR if "B" in want else None,
                                             P=None))
    return flatten(model, groups)
