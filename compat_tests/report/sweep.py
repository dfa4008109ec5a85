"""Run work units, in this process or in worker processes, appending each record to ``results.jsonl``
as it finishes: a killed run loses at most the units in flight, and ``--resume`` skips every unit whose
record is already there. With a time limit no unit starts after it; the units in flight finish.

A worker process that dies (a backend's native crash) breaks its pool, and which of the units in flight
killed it is unknown: the units left then run one at a time, each in a worker of its own, and the one
whose worker dies again gets an error record (the sweep goes on). In-process (``jobs=1``) a native crash
ends the run, but the unit it ran is named in ``in_flight`` until its record is written: the next run into
that folder (``--resume``) runs that unit first, alone in a worker process, so a crash it causes again
costs only its own record and the sweep goes on past it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from itertools import chain
from multiprocessing import get_context
from pathlib import Path
from typing import Iterable, Iterator

from ..config import RNNConfig
from .units import Unit, died_record, run_unit

RESULTS = "results.jsonl"
IN_FLIGHT = "in_flight"
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


# What every record holds, and what a record of each status and study adds (units.run_unit writes them).
RECORD_KEYS = ("id", "study", "backend", "config", "status", "passed", "indeterminate")
RECORD_KEYS_BY_KIND = {("ok", "compat"): ("forward", "reproduce"), ("ok", "gru_variant"): ("variant",),
                       ("error", "compat"): ("error", "reproduce"), ("error", "gru_variant"): ("error",)}
# What the report reads inside a record: each judged quantity's verdict, and a GRU-variant result.
VERDICT_KEYS = ("conditioned", "budget", "passed", "indeterminate", "max_eps", "per_step")
VARIANT_KEYS = ("max_abs", "final_h_max_abs", "per_step_abs")


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
    return None


def read_records(path: Path) -> list[dict]:
    """Records of a results file; a torn line (the run was killed mid-write) is dropped. A record without
    the keys the report and ``--resume`` read is a ValueError naming it: another version wrote it, or a hand."""
    if not path.exists():
        return []
    records = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
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


def _results(units: list[Unit], jobs: int, deadline: float | None, in_flight: Path) -> Iterable[dict]:
    """Records of ``units`` as they finish; none starts after ``deadline`` (``time.monotonic()``). In-process,
    the file ``in_flight`` names the unit running until the caller has taken its record."""
    def expired() -> bool:
        return deadline is not None and time.monotonic() >= deadline

    if jobs <= 1:
        for unit in units:
            if expired():
                return
            in_flight.write_text(unit.id + "\n")
            yield run_unit(unit.to_dict())
            in_flight.unlink()
        return
    broken: list[Unit] = []
    with _single_threaded_workers(jobs), ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
        unit_of: dict[Future, Unit] = {pool.submit(run_unit, unit.to_dict()): unit for unit in units}
        pending = set(unit_of)
        while pending and not broken:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, pending = wait(pending, timeout=left, return_when=FIRST_COMPLETED)
            for future in done:
                if future.cancelled():
                    continue
                try:
                    record = future.result()
                except BrokenProcessPool:
                    broken.append(unit_of[future])
                    continue
                yield record
            if expired():  # units not yet started are dropped; the ones in flight finish
                for future in pending:
                    future.cancel()
                deadline = None
        if broken:
            broken += [unit_of[f] for f in pending if not f.cancelled()]
    if broken:
        order = {unit.id: i for i, unit in enumerate(units)}
        yield from _one_at_a_time(sorted(broken, key=lambda u: order[u.id]), jobs, expired)


def _one_at_a_time(units: list[Unit], jobs: int, expired) -> Iterable[dict]:
    """Records of ``units``, each run alone in a worker process (a fresh one after a worker dies)."""
    pool = None
    try:
        with _single_threaded_workers(jobs):
            for unit in units:
                if expired():
                    return
                pool = pool or ProcessPoolExecutor(1, mp_context=get_context("spawn"))
                try:
                    yield pool.submit(run_unit, unit.to_dict()).result()
                except BrokenProcessPool:
                    yield died_record(unit)
                    pool.shutdown()
                    pool = None
    finally:
        if pool is not None:
            pool.shutdown()


def sweep(units: list[Unit], out: Path, jobs: int = 1, progress: bool = True,
          max_seconds: float | None = None) -> list[dict]:
    """Run every unit not yet in ``out/results.jsonl`` (none starting after ``max_seconds``, when given) and
    return the records of ``units`` there, in plan order: all of them unless the time ran out."""
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULTS
    _drop_torn_tail(path)
    done = {r["id"]: r for r in read_records(path)}
    todo = [u for u in units if u.id not in done]
    crashed = _crashed_in_process(out / IN_FLIGHT, todo)
    todo = [u for u in todo if u not in crashed]
    bar = Progress(len(crashed) + len(todo), progress)

    def expired() -> bool:
        return deadline is not None and time.monotonic() >= deadline

    with path.open("a") as sink:
        for record in chain(_one_at_a_time(crashed, jobs, expired), _results(todo, jobs, deadline, out / IN_FLIGHT)):
            sink.write(json.dumps(record, sort_keys=True) + "\n")
            sink.flush()
            done[record["id"]] = record
            bar.update(record)
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
