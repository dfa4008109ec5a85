"""Canonical weights grouped per pseudo-layer: the starting point of every peer's own format."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reference.layout import PROJECTION_LIN_LAYER_ID


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
