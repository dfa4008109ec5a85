"""Forward pass: the reference against every peer, judged by the tolerance policy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compat_tests.config import RNNConfig, make_case
from compat_tests.judge.compare import compare_peer
from compat_tests.judge.known_divergences import known
from compat_tests.judge.metrics import error_stats
from compat_tests.judge.tolerances import TORCH_FLOAT64_AGREEMENT
from compat_tests.peers import PEERS
from compat_tests.run import ground_truth
from compat_tests.strategies import rnn_configs


@pytest.mark.laddered
@given(data=st.data())
def test_peer_matches_float64_reference(peer, data):
    cfg = data.draw(rnn_configs(peer.capabilities), label="config")
    comparison = compare_peer(peer, cfg)
    assert comparison.passed, comparison.explain()


# Every feature PyTorch has, each mode it has, in float64: the issue's ~1e-12 relative agreement.
TORCH_FEATURES = {
    "plain": {},
    "three_layers": {"num_layers": 3},
    "bidirectional": {"direction": "bidirectional", "num_layers": 2},
    "ragged_lengths": {"lengths": (7, 3, 1, 5)},
    "ragged_bidirectional": {"lengths": (2, 7, 7, 4), "direction": "bidirectional", "num_layers": 2},
    "batch_major": {"time_major": False, "lengths": (7, 3, 1, 5), "direction": "bidirectional"},
    "no_initial_state": {"initial_state": False},
    "projection": {"num_proj": 3},
    "projection_bidirectional_ragged": {"num_proj": 3, "direction": "bidirectional", "num_layers": 2,
                                        "lengths": (7, 3, 1, 5)},
}


@pytest.mark.parametrize(("mode", "feature"), [(m, f) for m in ("relu", "tanh", "lstm", "gru") for f in TORCH_FEATURES
                                               if m == "lstm" or not f.startswith("projection")])
def test_torch_float64_agrees_to_1e12(mode, feature, available_peer):
    peer = available_peer("torch-cpu")
    cfg = RNNConfig(mode, num_units=6, input_size=5, seq_len=7, batch=4, dtype="float64", seed=11)
    cfg = cfg.with_(**TORCH_FEATURES[feature])
    case = make_case(cfg)
    truth = ground_truth(cfg, case)
    got = peer.forward(cfg, case)
    for name, expected in truth._asdict().items():
        if expected is not None:
            stats = error_stats(getattr(got, name), expected)
            assert stats.nonfinite_mismatch == 0 and stats.count == expected.size, (name, stats)
            assert stats.max_abs / stats.scale <= TORCH_FLOAT64_AGREEMENT, (name, stats)


@pytest.mark.parametrize("masked", [False, True], ids=["full", "lengths"])
@pytest.mark.parametrize("mode", ["relu", "tanh", "lstm", "gru", "classic_gru"])
def test_keras_float64_is_float64_accurate(mode, masked, request, available_peer):
    """Keras's float64 layers against the float64 budget, outside the Keras peer's declared dtypes; where
    Keras computes in float32 the ledger says so (strict xfail)."""
    peer = available_peer("keras")
    divergence = known("keras", "float64_precision_masked" if masked else "float64_precision", mode)
    if divergence:
        request.applymarker(pytest.mark.xfail(reason=divergence.reason, strict=True))
    cfg = RNNConfig(mode, num_layers=2, num_units=6, input_size=5, seq_len=7, batch=4, direction="bidirectional",
                    lengths=(7, 3, 1, 5) if masked else None, dtype="float64", seed=11)
    comparison = compare_peer(peer, cfg)
    assert comparison.passed, comparison.explain()


@pytest.mark.parametrize("mode", ["relu", "tanh", "lstm", "gru", "classic_gru"])
def test_nan_input_propagates_to_its_own_sequence_only(peer, mode, request):
    cfg = RNNConfig(mode, num_layers=2, num_units=4, input_size=3, seq_len=6, batch=3, dtype=peer.capabilities.dtypes[-1])
    if peer.unsupported(cfg):
        pytest.skip(peer.unsupported(cfg))
    divergence = known(peer.name, "nan_propagation", mode)
    if divergence:
        request.applymarker(pytest.mark.xfail(reason=divergence.reason, strict=True))
    case = make_case(cfg)
    t0, b0 = 2, 1
    case.x[t0, b0, 0] = np.nan
    with np.errstate(all="ignore"):
        out = peer.forward(cfg, case)
    assert np.isnan(out.output[t0:, b0]).all(), "NaN did not reach every later output of its sequence"
    assert np.isnan(out.output[:t0, b0]).sum() == 0, "NaN leaked backwards in time (unidirectional)"
    assert np.isnan(out.output_h[:, b0]).all()
    assert np.isfinite(np.delete(out.output, b0, axis=1)).all(), "NaN leaked into other sequences"


@pytest.mark.parametrize(("mode", "saturates"), [("relu", False), ("tanh", True), ("lstm", True), ("gru", True)])
def test_inf_input_saturates_bounded_cells_and_poisons_relu_only_in_its_sequence(mode, saturates):
    """+inf in one input: tanh/sigmoid cells saturate to finite values; a relu RNN carries inf into the next
    GEMM, where inf - inf makes NaN. Other sequences never see it."""
    cfg = RNNConfig(mode, num_layers=2, num_units=4, input_size=3, seq_len=6, batch=3, dtype="float64")
    case = make_case(cfg)
    case.x[2, 1, 0] = np.inf
    with np.errstate(all="ignore"):
        out = PEERS["reference"].forward(cfg.with_(dtype="float32"), case.astype(np.float32))
    assert np.isfinite(np.delete(out.output, 1, axis=1)).all()
    assert np.isfinite(out.output[2:, 1]).all() == saturates
