"""Peer adapters, one per implementation; each converts canonical weights to its own format.

``PEERS`` holds the built-in peers; importing this package loads no plugin. :func:`load_plugins` adds those of
installed packages and of ``RNN_COMPAT_PLUGINS`` (``compat_tests.peers.plugins``) where a command or the suite
asks, and :func:`load_plugin` one spec more (``--plugin``).
"""

from __future__ import annotations

from ..judge import peer_exceptions
from . import plugins
from .base import Capabilities, Peer
from .cudnn_gpu import CudnnPeer
from .keras_peer import KerasPeer
from .onnxruntime_cpu import OnnxRuntimeCPU
from .reference_peer import ReferencePeer, ReferenceTF32Peer
from .torch_peers import TorchPeer

PEERS: dict[str, Peer] = {peer.name: peer for peer in (
    ReferencePeer(),
    TorchPeer("torch-cpu", "cpu"),
    OnnxRuntimeCPU(),
    KerasPeer(),
    ReferenceTF32Peer(),
    CudnnPeer("cudnn", None, ("float16", "float32", "float64")),
    CudnnPeer("cudnn-tf32", "default", ("float32",)),
    CudnnPeer("cudnn-persist", None, ("float16", "float32"), algo="persist_static"),
    TorchPeer("torch-cuda", "cuda"),
    TorchPeer("torch-cuda-tf32", "cuda", tf32=True),
)}
GPU_PEERS = ("cudnn", "cudnn-tf32", "cudnn-persist", "torch-cuda", "torch-cuda-tf32")
BUILT_IN = tuple(PEERS)


_installed_loaded = False  # entry points are read once per process; the environment's specs at every call


def load_plugins() -> list[Peer]:
    """Register the plugin peers this process is to see, and return those it adds: the installed entry points'
    (group ``cudnn_rnn_compat.peers``; the first call only) and the specs of ``RNN_COMPAT_PLUGINS`` (a spec
    already loaded keeps its peers). Called by ``rnn-compat`` for the commands that look peers up, by the
    suite's ``pytest_configure`` (and so by every xdist worker), and by a report's worker processes as they
    start: :func:`load_plugin` puts its spec into ``RNN_COMPAT_PLUGINS``, which they inherit. A spec that cannot
    be loaded raises ``ValueError``/``TypeError`` naming it; a broken entry point only makes its peer
    unavailable."""
    global _installed_loaded
    before = set(PEERS)
    if not _installed_loaded:
        _installed_loaded = True
        plugins.load_installed(PEERS)
    plugins.load_environment(PEERS)
    return [peer for name, peer in PEERS.items() if name not in before]


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


def registered(peer) -> Peer | None:
    """``peer`` itself where it is a peer; for a name (or anything with a ``name``, such as ``compare.Recorded``
    results) the registered peer of that name, ``None`` where there is none."""
    return peer if isinstance(peer, Peer) else PEERS.get(peer_exceptions.name_of(peer))


def exceptions_of(peer, field: str) -> tuple:
    """The exceptions to the policy that ``peer`` carries (``field``: ``"overrides"`` or
    ``"known_divergences"``): a peer's own, or the registered peer's of its name (:func:`registered`). A
    built-in peer's are ``()``: its exceptions are in the tables (``compat_tests.judge``)."""
    return tuple(getattr(registered(peer), field, ()))


def declared_exceptions(field: str) -> tuple:
    """Every registered peer's own exceptions (``field`` as in :func:`exceptions_of`), in registration order."""
    return tuple(x for p in PEERS.values() for x in getattr(p, field, ()))


def choose(names: str | None) -> tuple[list[Peer], list[dict]]:
    """The available peers among ``names`` (comma-separated; default: all), and every considered backend's
    status (``{name, available, detail, requested}``, ``requested``: named in ``names``, so that its being
    unavailable fails a report; ``plugin``: where a plugin peer came from)."""
    from .base import availability

    if names is not None and not names.strip():
        raise ValueError("--backends must name at least one backend (leave it out for every available one)")
    listed = names.split(",") if names else []
    twice = sorted({n for n in listed if listed.count(n) > 1})
    if twice:
        raise ValueError(f"--backends names {', '.join(twice)} more than once")
    chosen = [get_peer(n) for n in listed] or list(PEERS.values())
    available, status = [], []
    for peer in chosen:
        ok, why = availability(peer)
        status.append({"name": peer.name, "available": ok, "detail": why, "requested": bool(names)}
                      | ({"plugin": plugins.SPECS[peer.name]} if peer.name in plugins.SPECS else {}))
        if ok:
            available.append(peer)
    return available, status


__all__ = ["BUILT_IN", "Capabilities", "GPU_PEERS", "PEERS", "Peer", "choose", "declared_exceptions", "exceptions_of",
           "get_peer", "load_plugin", "load_plugins", "registered"]
