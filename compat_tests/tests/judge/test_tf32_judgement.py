"""The TF32 judgement: a TF32 result is held to the FMA truth by the TF32 budget and, where every operand of its
first step is a given value (one layer, no projection), that step to the TF32 truth within
``tolerances.TF32_FIRST_STEP_SHARE`` of what TF32 costs there. So the reference's TF32 computed without TF32, with
truncated operands, or with one GEMM's operands (or the biases) read otherwise than the truth's fails, where the
TF32 budget alone passes it. A GPU's default math may leave a GEMM in float32 and, until a GPU settles the rule,
round by any candidate: such a result fits that truth and passes, naming it; rounded biases fit none. The reports
show which step strayed and by how much, and which truths each backend's first steps fit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from compat_tests.config import Outputs, RNNConfig, make_case
from compat_tests.judge import tolerances
from compat_tests.judge.compare import TF32_GEMM_SETS, Recorded, compare_peer, first_step_fit
from compat_tests.judge.metrics import tf32_share
from compat_tests.peers import PEERS
from compat_tests.peers.reference_peer import ReferenceTF32Peer
from compat_tests.run import run_reference, run_reference_backward
from compat_tests.tests.helpers import run
from reference import precision, recurrence, spec
from reference.spec import cell

MODES = ("relu", "tanh", "lstm", "gru", "classic_gru")
BOUND = tolerances.TF32_FIRST_STEP_SHARE.bound
WITH_STATE = ("relu", "tanh", "lstm", "gru")  # judged from a given state (the textbook GRU's reads r * h)


def test_the_share_is_the_distance_from_the_tf32_truth_over_what_tf32_costs():
    fma = np.array([1.0, 2.0, 3.0, 4.0])
    cost = np.array([1.0, -1.0, 1.0, -1.0]) * 2.0**-10  # rms 2^-10 = 8192 float32 eps: far above the least cost
    tf32 = fma + cost
    assert tf32_share(tf32.astype(np.float32), fma, tf32, 256) < 2.0**-22 / 2.0**-10  # float32 storage alone
    assert tf32_share(fma.astype(np.float32), fma, tf32, 256) == 1.0  # the FMA truth, exact in float32
    assert tf32_share((fma + 3 * cost).astype(np.float32), fma, tf32, 256) == 2.0  # twice the cost, other side
    with_nan = np.append(fma, np.nan).astype(np.float32)
    assert tf32_share(with_nan, np.append(fma, 5.0), np.append(tf32, 5.0), 256) == 1.0  # NaN left out, 5 exact
    assert tf32_share(fma.astype(np.float32), fma, fma + 1e-9, 256) is None  # TF32 costs nothing worth a share
    with pytest.raises(ValueError, match="shape mismatch"):
        tf32_share(fma[:3].astype(np.float32), fma, tf32, 256)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layout", ["uni", "bidirectional with lengths", "batch-major"])
def test_the_reference_s_tf32_math_follows_the_tf32_truth_at_its_first_step(mode, layout):
    extra = {"uni": {}, "bidirectional with lengths": dict(direction="bidirectional", lengths=(5, 2, 7)),
             "batch-major": dict(time_major=False)}[layout]
    cfg = RNNConfig(mode, 1, 24, 16, seq_len=7, batch=3, dtype="float32", seed=4,
                    initial_state=mode != "classic_gru", **extra)  # (the textbook GRU's r * h: computed)
    comparison = compare_peer(PEERS["reference-tf32"], cfg)
    share = comparison.verdicts["output"].tf32_share
    assert share is not None and share <= BOUND / 10, comparison.explain()
    assert comparison.passed, comparison.explain()


def test_the_first_step_is_judged_only_where_its_operands_are_given():
    """Above the first layer a step's GEMMs read the lower layer's output, a projection reads o * tanh(c), the
    textbook GRU's candidate r * h: values computed in float32 that may round to another TF32 value than the
    truth's, so no share is judged."""
    for cfg in (RNNConfig("gru", 2, 24, 16, seq_len=3, batch=3, dtype="float32"),
                RNNConfig("lstm", 1, 24, 16, seq_len=3, batch=3, dtype="float32", num_proj=8),
                RNNConfig("classic_gru", 1, 24, 16, seq_len=3, batch=3, dtype="float32")):
        case = make_case(cfg)
        assert first_step_fit("reference-tf32", cfg, case, run_reference(cfg, case, math_type="tf32").output) is None
        assert compare_peer(PEERS["reference-tf32"], cfg, case).verdicts["output"].tf32_share is None
    without_state = RNNConfig("classic_gru", 1, 24, 16, seq_len=3, batch=3, dtype="float32", initial_state=False)
    assert compare_peer(PEERS["reference-tf32"], without_state).verdicts["output"].tf32_share is not None
    assert compare_peer(PEERS["reference"], RNNConfig("gru", 1, 8, 4, dtype="float32")).verdicts["output"].tf32_share \
        is None  # a peer computing without TF32 is not held to the TF32 truth


def _faulty(fault: str, monkeypatch):
    """The reference engine's TF32 forward with ``fault`` planted (the truths, from reference.spec, untouched)."""
    if fault == "computed without TF32":
        return lambda cfg, case: run_reference(cfg, case)
    if fault == "operands truncated":
        def truncated(cfg, case):
            with monkeypatch.context() as m:
                m.setattr(precision, "TF32_ROUNDING", "truncate")  # read as the model is made
                return run_reference(cfg, case, math_type="tf32")
        return truncated
    real_layer = recurrence.tf32_layer

    def planted_layer(params, operand):
        rounded = real_layer(params, operand)
        unrounded = {"W not rounded": {"W": params.W}, "R not rounded": {"R": params.R},
                     "biases rounded": {"b_W": operand(params.b_W), "b_R": operand(params.b_R)}}[fault]
        return recurrence.replace(rounded, **unrounded)

    monkeypatch.setattr(recurrence, "tf32_layer", planted_layer)
    return lambda cfg, case: run_reference(cfg, case, math_type="tf32")


@pytest.mark.parametrize("fault", ["computed without TF32", "operands truncated", "W not rounded", "R not rounded",
                                   "biases rounded"])
def test_a_wrong_tf32_path_fails_where_the_tf32_budget_alone_passes_it(monkeypatch, fault):
    forward = _faulty(fault, monkeypatch)
    for mode in WITH_STATE:
        cfg = RNNConfig(mode, 1, 24, 16, seq_len=5, batch=3, dtype="float32", seed=2)
        case = make_case(cfg)
        verdict = compare_peer(Recorded("reference-tf32", outputs=forward(cfg, case)), cfg, case).verdicts["output"]
        assert verdict.conditioned_error <= verdict.bound, verdict.explain("output")  # the budget alone: passed
        assert not verdict.passed and verdict.strays_from_tf32, verdict.explain("output")
        assert f"of TF32's cost from the TF32 truth > {BOUND:g}" in verdict.explain("output")


def _spec_in_float32(cfg: RNNConfig, case, gemms: tuple[str, ...]):
    """The plain cells in float32 with TF32 in ``gemms`` of the forward GEMMs only: a float32 run as a GPU's default
    math may compute it, a kernel on TF32 tensor cores for some GEMMs and in float32 for the others."""
    with cell.tf32_variant(gemms):
        out = spec.forward(spec.Network.of(cfg.model()), case.weights, case.biases, case.x, case.h0, case.c0,
                           math_type="tf32")
    return Outputs(*out)


@pytest.mark.parametrize("gemms", TF32_GEMM_SETS)
def test_a_gpu_s_tf32_may_leave_a_gemm_in_float32(gemms):
    """cuDNN's default math and PyTorch's allow_tf32 permit TF32 without forcing it: a result with TF32 in the
    input GEMMs only, the recurrent ones only, both or neither fits that truth and passes, naming the GEMMs."""
    for mode in WITH_STATE:
        cfg = RNNConfig(mode, 1, 24, 16, seq_len=5, batch=3, dtype="float32", seed=2)
        case = make_case(cfg)
        verdict = compare_peer(Recorded("cudnn-tf32", outputs=_spec_in_float32(cfg, case, gemms)), cfg,
                               case).verdicts["output"]
        assert verdict.passed and verdict.tf32_gemms == gemms, verdict.explain("output")
        assert verdict.tf32_rule == (precision.TF32_ROUNDING if gemms else None), verdict.explain("output")
        assert verdict.tf32_share <= BOUND / 10, verdict.explain("output")


def test_until_a_gpu_settles_the_rule_a_gpu_s_tf32_may_round_by_any_candidate(monkeypatch):
    """A result whose operands are truncated fits the truth of truncation, named, while the rule is unsettled
    (``precision.TF32_ROUNDING_SETTLED``); once it is settled only the decided rule fits, and it fails."""
    forward = _faulty("operands truncated", monkeypatch)
    for settled in (False, True):
        monkeypatch.setattr(precision, "TF32_ROUNDING_SETTLED", settled)
        for mode in WITH_STATE:
            cfg = RNNConfig(mode, 1, 24, 16, seq_len=5, batch=3, dtype="float32", seed=2)
            case = make_case(cfg)
            verdict = compare_peer(Recorded("cudnn-tf32", outputs=forward(cfg, case)), cfg, case).verdicts["output"]
            if settled:
                assert not verdict.passed and verdict.strays_from_tf32, verdict.explain("output")
            else:
                fitted = (verdict.tf32_gemms, verdict.tf32_rule)
                assert verdict.passed and fitted == (("input", "recurrent"), "truncate"), verdict.explain("output")
                assert "rule truncate" in verdict.explain("output")


def test_no_tf32_truth_explains_rounded_biases(monkeypatch):
    forward = _faulty("biases rounded", monkeypatch)
    for mode in WITH_STATE:
        cfg = RNNConfig(mode, 1, 24, 16, seq_len=5, batch=3, dtype="float32", seed=2)
        case = make_case(cfg)
        verdict = compare_peer(Recorded("cudnn-tf32", outputs=forward(cfg, case)), cfg, case).verdicts["output"]
        assert not verdict.passed and verdict.strays_from_tf32, verdict.explain("output")


class UntensoredTF32(ReferenceTF32Peer):
    """A peer that says it computes TF32 and computes exact float32 GEMMs (a GPU run with TF32 switched off)."""

    name = "untensored-tf32"

    def forward(self, cfg, case):
        return run_reference(cfg, case)

    def backward(self, cfg, case):
        return run_reference_backward(cfg, case)


def test_a_report_lists_a_tf32_result_that_strays_at_its_first_step(tmp_path, monkeypatch):
    monkeypatch.setitem(PEERS, "untensored-tf32", UntensoredTF32())
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"study": "compat", "config": {"mode": mode, "num_units": 8, "input_size": 5,
                                                             "seq_len": 4, "batch": 2, "dtype": "float32", "seed": 1}}
                                for mode in ("gru", "lstm")]))
    assert run(tmp_path, "--backends", "untensored-tf32", "--grid", str(grid)) == 1
    report = json.loads((tmp_path / "report.json").read_text())
    failing = [w for w in report["worst"] if not w["passed"]]
    assert failing and all(w["quantity"] == "output" and w["tf32_first_step"]["bound"] == BOUND for w in failing)
    for w in failing:  # within the TF32 budget, failed by the first step: it follows the FMA truth
        assert w["conditioned"] <= w["budget"] and w["tf32_first_step"]["share"] == pytest.approx(1.0, abs=0.01), w
    md = (tmp_path / "report.md").read_text()
    assert "its first step strays from the TF32 truth: 1 of TF32's cost \\> 0.05" in md.split("## Failures")[1]
    assert report["policy"]["tf32_first_step"]["bound"] == BOUND
    (study,) = report["studies"]["tf32"]
    assert (study["judged"], study["strayed"]) == (2, 2) and study["largest_share"] == pytest.approx(1.0, abs=0.01)
