"""Canonical tensors grouped per pseudo-layer (and back): the starting point of every other format."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..layout import PROJECTION_LIN_LAYER_ID


@dataclass(frozen=True)
class PseudoLayerTensors:
    """One direction of one layer: per-gate matrices and biases in canonical (cuDNN) gate order.

    ``W``/``b_W`` are ``None`` where the layer has no input GEMM (skip_input, layer 0).
    """

    W: list[np.ndarray] | None
    R: list[np.ndarray]
    b_W: list[np.ndarray] | None
    b_R: list[np.ndarray]
    P: np.ndarray | None


def by_pseudo_layer(model, weights: list[np.ndarray], biases: list[np.ndarray]) -> list[PseudoLayerTensors]:
    """Group a model's canonical lists per pseudo-layer (``layer * num_dirs + direction``)."""
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
