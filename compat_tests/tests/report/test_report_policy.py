"""The tolerance policy in a report: the exceptions of the run's backends are listed with their reasons, render
shows the policy that judged the run (kept in run.json), not the renderer's, and --resume refuses a run
that another policy judged."""

from __future__ import annotations

import html
import json

from compat_tests import cli
from compat_tests.judge.known_divergences import KNOWN
from compat_tests.judge.tolerances import OVERRIDES
from compat_tests.peers import GPU_PEERS
from compat_tests.report.sweep import RESULTS
from compat_tests.tests.helpers import _copied_run, _validate, run


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
