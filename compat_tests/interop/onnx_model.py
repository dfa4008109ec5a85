"""A whole reference model as an ONNX graph (and back): one ``GRU``/``LSTM``/``RNN`` node per layer, both
directions in one node, sequence lengths and initial states as graph inputs, ``T`` and ``B`` symbolic.

Graph inputs: ``X [T, B, input_size]`` (time-major: onnxruntime rejects ``layout=1``), ``sequence_lens
[B]`` int32, ``initial_h [L*D, B, H]`` and, for LSTMs, ``initial_c``. Outputs ``output [T, B, D*H]``,
``output_h [L*D, B, H]``, ``output_c``. The model's config rides along in ``metadata_props``, so
:func:`import_model` restores exactly what was exported; for a foreign graph it reads the config from
the nodes. Needs the ``onnx`` package.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from reference import checkpoint
from reference.formats.files import load_json, replacing
from reference.formats import onnx as onnx_weights

from compat_tests.interop import onnx_dequantize
from compat_tests.interop.onnx_stack import (DEFAULT_DOMAIN, RECURRENT_OPS, attributes, check_stack, check_starts,
                                              node_name, stack_paths)
from compat_tests.optional import require

OPSET = 22
IR_VERSION = 10
META_KEY = "cudnn_rnn_compat"


def export_model(model, weights: list[np.ndarray], biases: list[np.ndarray], with_lengths: bool = True,
                 with_states: bool = True):
    """The ``onnx.ModelProto`` of ``model`` with its canonical weights (checked with ``onnx.checker``)."""
    onnx = require("onnx", "writing an ONNX model")
    from onnx import TensorProto, helper, numpy_helper

    if model.dtype == np.float64:
        raise ValueError("onnxruntime's recurrent kernels reject double: export float32 or float16")
    elem = {np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.float32): TensorProto.FLOAT}[model.dtype]
    D, H, L, I = model.num_dirs, model.num_units, model.num_layers, model.input_size
    op, attrs = onnx_weights.OPS[model.rnn_mode], dict(onnx_weights.ATTRIBUTES[model.rnn_mode])
    if "activations" in attrs:
        attrs["activations"] = attrs["activations"] * D
    lstm = model.rnn_mode == "lstm"
    inits, nodes = [], []

    def init(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    inputs = [helper.make_tensor_value_info("X", elem, ["T", "B", I])]
    if with_lengths:
        inputs.append(helper.make_tensor_value_info("sequence_lens", TensorProto.INT32, ["B"]))
    if with_states:
        inputs.append(helper.make_tensor_value_info("initial_h", elem, [L * D, "B", H]))
        if lstm:
            inputs.append(helper.make_tensor_value_info("initial_c", elem, [L * D, "B", H]))
    init("y_shape", np.array([0, 0, -1], dtype=np.int64))
    init("axis0", np.array([0], dtype=np.int64))

    def state_slice(name: str, layer: int) -> str:
        if not with_states or (name == "initial_c" and not lstm):
            return ""
        out = f"{name}_{layer}"
        nodes.append(helper.make_node("Slice", [name, init(f"{out}_start", np.array([layer * D], dtype=np.int64)),
                                                init(f"{out}_end", np.array([(layer + 1) * D], dtype=np.int64)),
                                                "axis0"], [out]))
        return out

    layer_input, h_outs, c_outs = "X", [], []
    for layer, wrb in enumerate(onnx_weights.to_onnx(model, weights, biases)):
        names = [layer_input, init(f"W{layer}", wrb["W"]), init(f"R{layer}", wrb["R"]),
                 init(f"B{layer}", wrb["B"]) if "B" in wrb else "",
                 "sequence_lens" if with_lengths else "", state_slice("initial_h", layer)]
        outputs = [f"Y{layer}", f"Yh{layer}"]
        if lstm:
            names.append(state_slice("initial_c", layer))
            outputs.append(f"Yc{layer}")
            c_outs.append(f"Yc{layer}")
        while names and names[-1] == "":
            names.pop()
        nodes.append(helper.make_node(op, names, outputs, name=f"layer{layer}", hidden_size=H,
                                      direction="bidirectional" if D == 2 else "forward", **attrs))
        nodes.append(helper.make_node("Transpose", [f"Y{layer}"], [f"Yt{layer}"], perm=[0, 2, 1, 3]))
        layer_input = f"layer{layer}_output"
        nodes.append(helper.make_node("Reshape", [f"Yt{layer}", "y_shape"], [layer_input]))
        h_outs.append(f"Yh{layer}")
    nodes.append(helper.make_node("Identity", [layer_input], ["output"]))
    nodes.append(helper.make_node("Concat", h_outs, ["output_h"], axis=0))
    outputs = [helper.make_tensor_value_info("output", elem, ["T", "B", D * H]),
               helper.make_tensor_value_info("output_h", elem, [L * D, "B", H])]
    if lstm:
        nodes.append(helper.make_node("Concat", c_outs, ["output_c"], axis=0))
        outputs.append(helper.make_tensor_value_info("output_c", elem, [L * D, "B", H]))
    graph = helper.make_graph(nodes, f"cudnn_rnn_compat_{model.rnn_mode}", inputs, outputs, initializer=inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION,
                              producer_name="cudnn-rnn-compat")
    helper.set_model_props(proto, {META_KEY: json.dumps(checkpoint.model_config(model))})
    onnx.checker.check_model(proto)
    return proto


def save(path: str | Path, model, weights, biases) -> None:
    blob = export_model(model, weights, biases).SerializeToString()
    with replacing(path) as partial:
        partial.write_bytes(blob)


def import_model(source, options: dict | None = None) -> tuple[object, list[np.ndarray], list[np.ndarray]]:
    """``(model, weights, biases)`` of an ONNX file or ``ModelProto`` made of chained recurrent nodes.
    ``options`` (config fields, ``None`` for not given) must agree with the config the file carries or its
    nodes tell; they may set only what a foreign graph cannot tell (skip_input behind identity ``W``)."""
    onnx = require("onnx", "reading an ONNX model")
    from google.protobuf.message import DecodeError

    if isinstance(source, onnx.ModelProto):
        return _import_proto(source, options or {})
    try:  # the weights must be inside the file: no other file is opened on a model's say-so
        proto = onnx.load(str(source), load_external_data=False)
    except DecodeError as exc:
        raise ValueError(f"{source}: not a readable ONNX model ({exc})") from None
    with checkpoint.about(source):
        return _import_proto(proto, options or {})


def _initializers(graph) -> dict[str, np.ndarray]:
    """A graph's initializers as arrays; one whose data lies in another file, or cannot be read, is refused."""
    import onnx
    from onnx import numpy_helper

    inits = {}
    for t in graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            raise ValueError(f"initializer {t.name!r} keeps its data in another file; save the model with its "
                             f"weights inside (onnx.save(..., save_as_external_data=False))")
        try:
            inits[t.name] = numpy_helper.to_array(t)
        except (KeyError, ValueError, TypeError) as exc:  # an unknown data_type, data of the wrong length
            raise ValueError(f"initializer {t.name!r} cannot be read: {type(exc).__name__}: {exc}") from None
    return inits


def elsewhere(proto) -> str | None:
    """The first tensor of the model ``proto`` that keeps its data in another file, said in words (where it
    lies in the model, and the file it names), else None. Every tensor is looked at, wherever it lies: the
    graphs' initializers and sparse initializers, every tensor, tensor list and sparse tensor a node's
    attributes hold, the subgraphs of control flow (If, Loop, Scan) at any depth, the model's functions and
    its training graphs; nothing is loaded or opened."""
    import onnx

    def said(what: str, tensors) -> str | None:
        for t in tensors:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                where = next((e.value for e in t.external_data if e.key == "location"), "unnamed")
                return f"{what} keeps its data in another file ({where})"
        return None

    def sparse(what: str, items) -> str | None:
        return next(filter(None, (said(what, (st.values, st.indices)) for st in items)), None)

    def nodes(items, where: str) -> str | None:
        for node in items:
            for a in node.attribute:
                what = f"attribute {a.name!r} of {node.op_type} node {node_name(node)}{where}"
                found = (said(what, [a.t] if a.HasField("t") else []) or said(what, a.tensors)
                         or sparse(what, [a.sparse_tensor] if a.HasField("sparse_tensor") else [])
                         or sparse(what, a.sparse_tensors)
                         or next(filter(None, (graph(g, f" in a subgraph of {what}")
                                               for g in ([a.g] if a.HasField("g") else []) + list(a.graphs))), None))
                if found:
                    return found
        return None

    def graph(g, where: str) -> str | None:
        return (next(filter(None, (said(f"initializer {t.name!r}{where}", [t]) for t in g.initializer)), None)
                or next(filter(None, (sparse(f"sparse initializer {st.values.name!r}{where}", [st])
                                      for st in g.sparse_initializer)), None)
                or nodes(g.node, where))

    return (graph(proto.graph, "")
            or next(filter(None, (nodes(f.node, f" in the function {f.name!r}") for f in proto.functions)), None)
            or next(filter(None, (graph(g, " in a training graph") for info in proto.training_info
                                  for g in (info.initialization, info.algorithm))), None))


def _import_proto(proto, options: dict) -> tuple[object, list[np.ndarray], list[np.ndarray]]:
    outside = elsewhere(proto)  # before anything of the model is read
    if outside:
        raise ValueError(f"{outside}; a model is read from its own bytes alone, so it is refused (nothing it points "
                         f"at was opened): save it with its weights inside (onnx.save(..., "
                         f"save_as_external_data=False))")
    options = dict(options)
    if options.pop("dequantize", None):  # onnxruntime's quantized LSTMs as float ones: an approximation, asked for
        proto = onnx_dequantize.dequantized(proto)
    wanted = options.pop("node", None)
    if wanted is not None:
        return _import_node(proto, wanted, options)
    meta = {p.key: p.value for p in proto.metadata_props}
    inits = _initializers(proto.graph)
    nodes = [n for n in proto.graph.node if n.op_type in RECURRENT_OPS and n.domain in DEFAULT_DOMAIN]
    if not nodes:
        _refuse_hidden(proto.graph)
        unrolled = {"MatMul", "Gemm"} & {n.op_type for n in proto.graph.node}
        raise ValueError("the ONNX graph has no GRU, LSTM or RNN node" + (
            ": it computes with MatMul or Gemm, perhaps a recurrence unrolled into steps, which cannot be read as "
            "a cuDNN model (PyTorch's dynamo exporter writes nn.RNN so, and Keras 3's ONNX export every recurrent "
            "layer; export nn.RNN with torch.onnx.export(..., dynamo=False), which writes an RNN node)"
            if unrolled else ""))
    paths = stack_paths(proto.graph, nodes)
    inits.update(_folded(proto.graph, inits, [name for n in nodes for name in list(n.input)[1:4] if name],
                         list(proto.opset_import)))
    layers = [_node_weights(n, inits) for n in nodes]
    kinds = [_node_kind(n, layer) for n, layer in zip(nodes, layers)]
    if META_KEY in meta:
        config = checkpoint.with_options(load_json(meta[META_KEY], f"its {META_KEY} metadata (the model config)"),
                                         options, "the graph carries its config")
    else:
        config = checkpoint.with_options(_config_from_nodes(kinds[0], layers), options,
                                         "its nodes tell its config", untold=("input_mode",))
    model = checkpoint.model_from_config(config, holds=2 * len(nodes))  # a node: one layer, both directions
    for n, (mode, direction) in zip(nodes, kinds):  # every node, not the first only, computes the model's cell
        if (mode, direction) != (model.rnn_mode, model.direction):
            raise ValueError(f"node {node_name(n)} computes a {direction} {mode!r} layer, but the model is a "
                             f"{model.direction} {model.rnn_mode!r} RNN")
    weights, biases = onnx_weights.from_onnx(model, _with_biases(model, layers))
    check_stack(proto, nodes, paths, inits, model.num_dirs, model.num_units)
    check_starts(proto.graph, nodes, inits)
    return model, weights, biases


# Recurrent ops of other domains, and why they are not read.
FOREIGN_RECURRENT = {
    "DynamicQuantizeLSTM": "its weights are int8 with scales and zero points, and onnxruntime quantizes its inputs "
                           "at run time too, so no float model computes what it does; export the float model, or "
                           "read its weights dequantized, an approximation, with --dequantize (options key "
                           "dequantize)",
    "AttnLSTM": "an LSTM with attention, which no cuDNN cell computes",
}
CONTROL_FLOW = ("If", "Loop", "Scan")


MAX_DEPTH = 16  # subgraphs within subgraphs looked into (a graph is a file's word)


def recurrent_nodes(graph, where: str = "the main graph", scopes: tuple = (), depth: int = 0):
    """``(node, where, scopes)`` of every recurrent node (ONNX's own GRU, LSTM, RNN) of ``graph`` and of the
    control-flow subgraphs within it, in file order: ``where`` says where it lies (``the main graph``, or ``the
    then_branch of If node 'pick'`` and so on, outermost first), ``scopes`` the graphs it sees, outermost first
    (its own last)."""
    scopes = scopes + (graph,)
    for node in graph.node:
        if node.op_type in RECURRENT_OPS and node.domain in DEFAULT_DOMAIN:
            yield node, where, scopes
        if depth < MAX_DEPTH:
            for attr, sub in _subgraphs(node):
                inner = f"the {attr} of {node.op_type} node {node_name(node)}"
                yield from recurrent_nodes(sub, inner if where == "the main graph" else f"{inner} in {where}",
                                           scopes, depth + 1)


def listed(graph) -> str:
    """Every recurrent node of a file's main ``graph`` with where it lies, for a message."""
    found = [f"{n.op_type} {node_name(n)} ({where})" for n, where, _ in recurrent_nodes(graph)]
    return "; ".join(found) if found else "none"


class _Scope:
    """The graphs a subgraph's node sees, as one graph for :func:`_folded`: every scope's nodes and inputs
    (a subgraph reads names of the graphs around it)."""

    def __init__(self, scopes: tuple) -> None:
        self.node = [n for g in scopes for n in g.node]
        self.input = [i for g in scopes for i in g.input]


def _import_node(proto, wanted: str, options: dict) -> tuple[object, list[np.ndarray], list[np.ndarray]]:
    """One recurrent node, named ``wanted``, wherever it lies (a control-flow subgraph's too), as a one-layer
    model: its ``W``, ``R`` and ``B`` from the initializers and constants of the graphs it sees (folded as
    for the main graph's nodes); its config from the node (``options`` may add what it cannot tell)."""
    if not isinstance(wanted, str) or not wanted:
        raise ValueError(f"node must name a recurrent node, got {wanted!r}")
    found = [(n, where, scopes) for n, where, scopes in recurrent_nodes(proto.graph) if n.name == wanted]
    if not found:
        raise ValueError(f"no recurrent node is named {wanted!r}; the file's recurrent nodes: {listed(proto.graph)}")
    if len(found) > 1:
        raise ValueError(f"{len(found)} recurrent nodes are named {wanted!r} ("
                         + "; ".join(where for _, where, _ in found) + "): the name does not pick one")
    node, where, scopes = found[0]
    inits: dict[str, np.ndarray] = {}
    for graph in scopes:  # an inner graph's names hide the outer ones'
        inits.update(_initializers(graph))
    inits.update(_folded(_Scope(scopes), inits, [name for name in list(node.input)[1:4] if name],
                         list(proto.opset_import)))
    layer = _node_weights(node, inits)
    config = checkpoint.with_options(_config_from_nodes(_node_kind(node, layer), [layer]), options,
                                     f"node {node_name(node)} ({where}) tells its config", untold=("input_mode",))
    model = checkpoint.model_from_config(config, holds=2)
    weights, biases = onnx_weights.from_onnx(model, _with_biases(model, [layer]))
    return model, weights, biases


def _subgraphs(node):
    """``(attribute name, graph)`` of every subgraph a node holds (an If's branches, a Loop's or Scan's body)."""
    import onnx

    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.name, attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for k, g in enumerate(attr.graphs):
                yield f"{attr.name}[{k}]", g


def _refuse_hidden(graph, depth: int = 0, root=None) -> None:
    """Refuse, naming it, a graph whose recurrent nodes are not GRU/LSTM/RNN nodes of its own: one inside a
    control-flow subgraph (If, Loop, Scan), or of another domain (``com.microsoft``'s DynamicQuantizeLSTM)."""
    for node in graph.node:
        if node.op_type in FOREIGN_RECURRENT or (node.op_type in RECURRENT_OPS and node.domain not in DEFAULT_DOMAIN):
            why = FOREIGN_RECURRENT.get(node.op_type, "an op of another domain than ONNX's own")
            raise ValueError(f"the ONNX graph holds node {node_name(node)}, a {node.domain or 'ai.onnx'} "
                             f"{node.op_type}, which is not read: {why}")
        for where, sub in _subgraphs(node):
            inner = [n for n in sub.node if n.op_type in RECURRENT_OPS or n.op_type in FOREIGN_RECURRENT]
            if inner and depth < 16:
                raise ValueError(f"the ONNX graph's recurrent node {node_name(inner[0])} ({inner[0].op_type}) lies "
                                 f"inside the {where} subgraph of {node.op_type} node {node_name(node)}: it runs on "
                                 f"what that {'branch' if node.op_type == 'If' else 'body'} is given, when and as "
                                 f"often as the graph decides at run time, which is not one cuDNN model; export the "
                                 f"recurrent part without control flow, or read one node as a one-layer model "
                                 f"with --node NAME (options key node) among the file's recurrent nodes: "
                                 f"{listed(root or graph)}")
            if depth < 16:
                _refuse_hidden(sub, depth + 1, root or graph)


# Ops folded, from the file's constants alone, into a W, R or B that is not an initializer (as exporters write
# them): each makes at most as many values as it reads (Concat: the sum of its inputs), so the values grow only
# where an input is read several times, which _check_growth bounds before anything is computed.
FOLDABLE = ("Constant", "Identity", "Cast", "Transpose", "Reshape", "Unsqueeze", "Squeeze", "Concat", "Slice")
MAX_FOLDED = 64  # nodes folded for one graph's weights (a bound: a graph is a file's word)
MAX_GROWTH = 4  # values the folded weights may hold, as a multiple of the constants they read


def _folded(graph, inits: dict, names: list[str], opsets: list | None = None) -> dict[str, np.ndarray]:
    """The values of ``names`` (recurrent nodes' W, R, B) that are not initializers, computed from the file's
    constants through :data:`FOLDABLE` ops alone (evaluated by ``onnx.reference``, the model never run); one
    fed at run time, or computed by any other op, is refused naming it and why."""
    fed = {i.name for i in graph.input}
    producers = {out: n for n in graph.node for out in n.output if out}
    order: list = []
    used: set[str] = set()

    def visit(name: str, wanted: str) -> None:
        if name in inits:  # (one that is also a graph input is read as an initializer, as a W itself is)
            used.add(name)
            return
        if name in fed:
            raise ValueError(f"{wanted} is fed at run time ({name!r} is a graph input), not fixed by the file")
        node = producers.get(name)
        if node is None:
            raise ValueError(f"{wanted}: {name!r} is neither an initializer nor any node's output")
        if node.domain not in DEFAULT_DOMAIN or node.op_type not in FOLDABLE:
            raise ValueError(f"{wanted} is computed by {node.op_type} node {node_name(node)}: only initializers and "
                             f"constants moved by {', '.join(FOLDABLE[1:])} are read as weights")
        if any(node is n for n in order):
            return
        if len(order) >= MAX_FOLDED:
            raise ValueError(f"{wanted} is computed by more than {MAX_FOLDED} nodes; refused")
        for source in node.input:
            if source:
                visit(source, wanted)
        order.append(node)

    wanted = [n for n in dict.fromkeys(names) if n not in inits]
    for name in wanted:
        visit(name, f"weight {name!r}")
    if not wanted:
        return {}
    _check_growth(order, {n: inits[n] for n in used})
    return _evaluate(order, {n: inits[n] for n in used}, wanted, opsets)


def _check_growth(nodes: list, constants: dict[str, np.ndarray]) -> None:
    """Refuse, before anything is computed, constant ops that would make more values than
    :data:`MAX_GROWTH` times all the file's constants they read: each op's output is bounded by the sum of its
    inputs' (Concat) or by its input (the others), so only an input read several times grows the data, and
    a chain of them (``Concat(x, x)`` after ``Concat(x, x)``...) doubles it at every node."""
    bound = {name: int(np.size(value)) for name, value in constants.items()}
    for node in nodes:
        if node.op_type == "Constant":
            made = max((int(np.prod(a.t.dims)) if a.t.dims else 1) for a in node.attribute) if node.attribute else 0
            made = max(made, max((len(a.floats) + len(a.ints) + len(a.strings) for a in node.attribute), default=0))
        else:
            made = sum(bound.get(source, 0) for source in node.input if source)
        for out in node.output:
            bound[out] = made
    read = sum(int(np.size(v)) for v in constants.values()) + sum(
        bound[n.output[0]] for n in nodes if n.op_type == "Constant" and n.output)
    largest = max(bound.values(), default=0)
    if largest > MAX_GROWTH * max(read, 1):
        raise ValueError(f"the constant ops that make the weights would make up to {largest} values from the "
                         f"{read} the file holds (an input read several times, grown node after node); refused "
                         f"before any is made")


def _evaluate(nodes: list, constants: dict[str, np.ndarray], outputs: list[str], opsets: list | None = None) \
        -> dict[str, np.ndarray]:
    """``outputs`` of the constant ``nodes`` on ``constants``, by ONNX's reference evaluator, at the file's
    opsets (``opsets``: its ``opset_import``, which decide an op's form)."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    for node in nodes:
        if node.op_type == "Constant":  # external data refused, as for initializers
            from compat_tests.interop.onnx_stack import _constant

            _constant(node)
    graph = helper.make_graph(nodes, "weights", [], [helper.make_value_info(n, helper.TypeProto()) for n in outputs],
                              initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()])
    try:
        model = helper.make_model(graph, **({"opset_imports": opsets} if opsets else {}))
        values = ReferenceEvaluator(model).run(None, {})
    except Exception as exc:  # noqa: BLE001 (a malformed op of the file's: its own error, named)
        raise ValueError(f"the constant ops that make the weights {outputs[:3]} cannot be evaluated "
                         f"({type(exc).__name__}: {exc})") from None
    return {n: np.asarray(v) for n, v in zip(outputs, values)}


def _node_weights(node, inits: dict) -> dict[str, np.ndarray]:
    """A node's ``W``, ``R`` and ``B`` (no ``B`` where the node has none: :func:`_with_biases` decides)."""
    names = [*node.input, "", "", "", ""]
    if names[1] not in inits or names[2] not in inits or (names[3] and names[3] not in inits):
        raise ValueError(f"node {node_name(node)}: W, R and B must be initializers")
    return {"W": inits[names[1]], "R": inits[names[2]], **({"B": inits[names[3]]} if names[3] else {})}


def _with_biases(model, layers: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """The nodes' tensors as ``model`` reads them: a graph whose nodes all lack ``B`` is a bias-free model
    (``bias_mode="none"``, told by :func:`_config_from_nodes`); in a model with biases, a node without ``B``
    has zero biases, as ONNX defines an absent ``B``."""
    if model.bias_mode == "none":
        return layers
    return [layer if "B" in layer or np.ndim(layer["R"]) != 3 else
            {**layer, "B": np.zeros((layer["R"].shape[0], 2 * layer["R"].shape[1]), layer["R"].dtype)}
            for layer in layers]


# Attributes that leave a node's function cuDNN's at these values (layout changes only how X and Y are
# read, not the weights); any other value of them, or an attribute not named here, is refused.
_NEUTRAL = {"input_forget": 0}
_KNOWN = {"activations", "activation_alpha", "activation_beta", "direction", "hidden_size", "layout",
          "linear_before_reset", *_NEUTRAL}


def _node_kind(node, layer: dict[str, np.ndarray]) -> tuple[str, str]:
    """``(rnn_mode, direction)`` that one recurrent node computes; a node that computes something no cuDNN
    mode does (cell clipping, coupled gates, peepholes, other activations, a reverse-only direction) is a
    ValueError naming the node and what it carries."""
    name = node_name(node)
    attrs = attributes(node)
    foreign = sorted(set(attrs) - _KNOWN) + [k for k, v in _NEUTRAL.items() if attrs.get(k, v) != v]
    if foreign:
        shown = (f"{k}={attrs[k]:g}" if isinstance(attrs[k], float) else f"{k}={attrs[k]!r}" for k in foreign)
        raise ValueError(f"node {name}: {', '.join(shown)} has no cuDNN equivalent")
    if node.op_type == "LSTM" and len(node.input) > 7 and node.input[7]:
        raise ValueError(f"node {name}: peephole weights (input P, {node.input[7]!r}) have no cuDNN equivalent")
    direction = attrs.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("forward", "bidirectional"):
        raise ValueError(f"node {name}: direction {direction!r} has no cuDNN equivalent")
    acts = tuple(a.decode() if isinstance(a, bytes) else a for a in attrs.get("activations") or ())
    if node.op_type == "GRU":
        mode = "gru" if attrs.get("linear_before_reset", 0) else "classic_gru"
    elif node.op_type == "LSTM":
        mode = "lstm"
    else:
        mode = {"tanh": "tanh", "relu": "relu"}.get(acts[0].lower() if acts else "tanh", "")
    expected = onnx_weights.ACTIVATIONS.get(mode, ("Tanh or Relu",))
    D = 2 if direction == "bidirectional" else 1
    if acts and tuple(a.lower() for a in acts) not in {tuple(e.lower() for e in expected) * k for k in (1, D)}:
        raise ValueError(f"node {name}: activations {list(acts)} are not a cuDNN cell's "
                         f"({', '.join(expected)}{' per direction' if D == 2 else ''})")
    R = layer["R"]
    if R.ndim == 3 and attrs.get("hidden_size", R.shape[2]) != R.shape[2]:
        raise ValueError(f"node {name}: hidden_size {attrs['hidden_size']} disagrees with R's shape {list(R.shape)}")
    return mode, "bidirectional" if D == 2 else "unidirectional"


def _config_from_nodes(kind: tuple[str, str], layers: list[dict[str, np.ndarray]]) -> dict:
    """A config read off a foreign graph's nodes: ``kind`` and the weights of the first; no node with ``B``
    is ``bias_mode="none"``."""
    W, R = layers[0]["W"], layers[0]["R"]
    for name, a in (("W", W), ("R", R)):
        if a.ndim != 3 or 0 in a.shape:
            raise ValueError(f"the first node's {name} must be a non-empty [num_directions, gates*hidden_size, "
                             f"width] tensor, got shape {list(a.shape)}")
    mode, direction = kind
    return checkpoint.complete_config({
        "rnn_mode": mode, "num_layers": len(layers), "num_units": int(R.shape[2]), "input_size": int(W.shape[2]),
        "direction": direction, "dtype": W.dtype.name,
        **({} if any("B" in layer for layer in layers) else {"bias_mode": "none"})})


def run(proto, x: np.ndarray, sequence_lengths=None, initial_h=None, initial_c=None):
    """Run an exported graph with onnxruntime (one thread) on time-major ``x``; ``(output, output_h, output_c)``."""
    import onnxruntime

    names = {i.name for i in proto.graph.input}
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    T, B = x.shape[:2]
    feed = {"X": x}
    L_D = next(o for o in proto.graph.output if o.name == "output_h").type.tensor_type.shape.dim[0].dim_value
    H = next(o for o in proto.graph.output if o.name == "output_h").type.tensor_type.shape.dim[2].dim_value
    if "sequence_lens" in names:
        feed["sequence_lens"] = (np.full(B, T) if sequence_lengths is None else np.asarray(sequence_lengths)).astype(np.int32)
    if "initial_h" in names:
        feed["initial_h"] = np.zeros((L_D, B, H), x.dtype) if initial_h is None else initial_h
    if "initial_c" in names:
        feed["initial_c"] = np.zeros((L_D, B, H), x.dtype) if initial_c is None else initial_c
    results = session.run(None, feed)
    return results[0], results[1], results[2] if len(results) > 2 else None


__all__ = ["export_model", "import_model", "run", "save"]
