"""Whether an ONNX graph's recurrent nodes are one stack: each node after the first must read the ``Y`` of
the node before through layout ops alone, and those ops, replayed in NumPy on a ``Y`` whose elements carry
their (time, batch, direction, hidden) index, must hand it ``[T, B, D*H]`` (``[B, T, D*H]`` for
``layout=1``) with every element in place. A layout op's shape or axes may be file constants or **shape
arithmetic**: ``Shape`` of the link's own tensors, then integer ops on it (``_SHAPE_OPS``), as PyTorch's
dynamo exporter writes with dynamic axes; the replay evaluates it at the sizes it replays at. And whether
each node starts from what the caller gives (:func:`check_starts`). Needs ``onnx``.
"""

from __future__ import annotations

import numpy as np

RECURRENT_OPS = ("GRU", "LSTM", "RNN")
DEFAULT_DOMAIN = ("", "ai.onnx")


def node_name(node) -> str:
    """A node's name, or for a nameless one its op and first output: ``(GRU -> 'Y0')``."""
    return node.name or f"({node.op_type} -> {node.output[0] if node.output else ''!r})"


def attributes(node) -> dict:
    """A node's attributes, name -> Python value."""
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def batch_major(node) -> bool:
    """Whether a recurrent node reads ``X`` and writes ``Y`` batch-major (``layout=1``)."""
    return bool(attributes(node).get("layout", 0))


# The ops that only move a tensor's elements (or, as Dropout at inference, pass it on): what may lie
# between one layer's output Y and the next layer's input X in a stack. Each is replayed here in NumPy on
# the op's input (``operands[0]``), its attributes, and its other inputs: an array where the file fixes the
# value or shape arithmetic computes it, None where the input is absent, an _Unknown where neither.


class _RunTime:
    """An input that the file does not fix: a graph input (``node`` None), which a caller may feed, or the
    output of ``node``, which shape arithmetic may still compute at the replay's sizes."""

    def __init__(self, name: str, node) -> None:
        self.name, self.node = name, node


class _Unknown:
    """An input the replay cannot tell; ``reason`` completes "its shape (input 1) ..." in the refusal."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


_UNTOLD = "so what the op does to the layer's output cannot be told from the file"


def _operand(operands: list, k: int, what: str) -> np.ndarray | None:
    """Input ``k`` (``what`` names it) of an op: None where absent; one the replay cannot tell is refused."""
    value = operands[k] if k < len(operands) else None
    if isinstance(value, _Unknown):
        raise ValueError(f"its {what} (input {k}) {value.reason}")
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
        raise ValueError(f"Constant node {node_name(node)} cannot be read: {exc}") from None
    raise ValueError(f"Constant node {node_name(node)} holds no integer or tensor value a layout op could read "
                     f"(attributes {[a.name for a in node.attribute]})")


def _file_values(graph, inits: dict[str, np.ndarray]):
    """``value(name)``: a tensor as the file fixes it (an initializer or a Constant), None for an absent
    input (``''``), else a :class:`_RunTime`. An initializer that is also a graph input is only a default a
    caller may override, so it is fed at run time."""
    fed = {i.name for i in graph.input}
    producers = {out: n for n in graph.node for out in n.output if out}

    def value(name: str):
        node = producers.get(name)
        if not name:
            return None
        if name in fed or (name not in inits and node is None):
            return _RunTime(name, None)
        if name in inits:
            return inits[name]
        if node.op_type == "Constant" and node.domain in DEFAULT_DOMAIN:
            return _constant(node)
        return _RunTime(name, node)

    return value


# Shape arithmetic: how an exporter computes a layout op's shape or axes at run time from the shapes of the
# link's own tensors (PyTorch's dynamo exporter with dynamic axes: Shape -> Slice, Mul -> Concat ->
# Reshape). Integer tensors only, each of at most _SHAPE_VALUES values, at most _SHAPE_DEPTH ops deep.
_SHAPE_VALUES, _SHAPE_DEPTH = 1024, 64


def _shape(attrs: dict, dims: tuple[int, ...]) -> np.ndarray:
    """``Shape``: the dims ``[start, end)`` of a tensor (negative counting from the back, both clamped)."""
    rank = len(dims)
    start, end = (min(max(k + rank if k < 0 else k, 0), rank)
                  for k in (_int(attrs, "start", 0), _int(attrs, "end", rank)))
    return np.array(dims[start:end], np.int64)


_TO_THE_END = (np.iinfo(np.int32).max, np.iinfo(np.int64).max)  # an end that runs to the end, either way


def _slice(attrs: dict, operands: list) -> np.ndarray:
    """``Slice``: starts, ends, axes and steps as attributes (up to opset 9) or inputs, clamped as onnxruntime
    does (as the spec says, but for an end of INT_MAX, which runs to the end in either direction)."""
    a = operands[0]
    if "starts" in attrs or "ends" in attrs:
        bounds = [attrs.get(k) for k in ("starts", "ends", "axes")] + [None]
    else:
        bounds = [_operand(operands, k, what) for k, what in enumerate(("starts", "ends", "axes", "steps"), 1)]
    if bounds[0] is None or bounds[1] is None:
        raise ValueError("it has no starts or no ends")
    starts, ends = _ints(bounds[0], "starts"), _ints(bounds[1], "ends")
    axes = list(range(len(starts))) if bounds[2] is None else _ints(bounds[2], "axes")
    steps = [1] * len(starts) if bounds[3] is None else _ints(bounds[3], "steps")
    if not len(starts) == len(ends) == len(axes) == len(steps) or 0 in steps or \
            any(not -a.ndim <= k < a.ndim for k in axes) or len({k % a.ndim for k in axes}) != len(axes):
        raise ValueError(f"starts {starts}, ends {ends}, axes {axes}, steps {steps} do not slice {list(a.shape)}")
    index = [slice(None)] * a.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        n = a.shape[axis]
        to_the_end = end in _TO_THE_END
        start, end = (k + n if k < 0 else k for k in (start, end))
        if step > 0:
            start, end = min(max(start, 0), n), min(max(end, 0), n)
        else:  # an end clamped to -1 runs down through the first element
            start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
        index[axis % a.ndim] = slice(start, None if to_the_end or end < 0 else end, step)
    return a[tuple(index)]


def _gather(attrs: dict, operands: list) -> np.ndarray:
    a, indices = operands[0], _operand(operands, 1, "indices")
    axis = _int(attrs, "axis", 0)
    if indices is None or not np.issubdtype(indices.dtype, np.integer) or not -a.ndim <= axis < a.ndim:
        raise ValueError(f"its indices or axis {axis} do not index {list(a.shape)}")
    n = a.shape[axis]
    if indices.size and not (-n <= indices.min() and indices.max() < n):
        raise ValueError(f"indices {indices.tolist()} are out of range for {n} elements")
    _at_most(indices.size * (a.size // n) if n else 0)
    return np.asarray(np.take(a, indices.astype(np.int64), axis=axis))  # a 0-d index gives a scalar


def _concat(attrs: dict, operands: list) -> np.ndarray:
    if "axis" not in attrs or any(a is None for a in operands) or len({a.ndim for a in operands}) != 1:
        raise ValueError("it needs an axis and inputs of one rank")
    axis = _int(attrs, "axis", 0)
    if not -operands[0].ndim <= axis < operands[0].ndim:
        raise ValueError(f"axis {axis} is not an axis of its inputs")
    _at_most(sum(a.size for a in operands))
    return np.concatenate(operands, axis=axis)


def _at_most(size: int) -> None:
    """Refuse, before it is made, a result of more values than shape arithmetic ever needs."""
    if size > _SHAPE_VALUES:
        raise ValueError(f"it would make {size} values, more than the {_SHAPE_VALUES} of shape arithmetic")


def _elementwise(ufunc):
    """``Add``, ``Sub``, ``Mul`` with ONNX's broadcasting, in Python integers (no silent wraparound)."""

    def op(attrs: dict, operands: list) -> np.ndarray:
        a, b = _operand(operands, 0, "A"), _operand(operands, 1, "B")
        if a is None or b is None or a.dtype != b.dtype:
            raise ValueError("it needs two inputs of one type")
        _at_most(int(np.prod(np.broadcast_shapes(a.shape, b.shape))))
        return _integers(ufunc(a.astype(object), b.astype(object)), a.dtype)

    return op


def _cast(attrs: dict, operands: list) -> np.ndarray:
    import onnx

    dtype = {onnx.TensorProto.INT64: np.int64, onnx.TensorProto.INT32: np.int32}.get(_int(attrs, "to", 0))
    if dtype is None:
        raise ValueError(f"it casts to type {attrs.get('to')!r}, not int32 or int64")
    return _integers(operands[0], dtype)


def _integers(values: np.ndarray, dtype) -> np.ndarray:
    """``values`` (integers, compared as Python ints) as ``dtype``, refusing a value out of its range rather
    than wrapping it."""
    info, values = np.iinfo(dtype), np.asarray(values, dtype=object)
    if values.size and not (info.min <= values.min() and values.max() <= info.max):
        raise ValueError(f"values {values.tolist()} overflow {np.dtype(dtype).name}")
    return values.astype(dtype)


_SHAPE_OPS = {**{k: v for k, v in _LAYOUT_OPS.items() if k != "Dropout"}, "Slice": _slice, "Gather": _gather,
              "Concat": _concat, "Add": _elementwise(np.add), "Sub": _elementwise(np.subtract),
              "Mul": _elementwise(np.multiply), "Cast": _cast}


def _shape_arithmetic(value, shapes: dict[str, tuple[int, ...]]):
    """``evaluate(item)``: a layout op's input after the first at the sizes the replay runs at. ``item`` is
    what ``value`` (see :func:`_file_values`) gave; a :class:`_RunTime` one is computed from ``shapes`` (the
    link's tensors replayed so far) by shape arithmetic, else is an :class:`_Unknown` saying why not.

    A value that derives from a Shape is a size: sizes may be multiplied and moved (sliced, gathered,
    concatenated) by constants, never added to or subtracted from, nor used as indices, bounds, axes or a
    shape. So every size the arithmetic computes is a product of dims (T, B, D, H) times a constant, which
    the replay at several T and B pins down: ``T + (T-1)(T-3)(T-4)`` equals T at every T replayed, and not
    at T=2."""
    done: dict[str, np.ndarray] = {}
    sized: set[str] = set()  # the computed values that derive from a Shape

    def computed(name: str, node, depth: int) -> np.ndarray:
        if name in done:
            return done[name]
        op = f"{node.op_type} node {node_name(node)}"
        if depth > _SHAPE_DEPTH:
            raise ValueError(f"is computed at run time by more than {_SHAPE_DEPTH} chained ops, {_UNTOLD}")
        if node.domain not in DEFAULT_DOMAIN or node.op_type not in ("Shape", *_SHAPE_OPS):
            raise ValueError(f"is computed at run time by {op}, which is not shape arithmetic (Shape of the "
                             f"link's tensors, then {', '.join(_SHAPE_OPS)}), {_UNTOLD}")
        if node.op_type == "Shape" and (node.input[0] if node.input else "") not in shapes:
            raise ValueError(f"is computed at run time from the shape of {node.input[0] if node.input else ''!r}, "
                             f"which is not a tensor of the link (the Y before it or a layout op's output), {_UNTOLD}")
        operands = []
        for name_in in node.input if node.op_type != "Shape" else ():  # a Shape reads its input's shape alone
            try:
                item = value(name_in)
            except ValueError as exc:  # a Constant that cannot be read
                raise ValueError(f"is computed by {op} from {name_in!r}, which cannot be read: {exc}") from None
            operands.append(arrays(item, depth + 1))
        if node.op_type != "Shape" and (not operands or operands[0] is None):
            raise ValueError(f"is computed by {op}, which has no input, {_UNTOLD}")
        floats = [a.dtype.name for a in operands if a is not None and not np.issubdtype(a.dtype, np.integer)]
        if floats:
            raise ValueError(f"is computed by {op} from {floats[0]} values, not from the integers of shape "
                             f"arithmetic, {_UNTOLD}")
        many = max((a.size for a in operands if a is not None), default=0)
        if many > _SHAPE_VALUES:
            raise ValueError(f"is computed by {op} from {many} values, not from the few integers of shape "
                             f"arithmetic, {_UNTOLD}")
        from_sizes = [i in sized for i in node.input]
        if node.op_type in ("Add", "Sub") and any(from_sizes):
            raise ValueError(f"is computed by {op}, which adds to or subtracts from a size: such arithmetic can be "
                             f"right at the sizes the check replays and wrong at others, {_UNTOLD}")
        if node.op_type not in ("Mul", "Concat") and any(from_sizes[1:]):
            raise ValueError(f"is computed by {op}, whose indices, bounds, axes or shape derive from a size: such "
                             f"arithmetic can be right at the sizes the check replays and wrong at others, {_UNTOLD}")
        try:
            if node.op_type == "Shape":
                result = _shape(attributes(node), shapes[node.input[0]])
            else:
                result = _SHAPE_OPS[node.op_type](attributes(node), operands)
        except (ValueError, TypeError, OverflowError, IndexError) as exc:
            raise ValueError(f"is computed by {op}, which fails: {exc}") from None
        done[name] = result  # integers (from integers), no more values than _at_most lets an op make
        if node.op_type == "Shape" or any(from_sizes):
            sized.add(name)
        return result

    def arrays(item, depth: int) -> np.ndarray | None:
        if not isinstance(item, _RunTime):
            return item
        if item.node is None:
            raise ValueError(f"is fed at run time (graph input {item.name!r}), {_UNTOLD}")
        return computed(item.name, item.node, depth)

    def evaluate(item):
        try:
            return arrays(item, 0)
        except ValueError as exc:
            return _Unknown(str(exc))

    return evaluate


def stack_paths(graph, nodes: list) -> list[list]:
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
            if source is None or source.op_type not in _LAYOUT_OPS or source.domain not in DEFAULT_DOMAIN \
                    or name != source.output[0] or len(path) > len(graph.node):  # a Dropout's second output: its mask
                passed = [n.op_type for n in path]
                what = (f"{source.op_type} node {node_name(source)}'s output {name!r}" if source is not None
                        else f"{name!r}, which no node computes" if name else "nothing")
                raise ValueError(f"node {node_name(node)} reads X from {what}"
                                 f"{' through ' + ', '.join(passed) if passed else ''}, not from the "
                                 f"output Y of the recurrent node before it, {node_name(previous)}, through layout ops "
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
    a file may declare, which it does not, nor the default of an initializer that is also an input, which a
    caller may override."""
    import onnx

    stripped = onnx.ModelProto()
    stripped.CopyFrom(proto)
    del stripped.graph.value_info[:]
    fed = {i.name for i in stripped.graph.input}  # an initializer that is also an input is a default, not a size
    kept = [t for t in stripped.graph.initializer if t.name not in fed]
    del stripped.graph.initializer[:]
    stripped.graph.initializer.extend(kept)
    for output in stripped.graph.output:
        output.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(stripped)
    except Exception:  # noqa: BLE001 - onnx raises several kinds; a graph it cannot infer fixes no size
        return {}
    infos = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    sizes = {}
    for node in inferred.graph.node:
        if node.op_type in RECURRENT_OPS and node.output:
            info = infos.get(node.output[0])
            dims = [d.dim_value for d in info.type.tensor_type.shape.dim] if info is not None else []
            if len(dims) == 4:
                sizes[node.output[0]] = (dims[1], dims[0]) if batch_major(node) else (dims[0], dims[2])
    return sizes


def check_stack(proto, nodes: list, paths: list[list], inits: dict[str, np.ndarray], D: int, H: int) -> None:
    """Replay each of ``paths`` on the ``Y`` of the node before it: the node after must read the stack's
    next input. A Transpose that swaps time and batch, or a Reshape that interleaves the directions, would
    otherwise load as a stack the file does not compute. The replay runs at the sizes the graph fixes and,
    for a size it leaves free, at each of ``_REPLAY_T`` or ``_REPLAY_B``, with any shape arithmetic evaluated
    at those sizes. A layout op whose shape or axes are fed at run time, or computed other than by shape
    arithmetic, cannot be replayed, and is refused."""
    fixed = _fixed_sizes(proto) if paths else {}
    value = _file_values(proto.graph, inits)
    T, B = 0, 0
    for previous, node, path in zip(nodes, nodes[1:], paths):
        # a size fixed for a layer's Y holds for every layer after it: each link checked hands the next node
        # [T, B, D*H] (shape inference loses a size behind a Reshape whose shape is computed)
        T, B = (known or carried for known, carried in zip(fixed.get(previous.output[0], (0, 0)), (T, B)))
        sizes = [(t, b) for t in ((T,) if T else _REPLAY_T) for b in ((B,) if B else _REPLAY_B)]
        if max(t * b for t, b in sizes) * D * H > _REPLAY_LIMIT:
            raise ValueError(f"the layout ops from {node_name(previous)} to {node_name(node)} cannot be checked: the sizes the "
                             f"graph fixes (T={T or 'free'}, B={B or 'free'}, D={D}, H={H}) are too many elements to "
                             f"replay them at; export with T and B free")
        given = [(attributes(op), [value(name) for name in op.input[1:]]) for op in path]
        for k, (t, b) in enumerate(sizes):
            _replay(previous, node, path, given, value, t, b, D, H, strict=k == 0)


def _replay(previous, node, path: list, given: list[tuple[dict, list]], value, T: int, B: int, D: int, H: int,
            strict: bool) -> None:
    """Run the layout ops ``path`` on ``previous``'s ``Y`` at sizes ``T, B, D, H``, each element labelled with
    its (time, batch, direction, hidden) index, and check that ``node`` reads ``[T, B, D*H]`` (``[B, T, D*H]``
    for ``layout=1``) with the directions side by side, as cuDNN concatenates them. Not ``strict``: a
    layout op that fails, or an ``X`` the node would refuse (not ``[*, *, D*H]``), passes, since the graph
    then fails at these sizes rather than computing something else. ``given``: each op's attributes and its
    inputs after the first, as ``value`` (:func:`_file_values`) gives them."""
    labels = np.arange(T * B * D * H, dtype=np.int32).reshape(T, B, D, H)  # at most _REPLAY_LIMIT
    got = labels.transpose((1, 0, 2, 3) if batch_major(previous) else (0, 2, 1, 3))
    shapes = {previous.output[0]: got.shape}  # the link's tensors so far, whose Shape shape arithmetic reads
    evaluate = _shape_arithmetic(value, shapes)
    for op, (attrs, operands) in zip(path, given):
        try:
            got = _LAYOUT_OPS[op.op_type](attrs, [got, *map(evaluate, operands)])
            shapes[op.output[0]] = got.shape
        except (ValueError, TypeError, OverflowError) as exc:
            if not strict:
                return
            raise ValueError(f"{op.op_type} node {node_name(op)} between recurrent nodes {node_name(previous)} and "
                             f"{node_name(node)}: {exc}") from None
    axes, want = ("[B, T, D*H]", labels.transpose(1, 0, 2, 3).reshape(B, T, D * H)) if batch_major(node) \
        else ("[T, B, D*H]", labels.reshape(T, B, D * H))
    if (got.shape == want.shape and np.array_equal(got, want)) or \
            (not strict and (got.ndim != 3 or got.shape[2] != D * H)):
        return
    raise ValueError(f"node {node_name(node)} reads the output Y of {node_name(previous)} rearranged by "
                     f"{', '.join(op.op_type for op in path) or 'nothing'} into {list(got.shape)} (replayed "
                     f"at T={T}, B={B}, D={D}, H={H}), not as a stack's next layer reads it, {axes} = "
                     f"{list(want.shape)} with every step, sequence and direction in its place: the graph's "
                     f"recurrent nodes are not one stack")




# What a recurrent node may start from: its initial_h, initial_c and sequence_lens come from the caller (a
# graph input, moved by these ops only) or, for the states, are zeros the file writes out (as the exporters
# do: Expand or ConstantOfShape of a zero, sliced per layer). A file that fixes other values computes the
# stack from a start the model read from its weights does not have.
_MOVES = ("Slice", "Gather", "Expand", "Tile", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity", "Cast",
          "Flatten", "Concat", "Split")
_START_INPUTS = {4: "sequence_lens", 5: "initial_h", 6: "initial_c"}


def check_starts(graph, nodes: list, inits: dict[str, np.ndarray]) -> None:
    """Each of ``nodes`` must start from the caller's states and lengths or from zero states: an initial state
    or sequence lengths the file fixes otherwise (an initializer, a ConstantOfShape of another value, a state
    computed from the data) are refused naming the node, the input and its source."""
    fed = {i.name for i in graph.input}
    value = _file_values(graph, inits)

    def source(name: str, state: bool, depth: int = 0) -> str | None:
        """Why ``name`` is no start the caller gives (None where it is)."""
        # an initializer that is also an input is a default, which runs where the caller feeds nothing
        item = inits[name] if name in inits else value(name)
        if not isinstance(item, _RunTime):
            return None if state and item.size and not np.any(item) else \
                f"{'initializer' if name in inits else 'Constant'} {name!r}, " \
                f"{'which is not all zeros' if state else 'fixed in the file'}"
        node = item.node
        if node is None:
            return None if name in fed else f"{name!r}, which no node of the graph computes"
        if depth > _SHAPE_DEPTH:
            return f"{name!r} through more than {_SHAPE_DEPTH} ops"
        if node.domain not in DEFAULT_DOMAIN:
            return f"{node.op_type} node {node_name(node)} of domain {node.domain!r}"
        if state and node.op_type == "ConstantOfShape":
            filled = attributes(node).get("value")
            return None if filled is None or not np.any(_tensor_value(filled)) else \
                f"ConstantOfShape node {node_name(node)}, whose value is not zero"
        if node.op_type not in _MOVES:
            return f"{node.op_type} node {node_name(node)}"
        moved = node.input if node.op_type == "Concat" else node.input[:1]
        return next((why for why in (source(i, state, depth + 1) for i in moved if i) if why), None)

    for node in nodes:
        for k, slot in _START_INPUTS.items():
            name = node.input[k] if k < len(node.input) else ""
            why = source(name, slot != "sequence_lens") if name else None
            if why:
                raise ValueError(f"node {node_name(node)} reads its {slot} from {why}: the model read from its weights "
                                 f"starts from the caller's {'states or zeros' if slot != 'sequence_lens' else 'lengths'}"
                                 f" and would silently disagree with the file; make it a graph input")


def _tensor_value(t) -> np.ndarray:
    from onnx import numpy_helper

    try:
        return numpy_helper.to_array(t)
    except (KeyError, ValueError, TypeError) as exc:
        raise ValueError(f"a ConstantOfShape value cannot be read: {exc}") from None
