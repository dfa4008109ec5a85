"""How sensitive a config's results are to rounding-sized changes of its inputs: the condition estimate.

A correct implementation in precision ``eps`` is off by roughly ``eps * kappa`` (relative to the result's
magnitude), where ``kappa`` is the problem's condition number: how much a relative change of ``delta`` in
every input, weight and initial state moves the result, divided by ``delta``. A contracting RNN has
``kappa ~ 1``; a chaotic one (large recurrent weights, long sequences) amplifies every rounding error
exponentially with time, and no implementation can do better than ``eps * kappa`` there.

``sensitivity`` estimates ``kappa`` per quantity with the float64 reference: it perturbs every value by an
independent relative ``U(-delta, delta)`` (the statistics of rounding) and takes the largest response over
a few trials. The tolerance policy divides a measured error by ``max(1, kappa)``, so the budget tests the
implementation, not the conditioning of the example.
"""

from __future__ import annotations

import numpy as np

from .config import Case, Outputs, RNNConfig, ground_truth

DELTA = 1e-7
TRIALS = 2
LINEAR_LIMIT = 1e-3  # largest relative response still read as linear
MIN_DELTA = 1e-13  # below this, float64 rounding of the truth itself swamps the response


def perturbed(case: Case, rng: np.random.Generator, delta: float) -> Case:
    def jiggle(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a * (1.0 + delta * rng.uniform(-1.0, 1.0, a.shape))

    return Case([jiggle(w) for w in case.weights], [jiggle(b) for b in case.biases], jiggle(case.x),
                jiggle(case.h0), jiggle(case.c0), case.lengths)


def _responses(cfg: RNNConfig, case64: Case, truth: Outputs, delta: float, trials: int,
               seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    kappa: dict[str, float] = {}
    with np.errstate(all="ignore"):
        for _ in range(trials):
            moved = ground_truth(cfg, perturbed(case64, rng, delta))
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
    return kappa


def sensitivity(cfg: RNNConfig, case: Case, truth: Outputs | None = None, *, delta: float = DELTA,
                trials: int = TRIALS, seed: int = 0) -> dict[str, float]:
    """``kappa`` per quantity name (``output``, ``output_h``, ``output_c``) of ``cfg``'s forward pass.

    The estimate is only meaningful while the response is linear (``kappa * delta`` small); for
    explosive configs ``delta`` shrinks until it is, down to :data:`MIN_DELTA`.
    """
    case64 = case.astype(np.float64)
    truth = truth if truth is not None else ground_truth(cfg, case64)
    while True:
        kappa = _responses(cfg, case64, truth, delta, trials, seed)
        worst = max(kappa.values())
        if not np.isfinite(worst) or worst * delta <= LINEAR_LIMIT or delta <= MIN_DELTA:
            return kappa
        delta = max(MIN_DELTA, LINEAR_LIMIT / worst / 10)
