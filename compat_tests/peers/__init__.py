"""Peer adapters, one per implementation; each converts canonical weights to its own format."""

from __future__ import annotations

from .base import Capabilities, Peer
from .cudnn_gpu import CudnnPeer
from .keras_peer import KerasPeer
from .onnxruntime_cpu import OnnxRuntimeCPU
from .reference_peer import ReferencePeer
from .torch_peers import TorchPeer

PEERS: dict[str, Peer] = {peer.name: peer for peer in (
    ReferencePeer(),
    TorchPeer("torch-cpu", "cpu"),
    OnnxRuntimeCPU(),
    KerasPeer(),
    CudnnPeer("cudnn", None, ("float16", "float32", "float64")),
    CudnnPeer("cudnn-tf32", "default", ("float32",)),
    TorchPeer("torch-cuda", "cuda"),
)}
GPU_PEERS = ("cudnn", "cudnn-tf32", "torch-cuda")


def get_peer(name: str) -> Peer:
    try:
        return PEERS[name]
    except KeyError:
        raise ValueError(f"unknown peer {name!r}, expecting one of {', '.join(PEERS)}") from None


__all__ = ["Capabilities", "GPU_PEERS", "PEERS", "Peer", "get_peer"]
