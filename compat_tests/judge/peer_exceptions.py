"""The exceptions to the tolerance policy, one way for every peer: what they are, the one check they pass,
and where a lookup finds a peer's.

An exception is a budget override (:class:`Override`: a budget of the peer's own for one dtype and
quantity) or a known divergence (:class:`Divergence`: a test expects the peer to fail, strictly), each
with its reason. The built-in peers' are data tables, ``compat_tests.judge.tolerances.OVERRIDES`` and
``compat_tests.judge.known_divergences.KNOWN``; any other peer's travel with the peer, ``Peer.overrides`` and
``Peer.known_divergences``, checked by :func:`problem` when its plugin loads. The lookups
(``tolerances.budget``/``judge``/``all_overrides``, ``known_divergences.known``/``ledger``) read the tables
and then the peer itself (``compat_tests.peers.exceptions_of``, ``declared_exceptions``): nothing here is
registered or changes at run time, and this module knows no peer.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import DTYPE_NAMES

FORWARD_QUANTITIES = ("output", "output_h", "output_c")
GRADIENT_QUANTITIES = ("d_input", "d_input_h", "d_input_c", "d_params")

# The areas whose tests run every peer, so that any peer may declare a divergence in them; the others test
# one built-in peer, and only the built-in ledger names them.
PEER_AREAS = {
    "nan_propagation": "test_forward.py::test_nan_input_propagates_to_its_own_sequence_only",
    "padded_nan_gradients": "test_backward.py::test_padded_steps_give_and_receive_no_gradient[nan]",
}
AREAS = {
    **PEER_AREAS,
    "float64_precision": "test_forward.py::test_keras_float64_is_float64_accurate[full]",
    "float64_precision_masked": "test_forward.py::test_keras_float64_is_float64_accurate[lengths]",
}
WHOLE_PEER_AREAS = ("padded_nan_gradients",)  # tests that draw the mode: a divergence of every mode or none


@dataclass(frozen=True)
class Budget:
    bound: float  # in conditioned epsilons (compat_tests.judge.tolerances)
    reason: str


@dataclass(frozen=True)
class Override:
    peer: str
    dtype: str
    quantity: str
    budget: Budget


@dataclass(frozen=True)
class Divergence:
    peer: str
    area: str  # what the test checks, e.g. "nan_propagation" (one of AREAS)
    modes: tuple[str, ...]
    reason: str


def _override_problem(o: object, what: str, peer: str) -> str | None:
    if not isinstance(o, Override) or not isinstance(o.budget, Budget):
        return (f"{what} must be a compat_tests.policy.Override(peer, dtype, quantity, Budget(bound, reason)), "
                f"got {o!r:.80}")
    if o.peer != peer:
        return f"{what} names peer {o.peer!r}: a peer may override only its own budgets ({peer!r})"
    if o.dtype not in DTYPE_NAMES:
        return f"{what} has dtype {o.dtype!r}, expecting one of {', '.join(sorted(DTYPE_NAMES))}"
    if o.quantity not in FORWARD_QUANTITIES + GRADIENT_QUANTITIES:
        return (f"{what} has quantity {o.quantity!r}, expecting one of "
                f"{', '.join(FORWARD_QUANTITIES + GRADIENT_QUANTITIES)}")
    bound = o.budget.bound
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not 0 < bound < float("inf"):
        return f"{what} has bound {bound!r}: a budget is a positive finite int or float (conditioned epsilons)"
    if not isinstance(o.budget.reason, str) or not o.budget.reason.strip():
        return f"{what} has no reason: every override says why the default budget does not fit"
    return None


def _divergence_problem(d: object, what: str, peer: str, modes: tuple[str, ...], areas) -> str | None:
    if not isinstance(d, Divergence):
        return f"{what} must be a compat_tests.policy.Divergence, got {d!r:.80}"
    if d.peer != peer:
        return f"{what} names peer {d.peer!r}: a peer may declare only its own divergences ({peer!r})"
    if d.area not in areas:
        return f"{what} has area {d.area!r}, expecting one of {', '.join(areas)}"
    if not isinstance(d.modes, tuple) or not d.modes or not set(d.modes) <= set(modes):
        return f"{what} has modes {d.modes!r}, expecting a non-empty tuple of the peer's modes {modes}"
    if d.area in WHOLE_PEER_AREAS and set(d.modes) != set(modes):
        return (f"{what}: area {d.area!r} must name every mode the peer runs {modes} (its test draws the "
                f"mode, so it can expect the divergence only of the peer as a whole)")
    if not isinstance(d.reason, str) or not d.reason.strip():
        return f"{what} has no reason: every divergence says what the peer does instead"
    return None


def problem(peer: str, modes: tuple[str, ...], overrides: object, divergences: object,
            areas=PEER_AREAS) -> str | None:
    """Why ``overrides`` and ``divergences`` cannot be the exceptions of ``peer`` (which runs ``modes``), or
    ``None``. Overrides: a tuple or list of :class:`Override`, each naming ``peer`` itself, a dtype and a
    quantity the policy knows, a positive finite bound and a reason, at most one per dtype and quantity.
    Divergences: a tuple or list of :class:`Divergence`, each naming ``peer``, one of ``areas`` (a plugin's:
    :data:`PEER_AREAS`; the built-in ledger's: :data:`AREAS`), some of ``modes`` and a reason, at most one
    per area. What every plugin peer passes as it loads, and the built-in tables too (test_policy.py)."""
    for field, items, kind in (("overrides", overrides, Override), ("known_divergences", divergences, Divergence)):
        if not isinstance(items, (tuple, list)):
            return f"{field} must be a tuple of compat_tests.policy.{kind.__name__}, got {type(items).__name__}"
    seen = set()
    for k, o in enumerate(overrides):
        why = _override_problem(o, f"overrides[{k}]", peer)
        if why:
            return why
        if (o.dtype, o.quantity) in seen:
            return f"overrides[{k}] overrides {o.dtype} {o.quantity} a second time"
        seen.add((o.dtype, o.quantity))
    seen = set()
    for k, d in enumerate(divergences):
        why = _divergence_problem(d, f"known_divergences[{k}]", peer, modes, areas)
        if why:
            return why
        if d.area in seen:
            return f"known_divergences[{k}] declares area {d.area!r} a second time"
        seen.add(d.area)
    return None


def name_of(peer) -> str:
    return peer if isinstance(peer, str) else peer.name
