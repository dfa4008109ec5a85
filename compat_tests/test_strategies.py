"""Meta-tests of the Hypothesis strategies: they draw valid configs that the peer can run."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from compat_tests.config import RNNConfig, make_case
from compat_tests.strategies import MAX_TIME, rnn_configs


@given(data=st.data())
def test_drawn_configs_are_supported_by_their_peer(peer, data):
    cfg = data.draw(rnn_configs(peer.capabilities), label="config")
    assert peer.unsupported(cfg) is None


@given(cfg=rnn_configs())
def test_drawn_configs_build_models_and_cases(cfg):
    model = cfg.model()
    case = make_case(cfg)
    assert len(case.weights) == len(model.canonical_shapes()[0])
    assert cfg.seq_len <= MAX_TIME
    if cfg.lengths is not None:
        assert len(cfg.lengths) == cfg.batch and all(1 <= n <= cfg.seq_len for n in cfg.lengths)
    if cfg.input_mode == "skip_input":
        assert cfg.input_size == cfg.num_units
    assert RNNConfig.from_json(cfg.to_json()) == cfg
