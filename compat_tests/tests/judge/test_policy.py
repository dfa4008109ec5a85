"""The measuring instruments: metrics, the condition estimate and the tolerance policy."""

from __future__ import annotations

import numpy as np
import pytest

from compat_tests.config import Outputs, RNNConfig, make_case
from compat_tests.judge import conditioning, known_divergences, peer_exceptions, tolerances
from compat_tests.judge.compare import Recorded, compare_peer, judge_results
from compat_tests.judge.conditioning import sensitivity
from compat_tests.judge.metrics import error_stats, ulp_distance
from compat_tests.peers import BUILT_IN, PEERS
from compat_tests.run import ground_truth, ground_truth_backward


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


def test_errors_count_whichever_side_of_the_truth_they_fall():
    truth = np.array([1.0, 2.5, 3.0])
    delta = 2.0 ** -10
    below = error_stats((truth - [0, delta, 0]).astype(np.float32), truth)
    above = error_stats((truth + [0, delta, 0]).astype(np.float32), truth)
    assert below.max_abs == above.max_abs == delta and below.max_eps == above.max_eps > 0
    assert below.max_ulp == above.max_ulp == delta / np.spacing(np.float32(2.5))


def test_the_error_per_time_step_is_each_steps_worst():
    """``per_step`` (the drift study) holds the largest error of each step, over batch and features."""
    truth = np.zeros((3, 2, 4))
    actual = truth.astype(np.float32)
    actual[1, 0, 3], actual[1, 1, 0] = -1e-3, 1e-4  # step 1: its worst is 1e-3
    actual[2, 1, 2] = 5e-5
    stats = error_stats(actual, truth, time_axis=0)
    eps = float(np.finfo(np.float32).eps)
    assert stats.per_step == pytest.approx((0.0, float(np.float32(1e-3)) / eps, float(np.float32(5e-5)) / eps))
    batch_major = error_stats(actual.transpose(1, 0, 2), truth.transpose(1, 0, 2), time_axis=1)
    assert batch_major.per_step == stats.per_step


def test_the_worst_element_is_judged_not_the_typical_one():
    """One element 100 eps off among 10,000 exact ones fails the float32 budget (16); its RMS would pass."""
    truth = np.linspace(-1.0, 1.0, 10_000)
    actual = truth.astype(np.float32)
    actual[1234] += 100 * np.finfo(np.float32).eps
    stats = error_stats(actual, truth)
    assert stats.rms_eps < 16 < stats.max_eps
    assert not tolerances.judge("reference", "float32", "output", stats, kappa=1.0).passed


def test_the_scale_is_the_truth_s_whatever_the_peer_answered():
    """A NaN where the truth is largest must not shrink the scale the other errors are measured against."""
    truth = np.array([100.0, 1.0, 0.5])
    stats = error_stats(np.array([np.nan, 1.0 + 1e-6, 0.5], np.float32), truth)
    assert stats.scale == 100.0 and stats.nonfinite_mismatch == 1
    assert stats.max_eps == pytest.approx(abs(np.float32(1.0 + 1e-6) - 1.0) / (100 * np.finfo(np.float32).eps))


def test_a_non_finite_disagreement_fails_whatever_the_error_of_the_rest():
    truth = np.array([1.0, 2.0, 3.0])
    stats = error_stats(np.array([1.0, np.inf, 3.0], np.float32), truth)
    assert stats.max_eps == 0 and stats.nonfinite_mismatch == 1
    assert not tolerances.judge("reference", "float32", "output", stats, kappa=1.0).passed


def test_moderately_ill_conditioned_truths_are_still_judged():
    """A float64 truth with kappa 1e6 is judged in float64 (its budget still rejects most answers), and an
    error a hundred times that budget fails."""
    assert tolerances.MAX_JUDGEABLE_KAPPA >= 1e6
    stats = error_stats(np.array([1.0 + 1e9 * 2 ** -52]), np.array([1.0]))
    verdict = tolerances.judge("reference", "float64", "output", stats, kappa=1e6)
    assert verdict.indeterminate is None and not verdict.passed


def test_a_budget_that_no_answer_could_fail_makes_the_comparison_indeterminate():
    """float32 with kappa 1e6: 16 eps x kappa exceeds the result's own size, so even an all-zero output
    would score within budget; such a comparison is indeterminate, not a pass. Found by a mutation run
    on a chaotic tanh (kappa 2.3e9), whose all-zero float32 output was judged a pass."""
    truth = np.array([0.5, -0.8, 0.3])
    zeros = error_stats(np.zeros(3, np.float32), truth)
    verdict = tolerances.judge("reference", "float32", "output", zeros, kappa=1e6)
    assert verdict.indeterminate and "no answer could fail" in verdict.explain("output")
    assert not tolerances.judge("reference", "float32", "output", zeros, kappa=1e4).passed


def test_a_peer_result_of_another_dtype_or_shape_is_an_error_not_a_comparison():
    """A peer that returned float64 for a float32 config would look exact without testing float32 at all."""
    cfg = RNNConfig("gru", num_units=3, input_size=2, seq_len=4, batch=2, dtype="float32")
    truth = ground_truth(cfg, make_case(cfg))
    for wrong in (truth.output, truth.output.astype(np.float32)[:-1], None):
        actual = Outputs(wrong, truth.output_h.astype(np.float32), None)
        with pytest.raises(AssertionError, match="returned output of"):
            judge_results("peer", cfg, actual, truth, {})


# Planted gradient errors, in eps x scale of the tested dtype: over three times each budget (32 for float32,
# 2 for float16; d_params on T*B = 64 terms, where its reduction factor is still 1), within 8x of it.
PLANTED_GRADIENT_ERRORS = {"float32": 100.0, "float16": 10.0}


@pytest.mark.parametrize("quantity", ["d_input", "d_params"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_a_planted_gradient_error_fails(dtype, quantity):
    cfg = RNNConfig("gru", num_units=4, input_size=3, seq_len=8, batch=8, dtype=dtype, weight_scale=0.5)
    case = make_case(cfg)
    clean = PEERS["reference"].backward(cfg, case)
    assert compare_peer(Recorded("reference", gradients=clean), cfg, case, backward=True).passed
    planted = getattr(clean, quantity).copy()
    flat = planted.reshape(-1)
    flat[5] += PLANTED_GRADIENT_ERRORS[dtype] * np.finfo(dtype).eps * max(1.0, float(np.abs(planted).max()))
    comparison = compare_peer(Recorded("reference", gradients=clean._replace(**{quantity: planted})), cfg, case,
                              backward=True)
    verdict = comparison.verdicts[quantity]
    assert verdict.kappa < 3, "a well-conditioned config, or the planted error proves nothing"
    assert not verdict.passed, verdict.explain(quantity)


def test_sensitivity_separates_contracting_from_chaotic_dynamics():
    calm = RNNConfig("gru", num_units=8, input_size=4, seq_len=20, batch=2, weight_scale=0.5)
    wild = RNNConfig("tanh", num_units=32, input_size=4, seq_len=200, batch=2, weight_scale=4.0)
    assert sensitivity(calm, make_case(calm))["output"] < 10
    assert sensitivity(wild, make_case(wild))["output"] > 1000


def test_an_explosive_configs_kappa_is_its_derivative_not_a_saturated_response():
    """tanh outputs move by at most 2, so at the default delta no response exceeds 2 / DELTA; a chaotic
    config's kappa goes past that only because delta shrinks until the response is linear again."""
    wild = RNNConfig("tanh", num_units=32, input_size=4, seq_len=200, batch=2, weight_scale=4.0)
    assert sensitivity(wild, make_case(wild))["output"] > 10 * 2 / conditioning.DELTA


def test_float16_rounding_can_cross_a_relu_kink_and_kappa_says_so():
    """A relu pre-activation of 2^-11 (x = 1, W = 1, b_W = -(1 - 2^-11)): relative changes of DELTA never
    cross 0, changes of float16's eps do, and there the gradient jumps; a correct float16 implementation
    may land on either side, so its kappa must show the jump. The same values in float64 are calm."""
    def kink(dtype: str):
        cfg = RNNConfig("relu", num_units=1, input_size=1, seq_len=1, batch=1, dtype=dtype)
        case = make_case(cfg)._replace(x=np.ones((1, 1, 1), dtype))
        weights = [np.ones((1, 1), dtype), np.zeros((1, 1), dtype)]
        biases = [np.full(1, -(1 - 2.0 ** -11), dtype), np.zeros(1, dtype)]
        return cfg, case._replace(weights=weights, biases=biases)

    kappa16 = sensitivity(*kink("float16"), evaluate=ground_truth_backward)
    kappa64 = sensitivity(*kink("float64"), evaluate=ground_truth_backward)
    assert kappa16["d_input"] > 100 and kappa64["d_input"] < 10, (kappa16, kappa64)


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


def test_the_built_in_exceptions_pass_the_check_every_plugin_s_pass():
    """One check for every peer's exceptions (``peer_exceptions.problem``): the built-in tables, per peer, pass what a
    plugin peer's must as it loads, with the areas of the one-peer tests besides."""
    for name in BUILT_IN:
        peer = PEERS[name]
        overrides = [o for o in tolerances.OVERRIDES if o.peer == name]
        divergences = [d for d in known_divergences.KNOWN if d.peer == name]
        assert peer_exceptions.problem(name, peer.capabilities.modes, overrides, divergences, areas=peer_exceptions.AREAS) is None
        assert peer.overrides == () and peer.known_divergences == ()  # a built-in peer's are in the tables
    assert {o.peer for o in tolerances.OVERRIDES} | {d.peer for d in known_divergences.KNOWN} <= set(BUILT_IN)


def test_a_recorded_result_is_judged_by_the_budget_of_the_peer_it_names():
    """A name (or a ``Recorded`` result) reads the exceptions of the registered peer of that name."""
    half = tolerances.budget("torch-cpu", "float16", "output")
    assert half.bound == 8.0 and tolerances.budget(Recorded("torch-cpu"), "float16", "output") == half
    assert tolerances.budget(PEERS["torch-cpu"], "float16", "output") == half
    assert tolerances.budget("reference", "float16", "output") == tolerances.DEFAULTS[("float16", "forward")]


def test_comparison_explains_itself_with_a_reproduce_command():
    cfg = RNNConfig("gru", dtype="float32")
    text = compare_peer(PEERS["reference"], cfg).explain()
    assert "rnn-compat check --peer reference --config" in text
    assert RNNConfig.from_json(text.split("--config '")[1].split("'")[0]) == cfg


def test_keras_float16_gradients_are_half_precision_math(available_peer):
    """The premise of the Keras float16 gradient override: on the worst config of a full report grid (seed 4)
    Keras's gradients are off by more than the reference's float16 gradients (float32 math rounded once) reach
    anywhere (calibration max 0.93, full report grids 1.0), the reference's stay below that here, and Keras's
    stay within the override."""
    keras = available_peer("keras")
    cfg = RNNConfig("classic_gru", num_layers=3, num_units=16, input_size=16, seq_len=12, batch=4, dtype="float16",
                    initial_state=True, seed=400224)  # rnn-compat report --grid full --seed 4
    got, reference = compare_peer(keras, cfg, backward=True), compare_peer(PEERS["reference"], cfg, backward=True)
    assert got.passed and max(v.conditioned_error for v in got.verdicts.values()) > 1.0, got.explain()
    assert all(v.conditioned_error < 1.0 for v in reference.verdicts.values()), reference.explain()
    assert {v.bound for v in got.verdicts.values()} == {tolerances._KERAS_HALF_GRADIENTS.bound}  # T*B < 64: no factor


def test_keras_float16_override_is_needed_and_enough(available_peer):
    """The Keras float16 override (half-precision math) stays true both ways: on the calibration's worst
    config Keras exceeds the default float16 budget, which the reference meets, and stays within its own."""
    keras = available_peer("keras")
    cfg = RNNConfig("gru", num_layers=2, num_units=1, input_size=1, direction="bidirectional", seq_len=10, batch=4,
                    dtype="float16", weight_scale=4.0, seed=200141)  # calibration --seed 2 --peers keras
    default = tolerances.DEFAULTS[("float16", "forward")].bound
    got = compare_peer(keras, cfg)
    assert got.passed, got.explain()
    assert max(v.conditioned_error for v in got.verdicts.values()) > default, got.explain()
    assert all(v.conditioned_error <= default for v in compare_peer(PEERS["reference"], cfg).verdicts.values())
