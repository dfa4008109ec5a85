"""Peers from outside this package: your own implementation under the suite and in the report.

Two ways in, both read by ``compat_tests.peers.load_plugins()`` in every process that looks peers up and
asks for them (``rnn-compat``'s commands that use peers, pytest and its xdist workers in ``pytest_configure``,
the report's worker processes as they start, the calibration sweep); importing a module loads none:

- a spec ``MODULE:ATTR`` or ``PATH.py:ATTR`` in the environment variable ``RNN_COMPAT_PLUGINS``
  (comma-separated), or on the command line (``rnn-compat report|check|test|peers --plugin SPEC``, which adds
  it to that variable for the processes the command starts);
- an entry point of an installed package in the group ``cudnn_rnn_compat.peers``
  (``[project.entry-points."cudnn_rnn_compat.peers"] mine = "mypkg.peers:MY_PEER"`` in its pyproject).

``ATTR`` names a :class:`~compat_tests.peers.base.Peer` instance, a ``Peer`` subclass (constructed with no
arguments) or a list or tuple of ``Peer`` instances. A spec that cannot be loaded is an error naming the
spec, since someone asked for it; an entry point that cannot be loaded becomes an unavailable peer whose
reason says why, since it was merely installed, and one broken package should not stop every run; for the
same reason an installed peer whose name is taken is left out with a warning, where a spec's is an error.
A spec cannot hold a comma (the variable's separator).
A plugin peer is judged by the policy's default budgets unless it declares its own exceptions, each with
its reason (``Peer.overrides``, ``Peer.known_divergences``): checked here (``compat_tests.judge.peer_exceptions.problem``);
the policy's lookups read them from the peer itself.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
import warnings
from pathlib import Path

from ..judge import peer_exceptions
from ..config import Case, Outputs, RNNConfig
from .base import Capabilities, Peer

ENV = "RNN_COMPAT_PLUGINS"
GROUP = "cudnn_rnn_compat.peers"
# Peer names travel through "--peers a,b", file names and shell commands.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")

# Peer name -> the spec it was loaded from (what a reproducing command must pass again).
SPECS: dict[str, str] = {}


class UnloadablePeer(Peer):
    """An installed entry point that failed to load: listed, never run, with the reason."""

    def __init__(self, name: str, reason: str):
        self.name, self.reason, self.capabilities = name, reason, Capabilities()

    def available(self) -> tuple[bool, str]:
        return False, self.reason

    def forward(self, cfg: RNNConfig, case: Case) -> Outputs:
        raise RuntimeError(self.reason)


def normalize(spec: str) -> str:
    """``spec`` with a file path made absolute, so it means the same in another directory."""
    target, sep, attr = spec.strip().rpartition(":")
    normal = f"{Path(target).resolve()}:{attr}" if sep and target.endswith(".py") else spec.strip()
    if "," in normal:  # checked on the absolute path: a relative file in a folder "a,b" gets one too
        raise ValueError(f"plugin {spec!r}: a spec cannot hold a comma ({ENV} separates specs with commas); "
                         f"move or link the file")
    return normal


def _import_file(path: Path):
    name = f"_rnn_compat_plugin_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # before running it: dataclasses and pickling look modules up by name
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _target(spec: str):
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ValueError(f"plugin {spec!r} must be MODULE:ATTR or PATH.py:ATTR (e.g. mypkg.peers:MY_PEER)")
    if target.endswith(".py") and not Path(target).is_file():
        raise ValueError(f"plugin {spec!r}: no file {target}")
    try:
        module = _import_file(Path(target).resolve()) if target.endswith(".py") else importlib.import_module(target)
    except Exception as exc:  # whatever the plugin's own import raises, named with the spec
        raise ValueError(f"plugin {spec!r}: importing {target} failed: {type(exc).__name__}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"plugin {spec!r}: {target} has no attribute {attr!r}") from None


def _check(peer: Peer, spec: str) -> None:
    name = getattr(peer, "name", None)
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"plugin {spec!r}: a peer's name must be a string of letters, digits and ._+- "
                         f"(not starting with a symbol), got {name!r}")
    caps = getattr(peer, "capabilities", None)
    if not isinstance(caps, Capabilities):
        raise TypeError(f"plugin {spec!r}: peer {name!r} must have capabilities of type "
                        f"compat_tests.peers.Capabilities, got {type(caps).__name__}")  # which check their fields
    problem = peer_exceptions.problem(name, caps.modes, peer.overrides, peer.known_divergences)
    if problem:
        raise ValueError(f"plugin {spec!r}: peer {name!r}: {problem}")


def peers_of(obj, spec: str) -> list[Peer]:
    """The peers an attribute stands for (instance, subclass or list), each checked."""
    if isinstance(obj, type) and issubclass(obj, Peer):
        try:
            obj = obj()
        except Exception as exc:  # abstract, needs arguments, or its constructor failed
            raise ValueError(f"plugin {spec!r}: constructing {obj.__name__}() failed: {type(exc).__name__}: "
                             f"{exc}") from exc
    items = [obj] if isinstance(obj, Peer) else list(obj) if isinstance(obj, (list, tuple)) else []
    if not items or not all(isinstance(p, Peer) for p in items):
        raise TypeError(f"plugin {spec!r} must name a compat_tests.peers.Peer instance, a Peer subclass or a "
                        f"list of Peer instances, got {type(obj).__name__}{' (empty)' if isinstance(obj, (list, tuple)) and not obj else ''}")
    for peer in items:
        _check(peer, spec)
    return items


def resolve(spec: str) -> list[Peer]:
    """Import what ``spec`` (``MODULE:ATTR`` or ``PATH.py:ATTR``) names; ``ValueError``/``TypeError`` naming
    the spec when it cannot."""
    return peers_of(_target(spec), spec)


def _register(registry: dict[str, Peer], peers: list[Peer], source: str, spec: str | None) -> None:
    """All of ``peers`` or none: a name already taken (but by the same spec, which keeps its first peers)
    refuses the lot."""
    names = [p.name for p in peers]
    for name in names:
        if (name in registry and (spec is None or SPECS.get(name) != spec)) or names.count(name) > 1:
            taken_by = SPECS.get(name, "a built-in or installed peer") if name in registry else "another of its peers"
            raise ValueError(f"{source}: peer name {name!r} is already taken by {taken_by}")
    for peer in peers:
        if peer.name not in registry:
            registry[peer.name] = peer
            if spec is not None:
                SPECS[peer.name] = spec


def load(registry: dict[str, Peer], spec: str) -> list[Peer]:
    """Load ``spec`` into ``registry`` (idempotent for the same spec) and return its peers."""
    spec = normalize(spec)
    peers = resolve(spec)
    _register(registry, peers, f"plugin {spec!r}", spec)
    return [registry[p.name] for p in peers]


def entry_point_peers() -> list[Peer]:
    """The peers of the installed entry points; one that fails to load is an :class:`UnloadablePeer`."""
    found = []
    for ep in importlib.metadata.entry_points(group=GROUP):
        where = f"entry point {ep.name} = {ep.value}"
        try:
            found += peers_of(ep.load(), where)
        except Exception as exc:  # an installed package's defect: reported as unavailable, not raised
            found.append(UnloadablePeer(ep.name, f"{where} failed to load: {type(exc).__name__}: {exc}"))
    return found


def specs_from_environment() -> list[str]:
    return [s for s in (part.strip() for part in os.environ.get(ENV, "").split(",")) if s]


def load_installed(registry: dict[str, Peer]) -> None:
    """The installed entry points' peers into ``registry``. One whose name is taken, or cannot be a peer name,
    is left out with a warning: raising would stop every command, ``rnn-compat peers`` included, which is how
    one finds out."""
    for peer in entry_point_peers():
        if not NAME.fullmatch(peer.name) or peer.name in registry:
            warnings.warn(f"entry point peer {peer.name!r} (group {GROUP}) left out: its name is "
                          f"{'taken' if peer.name in registry else 'not a peer name'}", stacklevel=2)
            continue
        registry[peer.name] = peer


def load_environment(registry: dict[str, Peer]) -> None:
    """The specs of ``RNN_COMPAT_PLUGINS`` into ``registry`` (a spec already loaded keeps its peers)."""
    for spec in specs_from_environment():
        load(registry, spec)


def load_all(registry: dict[str, Peer]) -> None:
    """Installed entry points (:func:`load_installed`), then the specs of ``RNN_COMPAT_PLUGINS``."""
    load_installed(registry)
    load_environment(registry)


def export(spec: str) -> None:
    """Add ``spec`` to ``RNN_COMPAT_PLUGINS`` so the processes started from here load it too."""
    spec = normalize(spec)
    present = specs_from_environment()
    if spec not in present:
        os.environ[ENV] = ",".join([*present, spec])
