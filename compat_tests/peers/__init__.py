"""Peer adapters, one per implementation; each converts canonical weights to its own format.

``PEERS`` holds the built-in peers, then those of installed plugins and of ``RNN_COMPAT_PLUGINS``
(``compat_tests.peers.plugins``); ``load_plugin`` adds one more at run time.
"""

from __future__ import annotations

from . import plugins
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
BUILT_IN = tuple(PEERS)


def load_plugin(spec: str) -> list[Peer]:
    """Register the peers ``spec`` (``MODULE:ATTR`` or ``PATH.py:ATTR``) names, here and in the processes
    started from here (``RNN_COMPAT_PLUGINS``), and return them."""
    loaded = plugins.load(PEERS, spec)
    plugins.export(spec)
    return loaded


def get_peer(name: str) -> Peer:
    try:
        return PEERS[name]
    except KeyError:
        raise ValueError(f"unknown peer {name!r}, expecting one of {', '.join(PEERS)} (a peer of your own: "
                         f"--plugin MODULE:ATTR or {plugins.ENV})") from None


__all__ = ["BUILT_IN", "Capabilities", "GPU_PEERS", "PEERS", "Peer", "get_peer", "load_plugin"]

# Last, so that a plugin module may import anything above from this package.
plugins.load_all(PEERS)
