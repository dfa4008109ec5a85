"""A complete report's documents (the tiny grid's run): report.json valid against its schema, report.md and
index.html naming every backend and config, every record's metrics and the command that reruns it, and the
figures' drift colours and labelled log axes."""

from __future__ import annotations

import json

import pytest

from compat_tests import cli
from compat_tests.peers import PEERS
from compat_tests.report.grids import load_grid
from compat_tests.report.sweep import RESULTS, read_records
from compat_tests.tests.helpers import TINY_GRID as TINY
from compat_tests.tests.helpers import _validate


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
