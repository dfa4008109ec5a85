"""The plugin API's types for a peer's own exceptions to the tolerance policy (docs/peers.md): a budget
override (:class:`Override`, of a :class:`Budget`) or a known divergence (:class:`Divergence`), each with its
reason, and the areas a plugin peer may declare a divergence in (:data:`PEER_AREAS`). Defined with the rest of
the judging in :mod:`compat_tests.judge.peer_exceptions`; a plugin imports them from here."""

from .judge.peer_exceptions import PEER_AREAS, Budget, Divergence, Override

__all__ = ["PEER_AREAS", "Budget", "Divergence", "Override"]
