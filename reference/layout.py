"""Canonical shapes and the opaque parameter layout, kept in one place so a GPU test can compare them.

Vocabulary (cuDNN's): a *pseudo-layer* is one direction of one layer, ``pseudo_layer = layer * num_dirs +
dir``; a *lin layer* is one matrix/bias pair inside it, numbered by ``lin_layer_id``: ``0..G-1`` act on the
layer input, ``G..2G-1`` on the recurrent state, and ``8`` is the LSTM projection (matrix only).

The canonical order (TensorFlow's ``CudnnRNNParamsToCanonical``) lists every weight of every
pseudo-layer (lin layers in id order, the projection last), then every bias in the same order.

The opaque order is cuDNN's weight space as ``cudnnGetRNNWeightParams`` reports it. What the reference
assumes about it (:func:`_opaque_order`) is the research notes' reading of cuDNN 9, UNCONFIRMED on a GPU:
all matrices of all pseudo-layers first, then all biases, no padding. The GPU suite compares
:func:`opaque_layout` with cuDNN region by region; change this module, nothing else, if they differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

PROJECTION_LIN_LAYER_ID = 8

# With SKIP_INPUT cuDNN applies no input GEMM in layer 0, so the layer-0 input matrices do not exist.
# Whether the layer-0 input *biases* exist is not documented: the cuDNN 9 header calls skip mode a "fixed
# identity matrix ... (no operation)", read here as "no input bias either". UNCONFIRMED: the GPU layout
# test settles it (cudnnGetRNNWeightParams returns a NULL bias address when they do not exist).
SKIP_INPUT_HAS_LAYER0_INPUT_BIASES = False


class Region(NamedTuple):
    """One tensor of the opaque buffer.

    ``offset`` is in elements; ``shape`` is ``(rows, cols)`` (row-major) for a matrix, ``(n,)`` for a bias.
    """

    kind: str  # "weight" | "bias"
    pseudo_layer: int
    lin_layer_id: int
    offset: int
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(map(int, self.shape))


@dataclass(frozen=True)
class LayoutSpec:
    """The configuration that fixes the parameter layout."""

    num_gates: int
    num_layers: int
    num_dirs: int
    num_units: int
    input_size: int
    num_proj: int | None
    skip_input: bool

    @property
    def state_width(self) -> int:
        """Width of the recurrent state h (and of each direction's output): num_proj or num_units."""
        return self.num_proj or self.num_units

    def input_width(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.num_dirs * self.state_width

    def has_input_params(self, layer: int, kind: str) -> bool:
        if layer > 0 or not self.skip_input:
            return True
        return kind == "bias" and SKIP_INPUT_HAS_LAYER0_INPUT_BIASES


def _canonical_entries(spec: LayoutSpec) -> list[tuple[str, int, int, tuple[int, ...]]]:
    """(kind, pseudo_layer, lin_layer_id, shape) in canonical order."""
    G, H, Hr = spec.num_gates, spec.num_units, spec.state_width
    weights, biases = [], []
    for pseudo_layer in range(spec.num_layers * spec.num_dirs):
        layer = pseudo_layer // spec.num_dirs
        for lin in range(2 * G):
            on_input = lin < G
            if not on_input or spec.has_input_params(layer, "weight"):
                width = spec.input_width(layer) if on_input else Hr
                weights.append(("weight", pseudo_layer, lin, (H, width)))
            if not on_input or spec.has_input_params(layer, "bias"):
                biases.append(("bias", pseudo_layer, lin, (H,)))
        if spec.num_proj is not None:
            weights.append(("weight", pseudo_layer, PROJECTION_LIN_LAYER_ID, (spec.num_proj, H)))
    return weights + biases


def _opaque_order(entry: tuple[str, int, int, tuple[int, ...]]) -> tuple[int, int, int]:
    """Sort key of cuDNN's weight space: matrices before biases, then pseudo-layer, then lin layer id."""
    kind, pseudo_layer, lin, _ = entry
    return (0 if kind == "weight" else 1, pseudo_layer, lin)


def canonical_layout(spec: LayoutSpec) -> list[Region]:
    """Every region, in canonical order, each with its offset in the opaque buffer."""
    entries = _canonical_entries(spec)
    offsets: dict[tuple[str, int, int], int] = {}
    offset = 0
    for kind, pseudo_layer, lin, shape in sorted(entries, key=_opaque_order):
        offsets[(kind, pseudo_layer, lin)] = offset
        offset += math.prod(map(int, shape))
    return [Region(k, p, i, offsets[(k, p, i)], s) for k, p, i, s in entries]


def opaque_layout(spec: LayoutSpec) -> list[Region]:
    """Every region in buffer order (what ``cudnnGetRNNWeightParams`` reports)."""
    return sorted(canonical_layout(spec), key=lambda r: r.offset)


def params_size(spec: LayoutSpec) -> int:
    """Elements in the opaque buffer: the sum of the canonical sizes (cuDNN padding is UNCONFIRMED)."""
    return sum(r.size for r in canonical_layout(spec))


def pack(regions: Sequence[Region], tensors: Sequence[np.ndarray], size: int, dtype: np.dtype) -> np.ndarray:
    """Write canonical tensors (already validated) into a fresh opaque buffer."""
    params = np.zeros(size, dtype=dtype)
    for region, tensor in zip(regions, tensors):
        params[region.offset : region.offset + region.size] = tensor.reshape(-1)
    return params


def view(params: np.ndarray, region: Region) -> np.ndarray:
    """The region's tensor as a view of ``params`` (1-D buffer), in its canonical shape."""
    return params[region.offset : region.offset + region.size].reshape(region.shape)
