"""rnn-compat render DIR: the report of the run (its environment, not the renderer's), figures left out with
--no-figures and drawn later, the old report left whole by a render that dies, and a folder that is not a
report run, or one another version or a hand wrote, refused naming the file and line (--resume too)."""

from __future__ import annotations

import json
import re

import pytest

from compat_tests import cli
from compat_tests.report.sweep import RESULTS
from compat_tests.tests.conftest import Killed
from compat_tests.tests.helpers import _copied_run, _validate, deterministic, run


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
