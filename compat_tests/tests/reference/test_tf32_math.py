"""TF32 math (``math_type="tf32"``): the spec cells and the engine read every GEMM operand rounded to TF32 and
nothing else, and the engine follows the TF32 truth (the spec's, in float64) rather than the FMA one.

A TF32 result is a discontinuous function of its inputs: an operand computed inside the pass (a state, a
layer's output) that lies near the boundary between two TF32 values rounds one way in float32 and the other
in the float64 truth, an error of a TF32 ulp in that operand. So the engine is held to the TF32 truth within
the float32 policy where no operand is computed (one step of one layer), and over a sweep by the typical
(median) error; the largest, where such a flip happened, is documented in docs/reference.md ("TF32 math")."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given

import reference
from compat_tests.config import BIAS_MODE_NAMES, RNNConfig, make_case
from compat_tests.judge import tolerances
from compat_tests.judge.compare import judge_results
from compat_tests.judge.conditioning import sensitivity
from compat_tests.judge.metrics import error_stats
from compat_tests.peers import PEERS
from compat_tests.run import ground_truth
from compat_tests.strategies import rnn_configs
from compat_tests.tests.helpers import finite_difference_failures
from reference import modes, precision, recurrence, spec, tf32
from reference.spec import cell

MODES = ("relu", "tanh", "lstm", "gru", "classic_gru")


def to_tf32(a: np.ndarray) -> np.ndarray:
    return tf32.RULES[precision.TF32_ROUNDING](np.asarray(a, np.float32))


def engine(cfg: RNNConfig, case, math_type: str):
    model = reference.make_model(cfg.mode, cfg.num_layers, cfg.num_units, cfg.input_size, cfg.input_mode,
                                 cfg.direction, np.float32, num_proj=cfg.num_proj, bias_mode=cfg.bias_mode,
                                 math_type=math_type)
    params = model.canonical_to_params(case.weights, case.biases)
    return model.forward(case.x, case.h0, params, input_c=case.c0, is_training=False, sequence_lengths=case.lengths)


def truth(cfg: RNNConfig, case, math_type: str):
    c64 = case.astype(np.float64)
    return spec.forward(spec.Network.of(cfg.model()), c64.weights, c64.biases, c64.x, c64.h0, c64.c0,
                        lengths=case.lengths, math_type=math_type)


def worst(cfg: RNNConfig, case, got, want) -> float:
    """The largest conditioned error (float32 eps) of ``got`` against ``want``, kappa the FMA truth's."""
    kappa = sensitivity(cfg, case, ground_truth(cfg, case))
    return max(error_stats(getattr(got, q), getattr(want, q)).max_eps / max(1.0, kappa[q])
               for q in ("output", "output_h", "output_c") if getattr(want, q) is not None)


def one_step(mode: str, bias_mode: str = "double", exact_operands: bool = False, seed: int = 0):
    cfg = RNNConfig(mode, 1, 12, 7, seq_len=1, batch=3, dtype="float32", bias_mode=bias_mode, seed=seed)
    case = make_case(cfg)
    if exact_operands:  # every GEMM operand a TF32 value already; the biases not (they add outside the GEMMs)
        case = case._replace(weights=[to_tf32(w) for w in case.weights], x=to_tf32(case.x), h0=to_tf32(case.h0))
    return cfg, case


@pytest.mark.parametrize("bias_mode", ["double", "single_rec"])
@pytest.mark.parametrize("mode", ("relu", "tanh", "lstm", "gru"))
def test_tf32_changes_nothing_where_every_gemm_operand_is_a_tf32_value(mode, bias_mode):
    """One step whose weights, input and state are TF32 values (its biases not): the TF32 truth is the FMA truth
    bit for bit, so nothing but the GEMMs' operands is rounded (a rounded bias would differ). (Not the textbook
    GRU: its candidate's GEMM reads ``r * h``, computed in the step.)"""
    cfg, case = one_step(mode, bias_mode, exact_operands=True)
    fma, tf = truth(cfg, case, "fma"), truth(cfg, case, "tf32")
    for q in ("output", "output_h", "output_c"):
        if getattr(fma, q) is not None:
            assert np.array_equal(getattr(fma, q), getattr(tf, q)), q
    got = engine(cfg, case, "tf32")
    assert worst(cfg, case, got, fma) <= tolerances.DEFAULTS[("float32", "forward")].bound


@pytest.mark.parametrize("mode, proj", [(m, None) for m in MODES] + [("lstm", 5)])
def test_the_engine_s_tf32_step_is_the_tf32_truth_s_within_float32_rounding(mode, proj):
    """One step of one layer (the operands are data, but for the textbook GRU's ``r * h`` and the projection's
    ``o * tanh(c)``, here away from a TF32 boundary): within the float32 budget of the TF32 truth, and far (over
    100 eps) from the FMA truth. The planted faults below are caught against these same steps."""
    cfg = RNNConfig(mode, 1, 12, 7, seq_len=1, batch=3, dtype="float32", seed=3, num_proj=proj)
    case = make_case(cfg)
    got = engine(cfg, case, "tf32")
    budget = tolerances.DEFAULTS[("float32", "forward")].bound
    assert worst(cfg, case, got, truth(cfg, case, "tf32")) <= budget
    assert worst(cfg, case, got, truth(cfg, case, "fma")) > 100


@pytest.mark.parametrize("fault", ["R not rounded", "W not rounded", "P not rounded", "biases rounded",
                                   "x not rounded", "state not rounded"])
def test_a_planted_fault_in_the_engine_s_tf32_fails_the_step_check(monkeypatch, fault):
    """TF32 applied to all GEMMs but one, or to the biases too: the one-step check above fails for some mode (the
    projection's fault: an LSTM with a projection, whose own check is within the float32 budget)."""
    real_layer = recurrence.tf32_layer
    rule = tf32.RULES[precision.TF32_ROUNDING]

    def planted_layer(params, operand):
        rounded = real_layer(params, operand)
        unrounded = {"R not rounded": {"R": params.R}, "W not rounded": {"W": params.W},
                     "P not rounded": {"P": params.P},
                     "biases rounded": {"b_W": operand(params.b_W), "b_R": operand(params.b_R)}}
        return recurrence.replace(rounded, **unrounded.get(fault, {}))

    monkeypatch.setattr(recurrence, "tf32_layer", planted_layer)
    if fault == "state not rounded":  # the steps' recurrent GEMMs read the state as it is
        monkeypatch.setattr(modes, "gemm_operand", lambda ws, a: a)
    budget = tolerances.DEFAULTS[("float32", "forward")].bound
    caught = []
    for mode, proj in [(m, None) for m in MODES] + [("lstm", 5)]:
        cfg = RNNConfig(mode, 1, 12, 7, seq_len=1, batch=3, dtype="float32", seed=3, num_proj=proj)
        case = make_case(cfg)
        model = reference.make_model(mode, 1, 12, 7, dtype=np.float32, num_proj=proj, math_type="tf32")
        if fault == "x not rounded":  # the layer's input (the only operand of three axes) as it is
            model._operand = lambda a: a if a.ndim == 3 else rule(a)
        got = model.forward(case.x, case.h0, model.canonical_to_params(case.weights, case.biases), input_c=case.c0,
                            is_training=False)
        caught.append(worst(cfg, case, got, truth(cfg, case, "tf32")) > budget)
    assert any(caught), f"{fault}: no mode's step left the float32 budget of the TF32 truth"


def test_over_a_sweep_the_engine_follows_the_tf32_truth_not_the_fma_one():
    """Seeded configs of every mode, 1-2 layers, H up to 24, T up to 40: the median conditioned error against the
    TF32 truth is within the float32 budget, against the FMA truth it is over 100 eps (a TF32 ulp is 8192)."""
    rng = np.random.default_rng(7)
    against_tf32, against_fma = [], []
    for k in range(20):
        mode = MODES[k % len(MODES)]
        cfg = RNNConfig(mode, int(rng.integers(1, 3)), int(rng.integers(4, 25)), int(rng.integers(2, 17)),
                        direction=("unidirectional", "bidirectional")[k % 2], seq_len=int(rng.integers(2, 41)),
                        batch=int(rng.integers(1, 5)), dtype="float32", seed=k)
        case = make_case(cfg)
        got = engine(cfg, case, "tf32")
        against_tf32.append(worst(cfg, case, got, truth(cfg, case, "tf32")))
        against_fma.append(worst(cfg, case, got, truth(cfg, case, "fma")))
    assert np.median(against_tf32) <= tolerances.DEFAULTS[("float32", "forward")].bound, against_tf32
    assert np.median(against_fma) > 100, against_fma


def test_math_type_is_checked_by_name_and_dtype():
    with pytest.raises(ValueError, match="math_type"):
        reference.CudnnGRU(1, 4, 3, math_type="tensor")
    with pytest.raises(ValueError, match="float32"):
        reference.CudnnGRU(1, 4, 3, dtype=np.float16, math_type="tf32")
    cfg, case = one_step("gru")
    with pytest.raises(ValueError, match="float16"):
        c16 = case.astype(np.float16)
        spec.forward(spec.Network.of(cfg.model()), c16.weights, c16.biases, c16.x, c16.h0, math_type="tf32")
    assert "math_type='tf32'" in repr(reference.CudnnGRU(1, 4, 3, math_type="tf32"))


def engine_gradients(cfg: RNNConfig, case, math_type: str):
    model = reference.make_model(cfg.mode, cfg.num_layers, cfg.num_units, cfg.input_size, dtype=np.float32,
                                 num_proj=cfg.num_proj, math_type=math_type)
    fwd = model.forward(case.x, case.h0, model.canonical_to_params(case.weights, case.biases), input_c=case.c0)
    grads = model.backward(fwd, case.dy, case.dh, case.dc)
    d_weights, d_biases = model.params_to_canonical(grads.params)
    return [grads.input, grads.input_h, *([] if grads.input_c is None else [grads.input_c]), *d_weights, *d_biases]


def truth_gradients(cfg: RNNConfig, case, math_type: str):
    c64 = case.astype(np.float64)
    g = spec.backward(spec.Network.of(cfg.model()), c64.weights, c64.biases, c64.x, c64.h0, c64.c0, c64.dy, c64.dh,
                      c64.dc, math_type=math_type)
    return [g.input, g.input_h, *([] if g.input_c is None else [g.input_c]), *g.weights, *g.biases]


def gradient_error(got: list, want: list) -> float:
    """The largest error of any gradient tensor, in float32 eps of that tensor's scale (one step: kappa ~ 1)."""
    return max(error_stats(a, b).max_eps for a, b in zip(got, want))


@pytest.mark.parametrize("mode, proj", [(m, None) for m in MODES] + [("lstm", 5)])
def test_the_engine_s_tf32_gradients_of_a_step_are_the_tf32_truth_s(mode, proj):
    """The backward pass of one step of one layer under TF32 math (every GEMM: ``dx``, ``dh``, ``dW``, ``dR``,
    ``dP``) within the float32 gradient budget of the TF32 truth's, and far (over 100 eps) from the FMA truth's."""
    cfg = RNNConfig(mode, 1, 12, 7, seq_len=1, batch=3, dtype="float32", seed=3, num_proj=proj)
    case = make_case(cfg)
    got = engine_gradients(cfg, case, "tf32")
    assert gradient_error(got, truth_gradients(cfg, case, "tf32")) <= tolerances.DEFAULTS[("float32", "gradient")].bound
    assert gradient_error(got, truth_gradients(cfg, case, "fma")) > 100


@pytest.mark.parametrize("fault", ["dR's gradient operand not rounded", "dW's input not rounded",
                                   "a step's gradient not rounded"])
def test_a_planted_fault_in_the_tf32_backward_pass_fails_the_gradient_check(monkeypatch, fault):
    from reference import backward

    real_read = backward.read
    if fault == "a step's gradient not rounded":  # the backward steps' GEMMs read d_xw as it is
        monkeypatch.setattr(modes, "read", lambda operand, a: a)
    else:
        wide = {"dR's gradient operand not rounded": "rows", "dW's input not rounded": "x"}[fault]

        def planted(operand, a):  # one GEMM operand of the weight gradients as it is
            if wide == "x" and a.ndim == 2 and a.shape[1] == 7:
                return a
            if wide == "rows" and a.ndim == 2 and a.shape[0] in (12, 24, 36, 48) and a.shape[1] == 3:
                return a
            return real_read(operand, a)

        monkeypatch.setattr(backward, "read", planted)
    budget = tolerances.DEFAULTS[("float32", "gradient")].bound
    caught = []
    for mode in MODES:
        cfg = RNNConfig(mode, 1, 12, 7, seq_len=1, batch=3, dtype="float32", seed=3)
        case = make_case(cfg)
        caught.append(gradient_error(engine_gradients(cfg, case, "tf32"), truth_gradients(cfg, case, "tf32")) > budget)
    assert any(caught), f"{fault}: no mode's gradients left the float32 budget of the TF32 truth"


@pytest.mark.parametrize("mode", MODES)
def test_a_tf32_models_stream_and_step_are_its_one_step_forward_bit_for_bit(mode):
    """The streaming API of a TF32 model: every step (``bound.step``, and a stream's) is that model's forward of
    the one step, bit for bit, and differs from the FMA model's."""
    cfg = RNNConfig(mode, 2, 12, 7, seq_len=6, batch=3, dtype="float32", seed=5)
    case = make_case(cfg)
    model = reference.make_model(mode, 2, 12, 7, dtype=np.float32, math_type="tf32")
    fma = reference.make_model(mode, 2, 12, 7, dtype=np.float32)
    params = model.canonical_to_params(case.weights, case.biases)
    bound = model.bind(params)
    stream = bound.stream(3, case.h0, case.c0)
    h, c = case.h0, case.c0
    differs = False
    for x_t in case.x:
        want = model.forward(x_t[None], h, params, c, is_training=False)
        got = bound.step(x_t, h, c) if cfg.has_cell_state else bound.step(x_t, h)
        assert np.array_equal(got[0], want.output[0]) and np.array_equal(got[1], want.output_h)
        assert np.array_equal(stream.step(x_t), want.output[0])
        differs |= not np.array_equal(want.output, fma.forward(x_t[None], h, params, c, is_training=False).output)
        h, c = want.output_h, want.output_c
    assert differs


@given(cfg=rnn_configs(PEERS["reference-tf32"].capabilities, modes_=("relu", "tanh", "lstm", "gru"), max_layers=1,
                       max_time=1, bias_modes_=BIAS_MODE_NAMES, cell_clips_=(None, (-0.5, 0.5)),
                       packed_=(False, True)))
def test_every_feature_of_a_tf32_step_is_the_tf32_truths(cfg):
    """One step of one layer, every mode whose GEMMs read data only (the textbook GRU's ``r * h`` and the
    projection's ``o * tanh(c)`` are computed: see the module docstring) and every feature the engine has (bias
    modes, skip_input, both directions, batch-major, the cell clip, packed sequences): the reference-tf32
    peer within the float32 budget of the TF32 truth."""
    assume(cfg.num_proj is None)
    case = make_case(cfg)
    truth = ground_truth(cfg, case, math_type="tf32")
    verdict = judge_results("reference", cfg, PEERS["reference-tf32"].forward(cfg, case), truth,
                            sensitivity(cfg, case, ground_truth(cfg, case)))
    assert verdict.passed, verdict.explain()


FD_CONFIGS = [dict(num_layers=1, seq_len=3, batch=2), dict(num_layers=2, direction="bidirectional", seq_len=2, batch=3)]


@pytest.mark.parametrize("mode", MODES)
def test_the_tf32_truth_s_gradients_are_the_function_s_within_tf32_rounding(mode):
    """The TF32 truth's gradients (every backward GEMM on TF32 operands) against central finite differences of the
    exact function: within TF32's rounding (``TF32_FINITE_DIFFERENCE_RTOL``), and not within float64's (TF32 is
    applied), along coordinates and random directions of the input, the initial states, the weights and biases."""
    for seed, shape in enumerate(FD_CONFIGS):
        cfg = RNNConfig(mode, num_units=6, input_size=5, dtype="float32", seed=seed, **shape)
        case = make_case(cfg)
        assert not finite_difference_failures(cfg, case, math_type="tf32", rtol=tolerances.TF32_FINITE_DIFFERENCE_RTOL)
        assert finite_difference_failures(cfg, case, math_type="tf32")  # at float64's tolerance TF32 shows


def test_gradients_on_operands_coarser_than_tf32_fail_the_finite_differences(monkeypatch):
    """A planted fault: the backward GEMMs' operands rounded to 6 significant bits, not TF32's 11."""
    def coarse(a):
        if cell._MATH.get() == "fma":
            return a
        m, e = np.frexp(np.asarray(a))
        return np.ldexp(np.round(m * 64) / 64, e)

    monkeypatch.setattr(cell, "operand", coarse)
    caught = []
    for seed, shape in enumerate(FD_CONFIGS):
        cfg = RNNConfig("gru", num_units=6, input_size=5, dtype="float32", seed=seed, **shape)
        caught += finite_difference_failures(cfg, make_case(cfg), math_type="tf32",
                                             rtol=tolerances.TF32_FINITE_DIFFERENCE_RTOL)
    assert caught


def test_a_tf32_variant_rounds_by_its_rule_in_its_gemms_alone():
    """``spec.cell.tf32_variant``: the truth of TF32 by another rule, or in the input or the recurrent GEMMs alone,
    is the FMA truth on those GEMMs' operands rounded by that rule (a tanh RNN: its state enters only through
    ``R h``); a name it does not know is refused."""
    cfg = RNNConfig("tanh", 1, 12, 7, seq_len=1, batch=3, dtype="float32", seed=1)
    case = make_case(cfg)
    net = spec.Network.of(cfg.model())
    (W, R), x, h = case.weights, case.x, case.h0

    def run(W, R, x, h, math_type="fma"):
        return spec.forward(net, [W.astype(np.float64), R.astype(np.float64)], [b.astype(np.float64) for b in
                            case.biases], x.astype(np.float64), h.astype(np.float64), math_type=math_type).output

    decided, truncate = tf32.RULES[precision.TF32_ROUNDING], tf32.RULES["truncate"]
    with cell.tf32_variant(rule="truncate"):
        assert np.array_equal(run(W, R, x, h, "tf32"), run(truncate(W), truncate(R), truncate(x), truncate(h)))
    with cell.tf32_variant(("input",)):
        assert np.array_equal(run(W, R, x, h, "tf32"), run(decided(W), R, decided(x), h))
    with cell.tf32_variant(("recurrent",), rule="truncate"):
        assert np.array_equal(run(W, R, x, h, "tf32"), run(W, truncate(R), x, truncate(h)))
    assert np.array_equal(run(W, R, x, h, "tf32"), run(decided(W), decided(R), decided(x), decided(h)))  # outside
    assert not np.array_equal(run(W, R, x, h, "tf32"), run(W, R, x, h))  # (TF32 shows on these values)
    with pytest.raises(ValueError, match="gemms must be among"):
        with cell.tf32_variant(("projection",)):
            pass
    with pytest.raises(ValueError, match="rule must be one of"):
        with cell.tf32_variant(rule="stochastic"):
            pass
