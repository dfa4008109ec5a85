"""A pytest plugin for ``compat_tests.gpu.ladder``: a JSON line in ``$RNN_COMPAT_LADDER_LOG`` as each test
starts and as it ends (outcome, seconds, the head of its failure, its notes, and the last ``reproduce``
command it recorded), flushed at once, so that a runner watching from outside knows which test is running
and what every finished one did even when the process is killed.

It also ends the process after a test that failed for any reason but wrong numbers: a test whose call ended
in an ``AssertionError`` (the test's own checks of what the backend returned) leaves the process as healthy
as it was, and the next test runs in it; any other exception (a CUDA error, which may stick to the context;
an error in a fixture) stops the session, and the runner goes on in a fresh process.

Tests record with ``request.node.user_properties``: ``("note", text)`` for a finding worth the table (a
cuDNN refusal with its status), ``("reproduce", command)`` for the one-line command that re-runs a failure
(a Hypothesis test records it on each failing example; the last is the shrunk one)."""

from __future__ import annotations

import json
import os
import time

import pytest


def _write(event: dict) -> None:
    path = os.environ.get("RNN_COMPAT_LADDER_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(event) + "\n")
            f.flush()
            os.fsync(f.fileno())


def pytest_runtest_logstart(nodeid: str, location) -> None:
    _write({"event": "start", "nodeid": nodeid, "time": time.time()})


def _message(report) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    text = str(report.longrepr or "")
    errors = [line[2:].strip() for line in text.splitlines() if line.startswith("E ")]
    return " | ".join(errors[:6])[:1000] if errors else text[-1000:]


_outcomes: dict[str, dict] = {}


def pytest_runtest_logreport(report) -> None:
    """One ``end`` line a test, written at its teardown (the worst of its setup, call and teardown)."""
    worst = _outcomes.setdefault(report.nodeid, {"outcome": "passed", "seconds": 0.0, "message": ""})
    worst["seconds"] += report.duration
    if report.outcome != "passed" and worst["outcome"] != "failed":
        worst.update(outcome=report.outcome, message=_message(report))
    if report.when != "teardown":
        return
    props = [(k, v) for k, v in report.user_properties]
    reproduce = [v for k, v in props if k == "reproduce"]
    _write({"event": "end", "nodeid": report.nodeid, **_outcomes.pop(report.nodeid),
            "notes": [v for k, v in props if k == "note"], "reproduce": reproduce[-1] if reproduce else None})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    wrong_numbers = report.when == "call" and call.excinfo is not None and call.excinfo.errisinstance(AssertionError)
    if report.failed and not wrong_numbers:  # (an XPASS(strict) too: no exception, nothing known of the process)
        why = call.excinfo.typename if call.excinfo else "a failure"
        item.session.shouldstop = f"{item.nodeid} failed with {why} in its {report.when}: a fresh process goes on"
