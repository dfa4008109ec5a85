"""Writing files whole: every writer of a weight, state or output file goes through :func:`replacing`."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` (same folder and suffix, so writers that add a suffix add none) to
    write to; it replaces ``path`` only once the block finishes. A write that fails or is killed leaves
    ``path`` as it was (a file it was to overwrite stays whole) and nothing under its name."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.partial{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
