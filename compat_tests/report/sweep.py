"""Run work units, in this process or in worker processes, appending each record to ``results.jsonl``
as it finishes: a killed run loses at most the units in flight, and ``--resume`` skips every unit whose
record is already there. With a time limit no unit starts after it; the units in flight finish.

A worker process that dies (a backend's native crash) breaks its pool, and which of the units in flight
killed it is unknown: the units left then run one at a time, each in a worker of its own, and the one
whose worker dies again gets an error record (the sweep goes on). In-process (``jobs=1``) a native crash
ends the run, but the unit it ran is named in ``in_flight`` until its record is written: the next run into
that folder (``--resume``) runs that unit first, alone in a worker process, so a crash it causes again
costs only its own record and the sweep goes on past it.

SIGINT or SIGTERM (Ctrl-C reaches the whole process group; the workers are deaf to both from their first
instruction, :mod:`compat_tests.interrupts`, and leave them to the main process) stops a run at once, wherever
it lands (workers starting, importing, running a unit or ending): the workers are killed, the units they were
running are lost, every record already written stays whole, and ``--resume`` runs the rest. A second signal
ends the process at once. A worker dies with the main process, however that ends (on Linux).
"""

from __future__ import annotations

import ctypes
import json
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures import TimeoutError as FuturesTimeout
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing import get_context
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from reference.formats.files import load_json

from ..config import RNNConfig
from ..interrupts import children_start_deaf, deaf
from ..peers import load_plugins
from .units import Unit, died_record, run_unit

RESULTS = "results.jsonl"
IN_FLIGHT = "in_flight"
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


# What every record holds, and what a record of each status and study adds (units.run_unit writes them).
RECORD_KEYS = ("id", "study", "backend", "config", "status", "passed", "indeterminate")
RECORD_KEYS_BY_KIND = {("ok", "compat"): ("forward", "reproduce"), ("ok", "gru_variant"): ("variant",),
                       ("ok", "published"): ("published",),
                       ("error", "compat"): ("error", "reproduce"), ("error", "gru_variant"): ("error",),
                       ("error", "published"): ("error",),
                       # a model report's (compat_tests.model_report.units)
                       ("ok", "model"): ("forward", "model", "reproduce", "file", "input", "layer"),
                       ("error", "model"): ("error", "reproduce", "file", "input", "layer")}
# What the report reads inside a record: each judged quantity's verdict, and a GRU-variant result.
VERDICT_KEYS = ("conditioned", "budget", "passed", "indeterminate", "max_eps", "per_step")
VARIANT_KEYS = ("max_abs", "final_h_max_abs", "per_step_abs")
PUBLISHED_KEYS = ("source", "checksums", "bound", "runs")


def _inner_problem(record: dict) -> str | None:
    """What inside a record (with the top-level keys) the report could not read, or ``None``."""
    try:
        RNNConfig.from_dict(record["config"])
    except (ValueError, TypeError) as exc:
        return f"a config that is not an RNNConfig ({exc})"
    for kind in ("forward", "gradients"):
        verdicts = record.get(kind, {})
        if not isinstance(verdicts, dict) or not all(
                isinstance(v, dict) and all(k in v for k in VERDICT_KEYS) for v in verdicts.values()):
            return f"{kind} verdicts without {', '.join(VERDICT_KEYS)}"
    if "forward" in record and not record["forward"]:
        return "no forward verdict"
    commands = record.get("reproduce", {"forward": ""})
    if not (isinstance(commands, dict) and "forward" in commands and all(isinstance(c, str) for c in commands.values())):
        return "reproduce commands that are not {comparison: command}"
    if "variant" in record and not (isinstance(record["variant"], dict)
                                    and all(k in record["variant"] for k in VARIANT_KEYS)):
        return f"a variant result without {', '.join(VARIANT_KEYS)}"
    if "published" in record and not (isinstance(record["published"], dict)
                                      and all(k in record["published"] for k in PUBLISHED_KEYS)):
        return f"a published-checksums result without {', '.join(PUBLISHED_KEYS)}"
    return None


def read_records(path: Path) -> list[dict]:
    """Records of a results file; a torn last line (the run was killed mid-write) is dropped. A line that is
    not JSON elsewhere, or a record without the keys the report and ``--resume`` read, is a ValueError naming
    it: another version wrote it, or a hand."""
    if not path.exists():
        return []
    records = []
    data = path.read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for number, line in enumerate(lines, 1):
        try:
            record = load_json(line, f"{path}: line {number}")
        except ValueError:
            if number == len(lines) and not data.endswith(b"\n"):
                continue  # torn: the run was killed while writing it
            raise ValueError(f"{path}: line {number} is not a record (not JSON, or nested too deeply): written "
                             f"by another version of rnn-compat, or edited?") from None
        if not isinstance(record, dict):
            record = {}
        kind = (record.get("status"), record.get("study"))
        known = all(isinstance(k, str) for k in kind) and kind in RECORD_KEYS_BY_KIND
        missing = [k for k in RECORD_KEYS + (RECORD_KEYS_BY_KIND[kind] if known else ()) if k not in record]
        if missing or not known:
            raise ValueError(f"{path}: line {number} lacks {missing or 'a known status and study'} (written by "
                             f"another version of rnn-compat, or edited?)")
        problem = _inner_problem(record)
        if problem:
            raise ValueError(f"{path}: line {number} holds {problem} (written by another version of rnn-compat, "
                             f"or edited?)")
        records.append(record)
    return records


class Progress:
    """A one-line progress bar on a terminal, a line every 10% elsewhere."""

    def __init__(self, total: int, enabled: bool, stream=sys.stderr):
        self.total, self.done, self.failed, self.enabled, self.stream = total, 0, 0, enabled, stream
        self.start = time.monotonic()
        self.tty = enabled and stream.isatty()
        self._last_tenth = -1

    def update(self, record: dict) -> None:
        self.done += 1
        self.failed += not record.get("passed", False)
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        width = 30
        filled = int(width * self.done / max(1, self.total))
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} units, "
                f"{self.failed} not passed, {elapsed:.0f}s elapsed, eta {eta:.0f}s")
        if self.tty:
            self.stream.write("\r" + line + ("\n" if self.done == self.total else ""))
            self.stream.flush()
        elif self.done * 10 // max(1, self.total) != self._last_tenth:
            self._last_tenth = self.done * 10 // max(1, self.total)
            self.stream.write(line + "\n")


@contextmanager
def _single_threaded_workers(jobs: int) -> Iterator[None]:
    """With several worker processes on few cores, BLAS/OpenMP pools must not also spin up threads."""
    saved = {k: os.environ.get(k) for k in _THREAD_VARS}
    if jobs > 1:
        os.environ.update({k: "1" for k in _THREAD_VARS})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached a run: it stops at once, keeping every record already written."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _Signals:
    """SIGINT and SIGTERM (once) raise :class:`Interrupted` in the main thread, but never while a record is
    being written (:meth:`whole`): a record is written whole or not at all. A second signal ends the process
    at once: the worker processes are killed first, and the records written so far stay."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._writing, self._pending = 0, False

    def __call__(self, signum: int, frame) -> None:
        if self.received is not None:
            for child in multiprocessing.active_children():
                child.kill()
            os.write(2, f"\ninterrupted again ({signal.Signals(signum).name}): stopped at once; the units that "
                        f"finished are kept, --resume runs the rest\n".encode())
            os._exit(128 + signum)
        self.received = signum
        if self._writing:
            self._pending = True
            return
        raise Interrupted(signum)

    @contextmanager
    def whole(self) -> Iterator[None]:
        self._writing += 1
        try:
            yield
        finally:
            self._writing -= 1
            if not self._writing and self._pending:
                self._pending = False
                raise Interrupted(self.received)


@contextmanager
def _interruptible() -> Iterator[_Signals]:
    """:class:`_Signals` handling SIGINT and SIGTERM while the block runs (where signals can be handled: the
    main thread), the handlers before it restored after it."""
    signals = _Signals()
    if threading.current_thread() is not threading.main_thread():
        yield signals
        return
    saved = {s: signal.signal(s, signals) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield signals
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def _worker_started(parent: int) -> None:
    """A worker process's first acts of its own (it started with SIGINT and SIGTERM blocked, :func:`_pool`):
    Ctrl-C at a terminal reaches the whole process group, but only the main process decides what it means (it
    kills the workers itself), so the worker ignores both; it dies with its parent (Linux's PR_SET_PDEATHSIG),
    so a killed run leaves none behind; and it loads the plugin peers the run's units name (``load_plugins``:
    the installed ones and ``RNN_COMPAT_PLUGINS``, inherited from the main process, where ``--plugin`` put its
    specs)."""
    deaf()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)
    load_plugins()


def _pool(jobs: int) -> ProcessPoolExecutor:
    """A pool of spawned workers. Its workers start when units are submitted to it: submit inside
    :func:`~compat_tests.interrupts.children_start_deaf`, so that a signal cannot reach them before
    :func:`_worker_started` has made them deaf to it (while they import, say)."""
    return ProcessPoolExecutor(jobs, mp_context=get_context("spawn"), initializer=_worker_started,
                               initargs=(os.getpid(),))


# The main thread waits for its futures in slices of this many seconds, each with signals deferred
# (_Signals.whole), so that an interrupt is raised between slices and never inside concurrent.futures' own
# locking: one raised while wait() acquires its futures' locks one by one left one of them held, the pool's
# manager thread then blocked on it for ever, and with it the shutdown (a run that hung after Ctrl-C, once in
# a loop of the interrupt tests beside a CPU burner). An interrupt waits at most one slice.
WAIT_SLICE = 0.2


def _result(future: Future, signals: _Signals) -> dict:
    """``future.result()``, waited for in :data:`WAIT_SLICE` slices with signals deferred."""
    while True:
        with signals.whole():
            try:
                return future.result(timeout=WAIT_SLICE)
            except FuturesTimeout:
                continue


def _close(pool: ProcessPoolExecutor | None, finished: bool) -> None:
    """Shut ``pool`` down: after a normal end, waiting for its workers; else (an interrupt, an error, also
    while waiting for them to end) killing them first, so that nothing is left computing units whose records
    would never be written, nor holding the interpreter's exit."""
    if pool is None:
        return
    if finished:
        try:
            pool.shutdown(wait=True)
            return
        except BaseException:
            _kill(pool)
            raise
    _kill(pool)


def _kill(pool: ProcessPoolExecutor) -> None:
    workers = list((getattr(pool, "_processes", None) or {}).values())
    for worker in workers:
        try:
            worker.kill()
        except (OSError, ValueError, AttributeError):  # already gone, or closed
            pass
    pool.shutdown(wait=True, cancel_futures=True)
    for worker in workers:
        worker.join(timeout=5)


def _run(units: list[Unit], jobs: int, deadline: float | None, in_flight: Path, emit, signals: _Signals,
         kind: "UnitKind") -> None:
    """Run ``units`` (by ``kind.run``), handing each record to ``emit`` as it finishes; none starts after ``deadline``
    (``time.monotonic()``). In-process, the file ``in_flight`` names the unit running until its record is
    written. An interrupt (any exception) ends it at once: the workers are killed, their units lost."""
    def expired() -> bool:
        return deadline is not None and time.monotonic() >= deadline

    if jobs <= 1:
        for unit in units:
            if expired():
                return
            in_flight.write_text(unit.id + "\n")
            try:
                record = kind.run(unit.to_dict())
            except BaseException:  # an interrupt, not a crash: the unit need not run alone next time
                in_flight.unlink(missing_ok=True)
                raise
            with signals.whole():
                emit(record)
                in_flight.unlink()
        return
    broken: list[Unit] = []
    pool, finished = None, False
    try:
        # (an interrupt while the workers spawn waits until the pool has them all: then _close kills every one)
        with signals.whole(), _single_threaded_workers(jobs), children_start_deaf(spawn=True):
            pool = _pool(jobs)
            unit_of: dict[Future, Unit] = {pool.submit(kind.run, unit.to_dict()): unit for unit in units}
        pending = set(unit_of)
        while pending and not broken:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            with signals.whole():  # (a signal is raised after the slice, never inside wait: see WAIT_SLICE)
                done, pending = wait(pending, timeout=WAIT_SLICE if left is None else min(left, WAIT_SLICE),
                                     return_when=FIRST_COMPLETED)
                for future in done:
                    if future.cancelled():
                        continue
                    try:
                        record = future.result()
                    except BrokenProcessPool:
                        broken.append(unit_of[future])
                        continue
                    emit(record)
            if expired():  # units not yet started are dropped; the ones in flight finish
                for future in pending:
                    future.cancel()
                deadline = None
        if broken:
            broken += [unit_of[f] for f in pending if not f.cancelled()]
        finished = True
    finally:
        _close(pool, finished)
    if broken:
        order = {unit.id: i for i, unit in enumerate(units)}
        _one_at_a_time(sorted(broken, key=lambda u: order[u.id]), jobs, expired, emit, signals, kind)


def _one_at_a_time(units: list[Unit], jobs: int, expired, emit, signals: _Signals, kind: "UnitKind") -> None:
    """Run ``units``, each alone in a worker process (a fresh one after a worker dies), records to ``emit``."""
    pool, finished = None, False
    try:
        with _single_threaded_workers(jobs):
            for unit in units:
                if expired():
                    break
                with signals.whole(), children_start_deaf(spawn=True):
                    pool = pool or _pool(1)
                    future = pool.submit(kind.run, unit.to_dict())
                try:
                    record = _result(future, signals)
                except BrokenProcessPool:
                    record = kind.died(unit)
                    _close(pool, True)
                    pool = None
                with signals.whole():
                    emit(record)
        finished = True
    finally:
        _close(pool, finished)


class UnitKind(NamedTuple):
    """How a sweep runs its units: ``run(unit.to_dict())`` -> the unit's record (a top-level function, which a
    worker process can import; it never raises for a unit's own failure), and ``died(unit)`` -> the record of a
    unit whose worker process died running it alone."""

    run: Callable[[dict], dict]
    died: Callable[[object], dict]


def sweep(units: list[Unit], out: Path, jobs: int = 1, progress: bool = True,
          max_seconds: float | None = None, runner=None, kind: UnitKind | None = None) -> list[dict]:
    """Run every unit not yet in ``out/results.jsonl`` (none starting after ``max_seconds``, when given) and
    return the records of ``units`` there, in plan order: all of them unless the time ran out. SIGINT or
    SIGTERM stops it at once with :class:`Interrupted` (a ``KeyboardInterrupt``): the workers are killed, the
    units in flight lost, every record already written kept whole for ``--resume``; a second one ends the
    process at once. ``runner(units, deadline, emit, signals)``, where given, runs the units instead of this
    machine's processes (a Dask cluster: ``fleet.Fleet.runner``), handing each record to ``emit`` inside
    ``signals.whole()``. ``kind``: how a unit runs (default the grid report's, :mod:`.units`; a model report's,
    :mod:`compat_tests.model_report.units`)."""
    kind = kind or UnitKind(run_unit, died_record)
    if max_seconds is not None and not (isinstance(max_seconds, (int, float)) and math.isfinite(max_seconds)
                                        and max_seconds > 0):
        raise ValueError(f"max_seconds must be a finite number of seconds > 0, got {max_seconds!r}")
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULTS
    _drop_torn_tail(path)
    done = {r["id"]: r for r in read_records(path)}
    todo = [u for u in units if u.id not in done]
    crashed = _crashed_in_process(out / IN_FLIGHT, todo) if runner is None else []
    todo = [u for u in todo if u not in crashed]
    bar = Progress(len(crashed) + len(todo), progress)

    def expired() -> bool:
        return deadline is not None and time.monotonic() >= deadline

    with path.open("a") as sink, _interruptible() as signals:
        def emit(record: dict) -> None:  # (called inside signals.whole(): the record is written whole)
            sink.write(json.dumps(record, sort_keys=True) + "\n")
            sink.flush()
            done[record["id"]] = record
            bar.update(record)

        if runner is not None:
            runner(todo, deadline, emit, signals)
        else:
            _one_at_a_time(crashed, jobs, expired, emit, signals, kind)
            _run(todo, jobs, deadline, out / IN_FLIGHT, emit, signals, kind)
    return [done[u.id] for u in units if u.id in done]


def _crashed_in_process(in_flight: Path, todo: list[Unit]) -> list[Unit]:
    """The unit an in-process run was running when it ended without writing its record (a native crash, or
    a kill), if it is still to run: it runs again alone in a worker process, so a second crash costs only its
    record."""
    if not in_flight.exists():
        return []
    name = in_flight.read_text().strip()
    in_flight.unlink()
    unit = [u for u in todo if u.id == name]
    if unit:
        print(f"unit {name} was running when the last run into this folder ended (a native crash, or a kill); "
              "it runs first, alone in a worker process", file=sys.stderr, flush=True)
    return unit


def _drop_torn_tail(path: Path) -> None:
    """A run killed mid-write leaves a partial last line; cut it so appended records stay whole."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
