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
from reference.formats.files import replacing
from reference.formats import onnx as onnx_weights

OPSET = 22
IR_VERSION = 10
META_KEY = "cudnn_rnn_compat"


def export_model(model, weights: list[np.ndarray], biases: list[np.ndarray], with_lengths: bool = True,
                 with_states: bool = True):
    """The ``onnx.ModelProto`` of ``model`` with its canonical weights (checked with ``onnx.checker``)."""
    import onnx
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
        names = [layer_input, init(f"W{layer}", wrb["W"]), init(f"R{layer}", wrb["R"]), init(f"B{layer}", wrb["B"]),
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
    import onnx
    from google.protobuf.message import DecodeError

    if isinstance(source, onnx.ModelProto):
        return _import_proto(source, options or {})
    try:  # the weights must be inside the file: no other file is opened on a model's say-so
        proto = onnx.load(str(source), load_external_data=False)
    except DecodeError as exc:
        raise ValueError(f"{source}: not a readable ONNX model ({exc})") from None
    with checkpoint.about(source):
        return _import_proto(proto, options or {})


def _import_proto(proto, options: dict) -> tuple[object, list[np.ndarray], list[np.ndarray]]:
    import onnx
    from onnx import numpy_helper

    meta = {p.key: p.value for p in proto.metadata_props}
    inits = {}
    for t in proto.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            raise ValueError(f"initializer {t.name!r} keeps its data in another file; save the model with its "
                             f"weights inside (onnx.save(..., save_as_external_data=False))")
        try:
            inits[t.name] = numpy_helper.to_array(t)
        except (KeyError, ValueError, TypeError) as exc:  # an unknown data_type, data of the wrong length
            raise ValueError(f"initializer {t.name!r} cannot be read: {type(exc).__name__}: {exc}") from None
    nodes = [n for n in proto.graph.node if n.op_type in _RECURRENT_OPS and n.domain in _DEFAULT_DOMAIN]
    if not nodes:
        raise ValueError("the ONNX graph has no GRU, LSTM or RNN node")
    paths = _stack_paths(proto.graph, nodes)
    layers = [_node_weights(n, inits) for n in nodes]
    kinds = [_node_kind(n, layer) for n, layer in zip(nodes, layers)]
    if META_KEY in meta:
        config = checkpoint.with_options(json.loads(meta[META_KEY]), options, "the graph carries its config")
    else:
        config = checkpoint.with_options(_config_from_nodes(kinds[0], len(nodes), layers[0]), options,
                                         "its nodes tell its config", untold=("input_mode",))
    model = checkpoint.model_from_config(config, holds=2 * len(nodes))  # a node: one layer, both directions
    for n, (mode, direction) in zip(nodes, kinds):  # every node, not the first only, computes the model's cell
        if (mode, direction) != (model.rnn_mode, model.direction):
            raise ValueError(f"node {_name(n)} computes a {direction} {mode!r} layer, but the model is a "
                             f"{model.direction} {model.rnn_mode!r} RNN")
    weights, biases = onnx_weights.from_onnx(model, layers)
    _check_stack(proto, nodes, paths, inits, model.num_dirs, model.num_units)
    return model, weights, biases


_RECURRENT_OPS = ("GRU", "LSTM", "RNN")


def _name(node) -> str:
    """A node's name, or for a nameless one its op and first output: ``(GRU -> 'Y0')``."""
    return node.name or f"({node.op_type} -> {node.output[0] if node.output else ''!r})"


def _attributes(node) -> dict:
    """A node's attributes, name -> Python value."""
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


# The ops that only move a tensor's elements (or, as Dropout at inference, pass it on): what may lie
# between one layer's output Y and the next layer's input X in a stack. Each is replayed here in NumPy on
# the op's input (``operands[0]``), its attributes, and its other inputs: an array where the file fixes the
# value, None where the input is absent, _COMPUTED where it is fed or computed at run time.
_COMPUTED = "computed"
_DEFAULT_DOMAIN = ("", "ai.onnx")


def _operand(operands: list, k: int, what: str) -> np.ndarray | None:
    """Input ``k`` (``what`` names it) of a layout op: None where absent; one fed or computed at run time is
    refused, since what the op then does to the layer's output cannot be told from the file."""
    value = operands[k] if k < len(operands) else None
    if isinstance(value, str):
        raise ValueError(f"its {what} (input {k}) is fed or computed at run time, so what it does to the layer's "
                         f"output cannot be told from the file")
    return value


def _ints(value, what: str) -> list[int]:
    """An INTS attribute or a 1-D integer tensor as a list of ints."""
    if isinstance(value, np.ndarray):
        if value.ndim != 1 or not np.issubdtype(value.dtype, np.integer):
            raise ValueError(f"its {what} must be a 1-D integer tensor, got {value.dtype} of shape {list(value.shape)}")
        return [int(v) for v in value]
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        raise ValueError(f"its {what} must be a list of integers, got {value!r}")
    return value


def _int(attrs: dict, name: str, default: int) -> int:
    value = attrs.get(name, default)
    if not isinstance(value, int):
        raise ValueError(f"its {name} must be an integer, got {value!r}")
    return value


def _axes(attrs: dict, operands: list, rank: int | None = None) -> list[int] | None:
    """A Squeeze's or Unsqueeze's axes (an attribute up to opset 12, an input since), each in ``[0, rank)``
    (a Squeeze's input rank, an Unsqueeze's output rank: the input rank plus the axes); None where absent."""
    if "axes" in attrs:
        axes = _ints(attrs["axes"], "axes")
    else:
        given = _operand(operands, 1, "axes")
        if given is None:
            return None
        axes = _ints(given, "axes")
    rank = operands[0].ndim + len(axes) if rank is None else rank
    if any(not -rank <= k < rank for k in axes) or len({k % rank for k in axes}) != len(axes):
        raise ValueError(f"axes {axes} are not distinct axes of a rank-{rank} tensor")
    return sorted(k % rank for k in axes)


def _transpose(attrs: dict, operands: list) -> np.ndarray:
    a = operands[0]
    perm = _ints(attrs["perm"], "perm") if "perm" in attrs else list(range(a.ndim))[::-1]
    if sorted(perm) != list(range(a.ndim)):
        raise ValueError(f"perm {perm} is not a permutation of the axes of {list(a.shape)}")
    return a.transpose(perm)


def _reshape(attrs: dict, operands: list) -> np.ndarray:
    a, shape = operands[0], _operand(operands, 1, "shape")
    if shape is None:
        raise ValueError("it has no shape")
    shape = _ints(shape, "shape")
    if not _int(attrs, "allowzero", 0):  # a 0 copies the input's size on that axis
        if any(d == 0 and k >= a.ndim for k, d in enumerate(shape)):
            raise ValueError(f"shape {shape} copies (0) an axis that {list(a.shape)} lacks")
        shape = [a.shape[k] if d == 0 else d for k, d in enumerate(shape)]
    known = 1
    for d in shape:
        known *= d if d != -1 else 1
    if shape.count(-1) > 1 or min(shape, default=0) < -1 or \
            (a.size % known if -1 in shape and known else a.size != known):
        raise ValueError(f"shape {shape} does not hold the {a.size} elements of {list(a.shape)}")
    return a.reshape(shape)


def _squeeze(attrs: dict, operands: list) -> np.ndarray:
    a = operands[0]
    axes = _axes(attrs, operands, a.ndim)
    axes = [k for k in range(a.ndim) if a.shape[k] == 1] if axes is None else axes
    if any(a.shape[k] != 1 for k in axes):
        raise ValueError(f"axes {axes} of {list(a.shape)} are not all of size 1")
    return a.squeeze(tuple(axes))


def _unsqueeze(attrs: dict, operands: list) -> np.ndarray:
    axes = _axes(attrs, operands)
    if axes is None:
        raise ValueError("it has no axes")
    return np.expand_dims(operands[0], tuple(axes))


def _flatten(attrs: dict, operands: list) -> np.ndarray:
    a, axis = operands[0], _int(attrs, "axis", 1)
    if not -a.ndim <= axis <= a.ndim:
        raise ValueError(f"axis {axis} is not an axis of {list(a.shape)}")
    axis = axis + a.ndim if axis < 0 else axis
    return a.reshape(int(np.prod(a.shape[:axis])), int(np.prod(a.shape[axis:])))


def _dropout(attrs: dict, operands: list) -> np.ndarray:
    training = _operand(operands, 2, "training_mode")
    if training is not None and (training.dtype != np.bool_ or training.size != 1):
        raise ValueError(f"its training_mode must be one bool, got {training.dtype} of shape {list(training.shape)}")
    if training is not None and training.reshape(-1)[0]:
        raise ValueError("its training_mode is true, so it drops elements")
    return operands[0]


_LAYOUT_OPS = {"Transpose": _transpose, "Reshape": _reshape, "Squeeze": _squeeze, "Unsqueeze": _unsqueeze,
               "Flatten": _flatten, "Identity": lambda attrs, operands: operands[0], "Dropout": _dropout}


def _constant(node) -> np.ndarray:
    """The value of a Constant node that a layout op reads, from the file alone (else a ValueError naming it)."""
    import onnx
    from onnx import helper, numpy_helper

    attr = node.attribute[0] if len(node.attribute) == 1 else None
    try:
        if attr is not None and attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
            if attr.t.data_location == onnx.TensorProto.EXTERNAL:
                raise ValueError("it keeps its data in another file")
            return numpy_helper.to_array(attr.t)
        if attr is not None and attr.name in ("value_int", "value_ints") and \
                attr.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS):
            return np.array(helper.get_attribute_value(attr), np.int64)
    except (KeyError, ValueError, TypeError) as exc:  # an unknown data_type, data of the wrong length
        raise ValueError(f"Constant node {_name(node)} cannot be read: {exc}") from None
    raise ValueError(f"Constant node {_name(node)} holds no integer or tensor value a layout op could read "
                     f"(attributes {[a.name for a in node.attribute]})")


def _file_values(graph, inits: dict[str, np.ndarray]):
    """``value(name)``: a layout op's input after the first as the replay reads it (see ``_COMPUTED``). An
    initializer that is also a graph input is only a default a caller may override, so it is fed at run time."""
    fed = {i.name for i in graph.input}
    constants = {n.output[0]: n for n in graph.node
                 if n.op_type == "Constant" and n.domain in _DEFAULT_DOMAIN and n.output}

    def value(name: str):
        return None if not name else _COMPUTED if name in fed else inits[name] if name in inits \
            else _constant(constants[name]) if name in constants else _COMPUTED

    return value


def _batch_major(node) -> bool:
    return bool(_attributes(node).get("layout", 0))


def _stack_paths(graph, nodes: list) -> list[list]:
    """The layout ops through which each node after the first reads the previous node's ``Y``, first op
    first. The recurrent ``nodes`` must form one stack: two RNNs side by side (an encoder and a decoder), or
    a layer fed through other computation, would otherwise read as one stack that computes something else.
    Before the first node and after the last, anything goes: the model is the stack."""
    producer = {out: n for n in graph.node for out in n.output if out}
    paths = []
    for previous, node in zip(nodes, nodes[1:]):
        y = previous.output[0] if previous.output else ""
        name, path = node.input[0] if node.input else "", []
        while not (y and name == y):
            source = producer.get(name)
            if source is None or source.op_type not in _LAYOUT_OPS or source.domain not in _DEFAULT_DOMAIN \
                    or name != source.output[0] or len(path) > len(graph.node):  # a Dropout's second output: its mask
                passed = [n.op_type for n in path]
                what = (f"{source.op_type} node {_name(source)}'s output {name!r}" if source is not None
                        else f"{name!r}, which no node computes" if name else "nothing")
                raise ValueError(f"node {_name(node)} reads X from {what}"
                                 f"{' through ' + ', '.join(passed) if passed else ''}, not from the "
                                 f"output Y of the recurrent node before it, {_name(previous)}, through layout ops "
                                 f"alone ({', '.join(_LAYOUT_OPS)}): the graph's recurrent nodes are not one stack")
            path.append(source)
            name = source.input[0] if source.input else ""
        paths.append(path[::-1])
    return paths


# T and B to replay a link at where the graph leaves them free: the first pair any failure refuses; the
# others (sizes 1, where a Squeeze without axes drops time or batch, and sizes that a Reshape's sizes written
# out for another run divide) refuse only what a node would run on without error, the wrong elements.
_REPLAY_T, _REPLAY_B = (3, 1, 4), (2, 1, 6)
_REPLAY_LIMIT = 2**25  # elements of Y to replay at (128 MiB of int32 labels)


def _fixed_sizes(proto) -> dict[str, tuple[int, int]]:
    """``(T, B)`` (0 where free) of each recurrent node's ``Y`` as the graph fixes them: onnx's shape inference
    from the graph's input shapes alone, which onnxruntime enforces, not the ``value_info`` and output shapes
    a file may declare, which it does not."""
    import onnx

    stripped = onnx.ModelProto()
    stripped.CopyFrom(proto)
    del stripped.graph.value_info[:]
    for output in stripped.graph.output:
        output.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(stripped)
    except Exception:  # noqa: BLE001 - onnx raises several kinds; a graph it cannot infer fixes no size
        return {}
    infos = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    sizes = {}
    for node in inferred.graph.node:
        if node.op_type in _RECURRENT_OPS and node.output:
            info = infos.get(node.output[0])
            dims = [d.dim_value for d in info.type.tensor_type.shape.dim] if info is not None else []
            if len(dims) == 4:
                sizes[node.output[0]] = (dims[1], dims[0]) if _batch_major(node) else (dims[0], dims[2])
    return sizes


def _check_stack(proto, nodes: list, paths: list[list], inits: dict[str, np.ndarray], D: int, H: int) -> None:
    """Replay each of ``paths`` on the ``Y`` of the node before it: the node after must read the stack's
    next input. A Transpose that swaps time and batch, or a Reshape that interleaves the directions, would
    otherwise load as a stack the file does not compute. The replay runs at the sizes the graph fixes and,
    for a size it leaves free, at each of ``_REPLAY_T`` or ``_REPLAY_B``. A layout op whose shape or axes are
    fed or computed at run time cannot be replayed, and is refused."""
    fixed = _fixed_sizes(proto) if paths else {}
    value = _file_values(proto.graph, inits)
    for previous, node, path in zip(nodes, nodes[1:], paths):
        T, B = fixed.get(previous.output[0], (0, 0))
        sizes = [(t, b) for t in ((T,) if T else _REPLAY_T) for b in ((B,) if B else _REPLAY_B)]
        if max(t * b for t, b in sizes) * D * H > _REPLAY_LIMIT:
            raise ValueError(f"the layout ops from {_name(previous)} to {_name(node)} cannot be checked: the sizes the "
                             f"graph fixes (T={T or 'free'}, B={B or 'free'}, D={D}, H={H}) are too many elements to "
                             f"replay them at; export with T and B free")
        given = [(_attributes(op), [value(name) for name in op.input[1:]]) for op in path]
        for k, (t, b) in enumerate(sizes):
            _replay(previous, node, path, given, t, b, D, H, strict=k == 0)


def _replay(previous, node, path: list, given: list[tuple[dict, list]], T: int, B: int, D: int, H: int,
            strict: bool) -> None:
    """Run the layout ops ``path`` on ``previous``'s ``Y`` at sizes ``T, B, D, H``, each element labelled with
    its (time, batch, direction, hidden) index, and check that ``node`` reads ``[T, B, D*H]`` (``[B, T, D*H]``
    for ``layout=1``) with the directions side by side, as cuDNN concatenates them. Not ``strict``: a
    layout op that fails, or an ``X`` the node would refuse (not ``[*, *, D*H]``), passes, since the graph
    then fails at these sizes rather than computing something else. ``given``: each op's attributes and its
    inputs after the first."""
    labels = np.arange(T * B * D * H, dtype=np.int32).reshape(T, B, D, H)  # at most _REPLAY_LIMIT
    got = labels.transpose((1, 0, 2, 3) if _batch_major(previous) else (0, 2, 1, 3))
    for op, (attrs, operands) in zip(path, given):
        try:
            got = _LAYOUT_OPS[op.op_type](attrs, [got, *operands])
        except (ValueError, TypeError, OverflowError) as exc:
            if not strict:
                return
            raise ValueError(f"{op.op_type} node {_name(op)} between recurrent nodes {_name(previous)} and "
                             f"{_name(node)}: {exc}") from None
    axes, want = ("[B, T, D*H]", labels.transpose(1, 0, 2, 3).reshape(B, T, D * H)) if _batch_major(node) \
        else ("[T, B, D*H]", labels.reshape(T, B, D * H))
    if (got.shape == want.shape and np.array_equal(got, want)) or \
            (not strict and (got.ndim != 3 or got.shape[2] != D * H)):
        return
    raise ValueError(f"node {_name(node)} reads the output Y of {_name(previous)} rearranged by "
                     f"{', '.join(op.op_type for op in path) or 'nothing'} into {list(got.shape)} (replayed "
                     f"at T={T}, B={B}, D={D}, H={H}), not as a stack's next layer reads it, {axes} = "
                     f"{list(want.shape)} with every step, sequence and direction in its place: the graph's "
                     f"recurrent nodes are not one stack")


def _node_weights(node, inits: dict) -> dict[str, np.ndarray]:
    """A node's ``W``, ``R`` and ``B``; an absent ``B`` is zeros, as ONNX defines it (a bias-free model)."""
    names = [*node.input, "", "", "", ""]
    if names[1] not in inits or names[2] not in inits or (names[3] and names[3] not in inits):
        raise ValueError(f"node {_name(node)}: W, R and B must be initializers")
    W, R = inits[names[1]], inits[names[2]]
    if names[3]:
        return {"W": W, "R": R, "B": inits[names[3]]}
    return {"W": W, "R": R, **({"B": np.zeros((R.shape[0], 2 * R.shape[1]), R.dtype)} if R.ndim == 3 else {})}


# Attributes that leave a node's function cuDNN's at these values (layout changes only how X and Y are
# read, not the weights); any other value of them, or an attribute not named here, is refused.
_NEUTRAL = {"input_forget": 0}
_KNOWN = {"activations", "activation_alpha", "activation_beta", "direction", "hidden_size", "layout",
          "linear_before_reset", *_NEUTRAL}


def _node_kind(node, layer: dict[str, np.ndarray]) -> tuple[str, str]:
    """``(rnn_mode, direction)`` that one recurrent node computes; a node that computes something no cuDNN
    mode does (cell clipping, coupled gates, peepholes, other activations, a reverse-only direction) is a
    ValueError naming the node and what it carries."""
    name = _name(node)
    attrs = _attributes(node)
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


def _config_from_nodes(kind: tuple[str, str], num_layers: int, first: dict[str, np.ndarray]) -> dict:
    """A config read off a foreign graph's nodes: ``kind`` and the weights of the first."""
    W, R = first["W"], first["R"]
    for name, a in (("W", W), ("R", R)):
        if a.ndim != 3 or 0 in a.shape:
            raise ValueError(f"the first node's {name} must be a non-empty [num_directions, gates*hidden_size, "
                             f"width] tensor, got shape {list(a.shape)}")
    mode, direction = kind
    return checkpoint.complete_config({
        "rnn_mode": mode, "num_layers": num_layers, "num_units": int(R.shape[2]), "input_size": int(W.shape[2]),
        "direction": direction, "dtype": W.dtype.name})


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
