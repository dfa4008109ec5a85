"""What a result beyond rounding most likely is: each diagnosis is a check, not a guess from the error's size.
The float64 truth runs under an alternative (the other GRU, the gates in another order, the biases doubled or
halved, a hard sigmoid for the gates' sigmoid, the direction reversed, the lengths ignored) and the result is
judged against it by the same policy: a diagnosis is given where the result fits the alternative within rounding.

:data:`ALTERNATIVES` is the table, one row per kind of fault: ``name``, ``finding`` (what the report says), and
``variants(cfg, case)``, the alternatives that apply to a config and case, each ``(detail, cfg, case,
evaluate)``: ``evaluate(cfg, case)`` gives the alternative's truth (``compat_tests.run.ground_truth`` but for a
reversed direction and another gate activation).
"""

from __future__ import annotations

import itertools
from typing import Callable, NamedTuple

import numpy as np

from ..config import Case, Outputs, RNNConfig
from ..run import float64_model, ground_truth

Evaluate = Callable[[RNNConfig, Case], Outputs]
Variant = tuple[str, RNNConfig, Case, Evaluate]


class Alternative(NamedTuple):
    name: str
    finding: str
    variants: Callable[[RNNConfig, Case], list[Variant]]


def _gru_variant(cfg: RNNConfig, case: Case) -> list[Variant]:
    other = {"gru": "classic_gru", "classic_gru": "gru"}.get(cfg.mode)
    if other is None:
        return []
    said = {"gru": "cuDNN's GRU (ONNX linear_before_reset=1, Keras reset_after=True, PyTorch's nn.GRU)",
            "classic_gru": "the textbook GRU (ONNX linear_before_reset=0, Keras reset_after=False)"}
    return [(f"it computes {said[other]} where {said[cfg.mode]} is expected", cfg.with_(mode=other), case,
             ground_truth)]


def _gate_orders(cfg: RNNConfig, case: Case) -> list[Variant]:
    """Every other order of the gate blocks, the same in every pseudo-layer, of ``W``, ``R`` and the biases."""
    model = float64_model(cfg)
    gates = model.gates
    G = len(gates)
    if G == 1:
        return []
    weights, biases = model.canonical_regions()
    variants = []
    for order in itertools.permutations(range(G)):
        if order == tuple(range(G)):
            continue
        moved = Case(_permuted(weights, case.weights, order, G), _permuted(biases, case.biases, order, G),
                     case.x, case.h0, case.c0, case.lengths)
        moved_gates = [g for g in range(G) if order[g] != g]
        said = (f"gates {gates[moved_gates[0]]} and {gates[moved_gates[1]]} exchanged" if len(moved_gates) == 2 else
                f"its gate blocks in the order {''.join(gates[g] for g in order)}")
        variants.append((f"{said}, where cuDNN's order is {' '.join(gates)}", cfg, moved, ground_truth))
    return variants


def _permuted(regions, tensors, order: tuple[int, ...], G: int) -> list[np.ndarray]:
    """``tensors`` (canonical, of ``regions``) with gate ``g``'s block taken from gate ``order[g]``'s."""
    by_key = {(r.pseudo_layer, r.lin_layer_id): t for r, t in zip(regions, tensors)}
    out = []
    for r, t in zip(regions, tensors):
        lin = r.lin_layer_id
        if lin >= 2 * G:  # the projection
            out.append(t)
            continue
        side = lin - lin % G
        out.append(by_key.get((r.pseudo_layer, side + order[lin % G]), t))
    return out


def _bias_scales(cfg: RNNConfig, case: Case) -> list[Variant]:
    if cfg.bias_mode == "none" or not any(np.any(b) for b in case.biases):
        return []
    return [(f"its biases are {word} (each gate adds {factor:g} times its b_W + b_R)", cfg,
             case._replace(biases=[b * factor for b in case.biases]), ground_truth)
            for word, factor in (("doubled", 2.0), ("halved", 0.5))]


def _reversed_in_time(a: np.ndarray | None, lengths: np.ndarray | None) -> np.ndarray | None:
    """A time-major sequence ``[T, B, ...]`` with each sequence's first ``lengths[b]`` steps reversed."""
    if a is None:
        return None
    if lengths is None:
        return a[::-1].copy()
    out = a.copy()
    for b, n in enumerate(lengths):
        out[:n, b] = a[:n, b][::-1]
    return out


def reversed_direction(cfg: RNNConfig, case: Case) -> Outputs:
    """The truth of a unidirectional ``cfg`` run over each sequence from its end to its start (ONNX's
    ``direction="reverse"``), time-major."""
    truth = ground_truth(cfg, case._replace(x=_reversed_in_time(case.x, case.lengths)))
    return truth._replace(output=_reversed_in_time(truth.output, case.lengths))


def _direction(cfg: RNNConfig, case: Case) -> list[Variant]:
    if cfg.num_dirs != 1 or not cfg.time_major:
        return []
    return [("it runs the sequence from its end to its start (direction reversed)", cfg, case, reversed_direction)]


def _lengths_ignored(cfg: RNNConfig, case: Case) -> list[Variant]:
    if case.lengths is None:
        return []
    return [("it runs every sequence to the full T: the sequence lengths are ignored (an export without "
             "sequence_lens, or a packed sequence lost)", cfg.with_(lengths=None), case._replace(lengths=None),
             ground_truth)]


# The recurrent activations a port may have put where cuDNN's logistic sigmoid belongs (LSTM i, f, o; GRU r, z):
# Keras 2's default hard_sigmoid, clip(0.2 v + 0.5, 0, 1), and Keras 3's, clip(v / 6 + 0.5, 0, 1).
HARD_SIGMOIDS = {"Keras 2's hard_sigmoid, clip(0.2 v + 0.5, 0, 1)": 0.2,
                 "Keras 3's hard_sigmoid, clip(v / 6 + 0.5, 0, 1)": 1.0 / 6.0}


def gates_computed_by(function) -> Evaluate:
    """The truth with ``function`` where the spec's LSTM and GRU cells compute the logistic sigmoid of their
    gates: the spec's own cells, their module-level ``sigmoid`` swapped for the call and restored after it."""
    from reference.spec import gru, lstm

    def evaluate(cfg: RNNConfig, case: Case) -> Outputs:
        saved = lstm.sigmoid, gru.sigmoid
        lstm.sigmoid = gru.sigmoid = function
        try:
            return ground_truth(cfg, case)
        finally:
            lstm.sigmoid, gru.sigmoid = saved
    return evaluate


def _activations(cfg: RNNConfig, case: Case) -> list[Variant]:
    if cfg.mode not in ("lstm", "gru", "classic_gru"):
        return []
    return [(f"its gates compute {name} where cuDNN computes the logistic sigmoid", cfg, case,
             gates_computed_by(lambda v, slope=slope: np.clip(slope * v + 0.5, 0.0, 1.0)))
            for name, slope in HARD_SIGMOIDS.items()]


ALTERNATIVES = (
    Alternative("gru_variant", "the other GRU", _gru_variant),
    Alternative("gate_order", "the gates in another order", _gate_orders),
    Alternative("bias_scale", "the biases scaled", _bias_scales),
    Alternative("activation", "another recurrent activation", _activations),
    Alternative("direction", "the direction reversed", _direction),
    Alternative("lengths_ignored", "the lengths ignored", _lengths_ignored),
)


def diagnose(cfg: RNNConfig, case: Case, fits: Callable[[RNNConfig, Case, Evaluate], bool]) -> list[dict]:
    """The alternatives the result fits: ``{"name", "finding", "detail"}`` for each variant of
    :data:`ALTERNATIVES` that applies to ``cfg`` and ``case`` and for which ``fits(cfg, case, evaluate)`` (the
    caller's judgement of its result against that variant's truth) holds; ``[]``: none explains it."""
    found = []
    for alternative in ALTERNATIVES:
        for detail, alt_cfg, alt_case, evaluate in alternative.variants(cfg, case):
            if fits(alt_cfg, alt_case, evaluate):
                found.append({"name": alternative.name, "finding": alternative.finding, "detail": detail})
    return found
