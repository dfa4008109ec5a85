"""A report run's folder and the files it holds: what ``rnn-compat report`` writes there (:data:`RUN_FILES`,
:data:`REPORT_FILES`), and the rule that they are the folder's own (:func:`check_own`).

A run folder may come from elsewhere (a colleague's, a CI artifact unpacked) and hold a symbolic link named
as one of its files (``index.html -> ~/.bashrc``): ``render``, ``--resume`` or ``diff`` writing through it
would replace the file it points at, and reading through it would take another file's bytes as the run's.
Each command refuses such a folder before it reads or writes anything there, naming the link."""

from __future__ import annotations

import os
from pathlib import Path

# What a report run writes in its folder: its own files (the plan, the records, the unit running in-process, a
# fleet run's log), and the report of them.
RUN_FILES = ("run.json", "results.jsonl", "in_flight", "fleet.log")
REPORT_FILES = ("report.json", "report.md", "index.html")


def check_own(folder: str | Path, names=RUN_FILES + REPORT_FILES) -> None:
    """ValueError naming the first of ``names`` in ``folder`` that is a symbolic link, and where it points."""
    for name in names:
        path = Path(folder) / name
        if path.is_symlink():
            raise ValueError(f"{path} is a symbolic link (to {os.readlink(path)}): a run folder's files are read and "
                             f"written there alone, never through a link to another file; refused (remove the link)")
