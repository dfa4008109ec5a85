"""The GPU suite as a ladder of rungs, and the runner that climbs it within a GPU window.

A GPU is lent rarely and briefly, and the cuDNN backend rests on guesses that only a GPU settles. Drawn all
at once, one wrong guess (skip_input's layer-0 biases, float16 rounding) fails a whole property and shrinks
to its example, and nothing else that property would have explored is seen. So the suite is a ladder: each
rung adds *one* feature to the best established base (float32 FMA, one layer, unidirectional, time-major,
equal lengths) and is its own set of tests (``compat_tests/tests/gpu/test_gpu_ladder.py``), its name in every test id.
A wrong guess fails its own rung and nothing else; ``combined`` then crosses the established features.

Rung 00 comes before all of them: cuDNN's own published numbers (its RNN sample's checksums,
``compat_tests.judge.published``) through the backend, checked against those numbers and against the float64
truth. Its truth rests on no decision of ours, so it tells "the backend drives cuDNN wrongly" (it misses the
published numbers, which the reference meets on every CPU run) apart from "our reference guessed wrongly"
(a later rung fails while this one passes).

:data:`RUNGS` is the table, best established first. Each rung names the checks it runs (test functions of
``test_gpu_ladder.py``, ``test_<check>``, parametrized with the rung, and for some checks a value); a rung
marked ``isolated`` (dropout, the persistent algorithms and their NVRTC builds: a hang, a crash or a sticky
CUDA error is likeliest there) runs in a process of its own; those come last.

:func:`climb` runs the rungs' tests in child pytest processes and watches them test by test (a plugin,
``compat_tests.gpu.ladder_log``, writes a line as each test starts and ends): a test that failed for any reason but
wrong numbers (an ``AssertionError``) ends its process (a CUDA error may stick) and the rest go on in a fresh
one; a test over its rung's time limit is killed with its process group and recorded as hung, the rest of its
rung is not run and the next rung goes on; when the window's time is up, what did not run is recorded as not
run. The result is a table, rung by rung (passed / failed / hung / skipped / not run, with the first failing
test's one-line reproduce command), printed and written as ``ladder.json`` and ``ladder.md``.

    python -m compat_tests.gpu.ladder --out DIR [--seconds N] [--rungs NAME,...] [--expect-cudnn]
    python -m compat_tests.gpu.ladder --failed LADDER_JSON|RUNS   # the rungs that did not pass, comma-separated
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..interrupts import stopped_quietly

TEST_FILE = "compat_tests/tests/gpu/test_gpu_ladder.py"
# Peers whose comparisons run rung by rung here, not in the generic properties over every peer (marked laddered).
LADDERED_PEERS = ("cudnn", "cudnn-tf32")
PROPERTY_CHECKS = ("layout", "forward", "backward")
STRUCTURE = PROPERTY_CHECKS  # rungs that change the weight space check its layout too
NUMBERS = ("forward", "backward")
OUTCOMES = ("passed", "skipped", "not run", "crashed", "hung", "failed")  # a rung's is its tests' last in this order


@dataclass(frozen=True)
class Rung:
    """One rung: the features its configs have (``offers``: the capabilities its strategy may draw from,
    ``require``: the features every drawn config has, both as in ``compat_tests.strategies.rnn_configs``),
    the peer that runs it, its checks, whether it runs alone (``isolated``) and each test's time limit."""

    name: str
    adds: str
    checks: tuple[str, ...] = STRUCTURE
    peer: str = "cudnn"
    dtypes: tuple[str, ...] = ("float32",)
    offers: frozenset[str] = frozenset()
    require: frozenset[str] = frozenset()
    isolated: bool = False
    seconds: float = 120.0
    values: dict[str, tuple[str, ...]] = field(default_factory=dict)  # check -> the values it runs with
    bias_modes: tuple[str, ...] = ("double",)  # the bias modes its configs draw from
    padding_fills: tuple[float, ...] = (0.0,)  # the paddingFill values its configs with lengths draw from
    cell_clips: tuple[tuple[float, float] | None, ...] = (None,)  # the LSTM cell clips its configs draw from
    modes: tuple[str, ...] | None = None  # the cell modes its configs draw from (None: the peer's)
    packed: tuple[bool, ...] = (False,)  # whether its configs' sequences are packed (SEQ_MAJOR_PACKED)


def _rung(name: str, adds: str, *features: str, **more) -> Rung:
    return Rung(name, adds, offers=frozenset(features), require=frozenset(features), **more)


ALL = frozenset({"layers", "bidirectional", "ragged", "batch_major", "projection"})
# The published sample's modes (compat_tests.judge.published.modes(), held equal by test_gpu_ladder_runner.py: the
# data file is not read at import).
PUBLISHED_MODES = ("relu", "tanh", "lstm", "gru")
RUNGS: tuple[Rung, ...] = (  # numbered from 00: the published sample is rung 00, before every other
    Rung("published", "cuDNN's published RNN sample (T=20, 2 layers, H=I=512, B=64): its own checksums and the "
         "reference", checks=("published",), values={"published": PUBLISHED_MODES}),
    Rung("base", "float32 FMA, one layer, unidirectional, time-major, equal lengths"),
    _rung("layers", "two or three layers", "layers"),
    _rung("bidirectional", "both directions", "bidirectional"),
    _rung("ragged", "sequence lengths, some short (padded I/O)", "ragged"),
    _rung("batch_major", "batch-major data and states", "batch_major"),
    _rung("projection", "LSTM with a recurrent projection (projSize)", "projection"),
    Rung("float64", "float64 data and math", dtypes=("float64",)),
    Rung("float16", "float16 data, float32 math, tensor ops; the float16 rounding decision",
         checks=STRUCTURE + ("float16_rounding",), dtypes=("float16",)),
    _rung("skip_input", "skip_input: layer 0 without input matrices", "skip_input"),
    Rung("bias_modes", "biasMode single_inp, single_rec and none: where the single biases lie, each mode's function",
         bias_modes=("single_inp", "single_rec", "none"), offers=frozenset({"layers", "bidirectional"})),
    _rung("padding_fill", "paddingFill -1, 1000 and NaN past each length (forward), and the gradients beside it",
          "ragged", checks=NUMBERS, padding_fills=(-1.0, 1000.0, float("nan"))),
    Rung("cell_clip", "LSTM cell clipping (cudnnRNNSetClip_v9, MINMAX) at [-0.25, 0.25] and [-1, 0.5]: the "
         "clipped state carried, returned and read by tanh, the gradient through the clip",
         checks=NUMBERS, modes=("lstm",), cell_clips=((-0.25, 0.25), (-1.0, 0.5)),
         offers=frozenset({"layers", "bidirectional"})),
    Rung("packed", "SEQ_MAJOR_PACKED data (PyTorch's PackedSequence), sorted lengths, some short: the packed "
         "order read and written, forward and backward", checks=NUMBERS, packed=(True,),
         offers=frozenset({"layers", "bidirectional", "ragged"})),
    Rung("combined", "every established feature at once, float32 and float64", dtypes=("float32", "float64"),
         offers=ALL),
    Rung("tf32", "default math (TF32 tensor cores) judged by the cudnn-tf32 budget, and the rule its operands "
         "round by", peer="cudnn-tf32", checks=NUMBERS + ("math_type", "tf32_divergence", "tf32_rounding"),
         values={"math_type": ("default", "tensor_op")}),
    Rung("dropout", "dropout between layers: the rate kept and the scale", checks=("dropout",), isolated=True,
         seconds=60.0, values={"dropout": ("0.25", "0.5")}),
    Rung("algorithms", "the persistent algorithms (NVRTC builds) and a plan rebuilt per batch size",
         checks=("algorithm", "persist_rebuild"), isolated=True, seconds=60.0,
         values={"algorithm": ("standard", "persist_static", "persist_static_small_h", "persist_dynamic")}),
)
BY_NAME = {r.name: r for r in RUNGS}


def rung_id(rung: Rung) -> str:
    """``NN-name``, numbered from 00 (the published sample)."""
    return f"{RUNGS.index(rung):02d}-{rung.name}"


def cases(check: str) -> list[tuple[Rung, str | None, str]]:
    """``(rung, value, test id)`` for every rung with ``check``: what ``test_<check>`` is parametrized with."""
    out = []
    for rung in RUNGS:
        if check in rung.checks:
            for value in rung.values.get(check, (None,)):
                out.append((rung, value, rung_id(rung) + ("" if value is None else f"-{value}")))
    return out


def node_ids(rung: Rung) -> list[str]:
    """The pytest node ids of a rung's tests, in the order they run."""
    return [f"{TEST_FILE}::test_{check}[{test_id}]" for check in rung.checks
            for r, _, test_id in cases(check) if r is rung]


def rung_of(node_id: str) -> Rung:
    return RUNGS[int(node_id.split("[", 1)[1][:2])]


def select(names: str | None) -> list[Rung]:
    """The rungs named (comma-separated, in ladder order), or every rung; ``ValueError`` naming an unknown one."""
    if names is None:
        return list(RUNGS)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in BY_NAME]
    if unknown or not wanted:
        raise ValueError(f"--rungs must name rungs among {', '.join(BY_NAME)}, got {names!r}")
    return [r for r in RUNGS if r.name in wanted]


def groups(rungs: Sequence[Rung]) -> list[list[Rung]]:
    """Consecutive rungs that share a process; an isolated rung alone, after every other (risky ones last)."""
    shared = [r for r in rungs if not r.isolated]
    return ([shared] if shared else []) + [[r] for r in rungs if r.isolated]


# ---- running ---------------------------------------------------------------------------------------------


def from_tree(command: str) -> str:
    """An ``rnn-compat ...`` command as it runs from the working tree, uninstalled (as on the GPU machine)."""
    return "PYTHONPATH=. python3 -m compat_tests.cli " + command.removeprefix("rnn-compat ")


def pytest_command(node: str) -> str:
    """The one-line command that runs a ladder test again from the working tree."""
    return f"PYTHONPATH=. python3 -m pytest {shlex.quote(node)} -m gpu -p no:cacheprovider --hypothesis-profile=gpu"


def _read_log(path: Path) -> list[dict]:
    """The events written so far; a last line still being written (torn) is left for the next read."""
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            break
    return events


def _stop(process: subprocess.Popen) -> int | None:
    """End a child pytest and everything it started (its own process group): SIGTERM, then SIGKILL; at most
    about 5 s. ``None`` where even SIGKILL left it running (a process in the kernel's uninterruptible wait)."""
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            return process.wait(wait)
        except subprocess.TimeoutExpired:
            continue
    return process.poll()


def run_group(nodes: list[str], log: Path, deadline: float, pytest_args: Sequence[str], limit_of,
              console=sys.stdout, results: dict[str, dict] | None = None) -> dict[str, dict]:
    """Run ``nodes`` in child pytest processes until each has a result or the deadline passes: a failure other than
    wrong numbers ends its process and the rest go on in a new one (``ladder_log``), a test over ``limit_of(node)``
    seconds is killed (hung) and the rest of its rung is not run, a process that dies takes only the test it was
    running (crashed). ``results`` (returned) is filled as tests end, so that an interrupted run keeps what
    finished."""
    results = {} if results is None else results
    pending = list(nodes)
    while pending:
        if time.monotonic() >= deadline:
            for node in pending:
                results[node] = {"outcome": "not run", "message": "no time left in the window"}
            break
        log.unlink(missing_ok=True)
        command = [sys.executable, "-m", "pytest", *pending, "-m", "gpu", "-p", "compat_tests.gpu.ladder_log",
                   "-p", "no:cacheprovider", "-q", "-rfEsx", *pytest_args]
        env = {**os.environ, "RNN_COMPAT_LADDER_LOG": str(log)}
        process = subprocess.Popen(command, env=env, stdout=console, stderr=subprocess.STDOUT, start_new_session=True)
        running, since, status = None, time.monotonic(), None
        try:
            while status is None:
                status = process.poll()
                if status is not None:
                    break
                events = _read_log(log)
                started = [e for e in events if e["event"] == "start"]
                ended = {e["nodeid"] for e in events if e["event"] == "end"}
                current = next((e["nodeid"] for e in reversed(started) if e["nodeid"] not in ended), None)
                if current != running:
                    running, since = current, time.monotonic()
                now = time.monotonic()
                if running is not None and now - since > limit_of(running):
                    status = "hung"
                elif now >= deadline:
                    status = "out of time"
                else:
                    time.sleep(0.2)
        finally:  # also where the runner itself is interrupted: its child (its own session) must not outlive it,
            if process.poll() is None:  # and what finished is kept
                _stop(process)
            for event in _read_log(log):
                if event["event"] == "end":
                    results[event["nodeid"]] = event
        unfinished = [n for n in pending if n not in results]
        in_flight = next((e["nodeid"] for e in reversed(_read_log(log)) if e["event"] == "start"
                          and e["nodeid"] not in results), None)
        if in_flight is not None:
            if status == "hung":
                results[in_flight] = {"outcome": "hung", "message": f"still running after {limit_of(in_flight):g} s: "
                                      "killed with its process group; the next rung went on in a new process"}
                for node in unfinished:  # what hung once would hang again: the window goes to the next rung
                    if node not in results and rung_of(node) is rung_of(in_flight):
                        results[node] = {"outcome": "not run", "message": f"{in_flight.split('::')[1]} of this "
                                         "rung hung before it"}
            elif status == "out of time":
                results[in_flight] = {"outcome": "not run", "message": "stopped: no time left in the window"}
            else:
                results[in_flight] = {"outcome": "crashed", "message": f"its process ended with status {status} "
                                      "before the test reported (a crash, or a CUDA error that killed it)"}
        elif unfinished and status not in ("hung", "out of time") and not any(
                e["event"] == "start" for e in _read_log(log)):
            for node in unfinished:  # pytest could not start, or ran none of them: another try would do the same
                results[node] = {"outcome": "crashed", "message": f"pytest ended with status {status} "
                                 "without running it (a collection or usage error, or it was not selected: see "
                                 "ladder-pytest.txt)"}
        pending = [n for n in pending if n not in results]
    return results


def climb(rungs: Sequence[Rung], out: Path, seconds: float, pytest_args: Sequence[str] = (),
          expect_cudnn: bool = False, risky_seconds: float | None = None) -> dict:
    """Run the rungs' tests within ``seconds``; write ``ladder.json`` and ``ladder.md`` in ``out``; return the
    table. With ``expect_cudnn`` (the backend is available, as ``versions.json`` says) a skipped test fails;
    ``risky_seconds`` replaces the time limit of the isolated rungs' tests."""
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + seconds
    def limit_of(node: str) -> float:
        rung = rung_of(node)
        return risky_seconds if risky_seconds and rung.isolated else rung.seconds

    results: dict[str, dict] = {}
    try:
        with open(out / "ladder-pytest.txt", "a") as console:
            for group in groups(rungs):
                nodes = [n for rung in group for n in node_ids(rung)]
                run_group(nodes, out / "ladder-log.jsonl", deadline, pytest_args, limit_of, console, results)
    finally:  # interrupted too (gpu_run.sh's step out of time): the table of what finished is written
        (out / "ladder-log.jsonl").unlink(missing_ok=True)
        table = tabulate(rungs, results, expect_cudnn)
        (out / "ladder.json").write_text(json.dumps(table, indent=1) + "\n")
        (out / "ladder.md").write_text(markdown(table) + "\n")
    return table


def tabulate(rungs: Sequence[Rung], results: dict[str, dict], expect_cudnn: bool) -> dict:
    """Per rung: its outcome (the worst of its tests'), per test outcome, seconds, notes, and the first failing
    test's reproduce command."""
    rows = []
    for rung in rungs:
        tests = []
        for node in node_ids(rung):
            r = results.get(node, {"outcome": "not run", "message": "no result"})
            outcome = r["outcome"]
            message = r.get("message", "")
            if outcome == "skipped" and expect_cudnn:
                outcome, message = "failed", f"skipped although the cuDNN backend is available: {message}"
            tests.append({"test": node.split("::", 1)[1], "outcome": outcome, "seconds": r.get("seconds"),
                          "message": message, "notes": r.get("notes", []),
                          "reproduce": r.get("reproduce") or pytest_command(node)})
        worst = max((t["outcome"] for t in tests), key=OUTCOMES.index)
        first = next((t for t in tests if t["outcome"] not in ("passed",)), None)
        rows.append({"rung": rung_id(rung), "name": rung.name, "adds": rung.adds, "peer": rung.peer,
                     "outcome": worst, "passed": sum(t["outcome"] == "passed" for t in tests), "tests": tests,
                     "reproduce": None if first is None else first["reproduce"],
                     "first_failure": None if first is None else f"{first['test']}: {first['message']}"[:400]})
    return {"rungs": rows, "passed": all(r["outcome"] == "passed" for r in rows)}


def markdown(table: dict) -> str:
    lines = ["| rung | adds | outcome | tests passed | first failing test, and its reproduce command |",
             "|---|---|---|---|---|"]
    for r in table["rungs"]:
        detail = "" if r["reproduce"] is None else f"{r['first_failure']}<br>`{r['reproduce']}`"
        lines.append(f"| {r['rung']} | {r['adds']} | **{r['outcome']}** | {r['passed']}/{len(r['tests'])} | "
                     f"{detail.replace('|', '/')} |")
    notes = [f"- {r['rung']} {t['test']}: {n}" for r in table["rungs"] for t in r["tests"] for n in t["notes"]]
    return "\n".join(lines + (["", "Notes:"] + notes if notes else []))


def text_table(table: dict) -> str:
    """The ladder as the terminal shows it: a line a rung, then each failure's reproduce command."""
    lines = [f"{'rung':<16} {'outcome':<8} tests  adds"]
    for r in table["rungs"]:
        lines.append(f"{r['rung']:<16} {r['outcome']:<8} {r['passed']:>2}/{len(r['tests']):<2}  {r['adds']}")
    for r in table["rungs"]:
        if r["reproduce"] is not None:
            lines += [f"{r['rung']}: {r['first_failure']}", f"    reproduce: {r['reproduce']}"]
    return "\n".join(lines)


def newest_run(runs: Path) -> Path:
    """The ``ladder.json`` of the newest unpacked run under ``runs`` (``reports/gpu``: ``*/`` and ``*/rerun-*/``),
    told by the start stamp its ``summary.txt`` opens with (file times say nothing in a fresh checkout)."""
    import re

    stamps = {}
    for ladder in list(runs.glob("*/ladder.json")) + list(runs.glob("*/rerun-*/ladder.json")):
        summary = ladder.with_name("summary.txt")
        found = re.search(r"started (\S+)", summary.read_text()) if summary.is_file() else None
        stamps[ladder] = found.group(1) if found else ""
    if not stamps:
        raise ValueError(f"no {runs}/*/ladder.json to read the failed rungs from")
    return max(stamps, key=lambda path: (stamps[path], str(path)))


def failed_rungs(ladder_json: Path) -> list[str]:
    """The rungs of a run's ``ladder.json`` that did not pass."""
    from reference.formats.files import load_json

    table = load_json(Path(ladder_json).read_bytes(), str(ladder_json))
    return [r["name"] for r in table["rungs"] if r["outcome"] != "passed"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compat_tests.gpu.ladder", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="folder for ladder.json, ladder.md and ladder-pytest.txt (what "
                                                 "the tests printed)")
    parser.add_argument("--seconds", type=float, default=300.0, help="the time the whole climb may take (300)")
    parser.add_argument("--rungs", help=f"comma-separated rungs to run (default: all): {', '.join(BY_NAME)}")
    parser.add_argument("--risky-seconds", type=float,
                        help="the time limit of each test of the isolated (risky) rungs instead of the rung's own")
    parser.add_argument("--expect-cudnn", action="store_true",
                        help="the backend is available (versions.json says so): a skipped test fails")
    parser.add_argument("--failed", type=Path, metavar="LADDER_JSON_OR_RUNS",
                        help="print the rungs that did not pass, comma-separated, and exit: of a ladder.json, or of "
                             "the newest run unpacked under a folder of runs (reports/gpu)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    if args.failed is not None:
        try:
            ladder = newest_run(args.failed) if args.failed.is_dir() else args.failed
            print(",".join(failed_rungs(ladder)))
        except (OSError, ValueError) as exc:
            parser.exit(2, f"gpu_ladder: --failed: {exc}\n")
        return 0
    if args.out is None:
        parser.error("--out is required")
    try:
        rungs = select(args.rungs)
    except ValueError as exc:
        parser.error(str(exc))
    if not args.seconds > 0:
        parser.error(f"--seconds must be > 0, got {args.seconds}")

    def climbed() -> int:
        table = climb(rungs, args.out, args.seconds, args.pytest_args, args.expect_cudnn, args.risky_seconds)
        print(text_table(table))
        return 0 if table["passed"] else 1

    # SIGINT (gpu_run.sh's step out of time) or SIGTERM: the child pytest stopped, the table of what finished kept
    return stopped_quietly(climbed, "gpu_ladder", f": the rungs that finished are in {args.out / 'ladder.md'}")


if __name__ == "__main__":
    sys.exit(main())
