"""How sensitive a config's results are to rounding-sized changes of its inputs: the condition estimate.

A correct implementation in precision ``eps`` is off by roughly ``eps * kappa`` (relative to the result's
magnitude), where ``kappa`` is the problem's condition number: how much a relative change of ``delta`` in
every input, weight and initial state moves the result, divided by ``delta``. A contracting RNN has
``kappa ~ 1``; a chaotic one (large recurrent weights, long sequences) amplifies every rounding error
exponentially with time, and no implementation can do better than ``eps * kappa`` there.

``sensitivity`` estimates ``kappa`` per quantity with the float64 truth (reference.spec): it moves every value by a
relative ``+delta`` or ``-delta`` with random signs (full-size, independent errors, like rounding; random
*magnitudes* would make the estimate collapse whenever one value dominates the result), tries each sign
pattern both ways, and keeps the largest response. The tolerance policy divides a measured error by ``max(1, kappa)``, so the budget tests the
implementation, not the conditioning of the example.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from ..config import Case, RNNConfig
from ..run import ground_truth

Evaluate = Callable[[RNNConfig, Case], NamedTuple]

SIGNS = np.array((-1.0, 1.0))  # drawn as rng.choice((-1.0, 1.0), shape) draws them, the same stream, faster
DELTA = 1e-7
PAIRS = 2  # random sign patterns per estimate, each tried both ways
LINEAR_LIMIT = 1e-3  # largest relative response still read as linear
MIN_DELTA = 1e-13  # below this, float64 rounding of the truth itself swamps the response
TF32_EPS = 2.0**-10  # the rounding size of a TF32 operand (10 mantissa bits)


def _responses(cfg: RNNConfig, case64: Case, truth: NamedTuple, evaluate: Evaluate, delta: float,
               pairs: int, seed: int) -> dict[str, float]:
    """Largest relative response over ``pairs`` random sign patterns ``s``, each tried both ways (``+s`` and
    ``-s``: whichever way a kink of the truth lies, one of the two crosses it)."""
    rng = np.random.default_rng(seed)
    kappa: dict[str, float] = {}
    with np.errstate(all="ignore"):
        for _ in range(pairs):
            start = rng.bit_generator.state
            for step in (delta, -delta):
                rng.bit_generator.state = start  # the same direction u, once each way
                moved = evaluate(cfg, case64.map(lambda a: a * (1.0 + step * SIGNS[rng.integers(0, 2, a.shape)])))
                _update(kappa, truth, moved, delta)
    return kappa


def _update(kappa: dict[str, float], truth: NamedTuple, moved: NamedTuple, delta: float) -> None:
    for name, base in truth._asdict().items():
        if base is None:
            continue
        finite = np.isfinite(base) & np.isfinite(getattr(moved, name))
        if not finite.any():
            kappa[name] = np.inf
            continue
        scale = max(1.0, float(np.abs(base[finite]).max()))
        change = float(np.abs(getattr(moved, name)[finite] - base[finite]).max())
        kappa[name] = max(kappa.get(name, 0.0), change / (delta * scale))


def sensitivity(cfg: RNNConfig, case: Case, truth: NamedTuple | None = None, *, evaluate: Evaluate = ground_truth,
                delta: float = DELTA, pairs: int = PAIRS, seed: int = 0,
                rounding: float | None = None) -> dict[str, float]:
    """``kappa`` per quantity name of ``evaluate`` (default the forward pass: ``output``, ``output_h``,
    ``output_c``; ``ground_truth_backward`` for the gradients), ``truth`` being its unperturbed result.

    Two responses, the larger kept per quantity:

    - the linear one: ``delta`` shrinks for explosive configs until ``kappa * delta`` is small (down to
      :data:`MIN_DELTA`), so ``kappa`` is the derivative's size, not a saturated response;
    - at the tested arithmetic's own rounding size, ``eps(cfg.dtype)`` or ``rounding`` where given (TF32 math's
      operands: ``TF32_EPS``), when that is larger (float16, TF32): there the
      truth may jump (a relu gradient switches when a pre-activation crosses 0), and a correct float16
      implementation can land on either side of the jump.
    """
    case64 = case.astype(np.float64)
    truth = truth if truth is not None else evaluate(cfg, case64)
    while True:
        kappa = _responses(cfg, case64, truth, evaluate, delta, pairs, seed)
        worst = max(kappa.values())
        if not np.isfinite(worst) or worst * delta <= LINEAR_LIMIT or delta <= MIN_DELTA:
            break
        delta = max(MIN_DELTA, LINEAR_LIMIT / worst / 10)
    rounding = max(float(np.finfo(cfg.dtype).eps), rounding or 0.0)
    if rounding > 10 * DELTA:
        at_rounding = _responses(cfg, case64, truth, evaluate, rounding, 2 * pairs, seed + 1)
        kappa = {name: max(k, at_rounding.get(name, 0.0)) for name, k in kappa.items()}
    return kappa
