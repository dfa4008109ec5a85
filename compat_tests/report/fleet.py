"""A report's units on a Dask cluster (``rnn-compat report --scheduler``): many machines, GPUs and versions.

The client (this process) stays the only writer of ``results.jsonl``: it submits each unit
(:func:`run_on_worker`, :func:`~compat_tests.report.units.run_unit` plus the worker's environment) and
writes each record as it comes back, so every promise of the local sweep holds here too: ``--resume`` skips
the units already recorded, ``--max-seconds`` starts none after the limit, SIGINT or SIGTERM cancels what is
pending, keeps every record written and prints the command that resumes.

- **Environments.** Every record carries the environment of the worker that made it (``environment``: the
  report's environment block, with the host; ``environment_key``: :func:`environment_key` of it, which leaves
  the host out, so identical machines share one). With ``fanout``, every unit runs once on each distinct
  environment of the cluster (its record id ``UNIT@KEY``): what a drift study across versions wants.
- **GPUs.** A unit of a backend that needs a GPU (``Peer.needs_gpu``) asks for the resource
  ``GPU=1``, so it goes only to a worker started with ``--resources GPU=1``.
- **Faults.** A worker that dies while running a unit costs that attempt: the scheduler runs the unit on
  another worker, up to its ``allowed-failures`` (Dask's ``KilledWorker`` after that), then the unit is
  recorded as an error with its command, as the local sweep records a unit whose worker died alone. A
  scheduler that goes away, or a cluster left without a worker that can run what is pending, ends the run
  with :class:`FleetLost`: its finished units kept, the resume command printed.
- **local[:N]** (:func:`local_cluster`) starts ``dask scheduler`` and N ``dask worker`` processes on this
  machine, the commands ``docs/fleet.md`` shows for a real fleet (each worker a nanny that starts its worker
  process again where it dies), each in a session of its own (Ctrl-C at the terminal reaches none of them:
  this process alone decides, and stops them) and dying with this process (Linux's ``PR_SET_PDEATHSIG``; a
  nanny's worker process ends with its nanny). (Dask's ``LocalCluster`` would start its workers from a thread
  of this process, as children that the terminal's Ctrl-C reaches mid-import.)

``distributed`` is an optional extra (``fleet``); this module imports it only inside what uses it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .reach import (LOCAL, Reach, check_scheduler, plain_beyond_this_machine, scheduler_address, split_address,
                    tls_context)
from .units import Unit, died_record, run_unit

MAX_LOCAL_WORKERS = 64
ALLOWED_FAILURES = 2  # a local fleet's scheduler: the attempts a unit may kill a worker in, beyond the first
POLL = 0.1  # seconds between looks at the futures (the main thread sleeps; a signal lands between looks)
LOST_AFTER = 20.0  # seconds without a scheduler, or without a worker able to run what is pending
STARTUP_SECONDS = 120.0  # for a local fleet's scheduler and workers to be up
CONNECT_SECONDS = 30.0  # for a scheduler to answer
# Environment fields that say where a unit ran, not with what: left out of the key, so identical machines share it.
PLACE = ("host", "cpu_count")


class FleetLost(RuntimeError):
    """The cluster went away (its scheduler, or every worker that could run what is pending): the run ends
    with its finished units kept."""


def parse_scheduler(text: str) -> tuple[str, int | None]:
    """``--scheduler``: ``("local", N)`` for ``local[:N]`` (N worker processes, default the cores), else
    ``(address, None)``: a scheduler's address, or the file ``dask scheduler --scheduler-file FILE.json``
    wrote. ValueError for an N that is not 1..64, an empty address, or a ``.json`` file that is not there."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("--scheduler must be local, local:N, a scheduler's address (tcp://HOST:8786) or the "
                         "scheduler file dask scheduler --scheduler-file wrote (FILE.json)")
    if text.endswith(".json") and not Path(text).is_file():
        raise ValueError(f"--scheduler {text}: no such scheduler file (dask scheduler --scheduler-file {text} "
                         f"writes it)")
    match = LOCAL.fullmatch(text.strip())
    if match:
        n = int(match.group(1)) if match.group(1) else (os.cpu_count() or 1)
        if not 1 <= n <= MAX_LOCAL_WORKERS:
            raise ValueError(f"--scheduler local:N needs 1 <= N <= {MAX_LOCAL_WORKERS} worker processes, got {n}")
        return "local", n
    if text.startswith("local"):
        raise ValueError(f"--scheduler {text!r}: local takes a number of workers, local:N")
    if not text.endswith(".json"):
        split_address(text)  # tcp:// or tls://, a port in range
    return text.strip(), None


def require_distributed() -> None:
    """``distributed`` (the ``fleet`` extra), or :class:`~compat_tests.optional.MissingDependency` saying so."""
    from ..optional import require

    require("distributed", "a Dask fleet (rnn-compat report --scheduler)", "pip install -e '.[fleet]'")


def environment_key(env: dict) -> str:
    """Eight hex digits naming an environment: the same for machines that differ only in :data:`PLACE`."""
    kept = {k: v for k, v in env.items() if k not in PLACE}
    return hashlib.sha1(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:8]


@functools.lru_cache(maxsize=1)
def worker_environment() -> dict:
    """This worker process's environment (the report's environment block and the host), once a process."""
    from .aggregate import environment

    return {**environment(), "host": platform.node()}


@functools.lru_cache(maxsize=1)
def _plugins_loaded() -> bool:
    from ..peers import load_plugins

    load_plugins()  # the installed plugin peers, and RNN_COMPAT_PLUGINS where the worker was started with it
    return True


@functools.lru_cache(maxsize=1)
def _worker_key() -> str:
    return environment_key(worker_environment())


def run_on_worker(unit: dict, record_id: str) -> dict:
    """A unit on a Dask worker: :func:`run_unit`'s record under ``record_id``, with the worker's environment."""
    _plugins_loaded()
    record = run_unit(unit)
    return {**record, "id": record_id, "environment": worker_environment(), "environment_key": _worker_key()}


@dataclass(frozen=True)
class Placed(Unit):
    """A unit to run on the workers of one environment (``fanout``): its record id is ``UNIT@KEY``."""

    environment: str = ""

    @property
    def id(self) -> str:
        return f"{Unit.id.fget(self)}@{self.environment}"


def needs_gpu(unit: Unit) -> bool:
    """Whether ``unit``'s backend needs a GPU (``Peer.needs_gpu``): then it asks for the resource ``GPU=1``."""
    from ..peers import PEERS

    return PEERS[unit.backend].needs_gpu


# ----------------------------------------------------------------------------------------------- local fleets

# ``python -c LAUNCH PARENT_PID dask-arguments...``: ``python -m dask`` that dies with the process that started
# it (Linux's PR_SET_PDEATHSIG, set before anything else; a parent gone already ends it at once). Set here, not
# in a ``preexec_fn``, which runs between fork and exec, unsafe in a parent with threads (a test's, a client's).
LAUNCH = ("import ctypes, os, runpy, signal, sys\n"
          "if sys.platform.startswith('linux'):\n"
          "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"
          "if os.getppid() != int(sys.argv.pop(1)):\n"
          "    os._exit(1)\n"
          "sys.argv[0] = 'dask'\n"
          "runpy.run_module('dask', run_name='__main__', alter_sys=True)\n")


@dataclass(frozen=True)
class WorkerSpec:
    """One worker of a :func:`local_cluster`: environment variables of its own, and whether it declares a GPU."""

    env: tuple[tuple[str, str], ...] = ()
    gpu: bool = False


@contextmanager
def local_cluster(workers: int | list[WorkerSpec], gpu: bool = False,
                  tls: Reach | None = None) -> Iterator[tuple[str, list, Path]]:
    """A scheduler and single-threaded workers on this machine: ``workers`` of them (``gpu``: each declares
    ``GPU=1``), or one per :class:`WorkerSpec`, each worker a nanny process that starts the worker process
    again where it dies; ``tls``: all of them speak TLS with its files (its CA, and its certificate and key for
    every one of them), as ``docs/fleet.md`` shows a fleet of one's own. Yields, once every worker has joined
    the scheduler (a run plans on the workers connected when it starts), ``(address, [scheduler process,
    nanny processes...], scheduler file)``, and kills them all after (each process's group: a nanny with its
    worker). Each has one BLAS thread and this process's environment (with a spec's variables)."""
    specs = [WorkerSpec(gpu=gpu)] * workers if isinstance(workers, int) else list(workers)
    folder = Path(tempfile.mkdtemp(prefix="rnn-compat-fleet-"))
    file = folder / "scheduler.json"
    base = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": str(ALLOWED_FAILURES),
            # one unit at a time a worker, none queued on it: a worker that dies takes only its own unit's
            # attempt with it, and at the time limit every unit not running is still the scheduler's to cancel
            "DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION": "1.0"}
    dask = [sys.executable, "-c", LAUNCH, str(os.getpid())]
    started: list[subprocess.Popen] = []

    def start(words: list[str], env: dict) -> subprocess.Popen:
        with open(folder / f"{len(started)}.log", "wb") as log:
            process = subprocess.Popen(dask + words, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                       start_new_session=True)
        started.append(process)
        return process

    secure = [] if tls is None else ["--tls-ca-file", tls.ca_file, "--tls-cert", tls.cert] + (
        ["--tls-key", tls.key] if tls.key else [])
    try:
        scheduler = start(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                           "--scheduler-file", str(file)] + (["--protocol", "tls"] if tls else []) + secure, base)
        address = _wait_for_scheduler(file, scheduler, folder)
        for n, spec in enumerate(specs):
            start(["worker", address, "--nthreads", "1", "--no-dashboard", "--name", f"local-{n}",
                   "--local-directory", str(folder)] + (["--resources", "GPU=1"] if spec.gpu else []) + secure,
                  {**base, **dict(spec.env)})
        with _client(address, len(specs), None if tls is None else tls.security()):
            pass
        yield address, started, file
    finally:
        for process in reversed(started):
            try:
                os.killpg(process.pid, signal.SIGKILL)  # (its own session's group: a nanny's worker with it)
            except (ProcessLookupError, PermissionError):
                pass
        for process in started:
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _wait_for_scheduler(file: Path, scheduler: subprocess.Popen, folder: Path) -> str:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if scheduler.poll() is not None:
            log = (folder / "0.log").read_text(errors="replace")[-2000:]
            raise FleetLost(f"the local scheduler ended at start (exit status {scheduler.returncode}):\n{log}")
        try:
            return json.loads(file.read_text())["address"]
        except (OSError, ValueError, KeyError):
            time.sleep(POLL)
    raise FleetLost(f"the local scheduler did not start within {STARTUP_SECONDS:g} s")


# ------------------------------------------------------------------------------------------------- the sweep

def connect(address: str, timeout: float | None = None, security=None):
    """A client of the scheduler at ``address`` (``security``: Dask's ``Security`` for a tls:// one), a
    FleetLost where none answers. Dask waits for the handshake without a limit: a remote address is first
    :func:`~compat_tests.report.reach.check_scheduler`'s (:func:`open_fleet`)."""
    from distributed import Client

    timeout = CONNECT_SECONDS if timeout is None else timeout
    try:
        return Client(address=address, timeout=timeout, set_as_default=False, security=security)
    except (OSError, TimeoutError) as exc:
        raise FleetLost(f"no Dask scheduler answers at {address} ({type(exc).__name__}: {exc})") from None


def wait_for_workers(client, n: int, timeout: float = STARTUP_SECONDS) -> None:
    try:
        client.wait_for_workers(n, timeout=timeout)
    except (OSError, TimeoutError):
        raise FleetLost(f"fewer than {n} Dask workers joined the scheduler within {timeout:g} s") from None


def environments(client) -> dict[str, list[str]]:
    """The cluster's distinct environments: key -> the addresses of its workers."""
    found = client.run(worker_environment)
    groups: dict[str, list[str]] = {}
    for address, env in sorted(found.items()):
        groups.setdefault(environment_key(env), []).append(address)
    return groups


def run_on_fleet(client, units: list[Unit], groups: dict[str, list[str]], deadline: float | None, emit,
                 signals, alive=lambda: True) -> None:
    """Run ``units`` on ``client``'s cluster (a :class:`Placed` one on the workers ``groups`` lists for its
    environment), each record to ``emit`` as it comes back (inside ``signals.whole()``); none started after
    ``deadline``. On any exception (an interrupt) the pending units are cancelled. ``alive()``: whether the
    scheduler's process is still there, where this process started it (a FleetLost at once where not)."""
    from distributed import KilledWorker

    futures: dict = {}
    try:
        for unit in units:
            if deadline is not None and time.monotonic() >= deadline:
                break
            place = getattr(unit, "environment", None)
            with signals.whole():
                futures[client.submit(run_on_worker, unit.to_dict(), unit.id, key=f"rnn-compat-{unit.id}",
                                      pure=False, resources={"GPU": 1} if needs_gpu(unit) else None,
                                      workers=groups[place] if place else None, allow_other_workers=False)] = unit
        pending, dropped = set(futures), set()
        watch = _Watch(client, alive)
        while pending:
            if deadline is not None and time.monotonic() >= deadline:
                dropped = _cancel_queued(client, pending)
                deadline = None
            for future in [f for f in pending if f.status in ("finished", "error", "cancelled")]:
                pending.discard(future)
                if future in dropped:
                    continue
                if future.status == "cancelled":  # not by this client: the scheduler, or the connection to it, ended
                    raise FleetLost(watch.why() or f"the scheduler cancelled unit {futures[future].id}")
                with signals.whole():
                    emit(_record(future, futures[future], KilledWorker))
            if pending:
                watch.check(pending)
                time.sleep(POLL)
    except BaseException:
        try:
            client.cancel(list(futures), force=True)
        except Exception:
            pass
        raise


def _record(future, unit: Unit, killed_worker: type) -> dict:
    """The record of a finished task: the unit's own, or an error record where no worker could run it."""
    try:
        return future.result()
    except killed_worker:
        why = (f"the worker running this unit died each time it ran it ({ALLOWED_FAILURES + 1} times on a local "
               f"fleet: the scheduler's allowed-failures + 1): a native crash, killed for memory, or a lost host")
    except Exception as exc:  # the worker could not run it at all (it lacks the project, say)
        why = f"the worker could not run this unit: {type(exc).__name__}: {exc}"
    return {**died_record(unit), "error": why}


def _cancel_queued(client, pending: set) -> set:
    """At the time limit: cancel the tasks no worker has started (those processing finish); return them."""
    processing = {k for keys in client.processing().values() for k in keys}
    queued = {f for f in pending if f.key not in processing}
    client.cancel(list(queued))
    return queued


class _Watch:
    """Notices a cluster that went away: the client not connected, or no worker, for :data:`LOST_AFTER` s; a
    scheduler process of this process's that ended, at once."""

    def __init__(self, client, alive) -> None:
        self.client, self.alive, self.since = client, alive, None

    def why(self) -> str | None:
        """Why the cluster is gone, if it is: the scheduler's process ended, or the client lost it."""
        if not self.alive():
            return "the scheduler's process ended"
        if self.client.status != "running":
            return f"the connection to the scheduler was lost (the client is {self.client.status})"
        return None

    def check(self, pending: set) -> None:
        if not self.alive():
            raise FleetLost(f"the scheduler's process ended ({len(pending)} units pending)")
        connected = self.client.status == "running"
        workers = connected and bool(self.client.scheduler_info().get("workers"))
        if connected and workers:
            self.since = None
            return
        now = time.monotonic()
        self.since = self.since or now
        if now - self.since >= LOST_AFTER:
            what = "the scheduler went away" if not connected else "the cluster has no worker left"
            raise FleetLost(f"{what} ({len(pending)} units pending for {LOST_AFTER:g} s)")


# ------------------------------------------------------------------------------------------- an open fleet

def _backend_status(names: str | None) -> list[dict]:
    """(On a worker) every considered backend's status there (``peers.choose``)."""
    from ..peers import choose

    _plugins_loaded()
    return choose(names)[1]


class Fleet:
    """A client of a cluster whose workers are up: what they can run, and a runner for the report's sweep."""

    def __init__(self, client, scheduler: str, alive=lambda: True) -> None:
        self.client, self.scheduler, self.alive = client, scheduler, alive
        self.groups = environments(client)
        workers = client.scheduler_info()["workers"]
        self.gpu = {a for a, w in workers.items() if (w.get("resources") or {}).get("GPU", 0) >= 1}

    def backends(self, names: str | None) -> tuple[list, list[dict]]:
        """``peers.choose`` across the workers: a backend is available where any worker has it (its units go
        only to the workers that declare a GPU, where it needs one); ValueError for a name none knows."""
        from ..peers import PEERS, get_peer

        found = self.client.run(_backend_status, names)
        entries: dict[str, list[tuple[str, dict]]] = {}  # name -> (worker, its status there), in first-seen order
        for address in sorted(found):
            for entry in found[address]:
                entries.setdefault(entry["name"], []).append((address, entry))
        status = []
        for name, seen in entries.items():
            gpu = name in PEERS and PEERS[name].needs_gpu
            able = [e for address, e in seen if e["available"] and (not gpu or address in self.gpu)]
            first = (able or [e for _, e in seen])[0]
            where = f"on {len(able)} of {len(found)} workers" + (" that declare a GPU" if gpu else "")
            status.append({**first, "available": bool(able), "detail": f"{first['detail']} ({where})"})
        peers = [get_peer(s["name"]) for s in status if s["available"] and s["name"] in PEERS]
        return peers, status

    def place(self, units: list[Unit], fanout: bool) -> list[Unit]:
        """The units as run: each once, or (``fanout``) once on each distinct environment."""
        if not fanout:
            return units
        with_gpu = {key for key, addresses in self.groups.items() if self.gpu & set(addresses)}
        return [Placed(u.study, u.backend, u.cfg, key) for u in units for key in sorted(self.groups)
                if key in with_gpu or not needs_gpu(u)]

    def runner(self):
        """What ``sweep.sweep`` calls to run the units left: ``(units, deadline, emit, signals)``."""
        return lambda units, deadline, emit, signals: run_on_fleet(self.client, units, self.groups, deadline, emit,
                                                                    signals, self.alive)


@contextmanager
def open_fleet(scheduler: str, log: Path, reach: Reach = Reach()) -> Iterator[Fleet]:
    """A :class:`Fleet` on ``--scheduler`` (``local[:N]``: one started here, and stopped after), its client
    closed after the block. A remote scheduler must greet within ``reach.wait`` seconds, else a
    :class:`~compat_tests.report.reach.NotAScheduler` (a ValueError) says what answered instead; one
    reached over plain tcp:// from another machine is warned of on stderr. Dask's own messages in this
    process (a connection lost and retried, with its traceback) go to the file ``log`` (:func:`_dask_log`),
    not to the terminal: what the run says of a lost cluster is :class:`FleetLost`'s."""
    require_distributed()
    where, workers = parse_scheduler(scheduler)
    reach.check(scheduler)
    _dask_log(log)  # (a file only where Dask has something to say)
    if where != "local":
        address = scheduler_address(where)
        if reach.ca_file is not None and split_address(address)[0] != "tls":
            raise ValueError(f"--tls-ca-file: the scheduler file {where} names {address}, not a tls:// scheduler")
        security = reach.security()
        tls = tls_context(security, address) if split_address(address)[0] == "tls" else None
        check_scheduler(address, reach.wait, tls)
        if plain_beyond_this_machine(address):
            print(f"rnn-compat report: warning: {address} is reached without TLS; a Dask scheduler runs whatever "
                  f"its clients send it, so a fleet beyond one machine should use tls:// (docs/fleet.md)",
                  file=sys.stderr, flush=True)
        with _client(address, 1, security) as client:
            yield Fleet(client, scheduler)
        return
    with local_cluster(workers, gpu=_gpu_here()) as (address, processes, _), _client(address, 1) as client:
        yield Fleet(client, scheduler, alive=lambda: processes[0].poll() is None)


def _dask_log(path: Path) -> None:
    """Dask's messages in this process to the file ``path`` from now on, for the rest of the process: its client
    logs a lost connection (with a traceback) from its own thread, also while the process ends."""
    import logging

    handler = logging.FileHandler(path, delay=True)  # (written only when Dask has something to say)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    for name in [n for n in logging.root.manager.loggerDict if n.startswith("distributed.")]:
        logging.getLogger(name).handlers[:] = []  # (Dask gives some of its loggers handlers of their own)
        logging.getLogger(name).propagate = True
    logger = logging.getLogger("distributed")
    logger.handlers[:] = [handler]
    logger.propagate = False


@contextmanager
def _client(address: str, workers: int, security=None):
    client = connect(address, security=security)
    try:
        wait_for_workers(client, workers)
        yield client
    finally:
        try:
            client.close(timeout=5)
        except Exception:  # (a scheduler gone already)
            pass


def _gpu_here() -> bool:
    import cudnn_backend

    return cudnn_backend.available()[0]
