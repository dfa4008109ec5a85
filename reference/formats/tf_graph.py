"""TensorFlow 1 frozen graphs (``frozen_model.pb``: a ``GraphDef`` whose variables
``convert_variables_to_constants`` turned into ``Const`` nodes), read with NumPy and the standard library
alone (``reference.formats.protobuf``); no TensorFlow, nothing executed.

Recurrent weights are found in a graph in one of two ways:

- ``Const`` nodes under TensorFlow's cell names (``rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel``,
  ..., ``reference.formats.tf``), read as a TensorFlow checkpoint's variables are
  (``reference.checkpoint.from_tf_names``: cells, ``MultiRNNCell`` stacks, uneven stacks as chains);
- a ``CudnnRNN``/``CudnnRNNV2``/``CudnnRNNV3`` op (what ``CudnnLSTM``, ``CudnnGRU``, ``CudnnRNNTanh`` and
  ``CudnnRNNRelu`` build), whose ``params`` input is a ``Const`` (through the ``Identity`` nodes a frozen
  variable's ``/read`` leaves): cuDNN's **opaque buffer** (:func:`cudnn_model`).

Messages read (field numbers of TensorFlow's ``.proto`` files): ``GraphDef`` {1 node}; ``NodeDef`` {1 name, 2 op,
3 input, 5 attr: map<string, AttrValue>}; ``AttrValue`` {1 list, 2 s, 3 i, 5 b, 6 type, 7 shape, 8 tensor};
``TensorProto`` {1 dtype, 2 tensor_shape, 4 tensor_content, 5 float_val, 6 double_val, 13 half_val}. A
graph's function library (TensorFlow 2's functions) is not searched. A ``Const``'s values are its
``tensor_content`` (little-endian, exactly its shape's bytes) or its typed values, the last repeated to fill
the shape as TensorFlow fills it; either is counted before anything of the declared shape is made.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..modes import MODES
from .protobuf import MESSAGE, fields, shape as _shape, typed, varint
from .tf_bundle import DTYPE_NAMES, DTYPES

SUFFIX = ".pb"
CUDNN_OPS = ("CudnnRNN", "CudnnRNNV2", "CudnnRNNV3")
RNN_MODES = {"rnn_relu": "relu", "rnn_tanh": "tanh", "lstm": "lstm", "gru": "gru"}  # the op's rnn_mode attr
INPUT_MODES = ("linear_input", "skip_input", "auto_select")
DIRECTIONS = ("unidirectional", "bidirectional")
PASS_THROUGH = ("Identity", "Snapshot", "StopGradient")  # ops between a frozen variable and its reader
MAX_HOPS = 1000
MAX_LAYERS = 1000  # layers searched for the sizes an opaque buffer's size fits
_VALUES = {1: (5, "<f4"), 2: (6, "<f8"), 19: (13, "half")}  # float dtype -> TensorProto field of typed values


@dataclass(frozen=True)
class Node:
    name: str
    op: str
    inputs: tuple[str, ...]
    attrs: dict  # name -> the AttrValue message, parsed when asked for


@dataclass(frozen=True)
class Const:
    """A ``Const`` node's tensor, as declared: values are read by :meth:`Graph.read`."""

    name: str
    dtype: int  # TensorFlow's DataType enum
    shape: tuple[int, ...]
    content: memoryview | None  # tensor_content, or None: typed values (``values`` of them)
    values: int  # how many values the file stores (the shape's count, or fewer, the last repeated)
    tensor: list  # the TensorProto's parsed fields (its typed values are decoded from them when read)

    def describe_dtype(self) -> str:
        return np.dtype(DTYPES[self.dtype]).name if self.dtype in DTYPES else \
            DTYPE_NAMES.get(self.dtype, f"TF dtype {self.dtype}")


def _text(value, what: str) -> str:
    if not isinstance(value, MESSAGE):
        raise ValueError(f"{what} is not a string")
    return bytes(value).decode("utf-8", errors="replace")


def _node(buf) -> Node:
    parsed = fields(buf)
    name = _text(typed(parsed, 1, bytes, b"", "a node's name"), "a node's name")
    what = f"node {name!r}"
    op = _text(typed(parsed, 2, bytes, b"", what), f"{what}'s op")
    inputs = tuple(_text(v, f"{what}'s input") for n, v in parsed if n == 3)
    attrs = {}
    for number, entry in parsed:
        if number == 5:
            if not isinstance(entry, MESSAGE):
                raise ValueError(f"{what}: an attribute is not a message")
            pair = fields(entry)
            attrs[_text(typed(pair, 1, bytes, b"", what), f"{what}'s attribute name")] = typed(pair, 2, bytes, b"", what)
    return Node(name, op, inputs, attrs)


def _packed_count(number: int, kind: str, parsed: list) -> int:
    """How many typed values field ``number`` holds, packed or not, without decoding them."""
    count = 0
    for n, value in parsed:
        if n != number:
            continue
        if isinstance(value, MESSAGE):  # packed
            if kind == "half":
                count += sum(1 for byte in bytes(value) if byte < 0x80)  # one varint ends at each such byte
            else:
                size = np.dtype(kind).itemsize
                if len(value) % size:
                    raise ValueError(f"packed field {number} of {len(value)} bytes is not whole {kind} values")
                count += len(value) // size
        else:
            count += 1
    return count


def _typed_values(number: int, kind: str, parsed: list) -> np.ndarray:
    """The typed values of field ``number`` (counted already)."""
    out: list = []
    for n, value in parsed:
        if n != number:
            continue
        if kind == "half":
            if isinstance(value, MESSAGE):
                pos, raw = 0, bytes(value)
                while pos < len(raw):
                    bits, pos = varint(raw, pos)
                    out.append(bits & 0xFFFF)
            else:
                out.append(value & 0xFFFF)
        elif isinstance(value, MESSAGE):
            out.extend(np.frombuffer(value, kind).tolist())
        else:
            out.append(np.array([value], "<u4" if kind == "<f4" else "<u8").view(kind)[0])
    if kind == "half":
        return np.array(out, np.uint16).view(np.float16)
    return np.array(out, np.dtype(kind).newbyteorder("="))


def _const(node: Node) -> Const:
    what = f"Const {node.name!r}"
    value = node.attrs.get("value")
    if value is None:
        raise ValueError(f"{what} has no value")
    tensor = typed(fields(value), 8, bytes, None, f"{what}'s value")
    if tensor is None:
        raise ValueError(f"{what}'s value is not a tensor")
    parsed = fields(tensor)
    dtype = typed(parsed, 1, int, 0, what)
    try:
        shape = _shape(typed(parsed, 2, bytes, b"", what))
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
    if any(d < 0 for d in shape):
        raise ValueError(f"{what} declares the shape {list(shape)}: a constant's dimensions are known")
    size = math.prod(shape)
    content = typed(parsed, 4, bytes, None, what)
    if content is not None and len(content):
        itemsize = np.dtype(DTYPES[dtype]).itemsize if dtype in DTYPES else None
        if itemsize is not None and len(content) != size * itemsize:
            raise ValueError(f"{what} holds {len(content)} bytes for its {list(shape)} {np.dtype(DTYPES[dtype]).name} "
                             f"values, which take {size * itemsize}")
        return Const(node.name, dtype, shape, memoryview(content), size, parsed)
    if dtype not in _VALUES:  # not a weight: declared, never read
        return Const(node.name, dtype, shape, None, 0, parsed)
    count = _packed_count(*_VALUES[dtype], parsed)
    if count > size:
        raise ValueError(f"{what} holds {count} values for its shape {list(shape)} of {size}")
    return Const(node.name, dtype, shape, None, count, parsed)


class Graph:
    """A parsed ``GraphDef``: its nodes by name, its ``Const`` nodes declared (nothing read)."""

    def __init__(self, data: bytes) -> None:
        top = fields(memoryview(data))
        if any(n == 1 and not isinstance(v, MESSAGE) for n, v in top):  # SavedModel: field 1 is an int64
            raise ValueError("a SavedModel (saved_model.pb: its variables are a TensorFlow checkpoint in "
                             "variables/variables.index), not a frozen GraphDef")
        self.nodes: dict[str, Node] = {}
        for number, value in top:
            if number == 1:
                node = _node(value)
                if node.name in self.nodes:
                    raise ValueError(f"names node {node.name!r} twice")
                self.nodes[node.name] = node
        if not self.nodes:
            raise ValueError("holds no node: not a GraphDef (a frozen graph's .pb)")
        self.consts = {name: _const(node) for name, node in self.nodes.items() if node.op == "Const"}

    def meta(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Every ``Const``'s dtype name and shape (what ``checkpoint.from_tf_names`` reads names off)."""
        return {n: (c.describe_dtype(), c.shape) for n, c in self.consts.items()}

    def stored(self) -> int:
        """Values the file stores for its constants (a repeated last value counted once): what a model read off
        their declared shapes may be checked against before anything of its size is made."""
        return sum(c.values for c in self.consts.values())

    def read(self, names) -> dict[str, np.ndarray]:
        """The named constants' values, native byte order (fresh arrays)."""
        out = {}
        for name in names:
            c = self.consts[name]
            if c.dtype not in _VALUES:
                raise ValueError(f"Const {name!r} is {c.describe_dtype()}, not a floating-point weight")
            if c.content is not None:
                dtype = np.dtype(DTYPES[c.dtype])
                out[name] = np.frombuffer(c.content, dtype.newbyteorder("<")).astype(dtype).reshape(c.shape)
                continue
            values = _typed_values(*_VALUES[c.dtype], c.tensor)
            full = np.zeros(math.prod(c.shape), DTYPES[c.dtype])
            if len(values):  # TensorFlow's fill: the last value repeated
                full[:len(values)] = values
                full[len(values):] = values[-1]
            out[name] = full.reshape(c.shape)
        return out

    def source(self, name: str) -> Node:
        """The node an input name (``NAME``, ``NAME:1``) reads, through pass-through ops."""
        for _ in range(MAX_HOPS):
            node = self.nodes.get(name.lstrip("^").rsplit(":", 1)[0] if ":" in name else name.lstrip("^"))
            if node is None:
                raise ValueError(f"an input names node {name!r}, which the graph does not hold")
            if node.op not in PASS_THROUGH or not node.inputs:
                return node
            name = node.inputs[0]
        raise ValueError(f"input {name!r}: more than {MAX_HOPS} {'/'.join(PASS_THROUGH)} nodes in a row")

    def static_shape(self, name: str) -> tuple[int, ...] | None:
        """The shape a node's input name reads, where the graph fixes it (a Placeholder's ``shape``, a
        Const's), else ``None``; unknown dimensions are -1."""
        node = self.source(name)
        try:
            if node.op == "Const":
                return self.consts[node.name].shape
            if node.op in ("Placeholder", "PlaceholderWithDefault") and "shape" in node.attrs:
                return _shape(typed(fields(node.attrs["shape"]), 7, bytes, b"", node.name))
        except ValueError:  # an unknown rank: nothing fixed
            return None
        return None

    def recurrent_ops(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.op in CUDNN_OPS]


def is_graph_file(path: str | Path) -> bool:
    return Path(path).suffix == SUFFIX and Path(path).is_file()


def read_graph(path: str | Path) -> Graph:
    return Graph(Path(path).read_bytes())


# ---- a CudnnRNN op and its opaque buffer -------------------------------------------------------------------


def attr(node: Node, name: str, kind: str, default):
    """An attribute of ``kind`` ``s`` (string), ``i``, ``b`` or ``type`` (their AttrValue fields 2, 3, 5, 6)."""
    value = node.attrs.get(name)
    if value is None:
        return default
    number = {"s": 2, "i": 3, "b": 5, "type": 6}[kind]
    got = typed(fields(value), number, bytes if kind == "s" else int, None, f"op {node.name!r}'s attribute {name!r}")
    if got is None:
        return {"s": "", "i": 0, "b": False, "type": 0}[kind]  # proto3: a zero value is left out
    if kind == "s":
        return _text(got, name)
    if kind == "i":
        return got - (1 << 64) if got >= 1 << 63 else got
    return bool(got) if kind == "b" else got


def pick(ops: list[Node], name: str | None) -> Node:
    """The recurrent op named ``name``, or the only one."""
    listed = ", ".join(f"{n.name!r} ({n.op}, {attr(n, 'rnn_mode', 's', 'lstm')})" for n in ops)
    if name is not None:
        chosen = [n for n in ops if n.name == name]
        if not chosen:
            raise ValueError(f"holds no CudnnRNN op named {name!r}; its recurrent ops: {listed or 'none'}")
        return chosen[0]
    if len(ops) > 1:
        raise ValueError(f"holds {len(ops)} CudnnRNN ops: {listed}; pick one by its name (--node NAME, options key "
                         f"node)")
    return ops[0]


def params_size(gates: int, layers: int, units: int, input_size: int, dirs: int, proj: int | None, skip: bool) -> int:
    """Elements of cuDNN's opaque buffer with the double bias, by cuDNN's count: per layer and direction,
    ``gates`` input matrices ``[units, width]`` (none in layer 0 under skip_input), as many recurrent
    ``[units, proj or units]``, a projection ``[proj, units]`` and two bias vectors a gate. Checked against
    the model's own ``params_size`` wherever it is used."""
    out_width = proj or units
    shared = gates * units * out_width + 2 * gates * units + (proj * units if proj else 0)  # every layer's
    first = (0 if skip else gates * units * input_size) + shared
    later = gates * units * dirs * out_width + shared
    return dirs * (first + (layers - 1) * later)


def _solve_units(size, values: int, hi: int) -> list[int]:
    """The ``units`` in [1, hi] at which the increasing ``size(units)`` is ``values`` (none, or one)."""
    lo = 1
    while lo < hi:
        mid = (lo + hi) // 2
        if size(mid) < values:
            lo = mid + 1
        else:
            hi = mid
    return [lo] if size(lo) == values else []


def size_candidates(values: int, gates: int, dirs: int, proj: int | None, skip: bool, known: dict) -> list[dict]:
    """Every ``{num_layers, num_units, input_size}`` that agrees with ``known`` (those of them the graph or the
    options fix) and whose opaque buffer holds ``values`` elements; layers searched up to :data:`MAX_LAYERS`.
    Without the units, the input size must be known (or skip_input, whose input size is the units)."""
    known = dict(known)
    if skip:  # layer 0 has no input matrices: its input is as wide as the units
        if "num_units" not in known and "input_size" in known:
            known["num_units"] = known["input_size"]
        if "num_units" in known:
            known.setdefault("input_size", known["num_units"])
    if "num_units" not in known and "input_size" not in known:
        raise ValueError("neither the input size nor the units are fixed by the graph: give input_size "
                         "(--input-size) or num_units (--num-units)")

    def count(L, H, I):
        return params_size(gates, L, H, I, dirs, proj, skip)

    found = []
    for L in [known["num_layers"]] if "num_layers" in known else range(1, MAX_LAYERS + 1):
        if count(L, known.get("num_units", 1), known.get("input_size", 0)) > values:
            break  # more layers hold more
        if "num_units" in known:
            H = known["num_units"]
            if "input_size" in known:
                inputs = [known["input_size"]]
            else:  # linear in layer 0's input width
                base, per = count(L, H, 0), count(L, H, 1) - count(L, H, 0)
                inputs = [(values - base) // per] if (values - base) % per == 0 else []
            pairs = [(H, I) for I in inputs if I >= 1 and count(L, H, I) == values]
        else:
            I = known["input_size"]
            pairs = [(H, I) for H in _solve_units(lambda H: count(L, H, I), values,
                                                  values if proj else math.isqrt(values) + 1)]
        found += [{"num_layers": L, "num_units": H, "input_size": I} for H, I in pairs]
    return found


def _params_const(graph: Graph, op: Node) -> Const:
    what = f"{op.op} op {op.name!r}"
    if len(op.inputs) < 4:
        raise ValueError(f"{what} has {len(op.inputs)} inputs, not input, input_h, input_c and params")
    source = graph.source(op.inputs[3])
    if source.op != "Const":
        raise ValueError(f"{what} reads its params from the {source.op} node {source.name!r}, not a constant: in a "
                         f"frozen graph (convert_variables_to_constants) the opaque buffer is a Const")
    const = graph.consts[source.name]
    if len(const.shape) != 1:
        raise ValueError(f"{what}'s params, Const {const.name!r}, has the shape {list(const.shape)}: an opaque "
                         f"buffer is 1-D")
    return const


def cudnn_config(graph: Graph, op: Node, options: dict) -> dict:
    """What a ``CudnnRNN*`` op tells of its model: cell mode, input mode, direction, projection (V3) and dtype
    from its attributes; layers, units and input size from its inputs' static shapes (``input [.., .., I]``,
    ``input_h [L*D, B, H]``, with a projection ``input_c [L*D, B, H]``), completed from ``options`` and from
    the opaque buffer's size, refused where that size fits no configuration or several (listed).
    ``auto_select`` resolves as TensorFlow does: skip_input where the input size is the units."""
    what = f"{op.op} op {op.name!r}"
    mode = attr(op, "rnn_mode", "s", "lstm")
    input_mode = attr(op, "input_mode", "s", "linear_input")
    direction = attr(op, "direction", "s", "unidirectional")
    code = attr(op, "T", "type", 0)
    for name, value, allowed in (("rnn_mode", mode, tuple(RNN_MODES)), ("input_mode", input_mode, INPUT_MODES),
                                 ("direction", direction, DIRECTIONS)):
        if value not in allowed:
            raise ValueError(f"{what}: {name} is {value!r}, expecting one of {', '.join(allowed)}")
    if code not in _VALUES:
        raise ValueError(f"{what}: T is TF dtype {code}, expecting float16, float32 or float64")
    proj = attr(op, "num_proj", "i", 0) if op.op == "CudnnRNNV3" else 0
    if proj < 0 or (proj and mode != "lstm"):
        raise ValueError(f"{what}: num_proj {proj} (a projection is an LSTM's, of at least one unit)")
    const = _params_const(graph, op)
    if const.dtype != code:
        raise ValueError(f"{what} computes in {np.dtype(DTYPES[code]).name}; its params, Const {const.name!r}, are "
                         f"{const.describe_dtype()}")
    dirs = 2 if direction == "bidirectional" else 1
    gates = len(MODES[RNN_MODES[mode]].gates)
    known = {}
    x = graph.static_shape(op.inputs[0])
    h = graph.static_shape(op.inputs[1])
    c = graph.static_shape(op.inputs[2]) if proj else h
    if x is not None and len(x) == 3 and x[2] > 0:
        known["input_size"] = x[2]
    if c is not None and len(c) == 3 and c[2] > 0:
        known["num_units"] = c[2]
    if h is not None and len(h) == 3 and h[0] > 0:
        if h[0] % dirs:
            raise ValueError(f"{what}: input_h has {h[0]} layers x directions, not a multiple of {dirs}")
        known["num_layers"] = h[0] // dirs
    for key in ("num_layers", "num_units", "input_size"):
        given = options.get(key)
        if given is not None:
            if key in known and known[key] != given:
                raise ValueError(f"{what}: the graph's shapes give {key} {known[key]}, the options {given}")
            known[key] = given
    found = []
    for skip in ((False, True) if input_mode == "auto_select" else (input_mode == "skip_input",)):
        found += [{**sizes, "input_mode": "skip_input" if skip else "linear_input"} for sizes in
                  size_candidates(const.shape[0], gates, dirs, proj or None, skip, known)
                  if input_mode != "auto_select" or skip == (sizes["input_size"] == sizes["num_units"])]
    if len(found) != 1:
        listed = "; ".join(", ".join(f"{k}={v}" for k, v in f.items() if k != "input_mode") for f in found[:10])
        fixed = ", ".join(f"{k} {v}" for k, v in known.items()) or "no size"
        raise ValueError(f"{what}: its opaque buffer, Const {const.name!r}, holds {const.shape[0]} values, which "
                         + (f"fit {len(found)} configurations ({listed}{'; ...' if len(found) > 10 else ''})"
                            if found else f"fit no configuration (layers up to {MAX_LAYERS})")
                         + f" with {fixed} as the graph and options fix: give the others (--num-layers, --num-units, "
                           f"--input-size)")
    return {"rnn_mode": RNN_MODES[mode], "direction": direction, "dtype": np.dtype(DTYPES[code]).name,
            "num_proj": proj or None, **found[0]}


def cudnn_weights(graph: Graph, op: Node, model) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The canonical weights and biases in a ``CudnnRNN*`` op's opaque buffer, read as ``model``'s layout
    (``model.params_to_canonical``), checked against the buffer's size and stored values first."""
    from .canonical import check_fits

    const = _params_const(graph, op)
    if model.params_size() != const.shape[0]:
        raise ValueError(f"{op.op} op {op.name!r}: its opaque buffer, Const {const.name!r}, holds {const.shape[0]} "
                         f"values; {model!r} takes {model.params_size()}")
    check_fits(model, const.values, f"Const {const.name!r}")
    return model.params_to_canonical(graph.read([const.name])[const.name])
