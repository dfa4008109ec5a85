"""The network loop: layers, directions, time, as cuDNN's documentation and TensorFlow's ``CudnnRNNV3``
state them, over the cells of ``rnn.py``, ``lstm.py`` and ``gru.py``.

- The canonical weights and biases (TensorFlow's order, ``docs/api.md`` "Parameters") are grouped per
  pseudo-layer (``layer * num_dirs + direction``); with skip_input, layer 0 has no input matrices: its input
  enters every gate as it is, plus the gate's input bias where the bias mode has one
  (``layout.SKIP_INPUT_HAS_LAYER0_INPUT_BIASES``, confirmed on a GPU).
- ``bias_mode`` (cuDNN's ``cudnnRNNBiasMode_t``, ``layout.BIAS_MODES``): the biases the mode lacks are
  absent from the canonical lists (at the lin layers ``layout.bias_slots`` names) and from the cells'
  equations (``cell.py``).
- Each layer's directions read the previous layer's output ``[forward | backward]``; the backward direction
  runs each sequence reversed within its own length.
- ``lengths``: a step past a sequence's length outputs ``padding_fill`` (cuDNN's ``paddingFill``; zero by
  default) and leaves its states as they were, so the final states are those of its last valid step; such a
  step is not computed, so it takes and gives no gradient. Only the network's output holds the fill: a
  layer's padded steps are never read by the next.
- Dropout between layers: layer ``l``'s output (``l < num_layers - 1``) times ``masks[l] / (1 - dropout)``
  (times 0 where ``dropout == 1``), the masks given by the caller.
- Precision (``reference.precision``): float16 data computes in float32; the cells round to float16 where
  ``precision.HALF_ROUNDS`` says (each GEMM's result before its bias, the state each step stores: ``cell.py``),
  and each layer's output (after dropout) is rounded to float16 before the next layer reads it; results come
  back in the data's dtype. Backward treats every rounding as the identity.
- Math type (``math_type``, ``cell.py``): under ``"tf32"`` every GEMM, forward and backward, reads its operands
  rounded to TF32; with float64 data that is the TF32 truth.
- ``time_major=False``: the first two axes of sequences, states and masks are swapped, at the edges.
- A packed ``x`` (``reference.PackedSequence``, cuDNN's ``SEQ_MAJOR_PACKED``): unpacked at the edge into the
  time-major batch and its lengths, which run as above; the output is packed again (it has no padding, so no
  fill), and so are ``d_output`` and the input's gradient.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, NamedTuple, Sequence

import numpy as np

from .. import checks, packing
from ..layout import BIAS_MODES, bias_slots
from ..packing import PackedSequence
from ..precision import STORAGE_DTYPES, compute_dtype
from . import gru, lstm, rnn
from .cell import MATH_TYPES, Array, CellParams
from .cell import math as cell_math

PROJECTION = 8  # cuDNN's lin_layer_id of the LSTM projection


class Cell(NamedTuple):
    """A mode's step ``(params, x, h, c) -> (h', c', cache)`` and its backward
    ``(params, cache, dh', dc') -> (dx, dh, dc, param gradients)``; ``gates`` in canonical order."""

    step: Callable
    step_backward: Callable
    gates: int
    has_cell_state: bool = False


CELLS: dict[str, Cell] = {
    "relu": Cell(partial(rnn.step, activation="relu"), partial(rnn.step_backward, activation="relu"), 1),
    "tanh": Cell(partial(rnn.step, activation="tanh"), partial(rnn.step_backward, activation="tanh"), 1),
    "lstm": Cell(lstm.step, lstm.step_backward, 4, has_cell_state=True),
    "gru": Cell(partial(gru.step, reset_after=True), partial(gru.step_backward, reset_after=True), 3),
    "classic_gru": Cell(partial(gru.step, reset_after=False), partial(gru.step_backward, reset_after=False), 3),
}


@dataclass(frozen=True)
class Network:
    """The configuration the canonical lists are read under (a model's attributes, :meth:`of`)."""

    mode: str
    num_layers: int
    num_units: int
    input_size: int
    num_dirs: int = 1
    num_proj: int | None = None
    skip_input: bool = False
    bias_mode: str = "double"
    cell_clip: tuple[float, float] | None = None  # the LSTM's (lclip, rclip), lstm.py

    def __post_init__(self) -> None:
        checks.one_of("mode", self.mode, tuple(CELLS))
        checks.one_of("bias_mode", self.bias_mode, tuple(BIAS_MODES))
        for name in ("num_layers", "num_units", "input_size"):
            checks.int_at_least(name, getattr(self, name), 1)
        if self.num_dirs not in (1, 2):
            raise ValueError(f"num_dirs must be 1 or 2, got {self.num_dirs!r}")
        if self.num_proj is not None and (self.mode != "lstm" or not 1 <= self.num_proj < self.num_units):
            raise ValueError(f"num_proj must be None, or in 1..num_units-1 for mode 'lstm', got {self.num_proj!r}")
        if self.skip_input and self.input_size != self.num_units:
            raise ValueError(f"skip_input needs input_size == num_units, got {self.input_size} and {self.num_units}")
        if self.cell_clip is not None:
            if self.mode != "lstm":
                raise ValueError(f"cell_clip is an LSTM's, got one for mode {self.mode!r}")
            object.__setattr__(self, "cell_clip", checks.cell_clip(self.cell_clip))

    @classmethod
    def of(cls, model) -> "Network":
        """The network of a model of this project (``reference.CudnnLSTM(...)``, the cuDNN backend's, ...); a
        model without a ``bias_mode`` has the double bias, one without a ``cell_clip`` no clip."""
        return cls(model.rnn_mode, model.num_layers, model.num_units, model.input_size, model.num_dirs,
                   model.num_proj, model.input_mode == "skip_input", getattr(model, "bias_mode", "double"),
                   getattr(model, "cell_clip", None))

    @property
    def cell(self) -> Cell:
        """The mode's cell (an LSTM's with its clip, where it has one)."""
        cell = CELLS[self.mode]
        if self.cell_clip is None:
            return cell
        return cell._replace(step=partial(cell.step, clip=self.cell_clip),
                             step_backward=partial(cell.step_backward, clip=self.cell_clip))

    @property
    def state_width(self) -> int:
        """``Hr``: the width of ``h`` and of each direction's output."""
        return self.num_proj or self.num_units

    def input_width(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.num_dirs * self.state_width

    def canonical_entries(self) -> list[tuple[str, int, int, tuple[int, ...]]]:
        """``(kind, pseudo_layer, lin_layer_id, shape)`` of each canonical tensor, in canonical order: every
        pseudo-layer's matrices (lin layers ``0..2G-1``, the projection last), then its biases likewise (those
        of the bias mode, ``layout.bias_slots``)."""
        G, H, Hr = self.cell.gates, self.num_units, self.state_width
        weights, biases = [], []
        for pl in range(self.num_layers * self.num_dirs):
            layer = pl // self.num_dirs
            skip = layer == 0 and self.skip_input  # no input matrices; the biases are every layer's
            for lin in range(2 * G):
                on_input = lin < G
                if not (on_input and skip):
                    weights.append(("weight", pl, lin, (H, self.input_width(layer) if on_input else Hr)))
            biases += [("bias", pl, lin, (H,)) for lin, present in bias_slots(self.bias_mode, G) if present]
            if self.num_proj is not None:
                weights.append(("weight", pl, PROJECTION, (self.num_proj, H)))
        return weights + biases


class Outputs(NamedTuple):
    """``output [T, B, D*Hr]``, ``output_h [L*D, B, Hr]``, ``output_c [L*D, B, H]`` or ``None`` (LSTM only),
    in the call's layout and the data's dtype."""

    output: Array
    output_h: Array
    output_c: Array | None


class Gradients(NamedTuple):
    """Gradients of ``x``, ``h0``, ``c0`` (``None`` but for the LSTM) in the call's layout, and of the
    canonical ``weights`` and ``biases`` (lists in canonical order), all in the data's dtype."""

    input: Array
    input_h: Array
    input_c: Array | None
    weights: list[Array]
    biases: list[Array]


# ---- one direction --------------------------------------------------------------------------------


def run_order(lengths: Array, reverse: bool) -> tuple[Array, Array]:
    """An index ``(time [T, B], batch [1, B])`` of a time-major ``[T, B, ...]`` array giving its steps in the
    order a direction runs them: as they are, or each sequence reversed within its length (padding stays in
    place). Either way the index is its own inverse, so it also puts run-order results back."""
    T = int(lengths.max()) if lengths.size else 0
    t = np.arange(T)[:, None]
    time = np.where(reverse & (t < lengths), lengths - 1 - t, t)
    return time, np.arange(lengths.size)[None, :]


def run_direction(step: Callable, x: Array, h0: Array, c0: Array | None, lengths: Array,
                  reverse: bool = False) -> tuple[Array, Array, Array | None, list]:
    """One direction of one layer: ``step(x_t [n, in], h [n, Hr], c) -> (h', c', cache)`` over ``x [T, B, in]``
    from ``h0 [B, Hr]`` and ``c0 [B, H]`` (or ``None``), each sequence ``b`` for its ``lengths[b]`` steps.

    Returns ``y [T, B, Hr]`` (zeros past each length), the final ``h [B, Hr]`` and ``c``, and the tape: per
    run-order step, the sequences it ran (``valid [B]``) and the step's cache."""
    T, B = x.shape[:2]
    time, batch = run_order(lengths, reverse)
    x_run = x[time, batch]  # the steps up to the longest sequence, in run order
    y_run = np.zeros((len(x_run), B, h0.shape[1]), dtype=h0.dtype)
    h, c = h0.copy(), None if c0 is None else c0.copy()
    tape = []
    for t in range(len(x_run)):
        valid = t < lengths
        h_new, c_new, cache = step(x_run[t, valid], h[valid], None if c is None else c[valid])
        h[valid] = h_new
        y_run[t, valid] = h_new
        if c is not None:
            c[valid] = c_new
        tape.append((valid, cache))
    y = np.zeros((T, B, h0.shape[1]), dtype=h0.dtype)
    y[: len(x_run)] = y_run[time, batch]
    return y, h, c, tape


def backprop_direction(step_backward: Callable, tape: list, dy: Array, dh_n: Array, dc_n: Array | None,
                       lengths: Array, reverse: bool, in_width: int) -> tuple[Array, Array, Array | None, CellParams]:
    """Backprop through time of :func:`run_direction`'s ``tape``: ``dy [T, B, Hr]`` of its outputs (ignored
    past each length), ``dh_n [B, Hr]`` and ``dc_n`` of its final states, which enter at each sequence's
    last valid step. Returns ``dx [T, B, in_width]`` (zeros past each length), ``dh0``, ``dc0`` and the
    parameter gradients summed over the steps."""
    T, B = dy.shape[:2]
    time, batch = run_order(lengths, reverse)
    dy_run = dy[time, batch]
    dx_run = np.zeros((len(tape), B, in_width), dtype=dy.dtype)
    dh, dc = dh_n.copy(), None if dc_n is None else dc_n.copy()
    total = None
    for t in reversed(range(len(tape))):
        valid, cache = tape[t]
        dx_t, dh_t, dc_t, grads = step_backward(cache, dh[valid] + dy_run[t, valid],
                                                None if dc is None else dc[valid])
        dx_run[t, valid], dh[valid] = dx_t, dh_t
        if dc is not None:
            dc[valid] = dc_t
        total = grads if total is None else _added(total, grads)
    dx = np.zeros((T, B, in_width), dtype=dy.dtype)
    dx[: len(tape)] = dx_run[time, batch]
    return dx, dh, dc, total


def _added(a: CellParams, b: CellParams) -> CellParams:
    def add(u, v):
        if u is None:
            return None
        return u + v if isinstance(u, np.ndarray) else [s + t for s, t in zip(u, v)]

    return CellParams(*(add(u, v) for u, v in zip(a, b)))


# ---- the network ------------------------------------------------------------------------------------


class _Call(NamedTuple):
    """A call's arguments checked and made time-major, in the compute dtype."""

    storage: np.dtype
    cells: list[CellParams]
    x: Array
    h0: Array
    c0: Array | None
    lengths: Array
    scales: list[Array]
    batch_sizes: Array | None  # a packed x's


def _state(name: str, value, LD: int, B: int, width: int, storage: np.dtype, time_major: bool) -> Array:
    """A ``[L*D, B, width]`` state (or its gradient; ``None``: zeros), time-major in the compute dtype."""
    if value is None:
        return np.zeros((LD, B, width), dtype=compute_dtype(storage))
    doc = f"[L*D, B, {width}]" if time_major else f"[B, L*D, {width}]"
    checks.array(name, value, storage, 3, doc)
    checks.shape(name, value, (LD, B, width) if time_major else (B, LD, width), doc)
    return (value if time_major else value.transpose(1, 0, 2)).astype(compute_dtype(storage))


def _check(net: Network, weights, biases, x, h0, c0, lengths, dropout, masks, time_major) -> _Call:
    if not isinstance(net, Network):
        raise TypeError(f"net must be a reference.spec.Network, got {type(net).__name__}")
    time_major = checks.flag("time_major", time_major)
    batch_sizes = None
    if isinstance(x, PackedSequence):
        if not time_major or lengths is not None:
            raise ValueError("a packed x takes neither time_major=False nor lengths (its batch_sizes give them)")
        batch_sizes = packing.check_batch_sizes("x.batch_sizes", x.batch_sizes)
        if not isinstance(x.data, np.ndarray) or x.data.dtype not in STORAGE_DTYPES:
            raise TypeError(f"x.data must be a float16, float32 or float64 numpy.ndarray, got "
                            f"{getattr(x.data, 'dtype', type(x.data).__name__)}")
        x, lengths = packing.unpack(packing.check("x", x, x.data.dtype, net.input_size))
    if not isinstance(x, np.ndarray) or x.dtype not in STORAGE_DTYPES:
        raise TypeError(f"x must be a float16, float32 or float64 numpy.ndarray, got "
                        f"{getattr(x, 'dtype', type(x).__name__)}")
    storage, cdt = x.dtype, compute_dtype(x.dtype)
    seq_doc = "[T, B, input_size]" if time_major else "[B, T, input_size]"
    checks.array("x", x, storage, 3, seq_doc)
    if min(x.shape[:2]) < 1 or x.shape[2] != net.input_size:
        raise ValueError(f"x must have shape {seq_doc} with T >= 1, B >= 1, input_size = {net.input_size}, "
                         f"got {x.shape}")
    x = x if time_major else x.transpose(1, 0, 2)
    T, B = x.shape[:2]
    LD = net.num_layers * net.num_dirs
    h0 = _state("h0", h0, LD, B, net.state_width, storage, time_major)
    if not net.cell.has_cell_state and c0 is not None:
        raise ValueError(f"c0 must be None for mode {net.mode!r} (no cell state)")
    c0 = _state("c0", c0, LD, B, net.num_units, storage, time_major) if net.cell.has_cell_state else None
    try:
        lengths = np.full(B, T) if lengths is None else checks.sequence_lengths(lengths, B, T)
    except (TypeError, ValueError) as exc:  # named as this function names it
        raise type(exc)(str(exc).replace("sequence_lengths", "lengths", 1)) from None
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
        raise ValueError(f"dropout must be a number in [0, 1], got {checks.shown(dropout)}")
    if isinstance(masks, np.ndarray) or not isinstance(masks, Sequence):
        raise TypeError(f"masks must be a list of boolean arrays, got {type(masks).__name__}")
    if dropout > 0 and len(masks) != net.num_layers - 1:
        raise ValueError(f"masks must hold num_layers - 1 = {net.num_layers - 1} arrays with dropout {dropout}, "
                         f"got {len(masks)}")
    mask_doc = "[T, B, D*Hr]" if time_major else "[B, T, D*Hr]"
    width = net.num_dirs * net.state_width
    scale = cdt.type(1.0 / (1.0 - dropout) if dropout < 1 else 0.0)
    scales = []
    for k, mask in enumerate(masks if dropout > 0 else ()):
        checks.array(f"masks[{k}]", mask, np.dtype(bool), 3, mask_doc)
        checks.shape(f"masks[{k}]", mask, (T, B, width) if time_major else (B, T, width), mask_doc)
        scales.append((mask if time_major else mask.transpose(1, 0, 2)) * scale)
    return _Call(storage, _cells(net, weights, biases, storage), x.astype(cdt), h0, c0, lengths, scales,
                 batch_sizes)


def _cells(net: Network, weights, biases, storage: np.dtype) -> list[CellParams]:
    """The canonical lists (checked against :meth:`Network.canonical_entries`) as per pseudo-layer
    :class:`CellParams` in the compute dtype."""
    entries = net.canonical_entries()
    found = {}
    for name, tensors, kind in (("weights", weights, "weight"), ("biases", biases, "bias")):
        mine = [e for e in entries if e[0] == kind]
        if isinstance(tensors, np.ndarray) or not isinstance(tensors, Sequence):
            raise TypeError(f"{name} must be a list of {len(mine)} arrays, got {type(tensors).__name__}")
        if len(tensors) != len(mine):
            raise ValueError(f"{name} must hold {len(mine)} arrays for {net}, got {len(tensors)}")
        for i, ((_, pl, lin, shape), t) in enumerate(zip(mine, tensors)):
            what = f"{name}[{i}] (pseudo_layer {pl}, lin_layer_id {lin})"
            checks.array(what, t, storage, len(shape), str(list(shape)))
            checks.shape(what, t, shape, str(list(shape)))
            found[(kind, pl, lin)] = t.astype(compute_dtype(storage))
    G = net.cell.gates

    def gates(kind: str, pl: int, first: int) -> list[Array] | None:
        blocks = [found.get((kind, pl, lin)) for lin in range(first, first + G)]
        return None if blocks[0] is None else blocks

    return [CellParams(gates("weight", pl, 0), gates("bias", pl, 0), gates("weight", pl, G), gates("bias", pl, G),
                       found.get(("weight", pl, PROJECTION)))
            for pl in range(net.num_layers * net.num_dirs)]


def _canonical(net: Network, grads: list[CellParams], storage: np.dtype) -> tuple[list[Array], list[Array]]:
    """The inverse of :func:`_cells`: per pseudo-layer gradients as canonical lists in ``storage``."""
    G = net.cell.gates
    weights, biases = [], []
    for kind, pl, lin, _ in net.canonical_entries():
        g = grads[pl]
        if lin == PROJECTION:
            tensor = g.P
        else:
            on_input = lin < G
            blocks = (g.W if on_input else g.R) if kind == "weight" else (g.b_W if on_input else g.b_R)
            tensor = blocks[lin % G]
        (weights if kind == "weight" else biases).append(tensor.astype(storage))
    return weights, biases


def _run(net: Network, call: _Call) -> tuple[Array, Array, Array | None, list]:
    """Forward through the stack: ``y [T, B, D*Hr]``, ``h_n``, ``c_n`` (time-major, compute dtype) and the
    tapes of every pseudo-layer."""
    h_n, c_n = np.empty_like(call.h0), None if call.c0 is None else np.empty_like(call.c0)
    tapes = []
    layer_input = call.x
    for layer in range(net.num_layers):
        outputs = []
        for direction in range(net.num_dirs):
            pl = layer * net.num_dirs + direction
            step = partial(net.cell.step, call.cells[pl], storage=call.storage)
            y, h_n[pl], c, tape = run_direction(step, layer_input, call.h0[pl],
                                                None if c_n is None else call.c0[pl], call.lengths, direction == 1)
            if c_n is not None:
                c_n[pl] = c
            outputs.append(y)
            tapes.append(tape)
        layer_input = np.concatenate(outputs, axis=2)
        if layer < len(call.scales):
            layer_input = layer_input * call.scales[layer]
        if call.storage != layer_input.dtype:  # a buffer of the data type between layers
            layer_input = layer_input.astype(call.storage).astype(layer_input.dtype)
    return layer_input, h_n, c_n, tapes


def caller_layout(a: Array | None, time_major: bool, storage: np.dtype) -> Array | None:
    """A time-major ``[T, B, ...]`` (or ``[L*D, B, ...]``) result in the caller's layout (the first two axes
    swapped unless ``time_major``) and dtype ``storage``; ``None`` stays ``None``."""
    if a is None:
        return None
    return a.astype(storage) if time_major else np.ascontiguousarray(a.transpose(1, 0, 2)).astype(storage)


def forward(net: Network, weights: Sequence[Array], biases: Sequence[Array], x: Array, h0: Array | None = None,
            c0: Array | None = None, *, lengths=None, dropout: float = 0.0, masks: Sequence[Array] = (),
            time_major: bool = True, padding_fill: float = 0.0, math_type: str = "fma") -> Outputs:
    """The network's outputs.

    ``weights``, ``biases``: canonical lists (``net.canonical_entries()``) of ``x``'s dtype; ``x [T, B, in]``;
    ``h0 [L*D, B, Hr]``, ``c0 [L*D, B, H]`` (LSTM only), ``None`` for zeros; ``lengths [B]`` each in
    ``1..T`` (``None``: all ``T``); ``masks``: the ``L-1`` boolean keep-masks ``[T, B, D*Hr]`` of a training
    pass with ``dropout`` (ignored where ``dropout == 0``); ``padding_fill``: the output past each length, in
    ``x``'s dtype (``checks.padding_fill``). ``time_major=False`` swaps the first two axes of every sequence,
    state and mask. A packed ``x`` (``reference.PackedSequence``) gives a packed output, its masks those of
    the padded batch ``[T, B, D*Hr]``. ``math_type``: ``"fma"`` or ``"tf32"`` (float32 or float64 ``x``; with
    float64, the TF32 truth): how the GEMMs read their operands (``cell.py``, "Math type")."""
    call = _check(net, weights, biases, x, h0, c0, lengths, dropout, masks, time_major)
    _check_math(math_type, call.storage)
    fill = checks.padding_fill(padding_fill, call.storage)
    if call.batch_sizes is not None and checks.fills(fill):
        raise ValueError(f"padding_fill must be 0.0 with a packed x (a packed output has no padding), got {fill!r}")
    with np.errstate(over="ignore", invalid="ignore", under="ignore"), cell_math(math_type):
        y, h_n, c_n, _ = _run(net, call)
    return _outputs(call, y, h_n, c_n, fill, time_major)


def _check_math(math_type: object, storage: np.dtype) -> None:
    """``math_type`` one of ``cell.MATH_TYPES``, and ``"tf32"`` only for float32 or float64 data (float16 data has
    float32 math, cuDNN's HALF data and FLOAT math, which TF32 does not apply to)."""
    checks.one_of("math_type", math_type, MATH_TYPES)
    if math_type == "tf32" and storage == np.float16:
        raise ValueError("math_type 'tf32' applies to float32 data (and float64, the TF32 truth), not float16")


def _outputs(call: _Call, y: Array, h_n: Array, c_n: Array | None, fill, time_major: bool) -> Outputs:
    """A run's outputs as the caller receives them: ``fill`` past each length, in the call's layout, dtype and
    packing."""
    for b, n in enumerate(call.lengths):
        y[n:, b] = fill
    output, h_n, c_n = (caller_layout(a, time_major, call.storage) for a in (y, h_n, c_n))
    return Outputs(_packed_like(call, output), h_n, c_n)


def _packed_like(call: _Call, sequence: Array) -> Array | PackedSequence:
    """A time-major result as the call's input came: packed (with its batch sizes) after a packed ``x``."""
    if call.batch_sizes is None:
        return sequence
    return packing.pack(sequence, call.lengths)  # its batch sizes are the call's, from the same lengths


def backward(net: Network, weights: Sequence[Array], biases: Sequence[Array], x: Array, h0: Array | None,
             c0: Array | None, d_output: Array, d_output_h: Array | None = None, d_output_c: Array | None = None,
             *, lengths=None, dropout: float = 0.0, masks: Sequence[Array] = (), time_major: bool = True,
             math_type: str = "fma") -> Gradients:
    """Gradients of ``<output, d_output> + <output_h, d_output_h> + <output_c, d_output_c>`` with respect to
    ``x``, ``h0``, ``c0`` and the canonical weights and biases, for the forward pass of :func:`forward` with
    the same arguments. ``d_output`` has ``output``'s shape (its values past each length are ignored; packed
    with ``x``'s batch sizes after a packed ``x``), ``d_output_h`` and ``d_output_c`` those of the final
    states (``None``: zeros)."""
    return forward_and_backward(net, weights, biases, x, h0, c0, d_output, d_output_h, d_output_c, lengths=lengths,
                                dropout=dropout, masks=masks, time_major=time_major, math_type=math_type)[1]


def forward_and_backward(net: Network, weights: Sequence[Array], biases: Sequence[Array], x: Array,
                         h0: Array | None, c0: Array | None, d_output: Array, d_output_h: Array | None = None,
                         d_output_c: Array | None = None, *, lengths=None, dropout: float = 0.0,
                         masks: Sequence[Array] = (), time_major: bool = True,
                         math_type: str = "fma") -> tuple[Outputs, Gradients]:
    """:func:`forward`'s outputs (zeros past each length) and :func:`backward`'s gradients of one call, from the
    one forward pass the gradients need: what a caller wanting both would otherwise compute twice."""
    call = _check(net, weights, biases, x, h0, c0, lengths, dropout, masks, time_major)
    _check_math(math_type, call.storage)
    T, B = call.x.shape[:2]
    LD, D, Hr = net.num_layers * net.num_dirs, net.num_dirs, net.state_width
    if call.batch_sizes is not None:
        d_output = packing.check("d_output", d_output, call.storage, D * Hr)
        if not np.array_equal(d_output.batch_sizes, call.batch_sizes):
            raise ValueError("d_output.batch_sizes must be x's")
        d_output, _ = packing.unpack(d_output)
    seq_doc = "[T, B, D*Hr]" if time_major else "[B, T, D*Hr]"
    checks.array("d_output", d_output, call.storage, 3, seq_doc)
    checks.shape("d_output", d_output, (T, B, D * Hr) if time_major else (B, T, D * Hr), seq_doc)
    d_out = (d_output if time_major else d_output.transpose(1, 0, 2)).astype(call.h0.dtype)
    dh_n = _state("d_output_h", d_output_h, LD, B, Hr, call.storage, time_major)
    if not net.cell.has_cell_state and d_output_c is not None:
        raise ValueError(f"d_output_c must be None for mode {net.mode!r} (no cell state)")
    dc_n = None if call.c0 is None else _state("d_output_c", d_output_c, LD, B, net.num_units, call.storage,
                                                time_major)
    dh0, dc0 = np.empty_like(call.h0), None if call.c0 is None else np.empty_like(call.c0)
    grads: list[CellParams | None] = [None] * LD
    with np.errstate(over="ignore", invalid="ignore", under="ignore"), cell_math(math_type):
        y, h_n, c_n, tapes = _run(net, call)
        for layer in reversed(range(net.num_layers)):
            width = net.input_width(layer)
            d_in = np.zeros((T, B, width), dtype=d_out.dtype)
            for direction in range(D):
                pl = layer * D + direction
                dx, dh0[pl], dc, grads[pl] = backprop_direction(
                    partial(net.cell.step_backward, call.cells[pl]), tapes[pl],
                    d_out[:, :, direction * Hr : (direction + 1) * Hr], dh_n[pl],
                    None if dc_n is None else dc_n[pl], call.lengths, direction == 1, width)
                if dc0 is not None:
                    dc0[pl] = dc
                d_in += dx
            if layer > 0 and call.scales:
                d_in = d_in * call.scales[layer - 1]
            d_out = d_in
    d_weights, d_biases = _canonical(net, grads, call.storage)
    d_x, dh0, dc0 = (caller_layout(a, time_major, call.storage) for a in (d_out, dh0, dc0))
    return (_outputs(call, y, h_n, c_n, 0.0, time_major),
            Gradients(_packed_like(call, d_x), dh0, dc0, d_weights, d_biases))
