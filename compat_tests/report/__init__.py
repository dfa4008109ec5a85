"""Divergence reports: ``rnn-compat report``.

``grids`` (what to run) -> ``units`` (one study x backend x config -> one JSON record) -> ``sweep``
(processes, ``results.jsonl``, resume) -> ``aggregate`` (``report.json``) -> ``render`` (``report.md``,
``index.html`` with ``plots``).
"""

from __future__ import annotations

import json
from pathlib import Path

from reference.formats.files import replacing

from .aggregate import build_report
from .render import html_page, markdown

SCHEMA = Path(__file__).with_name("report.schema.json")


def write_report(out: Path, report: dict, figures: bool = True) -> None:
    """``report.json``, ``report.md`` and ``index.html`` (with its figures unless ``figures`` is false) into
    ``out``, each whole (an earlier report stays as it was until its replacement is complete)."""
    for name, text in (("report.json", json.dumps(report, indent=1, sort_keys=True) + "\n"),
                       ("report.md", markdown(report)), ("index.html", html_page(report, figures))):
        with replacing(out / name) as partial:
            partial.write_text(text)


__all__ = ["SCHEMA", "build_report", "write_report"]
