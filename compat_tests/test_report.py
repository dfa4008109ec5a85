"""The divergence report: files, schema, planted divergence, resume after a kill, exit statuses."""

from __future__ import annotations

import html
import json
import re
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compat_tests import cli
from compat_tests.config import Outputs
from compat_tests.conftest import Killed
from compat_tests.judge.known_divergences import KNOWN
from compat_tests.peers import GPU_PEERS, PEERS
from compat_tests.peers.reference_peer import ReferencePeer
from compat_tests.report import SCHEMA
from compat_tests.report.grids import GRIDS, load_grid, plan
from compat_tests.report.sweep import IN_FLIGHT, RESULTS, read_records
from compat_tests.judge.tolerances import OVERRIDES
from compat_tests.report import sweep as sweep_module

TINY = Path(__file__).with_name("data") / "tiny_grid.json"
ROOT = Path(__file__).resolve().parent.parent


class Perturbed(ReferencePeer):
    """A deliberately wrong peer: the reference with one output nudged by 1000 ulp."""

    name = "perturbed"

    def forward(self, cfg, case):
        out = super().forward(cfg, case)
        y = out.output.copy()
        y.flat[0] += 1000 * np.finfo(y.dtype).eps * max(1.0, abs(float(y.flat[0])))
        return Outputs(y, out.output_h, out.output_c)


def run(out: Path, *extra: str) -> int:
    return cli.main(["report", "--grid", str(TINY), "--out", str(out), "--jobs", "1", "--no-progress", *extra])


def deterministic(report: dict) -> dict:
    """A report without the parts that legitimately differ between runs."""
    return {k: v for k, v in report.items() if k not in ("generated_utc", "environment")}


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    status = run(out)
    return status, out, json.loads((out / "report.json").read_text())


def _validate(report: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="schema validation needs jsonschema")
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))


def test_report_validates_against_its_schema(tiny_report):
    status, _, report = tiny_report
    assert status == 0 and report["passed"]
    _validate(report)


def test_markdown_and_html_name_every_backend_and_config(tiny_report):
    _, out, report = tiny_report
    md, page = (out / "report.md").read_text(), (out / "index.html").read_text()
    assert md.startswith("# cudnn-rnn-compat divergence report") and md.index("## Summary") < md.index("## Studies")
    backends = {r["backend"] for r in report["records"] if r["study"] == "compat"}
    specs = load_grid(str(TINY), 0)
    runnable = [cfg for study, cfg in specs if study == "compat"]
    assert backends == {name for name, p in PEERS.items()  # every available backend that can run one of them
                        if p.available()[0] and any(not p.unsupported(cfg) for cfg in runnable)}
    for backend in backends:
        assert f"`{backend}`" in md and f"<code>{backend}</code>" in page
    for study, cfg in specs:  # the page lists every comparison; report.md leaves that to report.json
        if study == "compat":
            assert cfg.short() in page
    assert "report.json (`records`" in md
    assert page.count("data:image/png;base64,") == 4  # heat maps, drift, GRU variants, amplification
    assert "gru_variant" in json.dumps(report["studies"]) and report["studies"]["gru_variant"]
    assert report["studies"]["drift"] and report["studies"]["amplification"]


def test_each_drift_line_has_one_colour_in_every_panel(tiny_report, monkeypatch):
    """Only the output panels carry a legend; a backend without gradients (no input-gradient line) must not
    shift the colours of the input-gradient panels away from it."""
    pytest.importorskip("matplotlib", reason="figures need matplotlib")
    from compat_tests.report import plots

    _, _, report = tiny_report
    drift = report["studies"]["drift"][0]
    report = {**report, "studies": {**report["studies"], "drift": [  # one backend without gradients, listed first
        {**drift, "backend": "aaa-forward-only", "d_input": None}, drift]}}
    assert drift.get("d_input"), "the tiny grid's long config has an input gradient"
    figures = []
    monkeypatch.setattr(plots, "_png", figures.append)
    plots._drift(report)
    colours: dict = {}
    for ax in figures[0].axes:
        for line in ax.get_lines():
            assert colours.setdefault(line.get_label(), line.get_color()) == line.get_color(), line.get_label()
    assert len(colours) == 2 and len(set(colours.values())) == 2
    import matplotlib.pyplot as plt

    plt.close(figures[0])


def _tick_labels(axis) -> list[tuple[float, str]]:
    """``(location, label)`` of an axis's major and minor ticks within its view, those with a label."""
    lo, hi = sorted(axis.get_view_interval())
    ticks = []
    for locator, formatter in ((axis.get_major_locator(), axis.get_major_formatter()),
                               (axis.get_minor_locator(), axis.get_minor_formatter())):
        locs = [loc for loc in locator() if lo <= loc <= hi]
        formatter.set_locs(locs)
        ticks += [(loc, formatter(loc, i)) for i, loc in enumerate(locs)]
    return [(loc, text) for loc, text in ticks if text]


def test_every_log_axis_of_every_figure_has_labelled_ticks(tiny_report, monkeypatch):
    """The figures drop a log axis's minor ticks where its decades are labelled (two decades or more); a
    narrower one keeps them, as they carry its only labels: in every figure of the tiny report (whose
    GRU-variant panels span less than a decade), each log axis shows at least two tick labels."""
    pytest.importorskip("matplotlib", reason="figures need matplotlib")
    import matplotlib.pyplot as plt

    from compat_tests.report import plots

    _, _, report = tiny_report
    saved, png = [], plots._png
    monkeypatch.setattr(plots, "_png", lambda fig: (saved.append(fig), png(fig))[1])
    assert set(plots.figures(report)) == {"heatmaps", "drift", "gru_variant", "amplification"}
    widths = []
    for fig in saved:
        for ax in fig.axes:
            for axis in (ax.xaxis, ax.yaxis):
                if ax.get_visible() and axis.get_scale() == "log":
                    lo, hi = sorted(axis.get_view_interval())
                    widths.append(hi / lo)
                    assert len(_tick_labels(axis)) >= 2, (saved.index(fig), axis.axis_name, (lo, hi))
    assert min(widths) < 10 <= 100 <= max(widths), "narrow and wide log axes both drawn"
    plt.close("all")


def test_the_policy_exceptions_of_the_run_s_backends_are_listed(tiny_report):
    """Every budget override and known divergence of a backend in the run is in both documents with its
    reason; those of backends not in the run are not."""
    _, out, report = tiny_report
    md, page = (out / "report.md").read_text(), (out / "index.html").read_text()
    section = md.split("## Policy exceptions for these backends")[1].split("\n## ")[0]
    page_section = page.split("<h2>Policy exceptions for these backends</h2>")[1].split("<h2>")[0]
    ran = {r["backend"] for r in report["records"]}
    assert {"reference", "torch-cpu"} <= ran and not ran & set(GPU_PEERS)  # exceptions both listed and left out
    for peer, reason in ([(o.peer, o.budget.reason) for o in OVERRIDES] + [(d.peer, d.reason) for d in KNOWN]):
        assert (reason in section) == (peer in ran), (peer, reason)
        assert (html.escape(reason) in page_section) == (peer in ran), (peer, reason)


METRICS = {"max_abs", "max_rel", "max_eps", "rms_eps", "max_ulp", "scale", "per_step", "kappa", "conditioned",
           "budget", "passed", "nonfinite_mismatch"}


def test_every_record_carries_its_metrics_and_a_command_that_reruns_it(tiny_report, capsys):
    _, out, _ = tiny_report
    compat = [r for r in read_records(out / RESULTS) if r["study"] == "compat"]
    assert compat
    for record in compat:
        for kind in ("forward", "gradients"):
            if kind not in record:
                continue
            command = record["reproduce"][kind]
            assert command.startswith(f"rnn-compat check --peer {record['backend']} ")
            assert ("--backward" in command) == (kind == "gradients")
            config = json.loads(command.split("--config '")[1].rstrip("'"))
            assert config == record["config"], "the command must re-run exactly the record's config"
            for quantity, stats in record[kind].items():
                assert METRICS <= set(stats), (quantity, sorted(METRICS - set(stats)))
    gradient = next(r for r in compat if "gradients" in r)
    argv = gradient["reproduce"]["gradients"].split(" --config ")[0].split()[1:]
    assert cli.main([*argv, "--config", json.dumps(gradient["config"])]) == 0
    assert "(gradients)" in capsys.readouterr().out


def test_a_planted_divergence_fails_with_its_reproduce_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(PEERS, "perturbed", Perturbed())
    assert run(tmp_path, "--backends", "perturbed") == 1
    report = json.loads((tmp_path / "report.json").read_text())
    failing = [w for w in report["worst"] if not w["passed"]]
    assert failing and all(w["quantity"] == "output" for w in failing)
    md = (tmp_path / "report.md").read_text()
    assert "**Verdict: failed**" in md and failing[0]["reproduce"] in md.split("## Failures")[1]
    assert failing[0]["reproduce"] in capsys.readouterr().out
    config = failing[0]["reproduce"].split("--config '")[1].rstrip("'")
    assert cli.main(["check", "--peer", "perturbed", "--config", config]) == 1


class LostState(ReferencePeer):
    """The reference with its first output one ulp of its scale larger (well within every budget) and one
    final-state entry NaN where the truth is finite."""

    name = "lost-state"

    def forward(self, cfg, case):
        out = super().forward(cfg, case)
        y, h = out.output.copy(), out.output_h.copy()
        y.flat[0] += np.finfo(y.dtype).eps * max(1.0, abs(float(y.flat[0])))
        h.flat[0] = np.nan
        return Outputs(y, h, out.output_c)


def test_a_non_finite_mismatch_is_a_worst_case_named_by_its_quantity(tmp_path, monkeypatch, capsys):
    """The NaN fails ``output_h`` while its finite entries (exact) use none of its budget, less than the
    nudged ``output`` uses: the failure still heads the worst cases, under its own quantity, and the
    documents say why (the error of the finite entries alone would read as a pass)."""
    monkeypatch.setitem(PEERS, "lost-state", LostState())
    assert run(tmp_path, "--backends", "lost-state") == 1
    report = json.loads((tmp_path / "report.json").read_text())
    records = [r for r in read_records(tmp_path / RESULTS) if r["study"] == "compat"]
    assert all(r["forward"]["output_h"]["nonfinite_mismatch"] == 1 and not r["forward"]["output_h"]["passed"]
               and 0 < r["forward"]["output"]["conditioned"] < r["forward"]["output"]["budget"] for r in records)
    forward = [w for w in report["worst"] if "--backward" not in w["reproduce"]]
    assert len(forward) == len(records)  # every failure is listed
    assert all(w["quantity"] == "output_h" and w["nonfinite_mismatch"] == 1 and not w["passed"] for w in forward)
    assert report["worst"][:len(forward)] == forward, "the failures come first"
    assert all(row["worst_forward"]["quantity"] == "output_h" for row in report["summary"])
    assert "1 non-finite mismatches" in (tmp_path / "report.md").read_text()
    assert "1 non-finite (output_h)" in capsys.readouterr().out
    _validate(report)
    config = forward[0]["reproduce"].split("--config '")[1].rstrip("'")
    assert cli.main(["check", "--peer", "lost-state", "--config", config]) == 1
    assert "output_h: 1 non-finite mismatches" in capsys.readouterr().out


class BackwardFails(ReferencePeer):
    name = "backward-fails"

    def backward(self, cfg, case):
        raise RuntimeError("backward refused (test double)")


def test_an_error_in_the_backward_pass_keeps_the_forward_verdict_and_prints_the_backward_command(
        tmp_path, monkeypatch):
    monkeypatch.setitem(PEERS, "backward-fails", BackwardFails())
    assert run(tmp_path, "--backends", "backward-fails") == 1
    report = json.loads((tmp_path / "report.json").read_text())
    records = [r for r in report["records"] if r["study"] == "compat"]
    assert records and all(r["status"] == "error" and r["error_in"] == "gradients" and r["forward"]
                           and all(v["passed"] for v in r["forward"].values()) for r in records)
    errors = [w for w in report["worst"] if w["quantity"] == "error"]
    assert len(errors) == len(records) and all("--backward" in w["reproduce"] for w in errors)
    _validate(report)


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


def test_a_run_with_nothing_to_compare_fails(tmp_path, capsys):
    grid = tmp_path / "grid.json"  # float64 configs: the reference is their truth, not a peer
    grid.write_text(json.dumps([{"study": "compat", "config": {"mode": "gru", "dtype": "float64"}}]))
    assert cli.main(["report", "--grid", str(grid), "--out", str(tmp_path / "run"), "--jobs", "1",
                     "--no-progress", "--backends", "reference"]) == 1
    assert "NOTHING RAN" in capsys.readouterr().out


def test_every_failure_is_listed_beyond_the_worst_case_count(tmp_path, monkeypatch, capsys):
    from compat_tests.report.aggregate import WORST_CASES

    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"study": "compat", "config": {"mode": "tanh", "seq_len": 2, "batch": 1,
                                                               "num_units": 2, "input_size": 2, "dtype": "float32", "seed": k}}
                                for k in range(WORST_CASES + 5)]))
    monkeypatch.setitem(PEERS, "perturbed", Perturbed())
    out = tmp_path / "run"
    assert cli.main(["report", "--grid", str(grid), "--out", str(out), "--jobs", "1", "--no-progress",
                     "--backends", "perturbed"]) == 1
    report = json.loads((out / "report.json").read_text())
    failing = [w for w in report["worst"] if not w["passed"]]
    assert len(failing) == WORST_CASES + 5 == report["totals"]["failed"]
    md = (out / "report.md").read_text()
    assert all(w["reproduce"] in md for w in failing)
    printed = capsys.readouterr().out
    assert sum(w["reproduce"] in printed for w in failing) == WORST_CASES and "... and 5 more" in printed


CRASHING_PEER = """
import os, signal
from compat_tests.peers.reference_peer import ReferencePeer

class Crashing(ReferencePeer):
    name = "crashing"

    def forward(self, cfg, case):
        if cfg.seed == 3:  # a native crash in the backend, as a segfault in its library would be
            os.kill(os.getpid(), signal.SIGSEGV)
        return super().forward(cfg, case)

CRASHING = Crashing()
"""


def _crashing_run(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The crashing peer's plugin file, a grid of six units whose fourth (seed 3) segfaults, and an --out."""
    plugin = tmp_path / "crashing_peer.py"
    plugin.write_text(CRASHING_PEER)
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"study": "compat", "config": {"mode": "tanh", "seq_len": 3, "batch": 2,
                                                               "dtype": "float32", "seed": k}} for k in range(6)]))
    return plugin, grid, tmp_path / "run"


def _only_seed_3_died(out: Path) -> tuple[dict, dict[int, dict]]:
    """The complete report of a crashing run, and its records by seed: seed 3's an error, the rest passed."""
    report = json.loads((out / "report.json").read_text())
    assert report["complete"] and report["totals"]["errors"] == 1
    by_seed = {r["config"]["seed"]: r for r in report["records"]}
    assert sorted(by_seed) == list(range(6))
    assert by_seed[3]["status"] == "error" and "worker process died" in by_seed[3]["error"]
    assert all(r["status"] == "ok" and r["passed"] for seed, r in by_seed.items() if seed != 3)
    return report, by_seed


def test_a_worker_that_dies_costs_its_unit_only(registry, tmp_path):
    """A segfault in a worker breaks the whole process pool; the unit that caused it gets an error record
    (found by running the units left one at a time), every other unit its own record, and the run ends
    with a whole report instead of a traceback."""
    plugin, grid, out = _crashing_run(tmp_path)
    assert cli.main(["report", "--plugin", f"{plugin}:CRASHING", "--backends", "crashing", "--grid", str(grid),
                     "--out", str(out), "--jobs", "2", "--no-progress"]) == 1
    report, by_seed = _only_seed_3_died(out)
    [crash] = [w for w in report["worst"] if w["quantity"] == "error"]
    assert f"--plugin {plugin}:CRASHING" in crash["reproduce"] and '"seed":3' in crash["reproduce"]
    forward, gradients = by_seed[3]["reproduce"]["forward"], by_seed[3]["reproduce"]["gradients"]
    assert crash["reproduce"] == f"{forward}; {gradients}", "where it died is unknown: both comparisons' commands"


def test_a_native_crash_in_process_ends_the_run_and_resume_goes_on_past_it(registry, tmp_path):
    """With ``--jobs 1`` the units run in the report's own process, so a segfault ends the run; the unit it
    was running is named in ``in_flight``, and ``--resume`` runs that unit alone in a worker process (where
    it dies again and gets an error record) and the rest as before."""
    plugin, grid, out = _crashing_run(tmp_path)
    common = ["report", "--plugin", f"{plugin}:CRASHING", "--backends", "crashing", "--grid", str(grid),
              "--out", str(out), "--jobs", "1", "--no-progress"]
    crashed = subprocess.run([sys.executable, "-m", "compat_tests.cli", *common], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert crashed.returncode == -signal.SIGSEGV, crashed.stderr
    before = read_records(out / RESULTS)
    assert sorted(r["config"]["seed"] for r in before) == [0, 1, 2]
    assert (out / IN_FLIGHT).read_text().strip() not in {r["id"] for r in before}
    assert cli.main([*common, "--resume"]) == 1
    assert not (out / IN_FLIGHT).exists()
    report, by_seed = _only_seed_3_died(out)
    assert read_records(out / RESULTS)[:3] == before


class UnitClock:
    """A clock for ``sweep`` that only a unit moves, one second per unit: a time limit stops a run at a
    known unit, however fast or slow the machine."""

    def __init__(self, run_unit):
        self.now, self._run_unit = 0.0, run_unit

    def monotonic(self) -> float:
        return self.now

    def run_unit(self, unit: dict) -> dict:
        self.now += 1.0
        return self._run_unit(unit)


def test_a_run_stopped_at_its_time_limit_reports_what_ran_and_resumes(tmp_path, monkeypatch, capsys, tiny_report):
    clock = UnitClock(sweep_module.run_unit)
    monkeypatch.setattr(sweep_module, "time", clock)
    monkeypatch.setattr(sweep_module, "run_unit", clock.run_unit)
    assert run(tmp_path, "--max-seconds", "2.5", "--no-figures") == 1, "a run that stopped early must not exit 0"
    partial = json.loads((tmp_path / "report.json").read_text())
    _validate(partial)
    planned = json.loads((tmp_path / "run.json").read_text())["units"]
    assert len(read_records(tmp_path / RESULTS)) == 3, "units start at t = 0, 1 and 2 only"
    assert not partial["complete"] and partial["totals"]["units"] == 3
    assert partial["totals"]["planned_units"] == len(planned) > 3
    assert [r["id"] for r in partial["records"]] == planned[:3]
    notice = f"INCOMPLETE: 3 of {len(planned)} planned units ran"
    assert notice in (tmp_path / "report.md").read_text() and notice in (tmp_path / "index.html").read_text()
    assert notice in capsys.readouterr().out
    headline = (tmp_path / "report.md").read_text().split("## Summary")[0]
    assert "Verdict: incomplete, no failure among the units that ran" in headline and "Verdict: passed" not in headline
    assert run(tmp_path, "--resume", "--no-figures") == 0
    resumed = json.loads((tmp_path / "report.json").read_text())
    assert resumed["complete"] and deterministic(resumed) == deterministic(tiny_report[2])


def test_a_time_limit_stops_worker_processes_too(tmp_path):
    """With worker processes, units not yet started when the time is up are dropped (those already handed
    to a worker finish) and the report of the rest is written."""
    assert run(tmp_path, "--jobs", "2", "--max-seconds", "1e-9", "--no-figures") == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert not report["complete"] and report["totals"]["units"] < report["totals"]["planned_units"]
    assert len(read_records(tmp_path / RESULTS)) == report["totals"]["units"]


def test_render_writes_the_report_of_the_run_not_of_the_renderer(tmp_path, tiny_report):
    """A run rendered on another machine (a GPU run's results on a laptop with matplotlib) keeps the
    environment of the machine that ran it."""
    _, _, report = tiny_report
    copy = _copied_run(tiny_report, tmp_path, lambda plan: plan.update(environment={
        **plan["environment"], "cpu": "the machine that ran it", "cudnn": {"device": "GPU 7"}}))
    plan = json.loads((copy / "run.json").read_text())
    assert cli.main(["render", str(copy)]) == 0
    rendered = json.loads((copy / "report.json").read_text())
    _validate(rendered)
    assert rendered["environment"] == plan["environment"]
    assert deterministic(rendered) == deterministic(report)
    page = (copy / "index.html").read_text()
    assert "the machine that ran it" in page and "GPU 7" in page
    assert (copy / "report.md").read_text().startswith("# cudnn-rnn-compat divergence report")


def test_no_figures_leaves_out_the_pages_figures_alone_and_render_draws_them(tmp_path, tiny_report):
    """``--no-figures``: index.html without a figure, saying how to draw them, every table and the report's
    numbers as with them; ``rnn-compat render DIR`` then draws the four."""
    copy = _copied_run(tiny_report, tmp_path)
    assert cli.main(["render", str(copy), "--no-figures"]) == 0
    bare = (copy / "index.html").read_text()
    assert "data:image/png" not in bare and "written with --no-figures" in bare and "matplotlib was not" not in bare
    assert deterministic(json.loads((copy / "report.json").read_text())) == deterministic(tiny_report[2])
    assert cli.main(["render", str(copy)]) == 0
    drawn = (copy / "index.html").read_text()
    assert drawn.count("data:image/png;base64,") == 4 and "--no-figures" not in drawn

    def tables(page: str) -> list[str]:
        return re.findall(r"<table.*?</table>", page, re.S)

    assert tables(bare) == tables(drawn) and len(tables(bare)) > 3


def _copied_run(tiny_report, tmp_path, edit_plan=None) -> Path:
    """A copy of the tiny run's ``run.json`` (changed by ``edit_plan``) and records in ``tmp_path/run``."""
    _, out, _ = tiny_report
    copy = tmp_path / "run"
    copy.mkdir(parents=True)
    for name in ("run.json", RESULTS):
        (copy / name).write_bytes((out / name).read_bytes())
    if edit_plan is not None:
        plan = json.loads((copy / "run.json").read_text())
        edit_plan(plan)
        (copy / "run.json").write_text(json.dumps(plan))
    return copy


def _policy_of_another_version(plan: dict) -> None:
    """``plan``'s policy as another version might have had it: torch-cpu's float32 budgets overridden."""
    plan["policy"]["overrides"].append({"peer": "torch-cpu", "dtype": "float32", "quantity": "output", "bound": 99.0,
                                        "reason": "an override of the version that ran it"})


def test_render_shows_the_policy_that_judged_the_run_not_the_renderer_s(tmp_path, tiny_report, monkeypatch):
    """The records carry the verdicts of the policy of the version that ran them, so the report shows that
    policy (run.json keeps it), whatever the renderer's version has; a plan of a version that kept none is
    shown with the renderer's."""
    from compat_tests.report import aggregate

    copy = _copied_run(tiny_report, tmp_path, _policy_of_another_version)
    monkeypatch.setattr(aggregate.tolerances, "OVERRIDES", [])  # the renderer's version has no override at all
    assert cli.main(["render", str(copy), "--no-figures"]) == 0
    rendered = json.loads((copy / "report.json").read_text())
    _validate(rendered)
    assert rendered["policy"] == json.loads((copy / "run.json").read_text())["policy"]
    assert "budget override: torch-cpu float32 output: 99 conditioned eps. an override of the version that ran it" \
        in (copy / "report.md").read_text()
    older = _copied_run(tiny_report, tmp_path / "older", lambda plan: plan.pop("policy"))
    assert cli.main(["render", str(older), "--no-figures"]) == 0
    assert json.loads((older / "report.json").read_text())["policy"] == aggregate.policy_summary()
    assert "budget override" not in (older / "report.md").read_text()


def test_resume_refuses_a_run_that_another_policy_judged(tmp_path, tiny_report, capsys):
    """Resuming under another tolerance policy would judge the run's records by two policies."""
    copy = _copied_run(tiny_report, tmp_path, _policy_of_another_version)
    plan, results = (copy / "run.json").read_text(), (copy / RESULTS).read_text()
    assert run(copy, "--resume") == 2
    assert f"--resume: the tolerance policy changed since the run in {copy} began" in capsys.readouterr().err
    assert (copy / "run.json").read_text() == plan and (copy / RESULTS).read_text() == results


def test_a_render_that_dies_before_it_ends_leaves_the_old_report_whole(tmp_path, tiny_report, kill_before_replacing):
    copy = _copied_run(tiny_report, tmp_path)
    assert cli.main(["render", str(copy), "--no-figures"]) == 0
    before = {p.name: p.read_bytes() for p in copy.iterdir()}
    plan = json.loads((copy / "run.json").read_text())
    (copy / "run.json").write_text(json.dumps({**plan, "environment": {"cpu": "another"}}))  # every document changes
    before["run.json"] = (copy / "run.json").read_bytes()
    kill_before_replacing()
    with pytest.raises(Killed):
        cli.main(["render", str(copy), "--no-figures"])
    assert {p.name: p.read_bytes() for p in copy.iterdir()} == before


def test_render_refuses_a_folder_that_is_not_a_report_run(tmp_path, capsys):
    assert cli.main(["render", str(tmp_path)]) == 2
    assert "no run.json" in capsys.readouterr().err


def _drop(key: str):
    return lambda d: {k: v for k, v in d.items() if k != key}


def _edit_first_compat(text: str, change) -> str:
    """The results with the first passing compat record, changed by ``change`` in place, moved to line 1."""
    lines = text.splitlines()
    k = next(i for i, line in enumerate(lines) if '"compat"' in line and '"status": "ok"' in line)
    record = json.loads(lines.pop(k))
    change(record)
    return "\n".join([json.dumps(record), *lines])


@pytest.mark.parametrize(("target", "damage", "match"), [
    ("run.json", lambda text: text[:-5], "is not JSON"),
    ("run.json", lambda text: "[]", "not an object with backends, environment"),
    ("run.json", lambda text: json.dumps(_drop("units")(json.loads(text))), "units must be a list, got nothing"),
    (RESULTS, lambda text: "\n".join([json.dumps(_drop("backend")(json.loads(text.splitlines()[0]))),
                                      *text.splitlines()[1:]]), "line 1 lacks \\['backend'\\]"),
    (RESULTS, lambda text: "\n".join([*text.splitlines()[:2], json.dumps(_drop("reproduce")(json.loads(
        next(line for line in text.splitlines() if '"compat"' in line))))]), "line 3 lacks \\['reproduce'\\]"),
    (RESULTS, lambda text: "[1, 2]\n" + text, "line 1 lacks \\['id', 'study'"),
    (RESULTS, lambda text: json.dumps({**json.loads(text.splitlines()[0]), "status": "pending"}) + "\n" + text,
     "line 1 lacks a known status and study"),
    (RESULTS, lambda text: json.dumps({**json.loads(text.splitlines()[0]), "status": ["ok"]}) + "\n" + text,
     "line 1 lacks a known status and study"),
    ("run.json", lambda text: json.dumps({**json.loads(text), "skipped": [{}]}),
     "skipped\\[0\\] must be an object with backend \\(str\\), reason \\(str\\), config \\(dict\\)"),
    ("run.json", lambda text: json.dumps({**json.loads(text), "units": "all"}), "units must be a list, got str"),
    ("run.json", lambda text: json.dumps({**json.loads(text), "policy": []}), "policy must be an object with measure"),
    ("run.json", lambda text: json.dumps({**(p := json.loads(text)), "policy": {**p["policy"], "overrides": [
        {"peer": "torch-cpu", "dtype": "float32", "quantity": "output", "bound": "99", "reason": "r"}]}}),
     "policy.overrides\\[0\\] must be an object with peer \\(str\\), dtype \\(str\\), quantity \\(str\\), "
     "bound \\(int or float\\)"),
    ("run.json", lambda text: json.dumps({**(p := json.loads(text)), "policy": {**p["policy"], "budgets": {
        "float32/output": {"bound": True, "reason": "r"}}}}), "policy.budgets\\['float32/output'\\] must be"),
    ("run.json", lambda text: json.dumps({**json.loads(text), "environment": 3}), "environment must be a dict"),
    ("run.json", lambda text: json.dumps({**json.loads(text), "units": [1]}), "units must be a list of unit ids"),
    ("run.json", lambda text: json.dumps({**(p := json.loads(text)), "backends": [{**p["backends"][0], "name": 7}]}),
     "backends\\[0\\] must be an object with name \\(str\\)"),
    (RESULTS, lambda text: _edit_first_compat(text, lambda r: r["forward"]["output"].pop("budget")),
     "line 1 holds forward verdicts without conditioned, budget"),
    (RESULTS, lambda text: _edit_first_compat(text, lambda r: r["config"].pop("dtype") and r["config"].update(extra=1)),
     "line 1 holds a config that is not an RNNConfig"),
    (RESULTS, lambda text: _edit_first_compat(text, lambda r: r["forward"].clear()), "line 1 holds no forward verdict"),
    (RESULTS, lambda text: _edit_first_compat(text, lambda r: r.update(reproduce="rnn-compat check")),
     "line 1 holds reproduce commands that are not"),
    (RESULTS, lambda text: "\n".join([json.dumps({**json.loads(next(line for line in text.splitlines()
                                                                   if '"gru_variant"' in line)),
                                                   "variant": {"max_abs": 1.0}}), *text.splitlines()]),
     "line 1 holds a variant result without max_abs, final_h_max_abs, per_step_abs"),
])
def test_render_and_resume_refuse_a_run_folder_another_version_or_a_hand_wrote(tmp_path, tiny_report, capsys,
                                                                              target, damage, match):
    """``render`` (and ``--resume``, which reads the same records) names the file and the line instead of
    failing with a KeyError deep in the report's aggregation."""
    copy = _copied_run(tiny_report, tmp_path)
    damaged = damage((copy / target).read_text())
    (copy / target).write_text(damaged if target != RESULTS else damaged.rstrip("\n") + "\n")  # whole lines
    assert cli.main(["render", str(copy)]) == 2
    assert re.search(f"{re.escape(str(copy / target))}:? {match}", capsys.readouterr().err)
    if target == RESULTS:
        assert run(copy, "--resume") == 2


@pytest.mark.parametrize("argv", [
    ["--grid", "nonesuch"],
    ["--grid", str(TINY), "--backends", "nonesuch"],
    ["--grid", str(TINY), "--max-seconds", "0"],
    ["--grid", str(TINY), "--max-seconds", "-1"],
])
def test_bad_report_arguments_exit_2(tmp_path, argv):
    assert cli.main(["report", "--out", str(tmp_path), "--no-progress", *argv]) == 2


def test_an_existing_run_is_not_overwritten_without_resume(tiny_report):
    _, out, _ = tiny_report
    assert run(out) == 2


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


def test_a_crashing_backend_becomes_an_error_record_not_a_crash(tmp_path, monkeypatch):
    class Crashing(ReferencePeer):
        name = "crashing"

        def forward(self, cfg, case):
            raise RuntimeError("kernel exploded")

    monkeypatch.setitem(PEERS, "crashing", Crashing())
    assert run(tmp_path, "--backends", "crashing") == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["totals"]["errors"] > 0 and not report["passed"]
    errors = [w for w in report["worst"] if w["quantity"] == "error"]
    assert errors and "kernel exploded" in errors[0]["error"] and errors[0]["reproduce"].startswith("rnn-compat check")
    _validate(report)
    crashed = [r for r in read_records(tmp_path / RESULTS) if r["status"] == "error"]
    assert crashed and not any(r["passed"] for r in crashed), "a crashed unit is not a passed one"
    assert sum(row["failed"] for row in report["summary"]) == sum(r["study"] == "compat" for r in crashed)


def test_a_unit_whose_gradients_cannot_be_judged_is_indeterminate_not_passed(tmp_path):
    """A float16 relu stack whose gradients are too ill-conditioned for half precision (kappa near 900: the
    budget admits an error as large as the result, test_policy), so the unit is indeterminate, and counts as
    such rather than as passed. (The earlier T 40, seed 1 stack now overflows its float16 state to inf and
    NaN in the forward pass, as the state is rounded to float16 every step: ``precision.HALF_ROUNDS``.)"""
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"study": "compat", "config": {
        "mode": "relu", "num_layers": 2, "num_units": 4, "input_size": 3, "seq_len": 12, "batch": 2,
        "dtype": "float16", "weight_scale": 4.0, "seed": 2}}]))
    out = tmp_path / "out"
    assert cli.main(["report", "--grid", str(grid), "--backends", "reference", "--out", str(out), "--jobs", "1",
                     "--no-progress"]) == 0
    (record,) = read_records(out / RESULTS)
    assert record["passed"] and record["indeterminate"] and "gradients" in record
    report = json.loads((out / "report.json").read_text())
    assert {k: report["totals"][k] for k in ("passed", "failed", "indeterminate")} == \
        {"passed": 0, "failed": 0, "indeterminate": 1}


class PerturbedGradients(ReferencePeer):
    """The reference with one input gradient nudged by 1000 ulp: its forward pass is exact."""

    name = "perturbed-gradients"

    def backward(self, cfg, case):
        grads = super().backward(cfg, case)
        d = grads.d_input.copy()
        d.flat[0] += 1000 * np.finfo(d.dtype).eps * max(1.0, float(np.abs(d).max()))
        return grads._replace(d_input=d)


def test_a_unit_with_a_failing_gradient_fails_and_leads_the_worst_cases(tmp_path, monkeypatch):
    monkeypatch.setitem(PEERS, "perturbed-gradients", PerturbedGradients())
    assert run(tmp_path, "--backends", "perturbed-gradients") == 1
    report = json.loads((tmp_path / "report.json").read_text())
    with_gradients = [r for r in report["records"] if r["study"] == "compat" and "gradients" in r]
    assert with_gradients and not any(r["passed"] for r in with_gradients)
    assert all(all(v["passed"] for v in r["forward"].values()) for r in with_gradients), "forward is exact"
    assert all(row["worst_gradient"]["quantity"] == "d_input" for row in report["summary"] if row["worst_gradient"])
    shares = [w["conditioned"] / w["budget"] for w in report["worst"]]
    assert shares == sorted(shares, reverse=True) and len(set(shares)) > 1, "worst cases, worst first"
    assert all(not w["passed"] for w in report["worst"][:len(with_gradients)])


# ---- found by an audit of the report: each of these was wrong before ------------------------------------

def _grid(tmp_path: Path, entries: list[tuple[str, dict]]) -> Path:
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"study": study, "config": config} for study, config in entries]))
    return grid


SMALL_GRU = {"mode": "gru", "seq_len": 3, "batch": 2, "num_units": 3, "input_size": 2, "dtype": "float32"}


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


def test_resume_refuses_a_plan_other_than_the_runs(tmp_path, capsys):
    """Resuming with another grid, seed or backends would mix two runs' records under one plan."""
    out = tmp_path / "run"
    first = _grid(tmp_path, [("compat", SMALL_GRU)])
    assert cli.main(["report", "--grid", str(first), "--backends", "reference", "--out", str(out), "--jobs", "1",
                     "--no-progress", "--no-figures"]) == 0
    plan_before, results_before = (out / "run.json").read_text(), (out / RESULTS).read_text()
    other = tmp_path / "other.json"
    other.write_text(json.dumps([{"study": "compat", "config": {**SMALL_GRU, "mode": "lstm"}}]))
    for argv in (["--grid", str(other), "--backends", "reference"], ["--grid", str(first), "--backends", "reference,torch-cpu"]):
        assert cli.main(["report", *argv, "--out", str(out), "--jobs", "1", "--no-progress", "--resume"]) == 2
        assert f"--resume: the run in {out} (grid 'grid.json', seed 0) planned 1 units; this command plans" \
            in capsys.readouterr().err
    assert (out / "run.json").read_text() == plan_before and (out / RESULTS).read_text() == results_before
    (out / "run.json").unlink()  # a plan lost: the records decide
    assert cli.main(["report", "--grid", str(other), "--backends", "reference", "--out", str(out), "--jobs", "1",
                     "--no-progress", "--resume"]) == 2
    assert f"{out / RESULTS} holds records of 1 units" in capsys.readouterr().err
    assert cli.main(["report", "--grid", str(first), "--backends", "reference", "--out", str(out), "--jobs", "1",
                     "--no-progress", "--resume", "--no-figures"]) == 0


def test_a_config_planned_but_not_yet_run_is_not_called_unrunnable(tmp_path):
    """An incomplete run: the classic GRU is planned for the reference, and torch-cpu cannot run it. It is
    in no backend's records yet, but a backend will run it, so it is not among the configs none can."""
    from compat_tests.report.aggregate import build_report
    from compat_tests.report.units import Unit
    from compat_tests.config import RNNConfig

    cfg = RNNConfig("classic_gru", dtype="float32")
    skipped = [("torch-cpu", "PyTorch has only the cuDNN (reset-after) GRU", cfg)]
    backends = [{"name": n, "available": True, "detail": "", "requested": True} for n in ("reference", "torch-cpu")]
    planned = build_report([], "g", 0, backends, skipped, env={}, planned=[Unit("compat", "reference", cfg).id])
    assert not planned["complete"] and planned["unrun"] == []
    unrunnable = build_report([], "g", 0, backends, skipped, env={}, planned=[])
    assert unrunnable["unrun"] == [{"config": cfg.short(), "reasons": {"torch-cpu": skipped[0][1]}}]


MARKUP_PEER = """
from compat_tests.peers.reference_peer import ReferencePeer

class Markup(ReferencePeer):
    name = "markup"

    def forward(self, cfg, case):
        raise TypeError("Half.__init__() got <half> | *x*\\n  and [a](b) & more")

    def backward(self, cfg, case):
        raise TypeError("no")

MARKUP = Markup()
"""


def test_free_text_in_the_markdown_is_one_escaped_line_and_an_erroring_backend_keeps_its_cells(registry, tmp_path):
    """An error message is the backend's text: in report.md it must read as written (not as emphasis, HTML
    tags or a table), and a backend whose every unit ended in an error is shown as such, not left out."""
    from compat_tests.report import render
    from compat_tests.report.plots import heat_cells

    plugin = tmp_path / "markup_peer.py"
    plugin.write_text(MARKUP_PEER)
    out = tmp_path / "run"
    grid = _grid(tmp_path, [("compat", {**SMALL_GRU, "mode": "tanh"})])
    assert cli.main(["report", "--plugin", f"{plugin}:MARKUP", "--backends", "markup,reference", "--grid", str(grid),
                     "--out", str(out), "--jobs", "1", "--no-progress"]) == 1
    md = (out / "report.md").read_text()
    assert r"TypeError: Half.\_\_init\_\_() got \<half\> \| \*x\* and \[a\](b) \& more" in md
    assert "<half>" not in md
    report = json.loads((out / "report.json").read_text())
    assert heat_cells(report)["markup"] == {("tanh", "float32"): (float("inf"), "error")}
    assert "error, 1 failed" in md and "<td>error, 1 failed</td>" in render.html_page(report)


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


def test_a_config_listed_twice_is_counted_once_among_those_not_run(tmp_path):
    grid = _grid(tmp_path, [("compat", {**SMALL_GRU, "mode": "classic_gru"})] * 2)
    out = tmp_path / "run"
    assert cli.main(["report", "--grid", str(grid), "--backends", "reference,torch-cpu", "--out", str(out),
                     "--jobs", "1", "--no-progress", "--no-figures"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["totals"]["units"] == 1 and [s["count"] for s in report["skipped"]] == [1]


def test_an_empty_backends_list_is_refused(tmp_path, capsys):
    assert cli.main(["report", "--grid", str(TINY), "--backends", "", "--out", str(tmp_path / "out"),
                     "--no-progress"]) == 2
    assert "--backends must name at least one backend" in capsys.readouterr().err


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
