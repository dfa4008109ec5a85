"""Stacks that are not one cuDNN stack, run as a chain of one-layer models.

A TensorFlow 1 ``MultiRNNCell`` may stack cells of several sizes (512, 256, 128 units); a cuDNN stack's layers
are all alike, so such a checkpoint is no one model (``reference.formats.tf.UnevenLayers``). Each of its layers
is a one-layer model, though, and the stack is those models one after another, each reading the one before's
output and keeping its own states: :class:`Chain`, which :func:`load_chain` reads from a checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import checkpoint, checks, packing
from .modes import MODES
from .formats import tf


@dataclass
class ChainResult:
    """What a :class:`Chain` computes: the last layer's ``output``, and each layer's final states (a list with
    one array per layer, ``[D, B, H_layer]``, or ``[B, D, H_layer]`` batch-major; ``output_c`` ``None`` but for
    LSTMs)."""

    output: np.ndarray
    output_h: list[np.ndarray]
    output_c: list[np.ndarray] | None


class Chain:
    """One-layer models (``reference.checkpoint.Checkpoint`` s: model and canonical weights) run one after
    another, as the stack of layers of different sizes they were read from."""

    def __init__(self, layers: list) -> None:
        if not layers:
            raise ValueError("a chain needs at least one layer")
        for k, (before, after) in enumerate(zip(layers, layers[1:])):
            width = before.model.num_dirs * before.model.state_width
            if after.model.input_size != width:
                raise ValueError(f"layer {k + 1} reads {after.model.input_size} inputs, but layer {k} writes {width}")
        self.layers = list(layers)
        self.models = [layer.model for layer in layers]

    def __repr__(self) -> str:
        return "Chain(" + ", ".join(map(repr, self.models)) + ")"

    @property
    def input_size(self) -> int:
        return self.models[0].input_size

    @property
    def dtype(self) -> np.dtype:
        return self.models[0].dtype

    def forward(self, x: np.ndarray, initial_h: list | None = None, initial_c: list | None = None,
                sequence_lengths=None, time_major: bool = True, *, padding_fill: float = 0.0) -> ChainResult:
        """Each layer on the one before's output, from its own initial states (``initial_h[k]``, ``initial_c[k]``
        in that layer's shape; ``None``: zeros); inference. ``padding_fill``: the last layer's output past each
        length (the layers before pad with zeros, which no layer reads). A packed ``x``
        (:class:`reference.PackedSequence`) runs packed through every layer."""
        n = len(self.layers)
        checks.padding_fill(padding_fill, self.dtype)  # before the first layer runs
        for name, given in (("initial_h", initial_h), ("initial_c", initial_c)):
            if given is not None and len(given) != n:
                raise ValueError(f"{name} must hold one state per layer, {n}, got {len(given)}")
        B = None  # every layer's states checked before the first layer runs (x: by the first layer)
        if isinstance(x, packing.PackedSequence):
            B = int(packing.check_batch_sizes("x.batch_sizes", x.batch_sizes)[0])
        elif np.ndim(x) == 3:
            B = np.shape(x)[1 if time_major else 0]
        if B is not None:
            for k, model in enumerate(self.models):
                for name, given, width in (("initial_h", initial_h, model.state_width),
                                           ("initial_c", initial_c, model.num_units)):
                    if given is None or given[k] is None:
                        continue
                    label = f"{name}[{k}]"
                    if name == "initial_c" and not MODES[model.rnn_mode].has_cell_state:
                        checks.no_cell_state(label, given[k], model.rnn_mode)
                    doc = "[D, B, H]" if time_major else "[B, D, H]"
                    checks.array(label, given[k], model.dtype, 3, doc)
                    D = model.num_dirs
                    checks.shape(label, given[k], (D, B, width) if time_major else (B, D, width), doc)
        y, hs, cs = x, [], []
        for k, layer in enumerate(self.layers):
            model = layer.model
            result = model.forward(y, None if initial_h is None else initial_h[k],
                                   model.canonical_to_params(layer.weights, layer.biases),
                                   input_c=None if initial_c is None else initial_c[k], is_training=False,
                                   sequence_lengths=sequence_lengths, time_major=time_major,
                                   padding_fill=padding_fill if k == n - 1 else 0.0)
            y = result.output
            hs.append(result.output_h)
            cs.append(result.output_c)
        return ChainResult(y, hs, cs if cs[0] is not None else None)


def layer_count(path: str | Path, overrides: dict | None = None) -> int | None:
    """The number of layers of the TF-named checkpoint at ``path`` where they differ in size (``None``: they do
    not, it is one model)."""
    try:
        checkpoint.load(path, overrides)
    except ValueError as exc:
        uneven = exc.__cause__ if isinstance(exc.__cause__, tf.UnevenLayers) else exc
        if isinstance(uneven, tf.UnevenLayers):
            return len(uneven.sizes)
        raise
    return None


def load_chain(path: str | Path, overrides: dict | None = None) -> Chain:
    """The TF-named checkpoint at ``path`` (see ``reference.checkpoint.load``; ``overrides`` as there) as a
    :class:`Chain`: one model per layer where its layers differ in size, else the one model it is."""
    overrides = dict(overrides or {})
    if overrides.get("layer") is not None:
        raise ValueError("a chain is read from every layer: give no layer")
    count = layer_count(path, overrides)
    if count is None:
        return Chain([checkpoint.load(path, overrides)])
    return Chain([checkpoint.load(path, {**overrides, "layer": k}) for k in range(count)])
