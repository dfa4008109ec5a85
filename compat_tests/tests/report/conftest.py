"""The report tests' shared fixture: one small report of the reference, made once a test process."""

from __future__ import annotations

import json

import pytest

from compat_tests.tests.helpers import run


@pytest.fixture(scope="session")
def tiny_report(tmp_path_factory):
    """``(exit status, folder, report.json)`` of a report of the reference on the tiny grid (``helpers.run``)."""
    out = tmp_path_factory.mktemp("report")
    status = run(out)
    return status, out, json.loads((out / "report.json").read_text())
