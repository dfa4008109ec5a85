"""Platform-independent cells, one time step each, over TensorFlow's cell-format weights
(``reference.formats.tf``), and a stack runner with ``dynamic_rnn`` / ``stack_bidirectional_dynamic_rnn``
semantics. They are written the way TensorFlow writes them (``[x, h] @ kernel``), independently of the fused
reference, which they must equal on the same weights; the stack runner steps them through the plain
direction loop of ``reference.spec`` (lengths, reversal within each length), not the fused engine's.

Cells take and return TF-style values: ``cell(inputs [B, in], state) -> (output, new_state)`` with state
``h [B, H]`` for the RNN and GRU cells and ``(c, h)`` (TF's ``LSTMStateTuple`` order) for the LSTM cell.
Float16 weights compute in float32, as the fused reference does, and round where it rounds
(``reference.precision.HALF_ROUNDS``): each GEMM's result before its bias (so ``[x, h] @ kernel`` is made as
``x @ kernel_x`` and ``h @ kernel_h``, each rounded), the new ``h`` a step returns, and each layer's output.
"""

from __future__ import annotations

from typing import ClassVar, Sequence

import numpy as np

from . import checks
from .formats.canonical import check_bias_mode, check_mapping, check_model, check_tensor, matrix_shape
from .formats.tf import cell_prefix, expected_shapes
from .precision import STORAGE_DTYPES, compute_dtype, rounds_at
from .spec import rnn
from .spec.cell import sigmoid
from .spec.network import caller_layout, run_direction

Array = np.ndarray


def _compute(*arrays: Array) -> list[Array]:
    dtype = compute_dtype(arrays[0].dtype)
    return [a.astype(dtype) for a in arrays]


def _matrix_shape(cell: str, name: str, a: object) -> tuple[int, int]:
    """``(rows, columns)`` of ``a``, which must be a non-empty float matrix (else an error naming it): the
    sizes a cell reads off its kernels before it checks its other tensors against them."""
    if not isinstance(a, np.ndarray) or a.dtype not in STORAGE_DTYPES:
        raise TypeError(f"{cell} {name} must be a float16, float32 or float64 array, got "
                        f"{getattr(a, 'dtype', type(a).__name__)}")
    return matrix_shape(f"{cell} {name}", a.shape)


def _check_cell(cell: str, tensors: dict[str, tuple[Array, tuple[int, ...]]]) -> None:
    """Every ``name: (array, expected shape)`` of a cell's tensors has its shape and the first one's dtype:
    a bias of the wrong length would otherwise broadcast (a ``[1]`` bias added to every unit)."""
    dtype = next(iter(tensors.values()))[0].dtype
    for name, (a, shape) in tensors.items():
        check_tensor(f"{cell} {name}", a, dtype, shape, cell)


class _TFCell:
    """What every cell shares: its constructor arguments are TF tensors, named (under the cell's prefix) by
    ``tf_tensors`` in order; ``tf_optional`` names those a checkpoint may lack (``None`` then). A cell
    knows its tensors' ``dtype``, the width of its input (``input_width``) and of its output and recurrent
    state (``state_width``: the projection's width, else ``num_units``)."""

    tf_tensors: ClassVar[tuple[str, ...]]
    tf_optional: ClassVar[frozenset[str]] = frozenset()
    has_cell_state: ClassVar[bool] = False
    dtype: np.dtype
    num_units: int
    input_width: int
    state_width: int

    def _sizes(self, dtype: np.dtype, num_units: int, input_width: int, state_width: int) -> None:
        self.dtype, self.num_units, self.input_width, self.state_width = dtype, num_units, input_width, state_width

    def _round(self, v: Array, point: str) -> Array:
        """``v`` rounded to the cell's dtype where its storage rounds at ``point`` (``reference.precision``)."""
        return v.astype(self.dtype).astype(v.dtype) if rounds_at(self.dtype, point) else v

    def _gemm(self, u: Array, kernel: Array) -> Array:
        """``u @ kernel``, rounded as a GEMM's result (``"gemm_outputs"``)."""
        return self._round(u @ kernel, "gemm_outputs")

    def _affine(self, x: Array, h: Array, kernel: Array, bias: Array) -> Array:
        """``[x, h] @ kernel + bias``; where GEMM results are rounded, ``x``'s and ``h``'s products apart, each
        rounded before the bias (cuDNN's two GEMMs); else TF's one GEMM, as written."""
        if rounds_at(self.dtype, "gemm_outputs"):
            width = x.shape[1]
            return self._gemm(x, kernel[:width]) + self._gemm(h, kernel[width:]) + bias
        return np.concatenate([x, h], axis=1) @ kernel + bias

    def _state(self, h: Array) -> Array:
        """The new ``h`` (or the LSTM's ``c``) as a step stores it (``"state"``)."""
        return self._round(h, "state")

    def _check_call(self, inputs: object, h: object, c: object = None) -> None:
        """The values of one call, checked as :func:`run_cells` checks its own: ``inputs [B, input_width]``,
        ``h [B, state_width]`` and (LSTM) ``c [B, num_units]``, each of the cell's dtype or the dtype it
        computes and returns in (float32 for float16 weights)."""
        dtypes = {self.dtype, compute_dtype(self.dtype)}
        values = (("inputs", inputs, self.input_width), ("h", h, self.state_width),
                  ("c", c, self.num_units))[:3 if self.has_cell_state else 2]
        for name, value, width in values:
            if not isinstance(value, np.ndarray) or value.dtype not in dtypes:
                raise TypeError(f"{name} must be a numpy.ndarray of {' or '.join(sorted(map(str, dtypes)))} with "
                                f"shape [B, {width}], got {getattr(value, 'dtype', type(value).__name__)}")
            checks.not_masked(name, value)
        if inputs.ndim != 2 or inputs.shape[0] < 1:
            raise ValueError(f"inputs must have shape [B, {self.input_width}] with B >= 1, got {inputs.shape}")
        for name, value, width in values:
            checks.shape(name, value, (inputs.shape[0], width), f"[B, {width}]")

    @classmethod
    def from_tf(cls, tensors: dict[str, Array], prefix: str, **options) -> _TFCell:
        """The cell whose tensors are ``tensors[f"{prefix}/{name}"]``; ``options`` go to the constructor.
        Errors name the tensor: a missing one, or one whose shape or dtype disagrees with the others'."""
        missing = [f"{prefix}/{n}" for n in cls.tf_tensors
                   if n not in cls.tf_optional and f"{prefix}/{n}" not in tensors]
        if missing:
            raise ValueError(f"{cls.__name__} needs tensor(s) the checkpoint lacks: {missing}")
        try:
            return cls(*(tensors.get(f"{prefix}/{name}") for name in cls.tf_tensors), **options)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{prefix}: {exc}") from None


class _StatelessCell(_TFCell):
    """A cell whose state is its output ``h [B, H]``."""

    def step(self, x: Array, h: Array, c: None) -> tuple[Array, None]:
        raise NotImplementedError

    def __call__(self, inputs: Array, state: Array) -> tuple[Array, Array]:
        """``inputs [B, input_width]``, ``state = h [B, num_units]`` -> ``(h', h')``."""
        self._check_call(inputs, state)
        h, _ = self.step(inputs, state, None)
        return h, h


ACTIVATIONS = {name: rnn.ACTIVATIONS[name][0] for name in ("tanh", "relu")}


class BasicRNNCell(_StatelessCell):
    """TF ``BasicRNNCell``: ``h' = act([x, h] @ kernel + bias)``; ``kernel [in+H, H]``, ``bias [H]``."""

    tf_tensors = ("kernel", "bias")

    def __init__(self, kernel: Array, bias: Array, activation: str = "tanh") -> None:
        rows, H = _matrix_shape("BasicRNNCell", "kernel", kernel)
        _check_cell("BasicRNNCell", {"kernel": (kernel, (max(rows, H + 1), H)), "bias": (bias, (H,))})
        self._sizes(kernel.dtype, H, rows - H, H)
        self.kernel, self.bias = _compute(kernel, bias)
        self.activation = ACTIVATIONS[checks.one_of("activation", activation, tuple(ACTIVATIONS))]

    def step(self, x: Array, h: Array, c: None) -> tuple[Array, None]:
        return self._state(self.activation(self._affine(x, h, self.kernel, self.bias))), None


class CudnnCompatibleLSTMCell(_TFCell):
    """TF ``CudnnCompatibleLSTMCell`` (``LSTMBlockCell``, forget_bias 0, no peepholes): ``[x, h] @ kernel +
    bias`` gives gate blocks **i, c, f, o**; ``c' = sigmoid(i) * tanh(ci) + sigmoid(f) * c``,
    ``h' = sigmoid(o) * tanh(c')``, then ``h' @ projection`` when a ``projection [H, P]`` is given
    (TF ``LSTMCell(num_proj)``). ``kernel [in+Hr, 4H]``, ``bias [4H]``."""

    tf_tensors = ("kernel", "bias", "projection/kernel")
    tf_optional = frozenset({"projection/kernel"})
    has_cell_state = True

    def __init__(self, kernel: Array, bias: Array, projection: Array | None = None) -> None:
        cell = "CudnnCompatibleLSTMCell"
        rows, columns = _matrix_shape(cell, "kernel", kernel)
        H = -(-columns // 4)
        Hr = H if projection is None else _matrix_shape(cell, "projection/kernel", projection)[1]
        _check_cell(cell, {"kernel": (kernel, (max(rows, Hr + 1), 4 * H)), "bias": (bias, (4 * H,)),
                           **({} if projection is None else {"projection/kernel": (projection, (H, Hr))})})
        self.kernel, self.bias = _compute(kernel, bias)
        self.projection = None if projection is None else _compute(projection)[0]
        self._sizes(kernel.dtype, H, rows - Hr, Hr)

    def step(self, x: Array, h: Array, c: Array) -> tuple[Array, Array]:
        H = self.num_units
        z = self._affine(x, h, self.kernel, self.bias)
        i, ci, f, o = sigmoid(z[:, :H]), np.tanh(z[:, H:2 * H]), sigmoid(z[:, 2 * H:3 * H]), sigmoid(z[:, 3 * H:])
        c_new = ci * i + c * f
        h_new = o * np.tanh(c_new)
        if self.projection is not None:
            h_new = self._gemm(self._state(h_new), self.projection)  # o * tanh(c) stored for the GEMM to read
        return self._state(h_new), self._state(c_new)

    def __call__(self, inputs: Array, state: tuple[Array, Array]) -> tuple[Array, tuple[Array, Array]]:
        """``inputs [B, input_width]``, ``state = (c [B, num_units], h [B, state_width])`` (TF's
        ``LSTMStateTuple`` order) -> ``(h', (c', h'))``."""
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            raise TypeError(f"state must be the pair (c, h), got {type(state).__name__}")
        c, h = state
        self._check_call(inputs, h, c)
        h_new, c_new = self.step(inputs, h, c)
        return h_new, (c_new, h_new)


class CudnnCompatibleGRUCell(_StatelessCell):
    """TF ``CudnnCompatibleGRUCell``: ``r, u = sigmoid([x, h] @ gates_kernel + gates_bias)``,
    ``c = tanh(x @ input_kernel + input_bias + r * (h @ hidden_kernel + hidden_bias))``,
    ``h' = (1 - u) * c + u * h``."""

    tf_tensors = ("gates/kernel", "gates/bias", "candidate/input_projection/kernel",
                  "candidate/input_projection/bias", "candidate/hidden_projection/kernel",
                  "candidate/hidden_projection/bias")

    def __init__(self, gates_kernel: Array, gates_bias: Array, input_kernel: Array, input_bias: Array,
                 hidden_kernel: Array, hidden_bias: Array) -> None:
        cell = "CudnnCompatibleGRUCell"
        width, H = _matrix_shape(cell, "candidate/input_projection/kernel", input_kernel)
        _check_cell(cell, {"gates/kernel": (gates_kernel, (width + H, 2 * H)), "gates/bias": (gates_bias, (2 * H,)),
                           "candidate/input_projection/kernel": (input_kernel, (width, H)),
                           "candidate/input_projection/bias": (input_bias, (H,)),
                           "candidate/hidden_projection/kernel": (hidden_kernel, (H, H)),
                           "candidate/hidden_projection/bias": (hidden_bias, (H,))})
        (self.gates_kernel, self.gates_bias, self.input_kernel, self.input_bias, self.hidden_kernel,
         self.hidden_bias) = _compute(gates_kernel, gates_bias, input_kernel, input_bias, hidden_kernel, hidden_bias)
        self._sizes(gates_kernel.dtype, H, width, H)

    def step(self, x: Array, h: Array, c: None) -> tuple[Array, None]:
        H = self.num_units
        gates = sigmoid(self._affine(x, h, self.gates_kernel, self.gates_bias))
        r, u = gates[:, :H], gates[:, H:]
        candidate = np.tanh(self._gemm(x, self.input_kernel) + self.input_bias
                            + r * (self._gemm(h, self.hidden_kernel) + self.hidden_bias))
        return self._state((1 - u) * candidate + u * h), None


class GRUCell(_StatelessCell):
    """TF ``GRUCell`` (the textbook GRU): gates as ``CudnnCompatibleGRUCell``,
    ``c = tanh([x, r * h] @ candidate_kernel + candidate_bias)``."""

    tf_tensors = ("gates/kernel", "gates/bias", "candidate/kernel", "candidate/bias")

    def __init__(self, gates_kernel: Array, gates_bias: Array, candidate_kernel: Array, candidate_bias: Array) -> None:
        rows, H = _matrix_shape("GRUCell", "candidate/kernel", candidate_kernel)
        _check_cell("GRUCell", {"candidate/kernel": (candidate_kernel, (max(rows, H + 1), H)),
                                "gates/kernel": (gates_kernel, (max(rows, H + 1), 2 * H)),
                                "gates/bias": (gates_bias, (2 * H,)),
                                "candidate/bias": (candidate_bias, (H,))})
        self.gates_kernel, self.gates_bias, self.candidate_kernel, self.candidate_bias = _compute(
            gates_kernel, gates_bias, candidate_kernel, candidate_bias)
        self._sizes(gates_kernel.dtype, H, rows - H, H)

    def step(self, x: Array, h: Array, c: None) -> tuple[Array, None]:
        H = self.num_units
        gates = sigmoid(self._affine(x, h, self.gates_kernel, self.gates_bias))
        r, u = gates[:, :H], gates[:, H:]
        candidate = np.tanh(self._affine(x, r * h, self.candidate_kernel, self.candidate_bias))
        return self._state((1 - u) * candidate + u * h), None


TF_CELLS: dict[str, tuple[type[_TFCell], dict]] = {
    "relu": (BasicRNNCell, {"activation": "relu"}), "tanh": (BasicRNNCell, {"activation": "tanh"}),
    "lstm": (CudnnCompatibleLSTMCell, {}), "gru": (CudnnCompatibleGRUCell, {}), "classic_gru": (GRUCell, {}),
}
"""The TF cell of each mode and its constructor options (``reference.formats.tf.CELL_NAMES`` names the cell
in a checkpoint)."""


def cells_from_tf(model, tensors: dict[str, Array], scope: str | None = None) -> list:
    """One cell per pseudo-layer of ``model`` from a TF-named checkpoint's tensors (others, such as a
    ``global_step``, are ignored); a tensor of the wrong shape or dtype for ``model`` is an error naming it."""
    check_model(model)
    check_bias_mode(model, "TensorFlow's cells")
    check_mapping("tensors", tensors, "tensors by TF variable name")
    for name, shape in expected_shapes(model, scope).items():
        if name in tensors:
            check_tensor(f"tensor {name!r}", tensors[name], model.dtype, shape, repr(model))
    cls, options = TF_CELLS[model.rnn_mode]
    return [cls.from_tf(tensors, cell_prefix(model, pl, scope), **options)
            for pl in range(model.num_layers * model.num_dirs)]


def _check_stack(cells: object, num_dirs: object) -> None:
    """A stack :func:`run_cells` can run: cells of one class and dtype, ``num_dirs`` (1 or 2) per layer, one
    state width, each layer's input width the previous layer's output width."""
    if isinstance(num_dirs, (bool, np.bool_)) or not isinstance(num_dirs, (int, np.integer)):
        raise TypeError(f"num_dirs must be the int 1 or 2, got {checks.shown(num_dirs)} ({type(num_dirs).__name__})")
    if num_dirs not in (1, 2):
        raise ValueError(f"num_dirs must be 1 or 2, got {num_dirs!r}")
    if not isinstance(cells, Sequence) or not cells or not all(isinstance(c, _TFCell) for c in cells):
        raise TypeError(f"cells must be a non-empty list of reference.cells cells, got {type(cells).__name__}")
    if len(cells) % num_dirs:
        raise ValueError(f"cells must hold num_dirs = {num_dirs} cells per layer, got {len(cells)}")
    first = cells[0]
    for pl, cell in enumerate(cells):
        layer = pl // num_dirs
        width = first.input_width if layer == 0 else num_dirs * first.state_width
        for what, got, want in (("a", type(cell).__name__, type(first).__name__), ("dtype", cell.dtype, first.dtype),
                                ("state width", cell.state_width, first.state_width),
                                ("num_units", cell.num_units, first.num_units),
                                ("input width", cell.input_width, width)):
            if got != want:
                raise ValueError(f"cells[{pl}] (layer {layer}) has {what} {got}, the stack needs {want}")


def run_cells(cells: Sequence, num_dirs: int, inputs: Array, initial_h: Array | None = None,
              initial_c: Array | None = None, sequence_lengths=None, time_major: bool = True):
    """Run a stack of cells (``cells[layer * num_dirs + direction]``) over ``inputs [T, B, in]``; each
    direction of a layer reads the previous layer's ``[forward | backward]`` output.

    ``inputs`` (and the states) have the cells' dtype; ``initial_h [L*D, B, Hr]``, ``initial_c [L*D, B, H]``
    (LSTM cells only) or ``None`` for zeros; ``sequence_lengths [B]`` each in ``1..T``. Every argument is
    checked as the fused model checks its own, before any work.
    Returns ``(output [T, B, D*Hr], output_h [L*D, B, Hr], output_c [L*D, B, H] or None)`` like the fused
    reference (``time_major=False`` swaps the first two axes of sequences and states).
    """
    time_major = checks.flag("time_major", time_major)
    _check_stack(cells, num_dirs)
    storage, first = cells[0].dtype, cells[0]
    seq_doc = "[T, B, input_width]" if time_major else "[B, T, input_width]"
    x = checks.array("inputs", inputs, storage, 3, seq_doc)
    x = x if time_major else x.transpose(1, 0, 2)
    T, B, width = x.shape
    if T < 1 or B < 1 or width != first.input_width:
        raise ValueError(f"inputs must have shape {seq_doc} with T >= 1, B >= 1 and the first cells' input width "
                         f"{first.input_width}, got {inputs.shape}")
    LD, lstm = len(cells), first.has_cell_state
    lengths = None if sequence_lengths is None else checks.sequence_lengths(sequence_lengths, B, T)
    x = x.astype(compute_dtype(storage))  # [T, B, in]

    def states(name: str, a: Array | None, width: int) -> list[Array]:
        if a is None:
            return [np.zeros((B, width), dtype=x.dtype) for _ in cells]
        doc = f"[L*D, B, {width}]" if time_major else f"[B, L*D, {width}]"
        checks.array(name, a, storage, 3, doc)
        checks.shape(name, a, (LD, B, width) if time_major else (B, LD, width), doc)
        a = a if time_major else a.transpose(1, 0, 2)
        return [s.astype(x.dtype) for s in a]

    if not lstm and initial_c is not None:
        raise ValueError(f"initial_c must be None for {type(first).__name__} cells (no cell state)")
    Hr = first.state_width
    h0 = states("initial_h", initial_h, Hr)
    c0 = states("initial_c", initial_c, first.num_units) if lstm else [None] * LD

    def cell_step(cell):
        """A TF cell as a step of ``reference.spec``'s direction loop (which keeps no cache of it)."""
        def step(x_t, h, c):
            h_new, c_new = cell.step(x_t, h, c)
            return h_new, c_new, None

        return step

    h_n, c_n = [], []
    layer_input = x
    full = np.full(B, T) if lengths is None else lengths
    # As the fused reference: overflow is the data's. A step past a sequence's length is not run for it.
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        for layer in range(len(cells) // num_dirs):
            outputs = []
            for direction, pl in enumerate(range(layer * num_dirs, (layer + 1) * num_dirs)):
                y, h, c, _ = run_direction(cell_step(cells[pl]), layer_input, h0[pl], c0[pl], full, direction == 1)
                outputs.append(y)
                h_n.append(h)
                c_n.append(c)
            layer_input = np.concatenate(outputs, axis=2)
            if storage != x.dtype:  # float16 between layers, as the fused reference (precision.py)
                layer_input = layer_input.astype(storage).astype(x.dtype)

    return (caller_layout(layer_input, time_major, storage), caller_layout(np.stack(h_n), time_major, storage),
            caller_layout(np.stack(c_n), time_major, storage) if lstm else None)
