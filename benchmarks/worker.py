"""Time one implementation on one config in this process; print one JSON line of seconds per call.

``python -m benchmarks.worker IMPL TASK MODE T B I H L BIDI [--lengths] [--min-repeat N] [--seconds S] [--serve]``
IMPL: reference | bound (the reference bound to its parameters once, ``model.bind``: its ``forward``, or its
``step``) | stream (a step of ``model.bind(params).stream(B)``) | torch | onnxruntime | floor (the
reference's GEMMs alone) | floor_act (and its exp and tanh) | floor_steps (its own steps and GEMMs, data
movement free) | floor_bound (the same, a bound model's layers) | gemm;
TASK: train (forward + backward, all gradients) | infer (forward only) | step (one time step, ``T`` ignored, of
a stream whose states each call carries over to the next, :func:`step_call`; the floors: a forward of ``T = 1``);
``--lengths``: a padded batch of sequences of :func:`lengths` (each implementation's own way: the reference's
``sequence_lengths``, torch's packed sequence, packed in each call as a user's padded batch is, ONNX's
``sequence_lens``).
``--serve``: after the warm-up, time a burst of ``--seconds`` for each line read from standard input, one
JSON line each (``benchmarks.harness.interleaved``).
Run by ``benchmarks.harness``, one process per measurement (or per implementation, serving bursts one at a
time), so thread pools never share the cores.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time

import numpy as np

from compat_tests.interrupts import deaf_if_started_deaf
from reference.modes import MODES


def lengths(T: int, B: int) -> np.ndarray:
    """The lengths of a padded batch: drawn from ``T/2..T`` (seeded), the first ``T``."""
    n = np.random.default_rng(1).integers(T // 2, T + 1, B)
    n[0] = T
    return n


def _reference_model(mode: str, I: int, H: int, L: int, bidi: bool):
    import reference

    return reference.make_model(mode, L, H, I, direction="bidirectional" if bidi else "unidirectional",
                                dtype=np.float32)


def reference_call(task: str, mode: str, T: int, B: int, I: int, H: int, L: int, bidi: bool, seq_lengths=None,
                   bound: bool = False, stream: bool = False):
    """The reference's call (``bound``: bound to its parameters once, ``model.bind``; ``stream``: a step of
    ``model.bind(params).stream(B)``)."""
    model = _reference_model(mode, I, H, L, bidi)
    rng = np.random.default_rng(0)
    params = (rng.standard_normal(model.params_size()) * H**-0.5).astype(np.float32)
    if task == "step":
        return step_call(model, model.bind(params) if bound or stream else None, params, B, stream)
    if stream:
        raise SystemExit("a stream runs one step at a time: task step")
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    dy = rng.standard_normal((T, B, (2 if bidi else 1) * H)).astype(np.float32)
    if task == "infer":
        if bound:
            return functools.partial(model.bind(params).forward, x, sequence_lengths=seq_lengths)
        return lambda: model.forward(x, None, params, is_training=False, sequence_lengths=seq_lengths)
    if bound:
        raise SystemExit("a bound model is for inference")

    def train():
        fwd = model.forward(x, None, params, is_training=True, sequence_lengths=seq_lengths)
        model.backward(fwd, dy)

    return train


def step_call(model, bound, params: np.ndarray, B: int, stream: bool = False):
    """One streaming step of batch ``B`` from states carried over from the call before: ``bound.step``
    updating the states in place, ``stream``: ``bound.stream(B).step`` (the states kept inside), or
    (``bound=None``) the model's ``T = 1`` call."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, model.input_size)).astype(np.float32)
    if stream:
        return functools.partial(bound.stream(B).step, x)
    lstm = model.rnn_mode == "lstm"
    h = np.zeros((model.num_layers, B, model.state_width), np.float32)
    c = np.zeros((model.num_layers, B, model.num_units), np.float32) if lstm else None
    if bound is not None:
        if lstm:
            return lambda: bound.step(x, h, c, out_h=h, out_c=c)
        return lambda: bound.step(x, h, out_h=h)
    states = [h, c]
    x_seq = x[None]

    def call():
        result = model.forward(x_seq, states[0], params, states[1], is_training=False)
        states[:] = result.output_h, result.output_c

    return call


def torch_call(task: str, mode: str, T: int, B: int, I: int, H: int, L: int, bidi: bool, seq_lengths=None):
    import torch

    torch.manual_seed(0)
    cls = {"gru": torch.nn.GRU, "lstm": torch.nn.LSTM}.get(mode)
    kwargs = {} if cls else {"nonlinearity": mode}
    module = (cls or torch.nn.RNN)(I, H, num_layers=L, bidirectional=bidi, **kwargs)
    if task == "step":  # the module's call on one step, its states carried over
        x_t = torch.randn(1, B, I)
        state = [None]

        def step():
            with torch.inference_mode():
                state[0] = module(x_t, state[0])[1]

        return step
    x = torch.randn(T, B, I)
    dy = torch.randn(T, B, (2 if bidi else 1) * H)
    n = None if seq_lengths is None else torch.from_numpy(seq_lengths)

    def run(x):
        if n is None:
            return module(x)[0]
        y = module(torch.nn.utils.rnn.pack_padded_sequence(x, n, enforce_sorted=False))[0]
        return torch.nn.utils.rnn.pad_packed_sequence(y, total_length=T)[0]

    if task == "infer":
        def infer():
            with torch.inference_mode():
                run(x)

        return infer
    x.requires_grad_(True)

    def train():
        module.zero_grad(set_to_none=True)
        x.grad = None
        (run(x) * dy).sum().backward()

    return train


def onnxruntime_call(task: str, mode: str, T: int, B: int, I: int, H: int, L: int, bidi: bool, seq_lengths=None):
    import onnxruntime

    from compat_tests.interop.onnx_model import export_model

    if task == "train":
        raise SystemExit("onnxruntime has no backward pass")
    model = _reference_model(mode, I, H, L, bidi)
    rng = np.random.default_rng(0)
    w_shapes, b_shapes = model.canonical_shapes()
    weights = [(rng.standard_normal(s) * H**-0.5).astype(np.float32) for s in w_shapes]
    biases = [(rng.standard_normal(s) * H**-0.5).astype(np.float32) for s in b_shapes]
    if task == "step":
        return onnxruntime_step(model, weights, biases, B)
    proto = export_model(model, weights, biases, with_lengths=seq_lengths is not None, with_states=False)
    session = ort_session(onnxruntime, proto)
    feed = {"X": rng.standard_normal((T, B, I)).astype(np.float32)}
    if seq_lengths is not None:
        feed["sequence_lens"] = seq_lengths.astype(np.int32)
    return lambda: session.run(None, feed)


def ort_session(onnxruntime, proto):
    """An onnxruntime CPU session of ``proto``; with ``OMP_NUM_THREADS`` set (as ``bench_streaming --threads``
    does for every implementation: OpenBLAS and torch follow it), its intra-op pool has that many threads."""
    options = onnxruntime.SessionOptions()
    if os.environ.get("OMP_NUM_THREADS"):
        options.intra_op_num_threads = int(os.environ["OMP_NUM_THREADS"])
    return onnxruntime.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])


def onnxruntime_step(model, weights: list[np.ndarray], biases: list[np.ndarray], B: int):
    """``session.run`` of the model's one recurrent node (a graph of that node alone, states as inputs and
    outputs; one layer, one direction) on one step, its states carried over from the run before."""
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    from compat_tests.interop.onnx_model import IR_VERSION, OPSET
    from reference.formats import onnx as onnx_weights

    if model.num_layers != 1 or model.num_dirs != 1:
        raise SystemExit("the step benchmark's ONNX graph is one node: one layer, one direction")
    lstm, H, I = model.rnn_mode == "lstm", model.num_units, model.input_size
    wrb = onnx_weights.to_onnx(model, weights, biases)[0]
    states = ["initial_h", "initial_c"] if lstm else ["initial_h"]
    outputs = ["Y", "Y_h", "Y_c"] if lstm else ["Y", "Y_h"]
    node = helper.make_node(onnx_weights.OPS[model.rnn_mode], ["X", "W", "R", "B", "", *states], outputs,
                            hidden_size=H, **onnx_weights.ATTRIBUTES[model.rnn_mode])
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        [node], "step", [helper.make_tensor_value_info("X", f32, [1, B, I]),
                         *(helper.make_tensor_value_info(s, f32, [1, B, H]) for s in states)],
        [helper.make_tensor_value_info(o, f32, None) for o in outputs],
        initializer=[numpy_helper.from_array(np.ascontiguousarray(wrb[k]), k) for k in ("W", "R", "B")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    session = ort_session(onnxruntime, proto)
    feed = {"X": np.random.default_rng(0).standard_normal((1, B, I)).astype(np.float32),
            **{s: np.zeros((1, B, H), np.float32) for s in states}}

    def step():
        result = session.run(None, feed)
        feed.update(zip(states, result[1:]))

    return step


# The [H, B] blocks of each forward step that go through NumPy's exp (the sigmoid gates) and tanh (tanh gates
# and the LSTM's cell output): what any NumPy step of the cell must compute beside its GEMM. relu: none.
ACTIVATION_BLOCKS = {"relu": (0, 0), "tanh": (0, 1), "lstm": (3, 2), "gru": (2, 1), "classic_gru": (2, 1)}


def floor_call(task: str, mode: str, T: int, B: int, I: int, H: int, L: int, bidi: bool, seq_lengths=None,
               activations: bool = False):
    """Only the GEMMs the reference makes for this config, on the same shapes and layouts: per
    pseudo-layer the input projection ``W @ x_rows.T`` (``x_rows @ W.T`` at batch 1) and ``R @ h`` per step
    into a buffer; for ``train`` also ``R.T @ d`` per step and the gradient GEMMs over all steps (``dR``,
    ``dW``, ``dx``). The time no NumPy implementation of this algorithm can beat on this machine's BLAS
    (the same with lengths: the reference steps every sequence of the batch to the end). Where the reference
    runs a direction stacked (``reference.recurrence.stacks_input``), its per-step GEMM ``[W b R] @ [x; 1; h]``
    does the projection's flops at the per-step GEMM's lower speed instead, so its GEMMs take longer than
    these: the floor stays a floor for both schemes.
    ``activations`` (``floor_act``): each forward step also computes ``exp`` and ``tanh`` of its
    :data:`ACTIVATION_BLOCKS` (from pre-activations drawn once), the least elementwise work a NumPy step
    with NumPy's own accurate ``exp`` and ``tanh`` has; the time no such implementation can beat here."""
    G, D = MODES[mode].num_gates, 2 if bidi else 1
    n_exp, n_tanh = ACTIVATION_BLOCKS[mode] if activations else (0, 0)
    rng = np.random.default_rng(0)
    layers, xs = [], []
    for layer in range(L):
        width = I if layer == 0 else D * H
        xs.append(rng.standard_normal((T * B, width)).astype(np.float32))
        for _ in range(D):
            layers.append((rng.standard_normal((G * H, width)).astype(np.float32),
                           rng.standard_normal((G * H, H)).astype(np.float32)))
    h = rng.standard_normal((H, B)).astype(np.float32)
    z = np.empty((G * H, B), dtype=np.float32)
    d_rows = rng.standard_normal((G * H, T * B)).astype(np.float32)
    h_rows = rng.standard_normal((H, T * B)).astype(np.float32)
    dh = np.empty((H, B), dtype=np.float32)
    pre = rng.standard_normal(((n_exp + n_tanh) * H, B)).astype(np.float32)
    act = np.empty_like(pre)
    exp_rows, tanh_rows = slice(0, n_exp * H), slice(n_exp * H, None)

    def gemms():
        for k, (W, R) in enumerate(layers):
            xs[k // D] @ W.T if B == 1 else W @ xs[k // D].T
            for _ in range(T):
                R.dot(h, out=z)
                if n_exp:
                    np.exp(pre[exp_rows], act[exp_rows])
                if n_tanh:
                    np.tanh(pre[tanh_rows], act[tanh_rows])
        if task == "train":
            for k, (W, R) in enumerate(layers):
                RT = np.ascontiguousarray(R.T)
                for _ in range(T):
                    np.matmul(RT, z, out=dh)
                _gradient_gemms(d_rows, h_rows, xs[k // D], W)

    return gemms


def _gradient_gemms(d_rows: np.ndarray, h_rows: np.ndarray, x_rows: np.ndarray, W: np.ndarray) -> None:
    """A pseudo-layer's weight and input gradients, one GEMM over all steps each (``dR``, ``dW``, ``dx``)."""
    d_rows @ h_rows.T
    d_rows @ x_rows
    W.T @ d_rows


def steps_call(task: str, mode: str, T: int, B: int, I: int, H: int, L: int, bidi: bool, seq_lengths=None,
               negated: bool = False):
    """``floor_steps``: the reference's own arithmetic with none of its data movement. Per pseudo-layer, ``T``
    calls of the step the reference builds (``recurrence.fused_step``, stacked where the reference stacks;
    else after the input projection's GEMM; ``negated`` (``floor_bound``, inference): with the sigmoid gates
    negated, as a bound model runs them, ``recurrence.negated_gates``) and for ``train`` ``T`` calls of
    ``mode.step_backward``, each
    on the same buffers, which stay in cache, then the gradient GEMMs over all steps. What the reference
    would take if its strided reads and writes of the projection and gate gradients, its output and state
    copies, its trace's memory traffic and its runner cost nothing (full-length sequences, linear input)."""
    from reference import recurrence

    model = _reference_model(mode, I, H, L, bidi)
    row = MODES[mode]
    rng = np.random.default_rng(0)
    params = (rng.standard_normal(model.params_size()) * H**-0.5).astype(np.float32)
    layers = model._pseudo_layers(params, copy=True)  # the reference's per-pseudo-layer parameters
    GH = row.num_gates * H

    def draw(*shape):
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    if negated and task == "train":
        raise SystemExit("floor_bound is inference's floor (a bound model's layers are for inference): "
                         "task infer or step")
    if negated:  # a bound model's layers (reference.streaming): sigmoid gates negated, a call fewer a step
        layers = [recurrence.negated_gates(row, p) for p in layers]
    plans = []
    for p in layers:
        width = p.W.shape[1]
        stacked = recurrence.stacks_input(row, p, B)
        c = draw(H, B) if row.has_cell_state else None
        record = recurrence.new_trace(row, p, draw(H, B), c, np.empty((1, B, H), np.float32))
        step = recurrence.fused_step(row, p, B, record if task == "train" else None,
                                     recurrence.projection_bias(row, p) if stacked else None)
        state = draw(width + 1 + H, B) if stacked else draw(H, B)  # [x; 1; h] or h
        plans.append((p, step, stacked, state, c, draw(T * B, width), record.acts[0]))
    xw, h_out, g, dy, gc = draw(GH, B), draw(H, B), draw(H, B), draw(H, B), draw(H, B)
    h_prev = draw(B, H).T  # as the reference passes it: a step of [T, B, H], transposed
    d_xw, d_rec = draw(GH, B), draw(GH, B)
    d_rows, h_rows = draw(GH, T * B), draw(H, T * B)

    def steps():
        for p, step, stacked, state, c, x_rows, acts in plans:
            if not stacked:  # one step's projection as recurrence.projector makes it (ndarray.dot for T = 1)
                p.W.dot(x_rows.T) if T == 1 else p.W @ x_rows.T
            for _ in range(T):
                step(0, None if stacked else xw, state, c, h_out)
        if task == "train":
            for p, step, stacked, state, c, x_rows, acts in plans:
                RT = np.ascontiguousarray(p.R.T)
                dh = g
                for _ in range(T):
                    dh = np.add(dh, dy)
                    dh = row.step_backward(dh, gc if c is not None else None, acts, h_prev, c, RT, d_xw,
                                           d_rec if row.separate_rec_grad else d_xw)[0]
                _gradient_gemms(d_rows, h_rows, x_rows, p.W)

    return steps


def gemm_call(task: str, mode: str, T: int, B: int, I: int, H: int, L: int, bidi: bool, seq_lengths=None):
    """The machine's float32 GEMM rate (``T x T @ T x T``), for "% of peak"."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((T, T)).astype(np.float32)
    b = rng.standard_normal((T, T)).astype(np.float32)
    return lambda: a @ b


IMPLS = {"reference": reference_call, "bound": functools.partial(reference_call, bound=True),
         "stream": functools.partial(reference_call, stream=True), "torch": torch_call,
         "onnxruntime": onnxruntime_call, "floor": floor_call,
         "floor_act": functools.partial(floor_call, activations=True), "floor_steps": steps_call,
         "floor_bound": functools.partial(steps_call, negated=True), "gemm": gemm_call}


def timed(call, seconds: float, min_repeat: int, most: int) -> dict:
    """``call`` timed call by call for ``seconds`` (at least ``min_repeat``, at most ``most`` calls): the median
    seconds per call and the number of calls."""
    times = []
    start = time.perf_counter()
    while len(times) < min_repeat or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
        if len(times) >= most:
            break
    return {"median": float(np.median(times)), "n": len(times)}


def main() -> None:
    deaf_if_started_deaf()  # started by the harness, which handles Ctrl-C: ignore it (a user's run keeps it)
    p = argparse.ArgumentParser()
    p.add_argument("impl", choices=sorted(IMPLS))
    p.add_argument("task", choices=("train", "infer", "step"))
    p.add_argument("mode")
    for name in ("T", "B", "I", "H", "L"):
        p.add_argument(name, type=int)
    p.add_argument("bidi", choices=("Y", "N"))
    p.add_argument("--seconds", type=float, default=1.5, help="time budget for the timed calls")
    p.add_argument("--min-repeat", type=int, default=5)
    p.add_argument("--lengths", action="store_true", help="a padded batch of sequences of lengths(T, B)")
    p.add_argument("--serve", action="store_true",
                   help="time a burst of --seconds for each line read from standard input, one JSON line each, "
                        "until standard input closes (benchmarks.harness.interleaved)")
    a = p.parse_args()
    impl, task, T = IMPLS[a.impl], a.task, a.T
    if task == "step" and a.impl in ("floor", "floor_act", "floor_steps", "floor_bound", "gemm"):
        task, T = "infer", 1  # the floors of a step: those of a forward pass of one step
    call = impl(task, a.mode, T, a.B, a.I, a.H, a.L, a.bidi == "Y", lengths(T, a.B) if a.lengths else None)
    most = 5000 if a.task == "step" else 200  # a step takes microseconds: more of them in the same time
    for _ in range(2):  # warm-up: allocations, BLAS/oneDNN kernel selection
        call()
    if not a.serve:
        print(json.dumps(timed(call, a.seconds, a.min_repeat, most)))
        return
    print(json.dumps({"ready": True}), flush=True)
    for _ in sys.stdin:  # a burst a line, while the harness's other workers wait on theirs
        call()  # the caches this process's data left while another process ran: warm them again, untimed
        print(json.dumps(timed(call, a.seconds, a.min_repeat, most)), flush=True)


if __name__ == "__main__":
    main()
