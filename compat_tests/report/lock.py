"""One run at a time in a report folder: a run holds an exclusive ``flock`` on ``OUT/.run.lock`` for as long as
it writes the folder (its plan, its records, its report), and the file says who holds it (pid, host, start
time). A second run into the folder (or a ``--resume`` of it) is refused, naming the first, instead of both
appending every unit to ``results.jsonl``. The lock is the kernel's: a run that dies, however, releases it."""

from __future__ import annotations

import datetime
import os
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

try:
    import fcntl
except ImportError:  # (not POSIX: no lock)
    fcntl = None

LOCK = ".run.lock"


@contextmanager
def run_lock(out: Path) -> Iterator[None]:
    """Hold the lock of the report folder ``out`` (made if need be) while the block runs; a ``ValueError`` naming
    the run that holds it, where another does."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if fcntl is None:
        yield
        return
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "a run that has only just started"
            raise ValueError(f"--out {out} is being written by another run ({holder}): wait for it to end, or use "
                             f"another --out") from None
        os.ftruncate(fd, 0)
        started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # (released below: the file no longer names a run)
    finally:
        os.close(fd)
