"""Canonical tensors grouped per pseudo-layer (and back): the starting point of every other format."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .. import checks
from ..layout import PROJECTION_LIN_LAYER_ID


@dataclass(frozen=True)
class PseudoLayerTensors:
    """One direction of one layer: per-gate matrices and biases in canonical (cuDNN) gate order.

    ``W`` is ``None`` where the layer has no input matrices (skip_input, layer 0: its input biases are there
    all the same); ``b_W``/``b_R`` are ``None`` where the bias mode has no such bias.
    """

    W: list[np.ndarray] | None
    R: list[np.ndarray]
    b_W: list[np.ndarray] | None
    b_R: list[np.ndarray] | None
    P: np.ndarray | None


_MODEL_ATTRIBUTES = ("rnn_mode", "num_layers", "num_dirs", "num_units", "num_proj", "input_mode", "dtype",
                     "canonical_regions", "canonical_shapes")


def check_model(model: object) -> None:
    """``model`` is a model of this project (the reference's, or the cuDNN backend's), else a ``TypeError``."""
    if not all(hasattr(model, a) for a in _MODEL_ATTRIBUTES):
        raise TypeError(f"model must be a model such as reference.CudnnLSTM(...), got {checks.shown(model)} "
                        f"({type(model).__name__})")


def check_bias_mode(model, fmt: str, held: tuple[str, ...] = ("double",)) -> None:
    """Refuse, naming ``bias_mode``, a model of a bias mode that a format (``fmt``) cannot hold: ``held``, the
    modes its reader and writer here hold (``reference.formats.tf`` holds every mode)."""
    mode = getattr(model, "bias_mode", "double")
    if mode not in held:
        kinds = {"double": "both biases of every gate", "none": "no bias", "single_inp": "the input biases only",
                 "single_rec": "the recurrent biases only"}
        raise ValueError(f"bias_mode must be {' or '.join(map(repr, held))} for {fmt}, which holds "
                         f"{' or '.join(kinds[m] for m in held)}; {model!r} has bias_mode {mode!r}")


def check_cell_clip(model, fmt: str) -> None:
    """Refuse, naming ``cell_clip``, a model with a clipped cell state for a format (``fmt``) that cannot say so:
    written there, its weights would run unclipped."""
    if getattr(model, "cell_clip", None) is not None:
        raise ValueError(f"cell_clip {model.cell_clip} cannot be held by {fmt}, whose model has no cell clip: its "
                         f"weights would run unclipped; write our checkpoint format, which carries it")


def check_mapping(name: str, value: object, holds: str) -> None:
    """``value`` is a mapping (``holds`` says of what), else a ``TypeError`` naming it."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict of {holds}, got {type(value).__name__}")


def check_layers(name: str, value: object, kind: type, holds: str) -> None:
    """``value`` is a list (or tuple) of ``kind`` (``holds`` says what each holds), else a ``TypeError``."""
    if isinstance(value, (str, bytes, np.ndarray)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a list with one {holds} per layer, got {type(value).__name__}")
    for i, item in enumerate(value):
        if isinstance(item, (str, bytes, np.ndarray)) or not isinstance(item, kind):
            raise TypeError(f"{name}[{i}] must be a {holds}, got {type(item).__name__}")


def check_canonical(model, weights: Sequence[np.ndarray], biases: Sequence[np.ndarray]) -> None:
    """``weights`` and ``biases`` are ``model``'s canonical lists (``canonical_shapes``, the model's dtype), else
    an error naming the list and its entry."""
    check_model(model)
    for name, tensors, regions in zip(("weights", "biases"), (weights, biases), model.canonical_regions()):
        if isinstance(tensors, np.ndarray) or not isinstance(tensors, Sequence):
            raise TypeError(f"{name} must be a list of {len(regions)} arrays, got {type(tensors).__name__}")
        if len(tensors) != len(regions):
            raise ValueError(f"{name} must hold {len(regions)} tensors for {model!r}, got {len(tensors)}")
        for i, (tensor, region) in enumerate(zip(tensors, regions)):
            what = f"{name}[{i}] (pseudo_layer {region.pseudo_layer}, lin_layer_id {region.lin_layer_id})"
            checks.array(what, tensor, model.dtype, len(region.shape), str(list(region.shape)))
            checks.shape(what, tensor, region.shape, str(list(region.shape)))


def by_pseudo_layer(model, weights: list[np.ndarray], biases: list[np.ndarray]) -> list[PseudoLayerTensors]:
    """Group a model's canonical lists (checked: :func:`check_canonical`) per pseudo-layer
    (``layer * num_dirs + direction``)."""
    check_canonical(model, weights, biases)
    w_regions, b_regions = model.canonical_regions()
    tensors = {(r.kind, r.pseudo_layer, r.lin_layer_id): t
               for r, t in zip(w_regions + b_regions, list(weights) + list(biases))}
    G = len(model.gates)

    def gates(kind: str, pl: int, lin_ids: range) -> list[np.ndarray] | None:
        found = [tensors.get((kind, pl, lin)) for lin in lin_ids]
        return None if found[0] is None else found

    return [
        PseudoLayerTensors(
            W=gates("weight", pl, range(G)), R=gates("weight", pl, range(G, 2 * G)),
            b_W=gates("bias", pl, range(G)), b_R=gates("bias", pl, range(G, 2 * G)),
            P=tensors.get(("weight", pl, PROJECTION_LIN_LAYER_ID)),
        )
        for pl in range(model.num_layers * model.num_dirs)
    ]


def flatten(model, groups: list[PseudoLayerTensors]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The inverse of :func:`by_pseudo_layer`: the model's canonical weight and bias lists."""
    G = len(model.gates)
    found: dict[tuple[str, int, int], np.ndarray] = {}
    for pl, t in enumerate(groups):
        for kind, blocks, first in (("weight", t.W, 0), ("weight", t.R, G), ("bias", t.b_W, 0), ("bias", t.b_R, G)):
            for k, tensor in enumerate(blocks or []):
                found[(kind, pl, first + k)] = tensor
        if t.P is not None:
            found[("weight", pl, PROJECTION_LIN_LAYER_ID)] = t.P
    w_regions, b_regions = model.canonical_regions()
    return ([found[(r.kind, r.pseudo_layer, r.lin_layer_id)] for r in w_regions],
            [found[(r.kind, r.pseudo_layer, r.lin_layer_id)] for r in b_regions])


# Stand-ins (``zeros``) up to this size are made even for a file too small for them: the per-tensor checks
# that follow name what is missing or misshapen, which a count cannot.
STAND_IN_BYTES = 2**28


def check_fits(model, values: int, what: str) -> None:
    """Refuse a model far larger than the file said to hold it before anything of the model's size is made
    (``zeros``): every format stores each canonical weight matrix once (biases may be summed), so a file of
    fewer values than the model's weights cannot hold them. Matters for a config that claims, say, 10^9
    units; a smaller mismatch is left to the per-tensor checks, which name the tensor."""
    need = sum(math.prod(shape) for shape in model.canonical_shapes()[0])
    if need > values and need * model.dtype.itemsize > STAND_IN_BYTES:
        raise ValueError(f"{what} hold {values} values in all, fewer than the {need} weights of {model!r}")


def zeros(model) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Zero canonical lists of ``model``: what a format's writer is run on to learn its names and shapes."""
    check_model(model)
    w, b = model.canonical_shapes()
    return [np.zeros(s, model.dtype) for s in w], [np.zeros(s, model.dtype) for s in b]


def input_matrices(model, t: PseudoLayerTensors) -> list[np.ndarray]:
    """Per-gate input matrices; where cuDNN has none (skip_input, layer 0) the identity, which gives the same
    function, stands in, for formats that always store them."""
    if t.W is not None:
        return t.W
    return [np.eye(model.num_units, dtype=model.dtype)] * len(model.gates)


def skipped_input_matrices(model, layer: int, W: list[np.ndarray], what: str) -> list[np.ndarray] | None:
    """A format's per-gate input matrices ``W`` of ``layer`` as the canonical ones: ``None`` in skip_input's
    layer 0, where they must be the identity that :func:`input_matrices` wrote (else a ValueError naming
    ``what`` and the gate), ``W`` elsewhere."""
    if layer > 0 or model.input_mode != "skip_input":
        return W
    eye = np.eye(model.num_units, dtype=model.dtype)
    for g, w in enumerate(W):
        if not np.array_equal(w, eye):
            raise ValueError(f"{what}: skip_input needs identity input matrices, gate {model.gates[g]!r} is not "
                             f"the identity")
    return None


def matrix_shape(what: str, shape: tuple[int, ...]) -> tuple[int, int]:
    """``(rows, columns)`` of a kernel that sizes are read from: a matrix with rows and columns, else a
    ValueError naming it (before a division by its width, or an index past its axes)."""
    if len(shape) != 2 or 0 in shape:
        raise ValueError(f"{what} must be a non-empty matrix, got shape {list(shape)}")
    return shape[0], shape[1]


def check_tensor(label: str, a: object, dtype: np.dtype, shape: tuple[int, ...], owner: str) -> None:
    """``a`` is an array of ``dtype`` and ``shape``; errors name the tensor (``label``) and who needs it."""
    if not isinstance(a, np.ndarray) or a.dtype != dtype:
        raise TypeError(f"{label} must be a {dtype} array, got {getattr(a, 'dtype', type(a).__name__)}")
    if a.shape != shape:
        raise ValueError(f"{label} has shape {list(a.shape)}, {owner} needs {list(shape)}")
