"""Where a result beyond rounding leaves its budget: the first time step of the output sequence, the direction
(a bidirectional output's halves judged apart), and the first layer, from per-layer truths: a peer runs the
model's first ``k`` layers alone (``k = 1, 2, ...``) until one leaves its budget; a file run in its own
framework is placed by the final states of its layers, where it gives them."""

from __future__ import annotations

import numpy as np

from ..config import Case, Outputs, RNNConfig
from ..judge import tolerances
from ..judge.compare import conditioning
from ..judge.metrics import error_stats
from ..run import float64_model, ground_truth


def first_step(verdict) -> int | None:
    """The first time step whose error (``verdict.stats.per_step``) leaves the verdict's budget, or ``None``."""
    steps = verdict.stats.per_step or ()
    for t, error in enumerate(steps):
        if error / max(1.0, verdict.kappa) > verdict.bound:
            return t
    return None


def first_layers(cfg: RNNConfig, case: Case, k: int) -> tuple[RNNConfig, Case]:
    """The model of ``cfg``'s first ``k`` layers and ``case`` with their weights alone."""
    weights, biases = float64_model(cfg).canonical_regions()
    kept = k * cfg.num_dirs
    return cfg.with_(num_layers=k), case._replace(
        weights=[w for r, w in zip(weights, case.weights) if r.pseudo_layer < kept],
        biases=[b for r, b in zip(biases, case.biases) if r.pseudo_layer < kept], h0=None, c0=None)


def _leaves(backend: str, cfg: RNNConfig, got: np.ndarray, want: np.ndarray, kappa: float, quantity: str) -> bool:
    stats = error_stats(got, want)
    return not tolerances.judge(backend, cfg.dtype, quantity, stats, kappa).passed


def where(backend: str, cfg: RNNConfig, case: Case, actual: Outputs, truth: Outputs, verdicts: dict) -> dict:
    """``{"layer", "direction", "step", "how"}`` of the first place the result ``actual`` (judged against
    ``truth``, the float64 truth of ``case``, in ``verdicts``) leaves its budget (``None`` where it cannot be
    told); ``backend``: a peer's name (its layers rerun alone) or ``"file"`` (a framework's run, placed by its
    states)."""
    found: dict = {"layer": None, "direction": None, "step": None}
    if "output" in verdicts:
        found["step"] = first_step(verdicts["output"])
    if cfg.num_dirs == 2 and actual.output is not None:
        H = actual.output.shape[-1] // 2
        kappa = verdicts["output"].kappa
        halves = [d for d, part in enumerate((slice(0, H), slice(H, None)))
                  if _leaves(backend, cfg, actual.output[..., part], truth.output[..., part], kappa, "output")]
        found["direction"] = {(0,): "forward", (1,): "backward", (0, 1): "both"}.get(tuple(halves))
    if backend == "file":
        found["layer"], found["how"] = _layer_from_states(cfg, actual, truth, verdicts), "the layers' final states"
    else:
        found["layer"], found["how"] = _layer_by_rerun(backend, cfg, case), "the first k layers run alone"
    return found


def _layer_from_states(cfg: RNNConfig, actual: Outputs, truth: Outputs, verdicts: dict) -> int | None:
    if actual.output_h is None or "output_h" not in verdicts:
        return None
    kappa = verdicts["output_h"].kappa
    for row in range(actual.output_h.shape[0]):
        if _leaves("file", cfg, actual.output_h[row], truth.output_h[row], kappa, "output_h"):
            return row // cfg.num_dirs
    return None


def _layer_by_rerun(backend: str, cfg: RNNConfig, case: Case) -> int:
    from ..peers import PEERS

    peer = PEERS[backend]
    for k in range(1, cfg.num_layers):
        sub_cfg, sub_case = first_layers(cfg, case, k)
        truth = ground_truth(sub_cfg, sub_case)
        kappa = conditioning(backend, sub_cfg, sub_case, truth)
        with np.errstate(all="ignore"):
            got = peer.forward(sub_cfg, sub_case)
        if _leaves(backend, sub_cfg, got.output, truth.output, kappa["output"], "output"):
            return k - 1
    return cfg.num_layers - 1
