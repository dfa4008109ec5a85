"""The command line: one-line reproduction of a comparison, exit statuses."""

from __future__ import annotations

import json

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


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "--backends", "nonesuch", "--grid", "quick"],
        ["report", "--grid", "huge"],
        ["report", "--bogus"],
        ["check", "--peer", "reference", "--config", "{not json"],
        ["check", "--peer", "reference", "--config", json.dumps({"mode": "gru", "colour": 1})],
        ["check", "--peer", "onnxruntime", "--config", RNNConfig("gru", dtype="float64").to_json()],
        ["check", "--peer", "onnxruntime", "--backward", "--config", RNNConfig("gru", dtype="float32").to_json()],
        ["frobnicate"],
    ],
)
def test_bad_arguments_exit_2(argv, tmp_path):
    try:
        status = cli.main(argv if argv[0] != "report" else [*argv, "--out", str(tmp_path)])
    except SystemExit as exc:  # argparse's own errors
        status = exc.code
    assert status == 2


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
