"""Helpers shared by the suite's test files: no test module imports another; what two of them need lives here."""

from __future__ import annotations

import ast
import itertools
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterable

import numpy as np
import pytest

import cudnn_backend
import reference
from compat_tests import cli
from compat_tests.config import Case, GradOutputs, Outputs, RNNConfig, make_case
from compat_tests.judge.compare import Comparison, Recorded, compare_peer
from compat_tests.judge.tolerances import FINITE_DIFFERENCE_RTOL, FINITE_DIFFERENCE_STEP
from compat_tests.peers.cudnn_gpu import gradients
from compat_tests.peers.reference_peer import ReferencePeer
from compat_tests.report import SCHEMA
from compat_tests.report.sweep import RESULTS, read_records
from compat_tests.run import forward_case, ground_truth, ground_truth_backward, misaligned, packed_like, padded
from reference import spec
from reference.formats import onnx as onnx_format

TINY = dict(max_layers=2, max_units=3, max_input=3, max_time=4, max_batch=2)


def engine_against_spec(cfg: RNNConfig, case: Case, dropout: float = 0.0, seed: int = 0) -> list[Comparison]:
    """The engine's inference outputs, and its training outputs and gradients (with ``dropout``, the masks
    its forward pass drew), each judged against the spec's truth by the reference peer's budgets."""
    model = cfg.model(dropout=dropout, seed=seed)
    params = model.canonical_to_params(case.weights, case.biases)
    inference = forward_case(model, cfg, case, is_training=False, params=params)
    fwd = forward_case(model, cfg, case, is_training=True, params=params)
    grads = model.backward(fwd, packed_like(cfg, case, case.dy), case.dh, case.dc)
    masks = fwd.reserve.dropout_masks
    training = Recorded("reference", outputs=Outputs(padded(cfg, fwd.output), *fwd[1:3]),
                        gradients=GradOutputs(padded(cfg, grads.input), grads.input_h, grads.input_c, grads.params))
    return [compare_peer(Recorded("reference", outputs=Outputs(padded(cfg, inference.output), *inference[1:3])), cfg,
                         case),
            compare_peer(training, cfg, case, dropout=dropout, masks=masks),
            compare_peer(training, cfg, case, backward=True, dropout=dropout, masks=masks)]


def failures(comparisons: list[Comparison]) -> list[str]:
    return [c.explain() for c in comparisons if not c.passed]


def finite_difference_failures(cfg: RNNConfig, case: Case, dropout: float = 0.0, masks=(), probes: int = 3,
                               seed: int = 0, math_type: str = "fma",
                               rtol: float = FINITE_DIFFERENCE_RTOL) -> list[str]:
    """Where ``reference.spec.backward`` (under ``math_type``: ``"tf32"``, the TF32 truth's gradients) disagrees
    with central finite differences of ``reference.spec.forward`` (float64, exact GEMMs) by more than ``rtol``
    relative to ``max(1, |loss|, |gradient|)``, along ``probes`` coordinates and one random direction of each of
    ``x``, ``h0``, ``c0``, the weights and the biases: ``loss = <y, dy> + <h_n, dh> + <c_n, dc>`` (a packed
    config's ``x``, ``y`` and ``dy`` packed: the packed data is what moves)."""
    case = case.astype(np.float64)
    net = spec.Network.of(cfg.model("float64"))
    options = dict(lengths=None if cfg.packed else case.lengths, dropout=dropout, masks=masks,
                   time_major=cfg.time_major)
    batch_sizes = reference.pack(case.x, case.lengths).batch_sizes if cfg.packed else None
    sequence = (lambda a: reference.PackedSequence(a, batch_sizes)) if cfg.packed else (lambda a: a)  # noqa: E731
    data = (lambda s: s.data) if cfg.packed else (lambda s: s)  # noqa: E731
    dy = data(packed_like(cfg, case, case.dy))
    args = {"x": [data(packed_like(cfg, case, case.x))], "h0": [np.zeros_like(case.dh) if case.h0 is None else case.h0],
            "c0": [None if case.dc is None else np.zeros_like(case.dc) if case.c0 is None else case.c0],
            "weights": list(case.weights), "biases": list(case.biases)}

    def loss(a) -> float:
        out = spec.forward(net, a["weights"], a["biases"], sequence(a["x"][0]), a["h0"][0], a["c0"][0], **options)
        return float(np.vdot(data(out.output), dy) + np.vdot(out.output_h, case.dh)
                     + (0.0 if out.output_c is None else np.vdot(out.output_c, case.dc)))

    g = spec.backward(net, args["weights"], args["biases"], sequence(args["x"][0]), args["h0"][0], args["c0"][0],
                      sequence(dy), case.dh, case.dc, **options, math_type=math_type)
    grads = {"x": [data(g.input)], "h0": [g.input_h], "c0": [g.input_c], "weights": g.weights, "biases": g.biases}
    rng = np.random.default_rng(seed)
    h = FINITE_DIFFERENCE_STEP
    base = loss(args)
    scale = max(1.0, abs(base))
    found = []
    for name, grad in grads.items():
        if not grad or grad[0] is None:  # no c0 but for the LSTM, no bias with bias_mode "none"
            continue
        sizes = np.cumsum([0] + [a.size for a in grad])
        directions = []
        for k in rng.choice(sizes[-1], size=min(probes, sizes[-1]), replace=False):
            unit = [np.zeros_like(a) for a in grad]
            i = int(np.searchsorted(sizes, k, side="right")) - 1
            unit[i].reshape(-1)[k - sizes[i]] = 1.0
            directions.append(unit)
        directions.append([rng.standard_normal(a.shape) for a in grad])

        def along(v: list, step: float) -> tuple[float, float]:
            """The central difference along ``v``, and the forward one less the backward one."""
            moved = lambda sign: {**args, name: [a + sign * step * d for a, d in zip(args[name], v)]}  # noqa: E731
            up, down = loss(moved(1)), loss(moved(-1))
            return (up - down) / (2 * step), (up - 2 * base + down) / step

        for v in directions:
            (fd, jump), (fd_half, jump_half) = along(v, h), along(v, h / 2)
            analytic = sum(float(np.vdot(a, d)) for a, d in zip(grad, v))
            tol = FINITE_DIFFERENCE_RTOL * max(scale, abs(analytic))
            if abs(fd - fd_half) > tol:  # a kink (relu at 0) within the step: not differentiable here
                continue
            # A kink at the point itself (a relu input exactly 0, as where a layer's input and h0 are 0 and it
            # has no bias): the one-sided differences part by as much at half the step (a smooth loss's part
            # by half as much), while the central ones agree.
            if abs(jump_half) > tol and abs(jump - jump_half) < abs(jump_half) / 2:
                continue
            if abs(fd - analytic) > rtol * max(scale, abs(analytic)):
                found.append(f"d loss / d {name}: finite difference {fd!r}, spec backward {analytic!r}")
    return found


def random_masks(cfg: RNNConfig, seed: int) -> tuple[np.ndarray, ...]:
    lead = (cfg.seq_len, cfg.batch) if cfg.time_major else (cfg.batch, cfg.seq_len)
    rng = np.random.default_rng(seed)
    return tuple(rng.random((*lead, cfg.num_dirs * cfg.state_width)) >= 0.5 for _ in range(cfg.num_layers - 1))


def _truth(cfg: RNNConfig, case: Case) -> list[np.ndarray]:
    return [a for a in (*ground_truth(cfg, case), *ground_truth_backward(cfg, case)) if a is not None]


def assert_caught_in_the_engine(cfg: RNNConfig, plant, dropout: float = 0.0) -> None:
    """The engine passes on ``cfg``; with the bug ``plant()`` installs it fails, and the truth computed
    under the bug is the truth computed without it, bit for bit."""
    case = make_case(cfg)
    assert not failures(engine_against_spec(cfg, case, dropout)), "the engine fails without the bug"
    truth = _truth(cfg, case)
    with pytest.MonkeyPatch.context() as mp:
        plant(mp)
        assert failures(engine_against_spec(cfg, case, dropout)), "the planted bug went unnoticed"
        under_the_bug = _truth(cfg, case)
    for a, b in zip(truth, under_the_bug, strict=True):
        np.testing.assert_array_equal(a, b)


SPEC_DIR = Path(spec.__file__).parent


ENGINE = {"reference.recurrence", "reference.backward", "reference.buffers", "reference.modes", "reference.model"}


def _imports(path: Path) -> set[str]:
    """The modules ``path`` imports, relative imports resolved against its package."""
    package = ".".join(path.relative_to(SPEC_DIR.parent.parent).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module) if p)
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names}  # `from . import gru` imports a module
    return found


def imports_reached(paths: Iterable[Path]) -> tuple[list[tuple[Path, str]], set[Path]]:
    """Every ``(file, module it imports)`` from the files ``paths``, followed through the reference's own
    modules (not the package's ``__init__``), and the files of the reference's modules reached."""
    seen, todo, found = set(), list(paths), []
    reference_dir = SPEC_DIR.parent
    while todo:
        path = todo.pop()
        for module in _imports(path):
            found.append((path, module))
            parts = module.split(".")
            if parts[0] == "reference":
                candidate = reference_dir.joinpath(*parts[1:]).with_suffix(".py")
                if candidate.exists() and candidate not in seen:
                    seen.add(candidate)
                    todo.append(candidate)
    return found, seen


def cudnn_model(cfg: RNNConfig, **options):
    return cfg.model(models=cudnn_backend.MODELS, **options)


def backward_reads_what_forward_read(disturbance: str, closing, request) -> None:
    """Gradients stay the reference's (within the cudnn budget) when, between forward and backward, the
    caller overwrites its params with NaN, or the padding of the input held NaN all along, or (persist_dynamic,
    whose plan is compiled per batch size: the ladder's ``algorithms`` rung) another batch size ran, or the
    caller's buffers start off cudaMalloc's alignment. persist_dynamic runs full-length sequences: persistent
    algorithms are reported not to take variable lengths; a refusal is recorded as a note with its status."""
    import cupy

    algo = "persist_dynamic" if disturbance == "other_batch_in_between" else "standard"
    cfg = RNNConfig("lstm", num_layers=2, num_units=16, input_size=8, direction="bidirectional", seq_len=9,
                    batch=4, lengths=None if algo == "persist_dynamic" else (9, 3, 6, 1), dtype="float32")
    case = make_case(cfg)
    gpu = cudnn_model(cfg, algo=algo)
    closing(gpu)
    params = gpu.canonical_to_params(case.weights, case.biases)
    d_params, dh, dc = None, case.dh, case.dc
    if disturbance == "misaligned_buffers":
        params, d_params = misaligned(cupy, params), misaligned(cupy, cupy.zeros_like(params))
        dh, dc = misaligned(cupy, case.dh), misaligned(cupy, case.dc)
    x = case.x.copy()
    if disturbance == "nan_in_padded_input":
        for b, n in enumerate(cfg.lengths):
            x[n:, b] = np.nan
    try:
        fwd = forward_case(gpu, cfg, case._replace(x=x), is_training=True, params=params)
    except cudnn_backend.CudnnError as exc:
        request.node.user_properties.append(("note", f"{algo} does not run {cfg.short()} here: {exc}"))
        return
    if disturbance == "params_overwritten":
        params.fill(np.nan)
    if disturbance == "other_batch_in_between":
        other = cfg.with_(batch=2, lengths=None)
        forward_case(gpu, other, make_case(other), is_training=True)
    grads = gpu.backward(fwd, case.dy, dh, dc, params_backprop_out=d_params)
    assert d_params is None or grads.params is d_params
    verdict = compare_peer(Recorded("cudnn", gradients=gradients(cfg, gpu, grads)), cfg, case, backward=True)
    assert verdict.passed, verdict.explain()


ROOT = Path(__file__).resolve().parents[2]


PEER = '''
"""A peer whose units of seed >= 2 hold at 'worker-running', and hold() for the run's other points."""
import multiprocessing
import os
import time
from multiprocessing import util
from pathlib import Path

from compat_tests.peers.reference_peer import ReferencePeer


def hold(point):
    """Where the test asked for ``point`` (HOLD): a file point.PID in HOLD_DIR, then wait until it is gone."""
    if os.environ.get("HOLD") == point:
        flag = Path(os.environ["HOLD_DIR"]) / f"{point}.{os.getpid()}"
        flag.touch()
        while flag.exists():
            time.sleep(0.01)


class Slow(ReferencePeer):
    name = "slow"

    def forward(self, cfg, case):
        if cfg.seed >= 2:
            hold("worker-running")
        return super().forward(cfg, case)


SLOW = Slow()
if multiprocessing.parent_process() is not None:  # a worker, which loads its plugins when it starts
    util.Finalize(None, hold, args=("worker-ending",), exitpriority=0)  # run as it ends
'''


def processes_with(variable: str) -> list[int]:
    """The live (not zombie) processes whose environment holds ``variable`` (``NAME=value``), in any session:
    a command's workers and the children it put in sessions of their own (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] != "Z" and variable.encode() in environ:
            found.append(int(entry.name))
    return found


def _ours(marker: str) -> list[int]:
    """The live processes of a held command: those whose ``HOLD_DIR`` is ``marker``, the test's folder of holds."""
    return processes_with(f"HOLD_DIR={marker}")


def as_at_a_terminal() -> None:
    """A child's SIGINT as a terminal's command gets it, Python's KeyboardInterrupt (``preexec_fn``): a test run
    from a background job (``cmd &`` in a script) would hand its children SIGINT ignored, and they keep it so."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _held(argv: list[str], tmp_path: Path, point: str | None, signals: list[tuple[int, bool]], ready=lambda: True,
          release: bool = False, on_hold=lambda: None, **env: str) -> tuple[subprocess.CompletedProcess, list[Path]]:
    """Run ``argv`` in a session of its own with ``HOLD=point``; once a process holds there (any time, for no
    point) and ``ready()``, call ``on_hold()``,
    send ``signals`` (each to the command's process group, or to its main process alone) and, with ``release``,
    remove the holds (where the command must go past its hold to end); return its exit and output and the
    holds' files seen (one a process that held). No process of the command may be left soon after."""
    if not Path("/proc/self/stat").is_file():
        pytest.skip("the processes are read from /proc")
    holds = tmp_path / "holds"
    holds.mkdir()
    log = tmp_path / "output.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env, "HOLD": point or "", "HOLD_DIR": str(holds)}
    with log.open("w") as output:
        proc = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, start_new_session=True, env=env,
                                cwd=ROOT, preexec_fn=as_at_a_terminal)
        try:
            deadline = time.monotonic() + 300  # (generous: processes start and import on a busy machine)
            while time.monotonic() < deadline and proc.poll() is None and not (
                    (point is None or any(holds.iterdir())) and ready()):
                time.sleep(0.01)
            held = sorted(holds.iterdir())
            assert proc.poll() is None and (point is None or held) and ready(), f"never held at {point}:\n{log.read_text()}"
            on_hold()
            for signum, group in signals:
                (os.killpg if group else os.kill)(proc.pid, signum)
                time.sleep(0.05)
            if release:
                for flag in holds.iterdir():
                    flag.unlink()
            code = proc.wait(timeout=300)  # (it would never end by itself; generous: a busy machine is slow)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    deadline = time.monotonic() + 10
    while _ours(str(holds)) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _ours(str(holds))
    info = {pid: (Path(f"/proc/{pid}/cmdline").read_bytes(), Path(f"/proc/{pid}/stat").read_text()) for pid in left}
    for pid in left:  # (not left running after the test either)
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {info}"
    return subprocess.CompletedProcess(argv, code, log.read_text(), ""), held


def _kept(out: Path) -> list[dict]:
    """The run's records, each line whole and each unit once."""
    if not (out / RESULTS).exists():
        return []
    records = read_records(out / RESULTS)  # whole lines only: a torn one would be dropped, so count them all
    assert len((out / RESULTS).read_text().splitlines()) == len(records)
    assert len({r["id"] for r in records}) == len(records), "a unit recorded twice"
    return records


def _one_unit_grid(tmp_path: Path) -> list[str]:
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"study": "compat", "config": {"mode": "gru", "seq_len": 2, "dtype": "float32"}}]))
    return ["report", "--grid", str(grid), "--backends", "reference", "--jobs", "1", "--no-progress", "--no-figures"]


def _model_files(tmp_path: Path):
    cfg = RNNConfig("gru", num_units=3, input_size=2, seq_len=3, dtype="float32")
    case = make_case(cfg)
    return cfg, case, cfg.model()


def random_bits(rng, shape, dtype):
    """Arrays with every bit pattern: NaN payloads, infinities, -0, subnormals."""
    dtype = np.dtype(dtype)
    ints = rng.integers(0, 2 ** (8 * dtype.itemsize), size=shape, dtype=np.uint64)
    return ints.astype({2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]).view(dtype)


H, I, T, B = 3, 2, 4, 2


RNG = np.random.default_rng(44)


LSTM_W = {"W": RNG.normal(size=(1, 4 * H, I)), "R": RNG.normal(size=(1, 4 * H, H)), "B": RNG.normal(size=(1, 8 * H))}


GRU_W = {"W": RNG.normal(size=(2, 3 * H, I)), "R": RNG.normal(size=(2, 3 * H, H)), "B": RNG.normal(size=(2, 6 * H))}


def model(nodes, outputs=("Y", "Y_h"), inits=(), inputs=None, opset=17):
    """An ONNX model of ``nodes`` (a graph as exporters make them) reading ``X`` [T, B, I]."""
    from onnx import TensorProto, helper, numpy_helper

    inputs = inputs or [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["T", "B", I])]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                                                   for n in outputs],
                              initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def ort_run(proto, x):
    import onnxruntime

    session = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"X": x})


def reference_run(proto, x):
    from compat_tests.interop.onnx_model import import_model

    m, weights, biases = import_model(proto)
    return m, m.forward(x, None, m.canonical_to_params(weights, biases), is_training=False)


X = RNG.uniform(-1, 1, (T, B, I)).astype(np.float32)


def _lstm_node(name="lstm"):
    from onnx import helper

    return helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h", "Y_c"], hidden_size=H, name=name)


LSTM_INITS = {k: v.astype(np.float32) for k, v in LSTM_W.items()}


def _foreign_onnx(cfg: RNNConfig, case, node_attrs: dict | None = None, peephole: bool = False):
    """``cfg``'s unidirectional stack as a foreign exporter writes it: a node per layer (named rnn0, rnn1,
    ...) chained through Squeeze, no config in the metadata (no B under ``bias_mode="none"``);
    ``node_attrs[layer]`` adds attributes."""
    from onnx import TensorProto, helper, numpy_helper

    H, inits, nodes, x = cfg.num_units, [], [], "X"
    for layer, wrb in enumerate(onnx_format.to_onnx(cfg.model(), case.weights, case.biases)):
        names = [x]
        for k in wrb:  # W, R[, B]
            inits.append(numpy_helper.from_array(wrb[k], f"{k}{layer}"))
            names.append(f"{k}{layer}")
        if peephole:
            inits.append(numpy_helper.from_array(np.full((1, 3 * H), 0.5, np.float32), f"P{layer}"))
            names += [""] * (7 - len(names)) + [f"P{layer}"]
        attrs = {**onnx_format.ATTRIBUTES[cfg.mode], "hidden_size": H, **(node_attrs or {}).get(layer, {})}
        nodes.append(helper.make_node(onnx_format.OPS[cfg.mode], names, [f"Y{layer}"], name=f"rnn{layer}", **attrs))
        nodes.append(helper.make_node("Squeeze", [f"Y{layer}", "axis1"], [f"S{layer}"]))
        x = f"S{layer}"
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "axis1"))
    graph = helper.make_graph(nodes, "foreign", [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(case.x.shape))],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=10)


def _onnxruntime(proto, x: np.ndarray, optimized: bool = True, extra: dict | None = None) -> np.ndarray:
    """The first output of ``proto`` on ``x`` fed to its first input (``X`` in the graphs made here) and the
    ``extra`` inputs; not ``optimized``: every node as the ONNX spec defines it (onnxruntime's graph optimizer
    removes a Dropout whatever its training_mode)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if not optimized:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x, **(extra or {})})[0]


def _no_initial_state(cfg: RNNConfig):
    """``cfg`` (float32, zero initial states: a foreign graph here has none) and its case."""
    cfg = cfg.with_(initial_state=False, dtype="float32")
    return cfg, make_case(cfg)


# The exporter sweeps' rows (the sweep fixture runs their pairwise rows outside the thorough profile).
TORCHSCRIPT_SWEEP = list(itertools.product(("relu", "lstm", "gru"), (2, 3), (False, True), (False, True),
                                           (False, True), (11, 13, 17), (False, True)))


DYNAMO_SWEEP = [(*row, 2 + k % 2, k % 4 < 2) for k, row in  # (layers, bias in turn)
                enumerate(itertools.product(("gru", "lstm"), (False, True), (False, True), (False, True)))]


TINY_GRID = Path(__file__).resolve().parents[1] / "data" / "tiny_grid.json"


class Perturbed(ReferencePeer):
    """A deliberately wrong peer: the reference with one output nudged by 1000 ulp."""

    name = "perturbed"

    def forward(self, cfg, case):
        out = super().forward(cfg, case)
        y = out.output.copy()
        y.flat[0] += 1000 * np.finfo(y.dtype).eps * max(1.0, abs(float(y.flat[0])))
        return Outputs(y, out.output_h, out.output_c)


def run(out: Path, *extra: str) -> int:
    return cli.main(["report", "--grid", str(TINY_GRID), "--out", str(out), "--jobs", "1", "--no-progress", *extra])


def deterministic(report: dict) -> dict:
    """A report without the parts that legitimately differ between runs."""
    return {k: v for k, v in report.items() if k not in ("generated_utc", "environment")}




def _validate(report: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="schema validation needs jsonschema")
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))


class BackwardFails(ReferencePeer):
    name = "backward-fails"

    def backward(self, cfg, case):
        raise RuntimeError("backward refused (test double)")


def _copied_run(tiny_report, tmp_path, edit_plan=None) -> Path:
    """A copy of the tiny run's ``run.json`` (changed by ``edit_plan``) and records in ``tmp_path/run``."""
    _, out, _ = tiny_report
    copy = tmp_path / "run"
    copy.mkdir(parents=True)
    for name in ("run.json", RESULTS):
        (copy / name).write_bytes((out / name).read_bytes())
    if edit_plan is not None:
        plan = json.loads((copy / "run.json").read_text())
        edit_plan(plan)
        (copy / "run.json").write_text(json.dumps(plan))
    return copy


def _grid(tmp_path: Path, entries: list[tuple[str, dict]]) -> Path:
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"study": study, "config": config} for study, config in entries]))
    return grid


SMALL_GRU = {"mode": "gru", "seq_len": 3, "batch": 2, "num_units": 3, "input_size": 2, "dtype": "float32"}


def bound_case(cfg: RNNConfig):
    """The model of ``cfg``, its params, the model bound to them and the case in the model's dtype."""
    model = cfg.model()
    case = make_case(cfg).astype(model.dtype)
    params = model.canonical_to_params(case.weights, case.biases)
    return model, params, model.bind(params), case


def same_bits(got, want) -> bool:
    return all((a is None and b is None) or (a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes())
               for a, b in zip(got, want, strict=True))


def run_stream(bound, case):
    """``case.x [T, B, in]`` through ``bound.stream(B, h0, c0)``: ``Outputs`` in the model's dtype."""
    s = bound.stream(case.x.shape[1], case.h0, case.c0)
    outputs = np.stack([s.step(x_t) for x_t in case.x])
    h, c = s.state()
    return Outputs(outputs, h.astype(bound.dtype), None if c is None else c.astype(bound.dtype))
