"""The report's grids: a grid file is refused naming its bad entry before any work, and the embedded grids
(whose seed changes their data, not their shape) cover every mode, feature, bias mode and published sample."""

from __future__ import annotations

import itertools
import json
import re

import pytest

from compat_tests import cli
from compat_tests.config import MODE_NAMES
from compat_tests.peers import PEERS
from compat_tests.report.grids import GRIDS, plan


@pytest.mark.parametrize(("text", "match"), [
    (json.dumps([{"study": "astrology", "config": {"mode": "gru"}}]), "entry 0: unknown study 'astrology'"),
    ("[{", "is not JSON"),
    ("[]", "must hold a non-empty JSON list .* got list \\(empty\\)"),
    (json.dumps({"study": "compat", "config": {"mode": "gru"}}), "must hold a non-empty JSON list .* got dict"),
    (json.dumps([{"study": "compat", "config": {"mode": "gru"}}, {"study": "compat"}]),
     "entry 1 must be an object with exactly the keys 'study' and 'config'"),
    (json.dumps([{"study": "compat", "confg": {"mode": "gru"}}]), "entry 0 must be an object with exactly"),
    (json.dumps([{"study": "compat", "config": {"mode": "gru", "seq_len": 0}}]),
     "entry 0: seq_len must be an int >= 1, got 0"),
])
def test_a_bad_grid_file_is_refused_naming_the_entry(tmp_path, capsys, text, match):
    bad = tmp_path / "grid.json"
    bad.write_text(text)
    assert cli.main(["report", "--grid", str(bad), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert re.search(f"grid file {re.escape(str(bad))}:? {match}", capsys.readouterr().err)
    assert not (tmp_path / "out").exists()  # refused before any work


def test_the_seed_changes_the_embedded_grids_data_not_their_shape():
    a, b = GRIDS["quick"](0), GRIDS["quick"](1)
    assert [(s, c.with_(seed=0)) for s, c in a] == [(s, c.with_(seed=0)) for s, c in b]
    assert all(ca.seed != cb.seed for (_, ca), (_, cb) in zip(a, b))


@pytest.mark.parametrize("name", sorted(GRIDS))
def test_embedded_grids_cover_every_mode_and_feature(name):
    specs = GRIDS[name](0)
    compat = [cfg for study, cfg in specs if study == "compat"]
    assert {cfg.mode for cfg in compat} == {"relu", "tanh", "lstm", "gru", "classic_gru"}
    assert {cfg.dtype for cfg in compat} == {"float16", "float32", "float64"}
    assert any(cfg.num_dirs == 2 for cfg in compat) and any(not cfg.time_major for cfg in compat)
    assert any(cfg.lengths for cfg in compat) and any(cfg.input_mode == "skip_input" for cfg in compat)
    assert any(cfg.num_proj for cfg in compat) and any(study == "gru_variant" for study, _ in specs)
    if name == "window":  # a GPU window's: short drift, a three-layer stack
        assert max(cfg.seq_len for cfg in compat) >= 300 and max(cfg.num_layers for cfg in compat) == 3
    elif name != "quick":
        assert max(cfg.seq_len for cfg in compat) >= 1000 and max(cfg.num_layers for cfg in compat) == 3


def test_the_default_and_window_grids_hold_every_mode_under_every_bias_mode():
    """The default grid in every dtype, the window's in float32; the peers that have only the double bias and
    none are left out of the single modes, each with its reason."""
    from compat_tests.config import BIAS_MODE_NAMES, MODE_NAMES, RNNConfig

    for name, dtypes in (("default", {"float16", "float32", "float64"}), ("window", {"float32"})):
        held = {(cfg.mode, cfg.bias_mode, cfg.dtype) for study, cfg in GRIDS[name](0) if study == "compat"}
        assert held >= {(m, b, d) for m in MODE_NAMES for b in BIAS_MODE_NAMES for d in dtypes}, name
    single = [("compat", RNNConfig("gru", bias_mode="single_inp", dtype="float32")),
              ("compat", RNNConfig("gru", bias_mode="none", dtype="float32"))]
    units, skipped = plan(single, [PEERS["reference"], PEERS["torch-cpu"]])
    assert [(u.backend, u.cfg.bias_mode) for u in units] == [("reference", "single_inp"), ("reference", "none"),
                                                             ("torch-cpu", "none")]
    assert [(b, cfg.bias_mode) for b, _, cfg in skipped] == [("torch-cpu", "single_inp")]
    assert "bias=False" in skipped[0][1]


def test_the_default_and_window_grids_set_every_mode_beside_cudnns_published_numbers():
    from compat_tests.judge import published

    for name in ("default", "window", "full"):
        specs = [cfg for study, cfg in GRIDS[name](0) if study == "published"]
        assert sorted((cfg.mode, cfg.dtype) for cfg in specs) == sorted(
            (mode, dtype) for mode in ("relu", "tanh", "lstm", "gru") for dtype in ("float32", "float64")), name
        assert all(published.is_sample(cfg) for cfg in specs)
    assert not any(study == "published" for study, _ in GRIDS["quick"](0))
    units, skipped = plan([("published", published.config("gru", dtype)) for dtype in ("float64", "float32")],
                          [PEERS["reference"], PEERS["cudnn"]])
    assert [(u.backend, u.cfg.dtype) for u in units] == [("reference", "float64"), ("reference", "float32"),
                                                         ("cudnn", "float32")]  # the truth once, then each backend
    assert not skipped


def _feature_rows(name: str, num_units: int) -> set[tuple]:
    """The feature values of grid ``name``'s plain float32 configs of width ``num_units`` (the feature sweep's):
    (mode, layers, direction, input mode, ragged, time-major, projected)."""
    return {(c.mode, c.num_layers, c.direction, c.input_mode, c.lengths is not None, c.time_major,
             c.num_proj is not None) for study, c in GRIDS[name](0)
            if study == "compat" and c.dtype == "float32" and c.num_units == num_units and c.bias_mode == "double" and not c.fills_padding and c.cell_clip is None and not c.packed
            and c.seq_len in (12, 40)}


def test_the_default_grid_meets_every_pair_of_features_and_full_every_combination():
    """``make report`` shows its page in about two minutes: the default grid runs the feature sweep's rows that
    hold every pair of feature values (at both sizes), and ``full`` every combination; the page says which."""
    from compat_tests.report.grids import LEFT_OUT

    every = {(m, layers, d, i, r, t, False) for m, layers, d, i, r, t in itertools.product(
        MODE_NAMES, (1, 2, 3), ("unidirectional", "bidirectional"), ("linear_input", "skip_input"), (False, True),
        (True, False))}
    for width in (16, 64):
        default, full = _feature_rows("default", width), _feature_rows("full", width)
        plain = {row for row in default if not row[-1]}
        assert full >= every and len(plain) < len(every) / 4, width
        for i, j in itertools.combinations(range(6), 2):
            assert {(row[i], row[j]) for row in plain} == {(row[i], row[j]) for row in every}, (width, i, j)
    assert "every pair of feature values" in LEFT_OUT["default"] and "--grid full" in LEFT_OUT["default"]


def test_the_page_of_a_built_in_grid_says_what_it_leaves_out(tiny_report):
    from compat_tests.report.grids import LEFT_OUT
    from compat_tests.report.render import html_page, markdown

    _, _, report = tiny_report
    for name in ("quick", "default"):
        assert LEFT_OUT[name] in markdown({**report, "grid": name})
        assert LEFT_OUT[name].replace("'", "&#x27;") in html_page({**report, "grid": name}, figures=False)
    assert not any(note in markdown(report) for note in LEFT_OUT.values())  # a grid file's: the user's own
