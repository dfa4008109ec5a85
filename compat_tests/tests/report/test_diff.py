"""``rnn-compat diff RUN_A RUN_B``: a run against itself is all identical and exits 0; against a copy with changes
planted in its records it reports exactly those units, each in its class, the environments side by side, and
exits 1 for a unit that passed in A and fails in B; bad arguments are refused by name."""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from compat_tests import cli

SMALL = {"seq_len": 3, "batch": 2, "num_units": 3, "input_size": 2, "dtype": "float32"}


UNITS = [{"mode": "gru"}, {"mode": "lstm", "seed": 1}, {"mode": "tanh", "seed": 2}, {"mode": "relu", "seed": 3},
         {"mode": "gru", "seed": 4}]


@pytest.fixture(scope="module")
def run_a(tmp_path_factory):
    """A report of the reference on five small units."""
    folder = tmp_path_factory.mktemp("diff")
    grid = folder / "grid.json"
    grid.write_text(json.dumps([{"study": "compat", "config": {**SMALL, **u}} for u in UNITS]))
    assert cli.main(["report", "--grid", str(grid), "--backends", "reference", "--out", str(folder / "a"),
                     "--jobs", "1", "--no-progress", "--no-figures"]) == 0  # (the diff reads its records)
    return folder / "a"


def test_a_run_against_itself_is_identical_and_exits_0(run_a, tmp_path, capsys):
    assert cli.main(["diff", str(run_a), str(run_a), "--out", str(tmp_path / "d")]) == 0
    assert "0 regressed, 0 fixed, 0 moved beyond 1 conditioned eps, 5 identical" in capsys.readouterr().out
    d = json.loads((tmp_path / "d" / "diff.json").read_text())
    assert (d["regressed"], d["fixed"], d["moved"], d["only_a"], d["only_b"], d["identical"]) == ([], [], [], [], [], 5)
    assert not any(e["differs"] for e in d["environment"])
    assert "data:image/png;base64," in (tmp_path / "d" / "index.html").read_text()


def test_planted_changes_are_reported_exactly_and_a_regression_exits_1(run_a, tmp_path, capsys):
    report = json.loads((run_a / "report.json").read_text())
    records = sorted(report["records"], key=lambda r: r["id"])
    regressed, moved, untouched, dropped, within = records
    b = tmp_path / "b"
    shutil.copytree(run_a, b)
    changed = copy.deepcopy(report)
    by_id = {r["id"]: r for r in changed["records"]}
    out = by_id[regressed["id"]]["forward"]["output"]
    out.update(conditioned=out["budget"] * 3, passed=False)
    by_id[regressed["id"]]["passed"] = False
    by_id[moved["id"]]["forward"]["output"]["conditioned"] += 5.0  # within its budget of 16: moved, still passes
    assert untouched["id"] in by_id  # left as it was: identical
    by_id[within["id"]]["forward"]["output"]["conditioned"] += 0.5  # within the band of 1
    changed["records"] = [r for r in changed["records"] if r["id"] != dropped["id"]]
    changed["environment"]["numpy"] = "9.9.9"
    (b / "report.json").write_text(json.dumps(changed))

    assert cli.main(["diff", str(run_a), str(b), "--out", str(tmp_path / "d")]) == 1
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("REGRESSED compat reference ") and "(passed -> failed, worst share of budget " \
        in printed[0], "the regressed unit, named in the terminal before the counts"
    assert printed[1:3] == [f"  {regressed['reproduce'][kind]}" for kind in ("forward", "gradients")]
    assert printed[3].startswith("1 regressed, 0 fixed, 1 moved beyond 1 conditioned eps, 1 identical, 1 within the "
                                 "band; 1 only in A, 0 only in B")
    d = json.loads((tmp_path / "d" / "diff.json").read_text())
    assert [e["id"] for e in d["regressed"]] == [regressed["id"]]
    assert d["regressed"][0]["verdict"] == ["passed", "failed"]
    assert [e["id"] for e in d["moved"]] == [moved["id"]]
    assert list(d["moved"][0]["errors"]) == ["forward.output"]
    x, y = d["moved"][0]["errors"]["forward.output"]
    assert y - x == pytest.approx(5.0)
    assert [e["id"] for e in d["only_a"]] == [dropped["id"]] and d["only_b"] == []
    assert [e["key"] for e in d["environment"] if e["differs"]] == ["numpy"]
    md = (tmp_path / "d" / "diff.md").read_text()
    assert "## Regressed" in md and "## Moved beyond the band" in md and "| numpy **(differs)** |" in md
    assert regressed["reproduce"]["forward"] in md, "each changed unit with the commands that re-run it"

    assert cli.main(["diff", str(b), str(run_a), "--out", str(tmp_path / "back")]) == 0  # the reverse: a fix
    back = json.loads((tmp_path / "back" / "diff.json").read_text())
    assert [e["id"] for e in back["fixed"]] == [regressed["id"]]
    assert [e["id"] for e in back["only_b"]] == [dropped["id"]]


def test_the_terminal_lists_twenty_regressed_units_with_their_commands_then_counts_the_rest():
    """A CI log gating an upgrade on the diff's exit status shows which units regressed: the first 20, each with
    the commands that re-run it in B, then how many more."""
    from compat_tests.report import diff

    units = [{"id": f"u{k}", "unit": f"compat torch-cpu gru seed {k}", "verdict": ["passed", "failed"],
              "worst_share": [0.5, 3.0 + k], "reproduce": {"a": [f"a{k}"], "b": [f"rnn-compat check {k}"]}}
             for k in range(23)]
    lines = diff.regressions({"regressed": units})
    assert len(lines) == 2 * 20 + 1
    assert lines[0] == "REGRESSED compat torch-cpu gru seed 0 (passed -> failed, worst share of budget 0.5 -> 3)"
    assert lines[1] == "  rnn-compat check 0" and lines[39] == "  rnn-compat check 19"
    assert lines[-1] == "... and 3 more regressed units (diff.md lists every one)"
    assert diff.regressions({"regressed": units[:1]}) == lines[:2] and diff.regressions({"regressed": []}) == []


def test_bad_arguments_are_refused_naming_them(run_a, tmp_path, capsys):
    assert cli.main(["diff", str(run_a), str(tmp_path), "--out", str(tmp_path / "d")]) == 2
    assert f"{tmp_path} holds no report.json" in capsys.readouterr().err
    assert cli.main(["diff", str(run_a), str(run_a), "--band", "-1", "--out", str(tmp_path / "d")]) == 2
    assert "band must be a finite number >= 0" in capsys.readouterr().err
    assert cli.main(["diff", str(run_a), str(run_a), "--out", str(tmp_path / "d")]) == 0
    capsys.readouterr()
    assert cli.main(["diff", str(run_a), str(run_a), "--out", str(tmp_path / "d")]) == 2
    assert "holds diff.json, diff.md, index.html already" in capsys.readouterr().err
    assert cli.main(["diff", str(run_a), str(run_a), "--out", str(tmp_path / "d"), "--force"]) == 0
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "report.json").write_text('{"records": 3}')
    assert cli.main(["diff", str(run_a), str(tmp_path / "broken"), "--out", str(tmp_path / "e")]) == 2
    assert "is not a report" in capsys.readouterr().err
