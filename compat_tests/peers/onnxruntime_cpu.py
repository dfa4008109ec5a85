"""ONNX Runtime on the CPU: one ONNX ``GRU``/``LSTM``/``RNN`` node per layer, chained.

Conversions at the edge: ONNX orders GRU gates z, r, h and LSTM gates i, o, f, c (cuDNN: r, z, h and
i, f, c, o); ``W [D, G*H, in]``, ``R [D, G*H, H]``, ``B [D, 2*G*H] = [b_W, b_R]``; ``Y [T, D, B, H]`` is
transposed to ``[T, B, D*H]`` before the next layer. The cuDNN GRU is ``linear_before_reset=1``; the
textbook GRU is ``linear_before_reset=0``.

What ONNX Runtime rejects or lacks (checked with onnxruntime 1.31 on CPU): ``layout=1`` (batch-major)
at session creation, so the adapter transposes batch-major data itself; double ("GRU/LSTM operator does
not support double yet"); LSTM projection (no such ONNX attribute); skip_input (no such ONNX mode).
float16 runs with ORT's own Cast to float32 around each node, i.e. float16 between layers.
"""

from __future__ import annotations

import numpy as np

from ..config import Case, Outputs, RNNConfig
from .base import Capabilities, Peer
from .canonical import by_pseudo_layer

OPSET = 22
IR_VERSION = 10

# op type, ONNX position -> canonical gate index, extra attributes
_NODES = {
    "relu": ("RNN", (0,), {"activations": ["Relu"]}),
    "tanh": ("RNN", (0,), {"activations": ["Tanh"]}),
    "lstm": ("LSTM", (0, 3, 1, 2), {}),
    "gru": ("GRU", (1, 0, 2), {"linear_before_reset": 1}),
    "classic_gru": ("GRU", (1, 0, 2), {"linear_before_reset": 0}),
}


class OnnxRuntimeCPU(Peer):
    name = "onnxruntime"
    capabilities = Capabilities(
        dtypes=("float16", "float32"),
        skip_input=False,
        projection=False,
        backward=False,
        notes=(
            ("dtype", "onnxruntime's GRU/LSTM/RNN CPU kernels reject double"),
            ("skip_input", "ONNX recurrent ops have no skip_input mode"),
            ("projection", "ONNX LSTM has no projection"),
        ),
    )

    def available(self) -> tuple[bool, str]:
        try:
            import onnx  # noqa: F401
            import onnxruntime
        except ImportError as exc:  # pragma: no cover - depends on the environment
            return False, f"onnx/onnxruntime is not installed ({exc})"
        return True, f"onnxruntime {onnxruntime.__version__}"

    def forward(self, cfg: RNNConfig, case: Case) -> Outputs:
        import onnxruntime

        x = case.x if cfg.time_major else np.ascontiguousarray(case.x.transpose(1, 0, 2))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        session = onnxruntime.InferenceSession(build_model(cfg, case).SerializeToString(), options,
                                               providers=["CPUExecutionProvider"])
        results = session.run(None, {"X": x})
        y, h = results[0], results[1]
        c = results[2] if cfg.has_cell_state else None
        if not cfg.time_major:
            y, h = (np.ascontiguousarray(a.transpose(1, 0, 2)) for a in (y, h))
            c = None if c is None else np.ascontiguousarray(c.transpose(1, 0, 2))
        return Outputs(y, h, c)


def build_model(cfg: RNNConfig, case: Case):
    """The ONNX graph of ``cfg`` with ``case``'s weights and states as initializers; input ``X`` [T, B, I]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    op, order, attrs = _NODES[cfg.mode]
    D, H, T, B, L = cfg.num_dirs, cfg.num_units, cfg.seq_len, cfg.batch, cfg.num_layers
    elem = {"float16": TensorProto.FLOAT16, "float32": TensorProto.FLOAT}[cfg.dtype]
    tensors = by_pseudo_layer(cfg.model(), case.weights, case.biases)

    def states(a: np.ndarray | None, width: int) -> np.ndarray:
        if a is None:
            return np.zeros((L * D, B, width), dtype=cfg.dtype)
        return a if cfg.time_major else np.ascontiguousarray(a.transpose(1, 0, 2))

    h0 = states(case.h0, H)
    c0 = states(case.c0, H) if cfg.has_cell_state else None
    inits, nodes = [], []

    def init(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    seq_lens = "" if case.lengths is None else init("seq_lens", case.lengths.astype(np.int32))
    init("y_shape", np.array([0, 0, -1], dtype=np.int64))
    layer_input, h_outs, c_outs = "X", [], []
    for layer in range(L):
        pls = [tensors[layer * D + d] for d in range(D)]
        names = [
            layer_input,
            init(f"W{layer}", np.stack([np.concatenate([t.W[g] for g in order]) for t in pls])),
            init(f"R{layer}", np.stack([np.concatenate([t.R[g] for g in order]) for t in pls])),
            init(f"B{layer}", np.stack([np.concatenate([t.b_W[g] for g in order] + [t.b_R[g] for g in order])
                                        for t in pls])),
            seq_lens,
            init(f"h0_{layer}", h0[layer * D:(layer + 1) * D]),
        ]
        outputs = [f"Y{layer}", f"Yh{layer}"]
        if c0 is not None:
            names.append(init(f"c0_{layer}", c0[layer * D:(layer + 1) * D]))
            outputs.append(f"Yc{layer}")
            c_outs.append(f"Yc{layer}")
        layer_attrs = dict(attrs)
        if "activations" in layer_attrs:
            layer_attrs["activations"] = layer_attrs["activations"] * D
        nodes.append(helper.make_node(op, names, outputs, hidden_size=H,
                                      direction="bidirectional" if D == 2 else "forward", **layer_attrs))
        nodes.append(helper.make_node("Transpose", [f"Y{layer}"], [f"Yt{layer}"], perm=[0, 2, 1, 3]))
        layer_input = f"out{layer}"
        nodes.append(helper.make_node("Reshape", [f"Yt{layer}", "y_shape"], [layer_input]))
        h_outs.append(f"Yh{layer}")
    graph_outputs = [("output", layer_input, [T, B, D * H]), ("output_h", h_outs, [L * D, B, H])]
    if c_outs:
        graph_outputs.append(("output_c", c_outs, [L * D, B, H]))
    for name, parts, _ in graph_outputs[1:]:
        nodes.append(helper.make_node("Concat", parts, [name], axis=0))
    nodes.append(helper.make_node("Identity", [layer_input], ["output"]))
    graph = helper.make_graph(
        nodes, f"cudnn_rnn_compat_{cfg.mode}",
        [helper.make_tensor_value_info("X", elem, [T, B, cfg.input_size])],
        [helper.make_tensor_value_info(name, elem, shape) for name, _, shape in graph_outputs],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return model
