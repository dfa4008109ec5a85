"""Meta-tests of the Hypothesis strategies: they draw valid configs that the peer can run."""

from __future__ import annotations

import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from compat_tests.config import BIAS_MODE_NAMES, RNNConfig, make_case
from compat_tests.peers import Capabilities
from compat_tests.strategies import MAX_TIME, pairwise, rnn_configs


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


FEATURES = {
    "ragged lengths": lambda c: c.lengths is not None and min(c.lengths) < c.seq_len,
    "skip_input": lambda c: c.input_mode == "skip_input",
    "projection": lambda c: c.num_proj is not None,
    "batch-major": lambda c: not c.time_major,
    "bidirectional": lambda c: c.num_dirs == 2,
    "three layers": lambda c: c.num_layers == 3,
    "float16": lambda c: c.dtype == "float16",
    "no initial state": lambda c: not c.initial_state,
    "textbook GRU": lambda c: c.mode == "classic_gru",
}


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_the_default_strategy_draws_every_feature(feature):
    """If a strategy piece stopped drawing a feature, every property test would stay green: not here."""
    find(rnn_configs(), FEATURES[feature], settings=settings(max_examples=2000, database=None))


LIMITED = Capabilities(modes=("gru",), dtypes=("float32",), skip_input=False, projection=False, lengths=False,
                       batch_major=False, bidirectional=False, max_layers=2)


@given(cfg=rnn_configs(LIMITED))
def test_a_limited_peer_gets_only_what_it_declares(cfg):
    """Every ``Capabilities`` field a peer can turn off (a plugin's own implementation may lack many)."""
    assert LIMITED.unsupported(cfg) is None
    assert (cfg.mode, cfg.dtype, cfg.input_mode, cfg.num_proj, cfg.lengths, cfg.time_major, cfg.direction) == (
        "gru", "float32", "linear_input", None, None, True, "unidirectional")
    assert cfg.num_layers <= 2


@pytest.mark.parametrize(("change", "reason"), [
    ({"num_layers": 3}, "stacks of more than 2 layer(s) not supported"),
    ({"direction": "bidirectional"}, "bidirectional layers not supported"),
])
def test_a_limited_peer_says_why_it_cannot_run_a_config(change, reason):
    assert LIMITED.unsupported(RNNConfig("gru", dtype="float32", **change)) == reason
    assert Capabilities().unsupported(RNNConfig("gru", dtype="float32", **change)) is None


@pytest.mark.parametrize("feature", ["layers", "bidirectional", "ragged", "batch_major", "projection", "skip_input"])
@given(data=st.data())
def test_a_required_feature_is_in_every_drawn_config(feature, data):
    """What the GPU ladder's rungs rest on: ``require`` draws the feature always, nothing it does not offer."""
    cfg = data.draw(rnn_configs(require=frozenset({feature})), label="config")
    has = {"layers": cfg.num_layers >= 2, "bidirectional": cfg.num_dirs == 2, "batch_major": not cfg.time_major,
           "ragged": cfg.lengths is not None and min(cfg.lengths) < cfg.seq_len, "projection": cfg.num_proj is not None,
           "skip_input": cfg.input_mode == "skip_input"}
    assert has[feature], cfg


@given(data=st.data())
def test_a_rung_draws_its_feature_and_nothing_it_does_not_offer(data):
    from compat_tests.gpu import ladder as gpu_ladder
    from compat_tests.strategies import rung_configs

    drawing = [r for r in gpu_ladder.RUNGS if set(gpu_ladder.STRUCTURE) <= set(r.checks)]  # base .. combined
    rung = data.draw(st.sampled_from(drawing), label="rung")
    cudnn = Capabilities(modes=("relu", "tanh", "lstm", "gru"), bias_modes=BIAS_MODE_NAMES)
    cfg = data.draw(rung_configs(rung, cudnn), label="config")
    drawn = {"layers": cfg.num_layers >= 2, "bidirectional": cfg.num_dirs == 2, "batch_major": not cfg.time_major,
             "ragged": cfg.lengths is not None, "projection": cfg.num_proj is not None,
             "skip_input": cfg.input_mode == "skip_input"}
    assert {f for f, on in drawn.items() if on} <= rung.offers, (rung.name, cfg)
    assert rung.require <= {f for f, on in drawn.items() if on}, (rung.name, cfg)
    assert cfg.dtype in rung.dtypes and cfg.mode != "classic_gru" and cfg.bias_mode in rung.bias_modes


def test_require_refuses_what_it_cannot_draw():
    with pytest.raises(ValueError, match="require must name features among"):
        find(rnn_configs(require=frozenset({"peepholes"})), lambda cfg: True, settings=settings(database=None))
    with pytest.raises(ValueError, match="which the capabilities"):
        find(rnn_configs(LIMITED, require=frozenset({"bidirectional"})), lambda cfg: True,
             settings=settings(database=None))


@given(levels=st.lists(st.integers(1, 3), min_size=1, max_size=5))
def test_the_pairwise_rows_of_a_sweep_hold_every_pair_of_values_in_their_order(levels):
    """``pairwise`` (the sweeps that run whole only under the thorough profile): a subset of the rows, in the
    sweep's order, in which every two factors take every pair of values the sweep gives them."""
    import itertools

    rows = list(itertools.product(*(range(n) for n in levels)))
    chosen = pairwise(rows)
    assert chosen == [row for row in rows if row in chosen], "a subset, in order"
    for i, j in itertools.combinations(range(len(levels)), 2):
        assert {(r[i], r[j]) for r in chosen} == {(r[i], r[j]) for r in rows}, (i, j)


def test_the_exporter_sweeps_run_the_pairwise_rows_their_docstrings_count():
    """the ONNX exporters' sweeps (helpers) say how many rows they run outside the thorough profile: 10 of 288 and 6 of
    16."""
    from compat_tests.tests.helpers import DYNAMO_SWEEP as dynamo
    from compat_tests.tests.helpers import TORCHSCRIPT_SWEEP as torchscript

    assert (len(torchscript), len(pairwise(torchscript)), len(dynamo), len(pairwise(dynamo))) == (288, 10, 16, 6)
