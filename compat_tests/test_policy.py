"""The measuring instruments: metrics, the condition estimate and the tolerance policy."""

from __future__ import annotations

import numpy as np
import pytest

from compat_tests import tolerances
from compat_tests.compare import compare_peer, judge_results
from compat_tests.conditioning import sensitivity
from compat_tests.config import Outputs, RNNConfig, ground_truth, make_case
from compat_tests.metrics import error_stats, ulp_distance
from compat_tests.peers import PEERS


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_ulp_distance_counts_representable_numbers(dtype):
    one = np.array([1.0], dtype)
    after = np.nextafter(one, np.array([2.0], dtype))
    assert ulp_distance(after, one.astype(np.float64))[0] == 1
    assert ulp_distance(np.array([-0.0], dtype), np.array([0.0]))[0] == 0
    tiny = np.array([np.finfo(dtype).smallest_subnormal], dtype)
    assert ulp_distance(-tiny, tiny.astype(np.float64))[0] == 2
    assert ulp_distance(np.nextafter(after, np.array([2.0], dtype)), np.array([1.0]))[0] == 2


def test_overflow_of_the_tested_dtype_is_an_outcome_not_an_error():
    truth = np.array([1.0, 1e6, 2.0])  # 1e6 overflows float16
    ok = error_stats(np.array([1.0, np.inf, 2.0], np.float16), truth)
    assert ok.nonfinite_mismatch == 0 and ok.max_abs == 0.0 and ok.count == 2
    bad = error_stats(np.array([np.nan, 6e4, 2.0], np.float16), truth)
    assert bad.nonfinite_mismatch == 2


def test_errors_of_small_tensors_are_absolute_and_of_large_ones_relative():
    small = error_stats(np.array([1e-8], np.float32), np.array([0.0]))
    assert small.scale == 1.0 and small.max_eps == pytest.approx(1e-8 / np.finfo(np.float32).eps)
    big = error_stats(np.array([1000.0 + 2 ** -13], np.float32), np.array([1000.0]))
    assert big.scale == 1000.0 and big.max_eps == pytest.approx(2 ** -13 / (1000 * np.finfo(np.float32).eps))


def test_sensitivity_separates_contracting_from_chaotic_dynamics():
    calm = RNNConfig("gru", num_units=8, input_size=4, seq_len=20, batch=2, weight_scale=0.5)
    wild = RNNConfig("tanh", num_units=32, input_size=4, seq_len=200, batch=2, weight_scale=4.0)
    assert sensitivity(calm, make_case(calm))["output"] < 10
    assert sensitivity(wild, make_case(wild))["output"] > 1000


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_a_planted_error_of_a_few_hundred_ulps_fails(dtype):
    """The policy's power: a single output off by 300 ulp is caught on a well-conditioned config."""
    cfg = RNNConfig("lstm", num_layers=2, num_units=6, input_size=4, seq_len=6, batch=3, dtype=dtype)
    case = make_case(cfg)
    truth = ground_truth(cfg, case)
    kappa = sensitivity(cfg, case, truth)
    clean = PEERS["reference"].forward(cfg, case)
    assert judge_results("reference", cfg, clean, truth, kappa).passed
    planted = clean.output.copy()
    planted[3, 1, 2] += 300 * np.finfo(dtype).eps * max(1.0, abs(float(planted[3, 1, 2])))
    verdicts = judge_results("reference", cfg, Outputs(planted, clean.output_h, clean.output_c), truth, kappa).verdicts
    assert not verdicts["output"].passed
    assert verdicts["output_h"].passed


def test_a_truth_too_ill_conditioned_to_trust_is_indeterminate_not_judged():
    stats = error_stats(np.array([2.0], np.float32), np.array([1.0]))
    assert not tolerances.judge("reference", "float32", "output", stats, kappa=1e3).passed
    verdict = tolerances.judge("reference", "float32", "output", stats, kappa=10 * tolerances.MAX_JUDGEABLE_KAPPA)
    assert verdict.indeterminate and "indeterminate" in verdict.explain("output")


def test_gradients_of_a_forward_pass_that_overflows_the_dtype_are_not_judged():
    """A relu stack whose float64 outputs reach 1e20 overflows float16: its float16 gradients belong to
    another function (inf/NaN activations), so they are reported as indeterminate, not as failures."""
    cfg = RNNConfig("relu", num_layers=2, num_units=4, input_size=3, seq_len=40, batch=2, dtype="float16",
                    weight_scale=4.0, seed=1)
    assert np.abs(ground_truth(cfg, make_case(cfg)).output).max() > np.finfo(np.float16).max
    comparison = compare_peer(PEERS["reference"], cfg, backward=True)
    assert all(v.indeterminate and "overflows float16" in v.indeterminate for v in comparison.verdicts.values())


def test_every_budget_has_a_reason_and_a_known_key():
    for (dtype, kind), b in tolerances.DEFAULTS.items():
        assert dtype in ("float16", "float32", "float64") and kind in ("forward", "gradient")
        assert b.bound > 0 and b.reason
    for o in tolerances.OVERRIDES:
        assert o.peer in PEERS and o.budget.reason


def test_comparison_explains_itself_with_a_reproduce_command():
    cfg = RNNConfig("gru", dtype="float32")
    text = compare_peer(PEERS["reference"], cfg).explain()
    assert "rnn-compat check --peer reference --config" in text
    assert RNNConfig.from_json(text.split("--config '")[1].split("'")[0]) == cfg
