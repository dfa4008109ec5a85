"""Divergence reports: ``rnn-compat report``.

``grids`` (what to run) -> ``units`` (one study x backend x config -> one JSON record) -> ``sweep``
(processes, ``results.jsonl``, resume) -> ``aggregate`` (``report.json``) -> ``render`` (``report.md``,
``index.html`` with ``plots``).
"""

from __future__ import annotations

import json
from pathlib import Path

from .aggregate import build_report
from .render import html_page, markdown

SCHEMA = Path(__file__).with_name("report.schema.json")


def write_report(out: Path, report: dict) -> None:
    """``report.json``, ``report.md`` and ``index.html`` into ``out``."""
    (out / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    (out / "report.md").write_text(markdown(report))
    (out / "index.html").write_text(html_page(report))


__all__ = ["SCHEMA", "build_report", "write_report"]
