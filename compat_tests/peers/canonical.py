"""Canonical weights grouped per pseudo-layer: the reference's own grouping (``reference.formats``)."""

from reference.formats.canonical import PseudoLayerTensors, by_pseudo_layer, flatten

__all__ = ["PseudoLayerTensors", "by_pseudo_layer", "flatten"]
