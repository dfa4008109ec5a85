"""The command line: the quick report, one-line reproduction of a failure, exit statuses."""

from __future__ import annotations

import json

import numpy as np
import pytest

from compat_tests import cli
from compat_tests.config import MODE_NAMES, Outputs, RNNConfig
from compat_tests.peers import PEERS
from compat_tests.peers.reference_peer import ReferencePeer


class Perturbed(ReferencePeer):
    """A deliberately wrong peer: the reference with one output nudged by 1000 ulp."""

    name = "perturbed"

    def forward(self, cfg, case):
        out = super().forward(cfg, case)
        y = out.output.copy()
        y.flat[0] += 1000 * np.finfo(y.dtype).eps * max(1.0, abs(float(y.flat[0])))
        return Outputs(y, out.output_h, out.output_c)


def test_quick_report_lists_every_available_backend_and_mode(capsys):
    assert cli.main(["report", "--grid", "quick"]) == 0
    text = capsys.readouterr().out
    for name, peer in PEERS.items():
        if peer.available()[0]:
            assert f"\n{name} " in text
    for mode in MODE_NAMES:
        assert f" {mode} " in text
    assert "FAIL" not in text


def test_a_planted_divergence_fails_the_report_and_prints_a_working_reproducer(capsys, monkeypatch):
    monkeypatch.setitem(PEERS, "perturbed", Perturbed())
    assert cli.main(["report", "--grid", "quick", "--backends", "perturbed"]) == 1
    text = capsys.readouterr().out
    assert "FAIL" in text
    command = next(line.strip() for line in text.splitlines() if "reproduce: rnn-compat check" in line)
    config = command.split("--config '")[1].rstrip("'")
    assert cli.main(["check", "--peer", "perturbed", "--config", config]) == 1
    assert cli.main(["check", "--peer", "reference", "--config", config]) == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "--backends", "nonesuch"],
        ["report", "--grid", "default"],
        ["report", "--grid", "huge"],
        ["report", "--bogus"],
        ["check", "--peer", "reference", "--config", "{not json"],
        ["check", "--peer", "reference", "--config", json.dumps({"mode": "gru", "colour": 1})],
        ["check", "--peer", "onnxruntime", "--config", RNNConfig("gru", dtype="float64").to_json()],
    ],
)
def test_bad_arguments_exit_2(argv, capsys):
    try:
        status = cli.main(argv)
    except SystemExit as exc:  # argparse's own errors
        status = exc.code
    assert status == 2
