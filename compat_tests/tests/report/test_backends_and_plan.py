"""Which backends a report runs and which configs it plans: a requested backend that cannot run (or whose
available() raises) fails the run and is named, an empty --backends is refused, and a config none can run
is listed once while one merely not yet run is not."""

from __future__ import annotations

import json

from compat_tests import cli
from compat_tests.peers import PEERS
from compat_tests.peers.reference_peer import ReferencePeer
from compat_tests.tests.helpers import SMALL_GRU, _grid, _validate, run
from compat_tests.tests.helpers import TINY_GRID as TINY


class Unavailable(ReferencePeer):
    name = "unavailable"

    def available(self):
        return False, "no such device (test double)"


def test_a_requested_backend_that_cannot_run_fails_the_run(tiny_report, tmp_path, monkeypatch, capsys):
    """Named by --backends, an unavailable backend fails the run (what could run, ran); left to the default
    (every available backend, as in the tiny report), it is only listed."""
    monkeypatch.setitem(PEERS, "unavailable", Unavailable())
    assert run(tmp_path / "named", "--backends", "reference,unavailable", "--no-figures") == 1
    report = json.loads((tmp_path / "named" / "report.json").read_text())
    note = "NOT RUN: backend unavailable was requested but is unavailable: no such device (test double)"
    assert not report["passed"] and report["totals"]["failed"] == 0 and report["totals"]["compat_units"] > 0
    assert note in (tmp_path / "named" / "report.md").read_text() and note in capsys.readouterr().out
    assert "Verdict: failed" in (tmp_path / "named" / "report.md").read_text().split("## Summary")[0]
    _validate(report)
    status, _, default = tiny_report
    assert status == 0 and default["passed"] and not any(b["requested"] for b in default["backends"])


def test_a_peer_whose_available_raises_is_unavailable_not_a_crash(registry, tmp_path, capsys):
    plugin = tmp_path / "raising_peer.py"
    plugin.write_text("from compat_tests.peers.reference_peer import ReferencePeer\n"
                      "class Raising(ReferencePeer):\n"
                      "    name = 'raising'\n"
                      "    def available(self):\n"
                      "        raise OSError('licence server unreachable')\n"
                      "RAISING = Raising()\n")
    spec = f"{plugin}:RAISING"
    assert cli.main(["peers", "--plugin", spec, "--json"]) == 0
    [listed] = [p for p in json.loads(capsys.readouterr().out) if p["name"] == "raising"]
    assert not listed["available"] and listed["detail"] == "Raising.available() raised OSError: licence server unreachable"
    out = tmp_path / "run"
    assert cli.main(["report", "--plugin", spec, "--backends", "raising,reference", "--grid",
                     str(_grid(tmp_path, [("compat", SMALL_GRU)])), "--out", str(out), "--jobs", "1",
                     "--no-progress"]) == 1
    assert "NOT RUN: backend raising was requested but is unavailable: Raising.available() raised OSError" \
        in (out / "report.md").read_text()


def test_an_empty_backends_list_is_refused(tmp_path, capsys):
    assert cli.main(["report", "--grid", str(TINY), "--backends", "", "--out", str(tmp_path / "out"),
                     "--no-progress"]) == 2
    assert "--backends must name at least one backend" in capsys.readouterr().err


def test_a_config_planned_but_not_yet_run_is_not_called_unrunnable(tmp_path):
    """An incomplete run: the classic GRU is planned for the reference, and torch-cpu cannot run it. It is
    in no backend's records yet, but a backend will run it, so it is not among the configs none can."""
    from compat_tests.config import RNNConfig
    from compat_tests.report.aggregate import build_report
    from compat_tests.report.units import Unit

    cfg = RNNConfig("classic_gru", dtype="float32")
    skipped = [("torch-cpu", "PyTorch has only the cuDNN (reset-after) GRU", cfg)]
    backends = [{"name": n, "available": True, "detail": "", "requested": True} for n in ("reference", "torch-cpu")]
    planned = build_report([], "g", 0, backends, skipped, env={}, planned=[Unit("compat", "reference", cfg).id])
    assert not planned["complete"] and planned["unrun"] == []
    unrunnable = build_report([], "g", 0, backends, skipped, env={}, planned=[])
    assert unrunnable["unrun"] == [{"config": cfg.short(), "reasons": {"torch-cpu": skipped[0][1]}}]


def test_a_config_listed_twice_is_counted_once_among_those_not_run(tmp_path):
    grid = _grid(tmp_path, [("compat", {**SMALL_GRU, "mode": "classic_gru"})] * 2)
    out = tmp_path / "run"
    assert cli.main(["report", "--grid", str(grid), "--backends", "reference,torch-cpu", "--out", str(out),
                     "--jobs", "1", "--no-progress", "--no-figures"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["totals"]["units"] == 1 and [s["count"] for s in report["skipped"]] == [1]
