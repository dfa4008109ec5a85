"""Who decides what Ctrl-C and SIGTERM mean: the main process alone, never a worker.

Ctrl-C at a terminal reaches every process of the foreground process group, and SIGTERM may be sent to a
group too. A worker that acted on either would die before its parent decided anything, and print a
``KeyboardInterrupt`` traceback from wherever the signal landed: in the middle of its imports while it
starts, in a unit, or while it ends. So every worker process the project starts is deaf to both, from its
first instruction, and its parent stops it (``kill``) when the parent is interrupted:

- :func:`children_start_deaf`, in the parent around starting workers: the processes started in the block
  begin with SIGINT and SIGTERM *blocked*, since a blocked signal mask survives ``fork`` and ``exec``; a
  signal that reaches one while the interpreter starts and imports waits there, unacted. In the parent they
  are blocked in the calling thread only, and only during the block: a signal that arrives meanwhile is
  taken by another thread of the parent (its handler then runs in the main thread, within the block: a
  caller that must finish its bookkeeping first defers it, as the report's sweep does) or waits until the
  block ends. None is lost.
- :func:`deaf`, in the worker as soon as it runs code of the project's: both ignored, then unblocked. A
  signal that waited while it started is discarded with them.
- :func:`terminated_as_interrupted`, in a main process: SIGTERM raises :class:`Terminated` (a
  ``KeyboardInterrupt``), so a command stops as Ctrl-C stops it, cleaning up, instead of ending without a word
  with its workers orphaned; :func:`stopped_quietly` runs a whole command so, ending it with one line.
"""

from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager
from typing import Callable, Iterator

STOPPING = frozenset({signal.SIGINT, signal.SIGTERM})
"""The signals a user sends to stop a command: the main process's to handle, never a worker's."""


@contextmanager
def children_start_deaf(spawn: bool = False) -> Iterator[None]:
    """Processes started in the block (``subprocess``; ``multiprocessing``'s spawn, with ``spawn``) begin with
    SIGINT and SIGTERM blocked, until they call :func:`deaf`; this thread's signal mask is restored after the
    block."""
    if not hasattr(signal, "pthread_sigmask"):  # (not POSIX: no masks to inherit)
        yield
        return
    if spawn:
        # multiprocessing starts its resource tracker with the first spawned process, and unblocks both signals
        # in the calling thread when it has: start it before they are blocked, so that the block holds.
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    saved = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, saved)


def deaf() -> None:
    """A worker's first act: SIGINT and SIGTERM ignored from now on (its parent kills it when it must stop),
    and unblocked, discarding any that arrived while it started (:func:`children_start_deaf`)."""
    for signum in STOPPING:
        signal.signal(signum, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING)


def deaf_if_started_deaf() -> None:
    """:func:`deaf` where this process began with SIGINT and SIGTERM blocked: a worker started in
    :func:`children_start_deaf`, whose parent decides. A process started otherwise (by a user) keeps both."""
    if hasattr(signal, "pthread_sigmask") and STOPPING <= signal.pthread_sigmask(signal.SIG_BLOCK, ()):
        deaf()


def stopped_quietly(main: Callable[[], int | None], prog: str, kept: str = "") -> int:
    """Run ``main`` as a process's whole command, SIGTERM handled as Ctrl-C (:func:`terminated_as_interrupted`);
    either ends it with one line on standard error (``prog: interrupted by SIGINT`` and ``kept``, what the
    command kept) and status 128 + the signal, instead of a traceback."""
    with terminated_as_interrupted():
        try:
            return main() or 0
        except KeyboardInterrupt as exc:
            signum = getattr(exc, "signum", signal.SIGINT)
            print(f"{prog}: interrupted by {signal.Signals(signum).name}{kept}", file=sys.stderr, flush=True)
            return 128 + signum


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is: the command stops, what it finished is kept, no file is left half-written."""

    signum = signal.SIGTERM


@contextmanager
def terminated_as_interrupted() -> Iterator[Callable[[], None]]:
    """SIGTERM raises :class:`Terminated` while the block runs (in the main thread: where a handler can be set),
    instead of ending the process without a word, its worker processes orphaned. The block may call what it is
    given (``ending()``) where the process ends interrupted: SIGINT and SIGTERM then end it at once, as they
    would otherwise hit the interpreter's shutdown."""
    def terminated(signum, frame):
        raise Terminated("SIGTERM")

    def at_once(signum, frame):
        os._exit(128 + signum)

    ending = []
    try:
        saved = signal.signal(signal.SIGTERM, terminated)
    except ValueError:  # not the main thread
        yield lambda: None
        return
    try:
        yield lambda: ending.append(True)
    finally:
        if ending:
            signal.signal(signal.SIGINT, at_once)
            signal.signal(signal.SIGTERM, at_once)
        else:
            signal.signal(signal.SIGTERM, saved)
