"""Peer adapters, one per implementation; each converts canonical weights to its own format."""

from __future__ import annotations

from .base import Capabilities, Peer
from .onnxruntime_cpu import OnnxRuntimeCPU
from .reference_peer import ReferencePeer
from .torch_cpu import TorchCPU

PEERS: dict[str, Peer] = {peer.name: peer for peer in (ReferencePeer(), TorchCPU(), OnnxRuntimeCPU())}


def get_peer(name: str) -> Peer:
    try:
        return PEERS[name]
    except KeyError:
        raise ValueError(f"unknown peer {name!r}, expecting one of {', '.join(PEERS)}") from None


__all__ = ["Capabilities", "PEERS", "Peer", "get_peer"]
