"""TensorFlow's canonical save format: what ``CudnnOpaqueParamsSaveable`` writes and what the
platform-independent cells (``CudnnCompatibleLSTMCell``, ``CudnnCompatibleGRUCell``, ``BasicRNNCell``)
read.

Names (``scope/`` optional): unidirectional ``rnn/multi_rnn_cell/cell_{layer}/{cell}/...``, bidirectional
``stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/{fw|bw}/{cell}/...``, with ``{cell}`` one of
``cudnn_compatible_lstm_cell``, ``cudnn_compatible_gru_cell``, ``basic_rnn_cell`` (tanh and relu) and, for
the textbook GRU (not a cuDNN mode), TF's ``gru_cell``.

Tensors per cell (``in`` the layer's input width, ``Hr`` num_proj or num_units):

- basic_rnn_cell: ``kernel [in+Hr, H] = [W; R]^T``, ``bias [H] = b_W + b_R``
- cudnn_compatible_lstm_cell: ``kernel [in+Hr, 4H]``, ``bias [4H]``, gate columns in TF's order **i, c, f, o**
  (cuDNN's is i, f, c, o), biases summed; with a projection ``projection/kernel [H, P] = P^T``
- cudnn_compatible_gru_cell: ``gates/kernel [in+H, 2H]`` (columns r | u), ``gates/bias = b_W + b_R`` (r, u);
  the candidate's biases stay apart: ``candidate/input_projection/{kernel [in, H] = W_h^T, bias = b_Wh}`` and
  ``candidate/hidden_projection/{kernel [H, H] = R_h^T, bias = b_Rh}``
- gru_cell (textbook): ``gates/...`` as above, ``candidate/kernel [in+H, H] = [W_h; R_h]^T``,
  ``candidate/bias = b_Wh + b_Rh``

Restoring a summed bias gives each half of the sum (TF's rule: the sum is what the math sees); the two
halves are chosen so that they add up to the saved sum exactly. With skip_input, layer 0 (no input matrices,
its input biases as any layer's) is saved with identity input matrices, and restoring checks that they are
exactly that.

Bias modes. TensorFlow's ``CudnnRNN`` has the double bias only; the format extends to the others as the
canonical lists do, with no bias invented: a single mode's model is saved under the same names, each summed
bias being the one bias the mode has (``b_W`` with ``single_inp``, ``b_R`` with ``single_rec``; restored
exactly, not halved), and the cuDNN GRU's candidate keeps only the projection bias of the mode's side
(``candidate/input_projection/bias`` or ``candidate/hidden_projection/bias``); a ``"none"`` model is saved with
no bias tensor at all. TensorFlow's own cells (``reference.cells``) read the double bias's names only. The
bias mode is not told by the names: a checkpoint carries it in its config (``reference.checkpoint``).
"""

from __future__ import annotations

import re

import numpy as np

from ..layout import BIAS_MODES
from .canonical import (PseudoLayerTensors, by_pseudo_layer, check_fits, check_mapping, check_model, check_tensor,
                        flatten, input_matrices, matrix_shape, skipped_input_matrices, zeros)

CELL_NAMES = {"relu": "basic_rnn_cell", "tanh": "basic_rnn_cell", "lstm": "cudnn_compatible_lstm_cell",
              "gru": "cudnn_compatible_gru_cell", "classic_gru": "gru_cell"}
LSTM_TF_ORDER = (0, 2, 1, 3)  # TF column blocks i, c, f, o as canonical (cuDNN i, f, c, o) gate indices


# TensorFlow's rule for an op's (and so a variable's) name (``_VALID_OP_NAME_REGEX`` in
# tensorflow/python/framework/ops.py): what a scope written here must keep to for TF to restore the names.
TF_NAME = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_.\\/>-]*")


def check_scope_to_write(scope: str | None) -> None:
    """A variable scope to write tensors under: ``None`` or ``''`` (none), or a name TensorFlow takes (see
    :data:`TF_NAME`), not ending in ``/`` (joined to the names with one). Reading takes any string."""
    _check_scope_type(scope)
    if scope and (not TF_NAME.fullmatch(scope) or scope.endswith("/")):
        raise ValueError(f"scope {scope!r} is not a name TensorFlow takes: letters, digits and '.' first, then "
                         f"also '_', '-', '/', '\\' and '>', not ending in '/'")


def _check_scope_type(scope: object) -> None:
    if scope is not None and not isinstance(scope, str):
        raise TypeError(f"scope must be a str (a variable scope) or None, got {type(scope).__name__}")


def cell_prefix(model, pseudo_layer: int, scope: str | None = None) -> str:
    """The name of pseudo-layer ``pseudo_layer``'s cell: every tensor name of the format starts with it."""
    _check_scope_type(scope)
    layer, direction = divmod(pseudo_layer, model.num_dirs)
    if model.num_dirs == 1:
        base = f"rnn/multi_rnn_cell/cell_{layer}"
    else:
        base = f"stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/{'bw' if direction else 'fw'}"
    return f"{scope + '/' if scope else ''}{base}/{CELL_NAMES[model.rnn_mode]}"


def bias_mode(model) -> str:
    """A model's bias mode (``"double"`` for a model without one)."""
    return getattr(model, "bias_mode", "double")


def _sum(bw: list[np.ndarray] | None, br: list[np.ndarray] | None, g: int) -> np.ndarray | None:
    """The one bias TF's cells add for gate ``g``: ``b_W + b_R``, the one a single bias mode has, or ``None``."""
    if bw is None or br is None:
        return None if bw is None and br is None else (br if bw is None else bw)[g]
    return bw[g] + br[g]


def _joined_biases(bw: list[np.ndarray] | None, br: list[np.ndarray] | None, gates) -> np.ndarray | None:
    """:func:`_sum` of ``gates``, one after another (``None`` where the bias mode has none)."""
    parts = [_sum(bw, br, g) for g in gates]
    return None if parts[0] is None else np.concatenate(parts)


def to_tf(model, weights: list[np.ndarray], biases: list[np.ndarray], scope: str | None = None) -> dict[str, np.ndarray]:
    """Canonical lists -> ``{TF variable name: tensor}`` in TF's cell formats (the biases the model's bias mode
    has: module docstring)."""
    out: dict[str, np.ndarray | None] = {}
    for pl, t in enumerate(by_pseudo_layer(model, weights, biases)):
        p = cell_prefix(model, pl, scope)
        W, bW = input_matrices(model, t), t.b_W

        def joined(g):
            return np.concatenate([W[g], t.R[g]], axis=1)

        if model.rnn_mode in ("relu", "tanh"):
            out[f"{p}/kernel"] = joined(0).T
            out[f"{p}/bias"] = _sum(bW, t.b_R, 0)
        elif model.rnn_mode == "lstm":
            out[f"{p}/kernel"] = np.concatenate([joined(g) for g in LSTM_TF_ORDER], axis=0).T
            out[f"{p}/bias"] = _joined_biases(bW, t.b_R, LSTM_TF_ORDER)
            if t.P is not None:
                out[f"{p}/projection/kernel"] = t.P.T
        else:
            out[f"{p}/gates/kernel"] = np.concatenate([joined(0), joined(1)], axis=0).T
            out[f"{p}/gates/bias"] = _joined_biases(bW, t.b_R, (0, 1))
            if model.rnn_mode == "gru":
                out[f"{p}/candidate/input_projection/kernel"] = W[2].T
                out[f"{p}/candidate/input_projection/bias"] = None if bW is None else bW[2]
                out[f"{p}/candidate/hidden_projection/kernel"] = t.R[2].T
                out[f"{p}/candidate/hidden_projection/bias"] = None if t.b_R is None else t.b_R[2]
            else:
                out[f"{p}/candidate/kernel"] = joined(2).T
                out[f"{p}/candidate/bias"] = _sum(bW, t.b_R, 2)
    return {name: np.ascontiguousarray(a) for name, a in out.items() if a is not None}


_CELL = re.compile(r"^(?:(?P<scope>.+)/)?(?:rnn/multi_rnn_cell/cell_(?P<uni>\d+)|stack_bidirectional_rnn/"
                   r"cell_(?P<bi>\d+)/bidirectional_rnn/(?P<dir>fw|bw))/(?P<cell>\w+)/(?P<tensor>.+)$")
GATE_COLUMNS = {"lstm": ("kernel", 4), "gru": ("gates/kernel", 2), "classic_gru": ("gates/kernel", 2),
                "relu": ("kernel", 1), "tanh": ("kernel", 1)}  # the first layer's kernel: [in + Hr, k * H]


class NoCells(ValueError):
    """Tensors among which no cell of the names read here is found."""


class UnevenLayers(ValueError):
    """A stack of cells whose layers differ in size (a ``MultiRNNCell`` of 512, 256 and 128 units): not one cuDNN
    stack. ``sizes``: ``(input width, units)`` per layer; ``overrides``: the reading options under which it was
    found (the scope)."""

    def __init__(self, message: str, sizes: list[tuple[int, int]]):
        super().__init__(message)
        self.sizes = sizes


def _layer_sizes(found: dict, first, cell: str, kernel: str, k: int, layers: list[int]) -> list[tuple[int, int]]:
    """``(input width, units)`` of each layer's cell, off its kernel's shape ``[in + Hr, k * H]``."""
    sizes = []
    for layer in layers:
        entry = found.get((layer, first, cell, kernel))
        if entry is None:
            raise ValueError(f"the checkpoint lacks layer {layer}'s {kernel!r} of its {cell}")
        rows, cols = matrix_shape(f"layer {layer}'s {kernel!r}", entry[1])
        projection = found.get((layer, first, cell, "projection/kernel"))
        width = matrix_shape(f"layer {layer}'s 'projection/kernel'", projection[1])[1] if projection else cols // k
        sizes.append((rows - width, cols // k))
    return sizes


def pick_layer(tensors: dict, layer: int, scope: str | None = None) -> dict:
    """The tensors of one layer (``layer``) of a TF-named stack as a one-layer stack's (``cell_0``), under the
    same scope; every other layer's cell tensors are left out (others, such as a ``global_step``, are kept)."""
    if not isinstance(layer, int) or isinstance(layer, bool) or layer < 0:
        raise ValueError(f"layer must be a layer number >= 0, got {layer!r}")
    out, seen = {}, False
    for name, value in tensors.items():
        m = _CELL.match(name)
        if not m or m["cell"] not in CELL_NAMES.values() or (scope is not None and m["scope"] != scope):
            out[name] = value
            continue
        if int(m["uni"] if m["uni"] is not None else m["bi"]) != layer:
            continue
        seen = True
        start, end = m.span("uni") if m["uni"] is not None else m.span("bi")
        out[name[:start] + "0" + name[end:]] = value
    if not seen:
        raise ValueError(f"the checkpoint has no layer {layer}")
    return out


# TensorFlow cells whose checkpoints are not read: what each computes beyond its tensors.
TF1_CELLS = {"lstm_cell": "tf.nn.rnn_cell.LSTMCell", "basic_lstm_cell": "tf.nn.rnn_cell.BasicLSTMCell"}


def tf1_cells_note(names) -> str:
    """Why tensors of TensorFlow's ``LSTMCell`` / ``BasicLSTMCell`` among ``names`` are not read (else '')."""
    found = sorted({part for name in names for part in str(name).split("/") if part in TF1_CELLS})
    if not found:
        return ""
    return (f"; it holds {found[0]} tensors ({TF1_CELLS[found[0]]}), which are not read: that cell adds forget_bias "
            f"(1.0 unless built otherwise) to its forget gate at run time, which the checkpoint does not hold, and may "
            f"use peepholes, a cell clip or a projection; cudnn_compatible_lstm_cell is that cell with forget_bias=0")


def has_biases(tensors: dict, scope: str | None = None) -> bool:
    """Whether any cell's tensor under ``scope`` (``None``: none) is a bias (``.../bias``); ``tensors``: by name."""
    for name in tensors:
        m = _CELL.match(name)
        if m and m["scope"] == scope and m["cell"] in CELL_NAMES.values() and m["tensor"].endswith("bias"):
            return True
    return False


def config_from_tf(tensors: dict[str, tuple[str, tuple[int, ...]]], rnn_mode: str | None = None,
                   scope: str | None = None) -> dict:
    """The model config that TF checkpoint names and shapes tell (``tensors``: name -> (dtype name, shape)),
    with ``scope``, the variable scope they were found under (``None``: none). Other tensors (a
    ``global_step``, optimizer slots) are ignored. ``rnn_mode`` is needed only for ``basic_rnn_cell``
    (relu or tanh); ``scope`` only when the file holds RNNs under several scopes."""
    cells: dict[str | None, dict] = {}
    for name, (dtype, shape) in tensors.items():
        m = _CELL.match(name)
        if m and m["cell"] in CELL_NAMES.values():
            layer = int(m["uni"] if m["uni"] is not None else m["bi"])
            cells.setdefault(m["scope"], {})[(layer, m["dir"], m["cell"], m["tensor"])] = (dtype, tuple(shape))
    if scope is not None and scope not in cells:
        raise ValueError(f"no RNN cell under scope {scope!r}; scopes found: {sorted(s or '' for s in cells)}")
    if scope is None and len(cells) > 1:
        raise ValueError(f"RNN cells under several scopes {sorted(s or '' for s in cells)}: say which (--scope)")
    if not cells:
        raise NoCells("no TensorFlow RNN cell tensors (rnn/multi_rnn_cell/cell_N/... or "
                      "stack_bidirectional_rnn/cell_N/...) found" + tf1_cells_note(tensors))
    scope = scope if scope is not None else next(iter(cells))
    found = cells[scope]
    kinds = {cell for _, _, cell, _ in found}
    directions = {d for _, d, _, _ in found}
    if len(kinds) > 1 or (None in directions and len(directions) > 1):
        raise ValueError(f"mixed cells under scope {scope!r}: {sorted(kinds)}, directions {sorted(map(str, directions))}")
    kind = kinds.pop()
    modes = tuple(m for m, c in CELL_NAMES.items() if c == kind)
    if rnn_mode is None and len(modes) > 1:
        raise ValueError("relu and tanh RNNs have the same weights (basic_rnn_cell): say which (rnn_mode / --mode)")
    mode = rnn_mode or modes[0]
    if mode not in modes:
        raise ValueError(f"the checkpoint holds {CELL_NAMES[modes[0]]} cells, which cannot be a {mode!r} RNN")
    layers = sorted({layer for layer, _, _, _ in found})
    if layers != list(range(len(layers))):
        raise ValueError(f"the checkpoint's layers are {layers}, not 0..{len(layers) - 1}")
    first = "fw" if None not in directions else None
    kernel, k = GATE_COLUMNS[mode]
    cell = CELL_NAMES[mode]
    try:
        dtype, shape = found[(0, first, cell, kernel)]
    except KeyError:
        raise ValueError(f"the checkpoint lacks layer 0's {kernel!r} of its {cell}") from None
    rows, cols = matrix_shape(f"layer 0's {kernel!r}", shape)
    H = cols // k
    projection = found.get((0, first, cell, "projection/kernel"))
    num_proj = matrix_shape("layer 0's 'projection/kernel'", projection[1])[1] if projection else None
    sizes = _layer_sizes(found, first, cell, kernel, k, layers)
    D = 1 if first is None else 2
    if any(units != H for _, units in sizes) or any(width != D * (num_proj or H) for width, _ in sizes[1:]):
        told = ", ".join(f"layer {n}: {units} units on {width} inputs" for n, (width, units) in enumerate(sizes))
        raise UnevenLayers(f"the checkpoint's {len(sizes)} layers differ in size ({told}; a MultiRNNCell of cells of "
                           f"several sizes): a cuDNN stack's layers are all alike, so it is not one; take one layer "
                           f"(--layer N, options key layer) or run them as a chain of one-layer models, each with "
                           f"its own states (rnn-compat infer does; reference.chain.load_chain in Python)", sizes)
    return {"rnn_mode": mode, "num_layers": len(layers), "num_units": H, "input_size": rows - (num_proj or H),
            "input_mode": "linear_input", "direction": "unidirectional" if first is None else "bidirectional",
            "num_proj": num_proj, "dtype": dtype, "scope": scope}


def expected_shapes(model, scope: str | None = None) -> dict[str, tuple[int, ...]]:
    """Every tensor name of ``model``'s TF checkpoint with its shape."""
    return {name: a.shape for name, a in to_tf(model, *zeros(model), scope).items()}


def from_tf(model, tensors: dict[str, np.ndarray], scope: str | None = None) -> tuple[list, list]:
    """``{TF variable name: tensor}`` -> canonical lists; errors name the offending tensor."""
    check_model(model)
    check_mapping("tensors", tensors, "tensors by TF variable name")
    check_fits(model, sum(np.size(v) for v in tensors.values()), "the checkpoint's tensors")
    shapes = expected_shapes(model, scope)
    missing = [n for n in shapes if n not in tensors]
    if missing:
        raise ValueError(f"checkpoint lacks {len(missing)} tensor(s) of {model!r}, e.g. {missing[0]!r} "
                         f"(expected shape {list(shapes[missing[0]])})")
    extra = sorted(set(tensors) - set(shapes))
    if extra:
        raise ValueError(f"checkpoint has tensor(s) {model!r} does not: {extra[:3]}"
                         f"{' ...' if len(extra) > 3 else ''}")
    for name, shape in shapes.items():
        check_tensor(f"tensor {name!r}", tensors[name], model.dtype, shape, repr(model))

    G, H = len(model.gates), model.num_units
    mode = BIAS_MODES[bias_mode(model)]
    groups = []
    for pl in range(model.num_layers * model.num_dirs):
        p = cell_prefix(model, pl, scope)
        layer = pl // model.num_dirs
        width = model.input_size if layer == 0 else model.num_dirs * model.state_width
        W, R, bW, bR = [None] * G, [None] * G, [None] * G, [None] * G

        def split(kernel_t: np.ndarray, gates_order, summed: np.ndarray | None):
            for k, g in enumerate(gates_order):
                rows = kernel_t[k * H:(k + 1) * H]
                W[g], R[g] = rows[:, :width].copy(), rows[:, width:].copy()
                bW[g], bR[g] = _parts(None if summed is None else summed[k * H:(k + 1) * H], mode)

        if model.rnn_mode in ("relu", "tanh"):
            split(tensors[f"{p}/kernel"].T, (0,), tensors.get(f"{p}/bias"))
        elif model.rnn_mode == "lstm":
            split(tensors[f"{p}/kernel"].T, LSTM_TF_ORDER, tensors.get(f"{p}/bias"))
        else:
            split(tensors[f"{p}/gates/kernel"].T, (0, 1), tensors.get(f"{p}/gates/bias"))
            if model.rnn_mode == "gru":
                W[2] = tensors[f"{p}/candidate/input_projection/kernel"].T.copy()
                bW[2] = tensors.get(f"{p}/candidate/input_projection/bias")
                R[2] = tensors[f"{p}/candidate/hidden_projection/kernel"].T.copy()
                bR[2] = tensors.get(f"{p}/candidate/hidden_projection/bias")
            else:
                _split_candidate(tensors, p, width, W, R, bW, bR, mode)
        bR = None if bR[0] is None else [b.copy() for b in bR]
        bW = None if bW[0] is None else [b.copy() for b in bW]
        P = tensors[f"{p}/projection/kernel"].T.copy() if model.num_proj else None
        groups.append(PseudoLayerTensors(W=skipped_input_matrices(model, layer, W, p), R=R, b_W=bW, b_R=bR, P=P))
    return flatten(model, groups)


def _parts(summed: np.ndarray | None, mode) -> tuple[np.ndarray | None, np.ndarray | None]:
    """A saved summed bias as the cuDNN biases of ``mode`` (a :class:`reference.layout.BiasMode`): halves of the
    double bias, the whole of a single mode's one bias (exactly), ``None`` where nothing was saved."""
    if summed is None:
        return None, None
    if mode.input and mode.recurrent:
        return halves(summed)
    return (summed, None) if mode.input else (None, summed)


def _split_candidate(tensors, p, width, W, R, bW, bR, mode) -> None:
    kernel_t = tensors[f"{p}/candidate/kernel"].T
    W[2], R[2] = kernel_t[:, :width].copy(), kernel_t[:, width:].copy()
    bW[2], bR[2] = _parts(tensors.get(f"{p}/candidate/bias"), mode)


def halves(summed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two biases whose sum is exactly ``summed`` (``s/2`` twice is not, for odd multiples of the
    smallest subnormal)."""
    half = summed / 2
    return half, summed - half
