"""The command line: one-line reproduction of a comparison, exit statuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compat_tests import cli
from compat_tests.config import RNNConfig


@pytest.mark.parametrize("backward", [False, True])
def test_check_reruns_one_comparison(capsys, backward):
    cfg = RNNConfig("lstm", num_layers=2, direction="bidirectional", lengths=(4, 2), dtype="float32")
    argv = ["check", "--peer", "torch-cpu", "--config", cfg.to_json()] + (["--backward"] if backward else [])
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    expected = ("(gradients)", "d_params") if backward else ("(forward)", "output_c")
    assert all(word in text for word in expected), text


GRID_FILE = "compat_tests/data/tiny_grid.json"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["report", "--backends", "nonesuch", "--grid", "quick"], "nonesuch"),
        (["report", "--backends", "reference,reference", "--grid", "quick"], "--backends names reference more"),
        (["report", "--grid", "huge"], "--grid must be one of"),
        (["report", "--bogus"], None),
        (["report", "--grid", "quick", "--jobs", "0"], "--jobs must be >= 1, got 0"),
        (["report", "--grid", "quick", "--seed", "-1"], "--seed must be >= 0, got -1"),
        (["report", "--grid", GRID_FILE, "--seed", "3"], "--seed applies to the built-in grids"),
        (["check", "--peer", "reference", "--config", "{not json"], "--config must be an RNNConfig as JSON"),
        (["check", "--peer", "reference", "--config", json.dumps({"mode": "gru", "colour": 1})], "colour"),
        (["check", "--peer", "onnxruntime", "--config", RNNConfig("gru", dtype="float64").to_json()], "float64"),
        (["check", "--peer", "onnxruntime", "--backward", "--config", RNNConfig("gru", dtype="float32").to_json()],
         "no backward pass"),
        (["frobnicate"], None),
    ],
)
def test_bad_arguments_exit_2_naming_the_argument(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(cli.SUITE.parent)
    try:
        status = cli.main(argv if argv[0] != "report" else [*argv, "--out", str(tmp_path / "run")])
    except SystemExit as exc:  # argparse's own errors
        status = exc.code
    assert status == 2
    assert message is None or message in capsys.readouterr().err
    assert not (tmp_path / "run").exists(), "refused before any work"


def test_check_reports_a_peer_that_raises_as_a_failure_not_a_bad_argument(monkeypatch, capsys):
    from compat_tests.peers import PEERS
    from compat_tests.test_report import BackwardFails

    monkeypatch.setitem(PEERS, "backward-fails", BackwardFails())
    cfg = RNNConfig("gru", dtype="float32")
    assert cli.main(["check", "--peer", "backward-fails", "--backward", "--config", cfg.to_json()]) == 1
    assert (f"backward-fails failed on {cfg.short()} (gradients): RuntimeError: backward refused"
            in capsys.readouterr().out)


@pytest.mark.parametrize("name, label", [("my_grid", "my_grid"), ("default.json", "default.json"),
                                         ("quick", "grids/quick")])
def test_a_report_of_a_grid_file_is_named_after_it(tmp_path, monkeypatch, name, label):
    """Its default folder is under reports/_scratch, named by the file's stem, whatever its suffix; the report
    calls the grid by the file's name, or where that is a built-in grid's, by its path, so that no report of
    a file reads as one of a built-in grid."""
    grid = tmp_path / "grids" / name
    grid.parent.mkdir()
    grid.write_text(json.dumps([{"study": "compat", "config": {"mode": "tanh", "dtype": "float32", "seq_len": 2}}]))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "--grid", f"grids/{name}", "--backends", "reference", "--jobs", "1",
                     "--no-progress"]) == 0
    [run] = (tmp_path / "reports" / "_scratch").iterdir()
    assert run.name.startswith(f"{Path(name).stem}-")
    assert json.loads((run / "report.json").read_text())["grid"] == label
    assert label in (run / "report.md").read_text()
    assert list(grid.parent.iterdir()) == [grid]


def test_rnn_compat_test_runs_the_whole_suite_unless_its_arguments_name_some_of_its_tests(tmp_path, monkeypatch):
    report = tmp_path / "junit.xml"
    report.write_text("")  # an option's existing file: not a test path
    assert not cli.names_suite_tests(["--junitxml", str(report), "-k", "forward", "--basetemp", str(tmp_path)])
    assert not cli.names_suite_tests(["--ignore", str(cli.SUITE / "test_gpu.py")])  # an option's value
    assert not cli.names_suite_tests([])
    assert cli.names_suite_tests([str(cli.SUITE / "test_forward.py") + "::test_peer_matches_float64_reference", "-x"])
    monkeypatch.chdir(cli.SUITE.parent)
    assert cli.names_suite_tests(["compat_tests/test_cli.py"]) and cli.names_suite_tests(["compat_tests"])
    assert not cli.names_suite_tests(["compat_tests/test_cli.py", str(tmp_path)])  # a path outside: the suite too


def test_peers_lists_every_peer_with_its_availability_and_what_it_lacks(capsys):
    from compat_tests.peers import PEERS

    assert cli.main(["peers", "--json"]) == 0
    listed = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    assert list(listed) == list(PEERS)
    for name, peer in PEERS.items():
        assert (listed[name]["available"], listed[name]["detail"]) == peer.available()
    assert listed["torch-cpu"]["lacks"]["classic_gru"] == dict(PEERS["torch-cpu"].capabilities.notes)["mode"]
    assert "gradients" in listed["onnxruntime"]["lacks"] and "gradients" not in listed["torch-cpu"]["lacks"]
    assert cli.main(["peers"]) == 0
    text = capsys.readouterr().out
    assert all(f"{name}: {'available' if p.available()[0] else 'UNAVAILABLE'}" in text for name, p in PEERS.items())


def test_ctrl_c_ends_a_command_without_a_traceback(monkeypatch, capsys, tmp_path):
    from compat_tests.report import sweep

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "sweep", interrupted)
    assert cli.main(["report", "--grid", "quick", "--backends", "reference", "--no-progress", "--out",
                     str(tmp_path)]) == 130
    assert "interrupted (its finished units are kept: the same command with --resume" in capsys.readouterr().err
