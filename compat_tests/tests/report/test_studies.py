"""The report's studies beyond the comparisons: the gru_variant study (GRU configs only, its largest difference
shown, a failed unit listed with a command that reruns it), the published study (cuDNN's own sample,
the float64 truth, each backend beside cuDNN's published checksums) and what TF32 costs (reference-tf32's error
over the time steps and the condition estimate)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from compat_tests import cli
from compat_tests.config import Outputs
from compat_tests.peers import PEERS
from compat_tests.peers.reference_peer import ReferencePeer
from compat_tests.tests.helpers import ROOT, SMALL_GRU, _grid, _validate
from reference import precision


def test_a_gru_variant_unit_that_ends_in_an_error_is_listed_with_a_command_that_runs_it(tmp_path, monkeypatch,
                                                                                        capsys):
    """A failed study unit fails the run, so the report must say which and why, as for a comparison, with a
    command that runs that unit again (``rnn-compat check`` runs comparisons only)."""
    from compat_tests.report import units

    def broken(unit):
        raise FloatingPointError("the textbook GRU overflowed")

    monkeypatch.setattr(units, "_run_gru_variant", broken)
    grid = _grid(tmp_path, [("gru_variant", SMALL_GRU), ("compat", {**SMALL_GRU, "mode": "tanh"})])
    out = tmp_path / "run"
    assert cli.main(["report", "--grid", str(grid), "--backends", "reference", "--out", str(out), "--jobs", "1",
                     "--no-progress"]) == 1
    report = json.loads((out / "report.json").read_text())
    [entry] = [w for w in report["worst"] if not w["passed"]]
    assert entry["quantity"] == "error" and entry["error"] == "FloatingPointError: the textbook GRU overflowed"
    assert entry["config"].startswith("gru_variant gru")
    assert entry["reproduce"] in (out / "report.md").read_text() and entry["reproduce"] in capsys.readouterr().out
    rerun = subprocess.run(entry["reproduce"], shell=True, capture_output=True, text=True, cwd=ROOT, timeout=300,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert rerun.returncode == 0, rerun.stderr
    record = json.loads(rerun.stdout)  # unpatched here: the unit runs
    assert record["id"] == entry["id"] and record["status"] == "ok" and record["variant"]["max_abs"] > 0


def test_a_gru_variant_entry_must_be_a_gru(tmp_path, capsys):
    """The study compares cuDNN's GRU with the textbook one: another mode would fail at run time, and
    classic_gru would compare the textbook GRU with itself and report no difference."""
    for mode in ("classic_gru", "lstm"):
        grid = _grid(tmp_path, [("compat", SMALL_GRU), ("gru_variant", {**SMALL_GRU, "mode": mode})])
        assert cli.main(["report", "--grid", str(grid), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
        assert (f"entry 1: the gru_variant study compares cuDNN's GRU with the textbook GRU under the same weights, "
                f"so its config's mode must be 'gru', got '{mode}'") in capsys.readouterr().err
        assert not (tmp_path / "out").exists()


def test_gru_variant_configs_of_one_scale_and_length_show_their_largest_difference(tmp_path):
    grid = _grid(tmp_path, [("gru_variant", {**SMALL_GRU, "seed": seed, "weight_scale": 3.0}) for seed in (0, 3, 1)])
    out = tmp_path / "run"
    assert cli.main(["report", "--grid", str(grid), "--backends", "reference", "--out", str(out), "--jobs", "1",
                     "--no-progress"]) == 0
    report = json.loads((out / "report.json").read_text())
    differences = [r["max_abs"] for r in report["studies"]["gru_variant"]]
    assert len(differences) == 3 and len(set(differences)) == 3
    assert differences.index(max(differences)) == 1, "the largest in the middle: neither the first nor the last wins"
    md = (out / "report.md").read_text()
    assert f"| 3 | {max(differences):.3g} |" in md
    assert all(f"{d:.3g}" not in md for d in differences if d != max(differences))


PUBLISHED_RELU = {"mode": "relu", "num_layers": 2, "num_units": 512, "input_size": 512, "seq_len": 20, "batch": 64}


class Scaled(ReferencePeer):
    """The reference with its forward results 1e-3 larger, relative: ten times the published study's bound."""

    name = "scaled"

    def forward(self, cfg, case):
        out = super().forward(cfg, case)
        return Outputs(*(None if a is None else a * a.dtype.type(1.001) for a in out))


def test_the_published_study_sets_the_truth_and_each_backend_beside_cudnns_own_numbers(tmp_path):
    grid = _grid(tmp_path, [("published", {**PUBLISHED_RELU, "dtype": dtype}) for dtype in ("float64", "float32")])
    out = tmp_path / "run"
    assert cli.main(["report", "--grid", str(grid), "--backends", "reference", "--out", str(out), "--jobs", "1",
                     "--no-progress"]) == 0
    report = json.loads((out / "report.json").read_text())
    _validate(report)
    rows = report["studies"]["published"]
    assert [(r["mode"], r["checksum"]) for r in rows] == [("relu", name) for name in ("y", "hy", "dx", "dhx", "dw")]
    dw = rows[-1]
    assert dw["published"] == {"M40": 1.453750e9, "RTX 3060": 1.453738e9}  # both runs, from the records
    assert dw["drift"] == pytest.approx(-8.25e-6, rel=1e-2)  # the scale of GPU-to-GPU variation
    for row in rows:
        assert [(v["source"], v["dtype"]) for v in row["values"]] == [
            ("float64 truth (reference.spec)", "float64"), ("reference", "float32")]
        assert all(v["passed"] and abs(v["relative"]) <= v["bound"] for v in row["values"]), row
    md = (out / "report.md").read_text()
    study = md.split("### cuDNN's published checksums")[1].split("###")[0]
    assert "| relu | dw | 1.453750e+09 | 1.453738e+09 | -8.3e-06 |" in study
    assert "<h3>cuDNN's published checksums</h3>" in (out / "index.html").read_text()


def test_a_backend_off_cudnns_published_numbers_fails_the_run_with_a_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(PEERS, "scaled", Scaled())
    grid = _grid(tmp_path, [("published", {**PUBLISHED_RELU, "dtype": "float32"})])
    out = tmp_path / "run"
    assert cli.main(["report", "--grid", str(grid), "--backends", "scaled", "--out", str(out), "--jobs", "1",
                     "--no-progress"]) == 1
    report = json.loads((out / "report.json").read_text())
    _validate(report)
    assert not report["passed"] and report["totals"]["published_failed"] == 1
    [entry] = [w for w in report["worst"] if not w["passed"]]
    assert entry["quantity"] in ("y", "hy") and "beyond its bound" in entry["published"]
    assert entry["config"].startswith("published relu") and "compat_tests.report.units" in entry["reproduce"]
    cells = {r["checksum"]: r["values"][0] for r in report["studies"]["published"]}
    assert not cells["y"]["passed"] and cells["y"]["relative"] == pytest.approx(1e-3, rel=1e-3)
    assert cells["dw"]["passed"], "its gradients are the reference's"
    md = (out / "report.md").read_text()
    assert "**Verdict: failed**" in md and entry["reproduce"] in md.split("## Failures")[1]
    assert "OUTSIDE its bound" in md and entry["reproduce"] in capsys.readouterr().out


@pytest.mark.parametrize("config", [{"mode": "relu", "dtype": "float32"}, {**PUBLISHED_RELU, "mode": "classic_gru"},
                                    {**PUBLISHED_RELU, "dtype": "float16"}])
def test_a_published_entry_must_be_the_sample_s_configuration(tmp_path, capsys, config):
    grid = _grid(tmp_path, [("published", config)])
    assert cli.main(["report", "--grid", str(grid), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert "entry 0: the published study runs cuDNN's published sample" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_what_tf32_costs_grows_with_the_time_steps_and_the_condition_estimate(tmp_path):
    """reference-tf32, the engine's TF32 math judged against the FMA truth, shows on a CPU what a GPU's default
    float32 math costs: over one tanh RNN at four weight scales (T=300), its error grows with the condition
    estimate, and where the recurrence amplifies (the two largest) it grows over the time steps too."""
    tanh = {"mode": "tanh", "num_units": 16, "input_size": 8, "seq_len": 300, "batch": 2, "dtype": "float32", "seed": 5}
    grid = _grid(tmp_path, [("compat", {**tanh, "weight_scale": scale}) for scale in (2.0, 0.5, 3.0, 1.0)])
    out = tmp_path / "run"
    assert cli.main(["report", "--grid", str(grid), "--backends", "reference-tf32", "--out", str(out), "--jobs", "1",
                     "--no-progress", "--no-figures"]) == 0
    report = json.loads((out / "report.json").read_text())
    records = sorted(report["records"], key=lambda r: r["forward"]["output"]["kappa"])
    assert [r["config"]["weight_scale"] for r in records] == [0.5, 1.0, 2.0, 3.0]  # kappa grows with the scale
    errors = [r["forward"]["output"]["max_eps"] for r in records]
    assert errors == sorted(errors) and errors[-1] > 10 * errors[0], errors
    drift = {d["id"]: d["output"] for d in report["studies"]["drift"]}
    for r in records[2:]:
        steps = drift[r["id"]]
        assert sorted(steps[-50:])[25] > 1.5 * steps[0], (r["config"]["weight_scale"], steps[0], steps[-50:])
    (study,) = report["studies"]["tf32"]  # and its first steps, each the TF32 truth's (every GEMM, decided rule)
    assert (study["backend"], study["judged"], study["fits"], study["strayed"]) == \
        ("reference-tf32", 4, {f"input+recurrent, {precision.TF32_ROUNDING}": 4}, 0)
    md = (out / "report.md").read_text().split("### TF32 as each backend computes it")[1]
    assert f"| reference-tf32 | float32 | 4 | input+recurrent, {precision.TF32_ROUNDING}: 4 |" in md
