"""The reference against cuDNN's own published numbers (``compat_tests.judge.published``): the checksums NVIDIA's cuDNN
RNN sample printed on an M40 (and once more on an RTX 3060), forward and backward, for relu, tanh, LSTM and
cuDNN's GRU, in the float64 truth and the float32 engine, each within the bound the policy derives
(``tolerances.published_rtol``: the 7 printed digits and float32's worst case for the longest sum behind a
checksum). The expected values are cuDNN's, never this code's; the textbook GRU and a single bias miss them,
so the numbers are seen to discriminate.

Each (mode, dtype) is computed once, by its own test: T = 20, 2 layers, H = I = 512, B = 64 takes 1-4 s in
float64 and under 1 s in float32, backward included.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from compat_tests.judge import published
from compat_tests.judge.tolerances import PUBLISHED_PRINT_RTOL, TEXTBOOK_GRU_MISSES_BY, float32_sum_rtol, published_rtol
from compat_tests.peers import PEERS
from compat_tests.run import ground_truth, ground_truth_backward

MODES = ("relu", "tanh", "lstm", "gru")


def misses(got: dict[str, float], cfg, peer=None) -> dict[str, str]:
    """The checksums of ``got`` outside their bound from a published run's, each with its numbers."""
    out = {}
    for run in published.runs():
        want = run.checksums.get(cfg.mode, {})
        for name, delta in published.relative(got, want).items():
            bound = published_rtol(cfg, published.CHECKSUMS[name], peer)
            if not abs(delta) <= bound:
                out[f"{run.name} {name}"] = f"{got[name]:.7e} vs {want[name]:.6e}: {delta:+.2e} > {bound:.2e}"
    return out


def test_the_data_file_holds_the_sample_its_modes_and_both_runs():
    assert published.modes() == MODES
    first, later = published.runs()
    assert first.device == "Tesla M40" and "RNN_example.cu" in first.source
    for mode in MODES:  # every golden file prints y, hy, dx, dhx, dw, and cy, dcx for the LSTM
        expected = {"y", "hy", "dx", "dhx", "dw"} | ({"cy", "dcx"} if mode == "lstm" else set())
        assert set(published.golden(mode)) == expected, mode
    assert set(later.checksums) == {"relu"} and "CUDA 12.3" in later.software
    cfg = published.config("relu")
    assert (cfg.num_layers, cfg.num_units, cfg.input_size, cfg.seq_len, cfg.batch, cfg.direction, cfg.input_mode) \
        == (2, 512, 512, 20, 64, "unidirectional", "linear_input")


def test_the_bound_admits_the_drift_between_the_two_published_gpus():
    """Two float32 cuDNN runs are each within gamma_n of the exact checksums, so within 2 gamma_n and two
    prints of each other: the drift on record (relu dw 8.3e-6), the scale of GPU-to-GPU variation, must be
    inside, or the bound would call real cuDNN wrong."""
    cfg = published.config("relu")
    drift = published.drift("relu")
    assert set(drift) == {"y", "hy", "dx", "dhx", "dw"} and abs(drift["dw"]) == pytest.approx(8.25e-6, rel=1e-2)
    for name, delta in drift.items():
        assert abs(delta) <= 2 * float32_sum_rtol(cfg) + 2 * PUBLISHED_PRINT_RTOL, (name, delta)
    assert published.drift("gru") == {}


def test_the_sample_s_arrays_are_its_fills():
    cfg = published.config("lstm")
    case = published.case(cfg)
    assert all(w.dtype == np.float32 and (w == np.float32(2.0**-18)).all() for w in case.weights)  # 1 / (512 * 512)
    assert len(case.weights) == len(case.biases) == 2 * 2 * 4 and all((b == 1).all() for b in case.biases)
    for a in (case.x, case.h0, case.c0, case.dy, case.dh, case.dc):
        assert a.dtype == np.float32 and (a == 1).all()
    assert case.x.shape == (20, 64, 512) and case.h0.shape == (2, 64, 512) and case.lengths is None
    with pytest.raises(ValueError, match="not the published sample's configuration"):
        published.case(cfg.with_(seq_len=19))


@pytest.mark.parametrize("mode", MODES)
def test_the_float64_truth_gives_cudnns_published_checksums(mode):
    cfg = published.config(mode, "float64")
    got = published.checksums(*published.run(cfg))
    assert set(got) >= set(published.golden(mode))
    assert not misses(got, cfg), misses(got, cfg)


@pytest.mark.parametrize("mode", MODES)
def test_the_float32_reference_gives_cudnns_published_checksums(mode):
    cfg = published.config(mode, "float32")
    got = published.checksums(*published.run(cfg, PEERS["reference"]))
    assert not misses(got, cfg, "reference"), misses(got, cfg, "reference")


def test_the_textbook_gru_does_not_give_the_gru_row():
    """Under the sample's weights the textbook GRU (reset gate before the recurrent product) is another
    function: it misses cuDNN's dx and dw by tens of percent, and y and hy by far more than the bound."""
    cfg = published.config("gru", "float64")
    case = published.case(cfg)
    textbook = cfg.with_(mode="classic_gru")
    got = published.checksums(ground_truth(textbook, case), ground_truth_backward(textbook, case))
    delta = published.relative(got, published.golden("gru"))
    assert abs(delta["dx"]) > TEXTBOOK_GRU_MISSES_BY and abs(delta["dw"]) > TEXTBOOK_GRU_MISSES_BY, delta
    for name in ("y", "hy"):
        assert abs(delta[name]) > published_rtol(cfg, published.CHECKSUMS[name]), (name, delta)


def test_a_single_bias_does_not_give_the_relu_row():
    """cuDNN's double bias is seen in the numbers: without the recurrent biases (a single bias, as
    ``CUDNN_RNN_SINGLE_INP_BIAS``) the forward checksums miss by far more than the bound."""
    cfg = published.config("relu", "float32")
    case = published.case(cfg)
    _, b_shapes = cfg.model().canonical_shapes()
    recurrent = [k % 2 == 1 for k in range(len(b_shapes))]  # per pseudo-layer: the input bias, then the recurrent
    single = case._replace(biases=[np.zeros_like(b) if r else b for b, r in zip(case.biases, recurrent)])
    got = published.checksums(PEERS["reference"].forward(cfg, single))
    delta = published.relative(got, published.golden("relu"))
    assert all(abs(delta[name]) > 100 * published_rtol(cfg, "output", "reference") for name in ("y", "hy")), delta


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda d: d.pop("runs"), "must be an object with 'configuration' and 'runs'"),
    (lambda d: d["runs"][0]["checksums"].pop("gru"), r"runs\[0\] \(the sample's own golden files\) must hold"),
    (lambda d: d["runs"][1]["checksums"]["relu"].update(dz=1.0), r"runs\[1\].checksums\['relu'\] must map names"),
    (lambda d: d["runs"][0]["checksums"]["tanh"].update(y=0), r"runs\[0\].checksums\['tanh'\] must map names"),
])
def test_a_data_file_that_cannot_be_read_is_refused_naming_the_problem(tmp_path, edit, problem):
    data = json.loads(published.DATA.read_text())
    edit(data)
    path = tmp_path / "sample.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=problem):
        published._data(path)
