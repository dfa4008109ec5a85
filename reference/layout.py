"""Canonical shapes and the opaque parameter layout, kept in one place so a GPU test can compare them.

Vocabulary (cuDNN's): a *pseudo-layer* is one direction of one layer, ``pseudo_layer = layer * num_dirs +
dir``; a *lin layer* is one matrix/bias pair inside it, numbered by ``lin_layer_id``: ``0..G-1`` act on the
layer input, ``G..2G-1`` on the recurrent state, and ``8`` is the LSTM projection (matrix only).

The canonical order (TensorFlow's ``CudnnRNNParamsToCanonical``) lists every weight of every
pseudo-layer (lin layers in id order, the projection last), then every bias in the same order: the biases the
model's bias mode (:data:`BIAS_MODES`) has, none invented for those it lacks.

The opaque order is cuDNN's weight space as ``cudnnGetRNNWeightParams`` reports it. What the reference
assumes about it (:func:`_opaque_order`) was the research notes' reading of cuDNN 9, confirmed on NVIDIA
H200 with cuDNN 9.19.0 (``reports/gpu/``: the captures and probe 8, under every bias mode): all matrices of
all pseudo-layers first, then all biases, no padding; where the biases of a single bias mode sit is
:func:`bias_slots`. The GPU suite compares :func:`opaque_layout` with cuDNN region by region;
change this module, nothing else, if they differ.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

PROJECTION_LIN_LAYER_ID = 8

# With SKIP_INPUT cuDNN applies no input GEMM in layer 0, so the layer-0 input matrices do not exist; its
# input biases do (the bias mode's, as in every other layer), and add to the input as under linear_input.
# CONFIRMED on NVIDIA H200, cuDNN 9.19.0 (reports/gpu/nvidia-h200-cudnn9.19.0/capture: cudnnGetRNNWeightParams
# reports lin_layer_ids 0..G-1 of pseudo-layer 0 with a bias and no matrix; probes.md, section 3: b_W is
# added). A finding, no longer a switch: the reference has this behaviour only; the name stays for its readers.
SKIP_INPUT_HAS_LAYER0_INPUT_BIASES = True


class BiasMode(NamedTuple):
    """One ``cudnnRNNBiasMode_t``: its value in cuDNN's enum, and which of a gate's two bias vectors the cell
    equations use: ``input`` (``b_W``, added to the input GEMM ``W x``) and ``recurrent`` (``b_R``, added to
    the recurrent GEMM ``R h``). cuDNN documents these: "rnn cell formulas use one input bias in input GEMM"
    (SINGLE_INP), "... one recurrent bias in recurrent GEMM" (SINGLE_REC), "... two bias vectors" (DOUBLE,
    the default), "... do not use biases" (NO_BIAS)."""

    cudnn: int
    input: bool
    recurrent: bool


BIAS_MODES: dict[str, BiasMode] = {
    "double": BiasMode(2, input=True, recurrent=True),       # CUDNN_RNN_DOUBLE_BIAS: TF, PyTorch, Keras
    "single_inp": BiasMode(1, input=True, recurrent=False),  # CUDNN_RNN_SINGLE_INP_BIAS
    "single_rec": BiasMode(3, input=False, recurrent=True),  # CUDNN_RNN_SINGLE_REC_BIAS: ROOT TMVA
    "none": BiasMode(0, input=False, recurrent=False),       # CUDNN_RNN_NO_BIAS: PyTorch's bias=False
}
"""The bias modes by the name the models take (``bias_mode=``), the default ``"double"`` first."""


class BiasSlot(NamedTuple):
    """One bias vector's place in a pseudo-layer's part of cuDNN's weight space: the ``lin_layer_id`` it is
    reported under, and whether it holds a bias (``present``) or is a hole: room that is neither read nor
    reported (:func:`bias_slots`)."""

    lin_layer_id: int
    present: bool


def bias_slots(bias_mode: str, num_gates: int) -> tuple[BiasSlot, ...]:
    """The bias vectors of one pseudo-layer (of ``num_gates`` gates) in cuDNN's weight space under
    ``bias_mode``, in buffer order: the ONE place that decides where a single mode's biases live.

    What cuDNN documents is which biases the equations use (:data:`BIAS_MODES`). Where they lie it does not
    say. A DECISION, confirmed on NVIDIA H200 with cuDNN 9.19.0 (``cudnnGetRNNWeightParams`` per
    ``lin_layer_id`` under each mode: ``reports/gpu/nvidia-h200-cudnn9.19.0-2/probe8.md``): each bias is
    reported under the lin layer of its own GEMM, ``0..G-1`` for the input biases and ``G..2G-1`` for the
    recurrent ones, as under the double bias; and an absent bias leaves no hole, so a
    single mode's biases are consecutive and ``"none"`` has no bias space at all. The one public user of a
    single mode seen, ROOT TMVA (``SINGLE_REC_BIAS``), writes its biases at ids ``G..2G-1``, takes ``0..G-1``
    to have none, and asserts they start right after the matrices (no room for the absent ones). Were cuDNN
    to keep room for the absent biases, these slots would list them with ``present=False``.
    """
    mode = BIAS_MODES[bias_mode]
    slots = [BiasSlot(lin, mode.input if lin < num_gates else mode.recurrent) for lin in range(2 * num_gates)]
    leave_holes = False  # the decision: an absent bias takes no room
    return tuple(slot for slot in slots if slot.present or leave_holes)


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
    bias_mode: str = "double"

    @property
    def state_width(self) -> int:
        """Width of the recurrent state h (and of each direction's output): num_proj or num_units."""
        return self.num_proj or self.num_units

    def input_width(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.num_dirs * self.state_width

    def has_input_matrices(self, layer: int) -> bool:
        """Whether ``layer`` has input matrices: all but layer 0 of a skip_input network (its input biases
        exist all the same, :data:`SKIP_INPUT_HAS_LAYER0_INPUT_BIASES`)."""
        return layer > 0 or not self.skip_input


def _weight_space_entries(spec: LayoutSpec) -> list[tuple[str, int, int, tuple[int, ...]]]:
    """(kind, pseudo_layer, lin_layer_id, shape) in canonical order, the holes of :func:`bias_slots` among the
    biases as kind ``"hole"``."""
    G, H, Hr = spec.num_gates, spec.num_units, spec.state_width
    weights, biases = [], []
    for pseudo_layer in range(spec.num_layers * spec.num_dirs):
        layer = pseudo_layer // spec.num_dirs
        for lin in range(2 * G):
            on_input = lin < G
            if not on_input or spec.has_input_matrices(layer):
                width = spec.input_width(layer) if on_input else Hr
                weights.append(("weight", pseudo_layer, lin, (H, width)))
        if spec.num_proj is not None:
            weights.append(("weight", pseudo_layer, PROJECTION_LIN_LAYER_ID, (spec.num_proj, H)))
        for lin, present in bias_slots(spec.bias_mode, G):
            biases.append(("bias" if present else "hole", pseudo_layer, lin, (H,)))
    return weights + biases


def _canonical_entries(spec: LayoutSpec) -> list[tuple[str, int, int, tuple[int, ...]]]:
    """(kind, pseudo_layer, lin_layer_id, shape) in canonical order."""
    return [e for e in _weight_space_entries(spec) if e[0] != "hole"]


def _opaque_order(entry: tuple[str, int, int, tuple[int, ...]]) -> tuple[int, int, int]:
    """Sort key of cuDNN's weight space: matrices before biases, then pseudo-layer, then lin layer id."""
    kind, pseudo_layer, lin, _ = entry
    return (0 if kind == "weight" else 1, pseudo_layer, lin)


def canonical_layout(spec: LayoutSpec) -> list[Region]:
    """Every region, in canonical order, each with its offset in the opaque buffer."""
    return list(_layout(spec)[0])


@functools.lru_cache(maxsize=512)
def _layout(spec: LayoutSpec) -> tuple[tuple[Region, ...], int]:
    """The regions in canonical order, and the elements of the whole weight space (holes included). Computed
    once per spec (a frozen dataclass) and kept immutable: every model of one architecture has the same."""
    entries = _weight_space_entries(spec)
    offsets: dict[tuple[str, int, int], int] = {}
    offset = 0
    for kind, pseudo_layer, lin, shape in sorted(entries, key=_opaque_order):
        offsets[(kind, pseudo_layer, lin)] = offset
        offset += math.prod(map(int, shape))
    return tuple(Region(k, p, i, offsets[(k, p, i)], s) for k, p, i, s in entries if k != "hole"), offset


def opaque_layout(spec: LayoutSpec) -> list[Region]:
    """Every region in buffer order (what ``cudnnGetRNNWeightParams`` reports)."""
    return sorted(canonical_layout(spec), key=lambda r: r.offset)


def params_size(spec: LayoutSpec) -> int:
    """Elements in the opaque buffer: the sum of the canonical sizes, and of the holes :func:`bias_slots`
    may leave (none, as decided and as cuDNN 9.19.0 has it: no hole, no padding)."""
    return _layout(spec)[1]


def pack(regions: Sequence[Region], tensors: Sequence[np.ndarray], size: int, dtype: np.dtype) -> np.ndarray:
    """Write canonical tensors (already validated) into a fresh opaque buffer."""
    params = np.zeros(size, dtype=dtype)
    for region, tensor in zip(regions, tensors):
        params[region.offset : region.offset + region.size] = tensor.reshape(-1)
    return params


def view(params: np.ndarray, region: Region) -> np.ndarray:
    """The region's tensor as a view of ``params`` (1-D buffer), in its canonical shape."""
    return params[region.offset : region.offset + region.size].reshape(region.shape)
