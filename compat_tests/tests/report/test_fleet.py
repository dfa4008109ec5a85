"""``rnn-compat report --scheduler``: a report's units on a Dask cluster, on this machine's CPU.

A local fleet (``local:2``: a scheduler and two workers started by the command) or a cluster the test starts
(``fleet.local_cluster``: workers of differing environments, one declaring a GPU, with the fake CuPy and
libcudnn of ``fake_site``). The same grid gives the local run's records, bit for bit; a worker that dies
costs its attempt; Ctrl-C and a scheduler that goes away end the run keeping its units, leaving no process;
GPU units go only to the worker that declares one; ``--fanout`` runs every unit on every environment, and
``diff RUN@KEY RUN@KEY`` compares two of them. An address where no Dask scheduler greets (nothing, a silent
port, an HTTP server, TLS where plain TCP was given, or the reverse) is said so within seconds, exit status 2;
a TLS fleet runs with the client's certificates."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from compat_tests import cli
from compat_tests.report import fleet
from compat_tests.report.sweep import RESULTS, read_records
from compat_tests.tests.helpers import PEER, _held, _kept, as_at_a_terminal, processes_with

pytest.importorskip("distributed", reason="the fleet needs dask.distributed (the fleet extra)")


ROOT = Path(__file__).resolve().parents[3]


TINY = Path(__file__).resolve().parents[2] / "data" / "tiny_grid.json"


UNITS = 10


CRASHING = '''
"""A peer whose unit of seed 3 kills its worker the first time it runs, and of seed 4 every time."""
import os
import signal
from pathlib import Path

from compat_tests.peers.reference_peer import ReferencePeer


class Crashing(ReferencePeer):
    name = "crashing"

    def forward(self, cfg, case):
        first = Path(os.environ["CRASH_DIR"]) / f"crashed-{cfg.seed}-{os.getpid()}"
        if cfg.seed == 4 or (cfg.seed == 3 and not list(first.parent.glob("crashed-3-*"))):
            first.touch()
            os.kill(os.getpid(), signal.SIGKILL)  # as a native crash ends a worker
        return super().forward(cfg, case)


CRASHING = Crashing()
'''


def _grid(tmp_path: Path) -> Path:
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"study": "compat", "config": {"mode": "tanh", "seq_len": 3, "batch": 2,
                                                               "dtype": "float32", "seed": k}} for k in range(UNITS)]))
    return grid


def _report(*args: str, **env: str) -> subprocess.CompletedProcess:
    """``rnn-compat report`` in a child process, its page without figures (the figures are test_report's)."""
    return subprocess.run([sys.executable, "-m", "compat_tests.cli", "report", "--no-progress", "--no-figures", *args],
                          cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env={**os.environ, **env})


def _records(out: Path) -> dict[str, dict]:
    return {r["id"]: r for r in read_records(out / RESULTS)}


def _without(record: dict, *keys: str) -> dict:
    return {k: v for k, v in record.items() if k not in keys}


def test_a_local_fleet_gives_the_local_runs_records_bit_for_bit_and_the_same_report(tmp_path):
    """The same grid in this machine's processes and on ``local:2``: the same records (but for their run time
    and the worker's environment each fleet record carries) and the same report."""
    local, remote = tmp_path / "local", tmp_path / "fleet"
    assert cli.main(["report", "--grid", str(TINY), "--backends", "reference", "--out", str(local), "--jobs", "1",
                     "--no-progress", "--no-figures"]) == 0
    done = _report("--grid", str(TINY), "--backends", "reference", "--out", str(remote), "--scheduler", "local:2")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "the Dask cluster local:2" in done.stdout and "Traceback" not in done.stderr
    mine, theirs = _records(local), _records(remote)
    assert mine.keys() == theirs.keys() and len(mine) == 5  # (the tiny grid: 5 units of the reference)
    for uid, record in theirs.items():
        assert record["environment"]["host"]
        assert record["environment_key"] == fleet.environment_key(record["environment"])
        assert _without(record, "seconds", "environment", "environment_key") == _without(mine[uid], "seconds")
    a, b = (json.loads((folder / "report.json").read_text()) for folder in (local, remote))
    assert len(b["environments"]) == 1 and b["environments"][0]["units"] == len(theirs) and a["environments"] == []
    for key in ("summary", "worst", "totals", "studies", "passed", "complete"):
        assert a[key] == b[key], key
    assert [_without(r, "environment_key") for r in b["records"]] == a["records"]


@pytest.fixture(scope="module")
def cluster():
    """A scheduler and three workers: two environments on the CPU (OpenBLAS's kernels chosen apart), and a third
    that declares a GPU and has the fake CuPy and libcudnn (``fake_site``)."""
    fake = os.pathsep.join([str(ROOT / "compat_tests" / "gpu" / "fake_site"), str(ROOT)])
    specs = [fleet.WorkerSpec(), fleet.WorkerSpec(env=(("OPENBLAS_CORETYPE", "Sandybridge"),)),
             fleet.WorkerSpec(env=(("PYTHONPATH", fake),), gpu=True)]
    with fleet.local_cluster(specs) as (address, _, _):
        yield address


def test_fanout_runs_each_unit_on_each_environment_gpu_units_only_where_a_gpu_is_declared(cluster, tmp_path):
    """``--fanout`` on three environments: a reference unit runs on each, a cuDNN unit only on the worker that
    declares a GPU (and has cuDNN, faked); the report groups the results by environment, and ``diff`` of two
    environments of the run pairs their units (OpenBLAS's kernels differ; no verdict does)."""
    out = tmp_path / "fan"
    done = _report("--grid", str(TINY), "--backends", "reference,cudnn", "--out", str(out), "--scheduler", cluster,
                   "--fanout")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    records = list(_records(out).values())
    keys = {r["environment_key"] for r in records}
    assert len(keys) == 3 and all(r["id"] == f"{r['id'].partition('@')[0]}@{r['environment_key']}" for r in records)
    gpu = {r["environment_key"] for r in records if r["backend"] == "cudnn"}
    assert len(gpu) == 1 and all(r["environment"]["cudnn"].get("device") == "fake" for r in records
                                 if r["environment_key"] in gpu)
    reference = [r for r in records if r["backend"] == "reference"]
    per_unit = {}
    for r in reference:
        per_unit.setdefault(r["id"].partition("@")[0], set()).add(r["environment_key"])
    assert per_unit and all(v == keys for v in per_unit.values()), "every reference unit on every environment"
    report = json.loads((out / "report.json").read_text())
    rows = {row["backend"] for row in report["summary"]}
    assert rows == {f"reference@{k}" for k in keys} | {f"cudnn@{k}" for k in gpu}
    md = (out / "report.md").read_text()
    assert "in 3 distinct environments; they differ in" in md and "numpy_blas" in md

    cpu = sorted(keys - gpu)
    diffed = tmp_path / "diff"
    ran = subprocess.run([sys.executable, "-m", "compat_tests.cli", "diff", f"{out}@{cpu[0][:4]}", f"{out}@{cpu[1]}",
                          "--out", str(diffed)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    result = json.loads((diffed / "diff.json").read_text())
    paired = result["identical"] + result["within_band"] + len(result["moved"])
    assert paired == len(per_unit) and not result["only_a"] and not result["only_b"] and not result["regressed"]
    assert any(e["key"] == "numpy_blas" and e["differs"] for e in result["environment"])
    bad = subprocess.run([sys.executable, "-m", "compat_tests.cli", "diff", f"{out}@ffffffff", f"{out}@{cpu[1]}",
                          "--out", str(tmp_path / "bad")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "no environment of that run has a key starting 'ffffffff'" in bad.stderr


def test_without_fanout_a_gpu_unit_goes_only_to_the_worker_that_declares_a_gpu(cluster, tmp_path):
    out = tmp_path / "run"
    done = _report("--grid", str(TINY), "--backends", "cudnn,reference", "--out", str(out), "--scheduler", cluster)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    records = list(_records(out).values())
    cudnn = [r for r in records if r["backend"] == "cudnn"]
    assert cudnn and all(r["environment"]["cudnn"].get("device") == "fake" for r in cudnn)
    plan = json.loads((out / "run.json").read_text())
    status = {b["name"]: b for b in plan["backends"]}
    assert status["cudnn"]["available"] and "(on 1 of 3 workers that declare a GPU)" in status["cudnn"]["detail"]


def test_a_unit_that_kills_its_worker_costs_that_attempt_one_that_always_does_is_recorded_once_as_an_error(tmp_path):
    """A unit whose first run kills its worker (SIGKILL, as a native crash) runs again on a worker and passes;
    one that kills every worker it runs on is recorded as an error after the scheduler's allowed failures;
    every unit recorded once, the run goes on to its report."""
    (tmp_path / "crashing.py").write_text(CRASHING)
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    out = tmp_path / "run"
    done = _report("--plugin", f"{tmp_path / 'crashing.py'}:CRASHING", "--backends", "crashing", "--grid",
                   str(_grid(tmp_path)), "--out", str(out), "--scheduler", "local:2", CRASH_DIR=str(crashes))
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-3000:]  # (the unit that always crashes)
    records = _kept(out)
    assert len(records) == UNITS
    by_seed = {r["config"]["seed"]: r for r in records}
    assert by_seed[3]["status"] == "ok" and by_seed[3]["passed"]
    assert by_seed[4]["status"] == "error" and "died each time it ran it" in by_seed[4]["error"]
    assert by_seed[4]["reproduce"]["forward"].startswith("rnn-compat check --plugin ")
    assert all(by_seed[s]["passed"] for s in set(range(UNITS)) - {4})
    assert len(list(crashes.glob("crashed-4-*"))) == fleet.ALLOWED_FAILURES + 1
    assert len(list(crashes.glob("crashed-3-*"))) == 1
    assert json.loads((out / "report.json").read_text())["complete"]


def _slow_run(tmp_path: Path) -> tuple[list[str], Path]:
    (tmp_path / "slow_peer.py").write_text(PEER)
    out = tmp_path / "run"
    return [sys.executable, "-m", "compat_tests.cli", "report", "--plugin", f"{tmp_path / 'slow_peer.py'}:SLOW",
            "--backends", "slow", "--grid", str(_grid(tmp_path)), "--out", str(out), "--no-progress",
            "--no-figures", "--scheduler", "local:2"], out


@pytest.mark.parametrize("signum, group", [(signal.SIGINT, True), (signal.SIGTERM, False)],
                         ids=["Ctrl-C", "SIGTERM to the command"])
def test_a_signal_to_a_fleet_run_keeps_its_units_leaves_no_process_and_resume_completes_it(registry, tmp_path,
                                                                                       signum, group):
    """Ctrl-C (or SIGTERM to the command alone) while both workers hold a unit: the command alone hears it (the
    scheduler and workers run in sessions of their own), ends with the resume command and no traceback, its
    scheduler and workers gone; after Ctrl-C, the resume command completes the run on a new local fleet,
    each unit once."""
    argv, out = _slow_run(tmp_path)

    def ready() -> bool:
        return (out / RESULTS).exists() and len(read_records(out / RESULTS)) >= 2

    ended, held = _held(argv, tmp_path, "worker-running", [(signum, group)], ready)
    assert ended.returncode == 128 + signum, ended.stdout
    assert "Traceback" not in ended.stdout and "KeyboardInterrupt" not in ended.stdout, ended.stdout
    assert held and sorted(r["config"]["seed"] for r in _kept(out)) == [0, 1]
    resume = re.search(r"to run the rest:\n  rnn-compat (.*)\n", ended.stdout).group(1).split()
    assert resume[resume.index("--scheduler") + 1] == "local:2"
    if signum == signal.SIGTERM:
        return  # (the resume is the same as after Ctrl-C)
    done = _report(*resume[1:])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert len(_kept(out)) == UNITS and json.loads((out / "report.json").read_text())["complete"]


def test_a_fleet_run_out_of_time_starts_no_unit_and_reports_what_ran(tmp_path):
    """``--max-seconds`` on a fleet: a limit already past when the workers are up submits no unit; the report
    says the run is incomplete, exit status 1, and the plan is there for --resume."""
    out = tmp_path / "run"
    done = _report("--grid", str(TINY), "--backends", "reference", "--out", str(out), "--scheduler", "local:1",
                   "--max-seconds", "1e-9")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert not report["complete"] and report["totals"]["units"] == 0 and report["totals"]["planned_units"] == 5


def test_a_scheduler_that_goes_away_ends_the_run_keeping_its_units(registry, tmp_path):
    """The scheduler killed while both workers hold a unit: the run ends at once with status 1, why, the units
    it finished and the command that resumes; no process of it is left."""
    argv, out = _slow_run(tmp_path)
    marker = f"FLEET_TEST={tmp_path}"

    def scheduler() -> list[int]:
        return [pid for pid in processes_with(marker)
                if b"\0scheduler\0--host\0" in Path(f"/proc/{pid}/cmdline").read_bytes()]

    def ready() -> bool:
        return (out / RESULTS).exists() and len(read_records(out / RESULTS)) >= 2 and bool(scheduler())

    def kill_scheduler():
        for pid in scheduler():
            os.kill(pid, signal.SIGKILL)

    t0 = time.monotonic()
    ended, _ = _held(argv, tmp_path, "worker-running", [], ready, on_hold=kill_scheduler,
                     FLEET_TEST=str(tmp_path))
    assert ended.returncode == 1, ended.stdout
    assert "stopped, the Dask cluster was lost: the scheduler's process ended" in ended.stdout, ended.stdout
    assert "Traceback" not in ended.stdout and "2 of 10 units are in" in ended.stdout, ended.stdout
    assert "--resume --scheduler local:2" in ended.stdout
    assert sorted(r["config"]["seed"] for r in _kept(out)) == [0, 1]
    assert time.monotonic() - t0 < 300


@pytest.mark.parametrize("text, expected", [("local", ("local", os.cpu_count() or 1)), ("local:3", ("local", 3)),
                                            ("tcp://10.0.0.2:8786", ("tcp://10.0.0.2:8786", None))])
def test_the_scheduler_is_local_n_or_an_address(text, expected):
    assert fleet.parse_scheduler(text) == expected


@pytest.mark.parametrize("text, message", [("local:0", "1 <= N <= 64"), ("local:x", "local takes a number"),
                                           ("", "local, local:N, a scheduler's address"),
                                           ("nowhere.json", "no such scheduler file")])
def test_a_bad_scheduler_is_refused_naming_it(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        fleet.parse_scheduler(text)


def test_fanout_without_a_scheduler_is_refused_before_anything_runs(tmp_path, capsys):
    assert cli.main(["report", "--grid", str(TINY), "--fanout", "--out", str(tmp_path / "x")]) == 2
    assert "--fanout runs every unit on every environment of a Dask cluster: it needs --scheduler" in \
        capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_identical_machines_share_an_environment_key():
    env = {"cpu": "x", "numpy": "2.4", "host": "a", "cpu_count": 2}
    assert fleet.environment_key(env) == fleet.environment_key({**env, "host": "b", "cpu_count": 64})
    assert fleet.environment_key(env) != fleet.environment_key({**env, "numpy": "2.5"})


TLS = ROOT / "compat_tests" / "data" / "tls"


TLS_FILES = ["--tls-ca-file", str(TLS / "dask.pem"), "--tls-cert", str(TLS / "dask.pem"), "--tls-key",
             str(TLS / "dask.key")]


class _Listener:
    """A server on a port of 127.0.0.1 that is not a Dask scheduler, in threads of this process: ``silent``
    accepts and never speaks (a stalled service), ``http`` answers HTTP requests (the Dask dashboard's port),
    ``tls`` speaks TLS with the fleet's test certificate and wants the client's (a TLS scheduler), ``closed``
    is a port where nothing listens."""

    def __init__(self, kind: str) -> None:
        self.kind, self.held = kind, []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        if kind == "closed":
            self.sock.close()
            return
        if kind == "tls":
            self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(TLS / "dask.pem"))
            self.context.load_cert_chain(TLS / "dask.pem", TLS / "dask.key")
            self.context.verify_mode = ssl.CERT_REQUIRED
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.held.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.kind == "http":  # (a request it cannot parse, such as a TLS hello, gets a 400)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<title>Dask: Status</title>"
                             if conn.recv(4096).startswith(b"GET ") else b"HTTP/1.1 400 Bad Request\r\n\r\n")
            elif self.kind == "tls":
                self.held.append(self.context.wrap_socket(conn, server_side=True))
        except OSError:  # (a client that is no TLS client, or gone)
            pass

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def listener(request):
    server = _Listener(request.param)
    yield server
    server.close()


@pytest.mark.parametrize("listener, scheme, options, message", [
    ("closed", "tcp", [], "nothing listens there (connection refused): is the scheduler running"),
    ("silent", "tcp", [], "it accepted the connection and said nothing for 1 s: not a Dask scheduler"),
    ("http", "tcp", [], "an HTTP server answered (HTTP/1.1 200 OK), not a Dask scheduler: this looks like the Dask "
                        "dashboard; the scheduler listens on its own port, 8786 by default"),
    ("tls", "tcp", [], "a TLS endpoint answered, not a plain Dask scheduler: give tls://HOST:PORT with the "
                       "certificates the scheduler wants (--tls-ca-file, --tls-cert, --tls-key"),
    ("tls", "tls", [], "a TLS scheduler is reached with --tls-ca-file and --tls-cert (--tls-key), or with Dask's "
                       "own TLS configuration (distributed.comm.tls); none is given"),
    ("tls", "tls", ["--tls-ca-file", str(TLS / "other.pem"), *TLS_FILES[2:]],
     "the TLS handshake failed (CERTIFICATE_VERIFY_FAILED): the scheduler's certificate must be one --tls-ca-file "
     "trusts"),
    ("tls", "tls", [*TLS_FILES[:2], "--tls-cert", str(TLS / "other.pem"), "--tls-key", str(TLS / "other.key")],
     "the scheduler refused this client over TLS ("),  # (the alert's name is OpenSSL's, by version)
    ("http", "tls", TLS_FILES, "it does not speak TLS (a scheduler without TLS is reached at tcp://)"),
    ("silent", "tls", TLS_FILES, "no TLS handshake within 1 s: not a TLS endpoint"),
], indirect=["listener"])
def test_what_answers_at_a_scheduler_address_that_is_none_is_said_within_seconds(listener, scheme, options, message,
                                                                                 tmp_path, capsys):
    """``--scheduler`` at a port where no Dask scheduler is (the most common slip: the dashboard's port): the
    client waited for a handshake without end. Now exit status 2 within a few seconds, naming the address and
    what answered there, no traceback, nothing written."""
    out, address = tmp_path / "run", f"{scheme}://127.0.0.1:{listener.port}"
    t0 = time.monotonic()
    assert cli.main(["report", "--grid", str(TINY), "--backends", "reference", "--out", str(out), "--scheduler",
                     address, "--scheduler-wait", "1", "--no-progress", *options]) == 2
    err = capsys.readouterr().err
    assert f"rnn-compat report: --scheduler {address}: {message}" in err and "Traceback" not in err, err
    assert time.monotonic() - t0 < 10 and not out.exists()


@pytest.mark.parametrize("listener", ["http"], indirect=True)
def test_a_scheduler_file_is_read_for_its_address_which_is_checked_as_one_given(listener, tmp_path, capsys):
    """A scheduler file whose address is the dashboard's is refused as that address is; one without an address,
    or naming a scheme the fleet does not speak, is refused naming the file."""
    file = tmp_path / "scheduler.json"
    argv = ["report", "--grid", str(TINY), "--backends", "reference", "--out", str(tmp_path / "run"), "--scheduler",
            str(file), "--scheduler-wait", "1", "--no-progress"]
    file.write_text(json.dumps({"address": f"tcp://127.0.0.1:{listener.port}"}))
    assert cli.main(argv) == 2
    assert "an HTTP server answered (HTTP/1.1 200 OK), not a Dask scheduler" in capsys.readouterr().err
    for document, message in (({"type": "Scheduler"}, "this one does not"),
                              ({"address": "ws://127.0.0.1:1"}, "the fleet reaches a scheduler over tcp:// or tls://, "
                                                                "not ws://")):
        file.write_text(json.dumps(document))
        assert cli.main(argv) == 2
        assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--tls-ca-file", "ca.pem"], "--tls-ca-file says how to reach a Dask scheduler: it needs --scheduler"),
    (["--scheduler", "local:1", *TLS_FILES], "--tls-ca-file: a local fleet listens on 127.0.0.1 alone, without TLS"),
    (["--scheduler", "tcp://127.0.0.1:1", *TLS_FILES], "the TLS options reach a tls:// scheduler; --scheduler "
                                                       "tcp://127.0.0.1:1 is not one"),
    (["--scheduler", "tls://127.0.0.1:1", "--tls-cert", str(TLS / "dask.pem")], "with --tls-ca-file"),
    (["--scheduler", "tls://127.0.0.1:1", "--tls-ca-file", "missing.pem", "--tls-cert", str(TLS / "dask.pem")],
     "No such file or directory: 'missing.pem'"),
    (["--scheduler", "tls://127.0.0.1:1", "--tls-ca-file", str(TINY), "--tls-cert", str(TINY)],
     "the TLS files do not load"),
    (["--scheduler", "tcp://127.0.0.1:1", "--scheduler-wait", "0"], "--scheduler-wait must be a finite number"),
    (["--scheduler", "tcp://127.0.0.1:99999"], "port 99999 is not 1..65535"),
])
def test_the_options_that_reach_a_scheduler_are_refused_naming_what_is_wrong(argv, message, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["report", "--grid", str(TINY), "--backends", "reference", "--out", str(out), "--no-progress",
                     *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert not out.exists()


@pytest.mark.parametrize("listener", ["silent"], indirect=True)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_waiting_for_a_scheduler_ends_the_command_at_once_without_a_traceback(listener, signum,
                                                                                            tmp_path):
    """Ctrl-C or SIGTERM while the command waits for a silent port to greet: it ends at once (Dask's client
    printed a traceback a minute later), saying no unit ran."""
    process = subprocess.Popen([sys.executable, "-m", "compat_tests.cli", "report", "--grid", str(TINY), "--backends",
                                "reference", "--out", str(tmp_path / "run"), "--no-progress", "--scheduler",
                                f"tcp://127.0.0.1:{listener.port}", "--scheduler-wait", "60"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=as_at_a_terminal)  # (a suite run in the background ignores SIGINT)
    deadline = time.monotonic() + 60
    while not listener.held and time.monotonic() < deadline:  # (connected: waiting for the greeting)
        time.sleep(0.05)
    t0 = time.monotonic()
    process.send_signal(signum)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 128 + signum and time.monotonic() - t0 < 5, output
    assert f"interrupted while reaching the scheduler tcp://127.0.0.1:{listener.port}, before any unit ran" in output
    assert "Traceback" not in output and not (tmp_path / "run").exists(), output


def test_a_tls_fleet_runs_the_report_with_the_certificates_and_refuses_a_client_without_them(tmp_path):
    """A scheduler and a worker that speak TLS alone (the fleet docs/fleet.md recommends beyond one machine):
    with ``--tls-ca-file``, ``--tls-cert`` and ``--tls-key`` the report runs there, reached through the
    scheduler file, and its resume command keeps them; without them, or at tcp://, the command says what to
    give."""
    tls = fleet.Reach(ca_file=str(TLS / "dask.pem"), cert=str(TLS / "dask.pem"), key=str(TLS / "dask.key"))
    with fleet.local_cluster(1, tls=tls) as (address, _, file):
        assert address.startswith("tls://")
        out = tmp_path / "run"
        done = _report("--grid", str(TINY), "--backends", "reference", "--out", str(out), "--scheduler", str(file),
                       *TLS_FILES)  # (the scheduler file names the tls:// address, as docs/fleet.md runs it)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        assert len(_records(out)) == 5 and "warning" not in done.stderr
        bare = _report("--grid", str(TINY), "--backends", "reference", "--out", str(tmp_path / "bare"), "--scheduler",
                       address, "--scheduler-wait", "2")
        assert bare.returncode == 2 and "a TLS scheduler is reached with --tls-ca-file and --tls-cert" in bare.stderr
        plain = _report("--grid", str(TINY), "--backends", "reference", "--out", str(tmp_path / "plain"),
                        "--scheduler", address.replace("tls://", "tcp://"), "--scheduler-wait", "1")
        assert plain.returncode == 2 and "a TLS endpoint answered, not a plain Dask scheduler" in plain.stderr
        assert "Traceback" not in bare.stderr + plain.stderr
    from compat_tests.report.command import _resume_command

    args = cli.build_parser().parse_args(["report", "--grid", str(TINY), "--scheduler", address, *TLS_FILES])
    resume = _resume_command(args, out)
    assert all(word in resume for word in TLS_FILES)


class _Client:
    """What ``fleet._Watch`` reads of a client: its status and the scheduler's workers."""

    def __init__(self, status: str, workers: dict) -> None:
        self.status, self.workers = status, workers

    def scheduler_info(self) -> dict:
        return {"workers": self.workers}


@pytest.mark.parametrize("status, workers, why", [("running", {}, "the cluster has no worker left"),
                                                  ("connecting", {"w": {}}, "the scheduler went away")])
def test_a_cluster_without_workers_or_scheduler_for_long_enough_is_lost(monkeypatch, status, workers, why):
    """A remote cluster gone (no scheduler reachable, or no worker) is borne for ``LOST_AFTER`` seconds (a
    worker restarting, a connection retried), then the run ends; a cluster back in time resets the wait."""
    now = [100.0]
    monkeypatch.setattr(fleet.time, "monotonic", lambda: now[0])
    client = _Client(status, workers)
    watch = fleet._Watch(client, alive=lambda: True)
    watch.check({1, 2})
    now[0] += fleet.LOST_AFTER - 1
    watch.check({1, 2})
    client.status, client.workers = "running", {"w": {}}  # back: the wait starts again
    watch.check({1, 2})
    client.status, client.workers = status, workers
    watch.check({1, 2})
    now[0] += fleet.LOST_AFTER - 1
    watch.check({1, 2})
    now[0] += 1
    with pytest.raises(fleet.FleetLost, match=f"{why} \\(2 units pending for {fleet.LOST_AFTER:g} s\\)"):
        watch.check({1, 2})
    with pytest.raises(fleet.FleetLost, match="the scheduler's process ended"):
        fleet._Watch(_Client("running", {"w": {}}), alive=lambda: False).check({1})
