"""The contract both backends keep (``reference`` and ``cudnn_backend``): one config and its validation, the
results of a forward and a backward call, what a reserve holds, TensorFlow's ``__call__`` and the checks of a
call's arguments. NumPy, the argument checks, the layout spec, the precision rules and the packed layout
(``reference.packing``) only: nothing of the reference's engine, so the cuDNN backend uses the same contract
without the engine.

Shapes are written time-major, as in ``reference.model``; ``time_major=False`` swaps the first two axes of
sequences and states.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Protocol, Sequence

import numpy as np

from . import checks, packing
from .layout import BIAS_MODES, LayoutSpec
from .packing import PackedSequence
from .precision import storage_dtype

INPUT_MODES = ("linear_input", "skip_input", "auto_select")
DIRECTIONS = ("unidirectional", "bidirectional")


class ModeShape(NamedTuple):
    """What a cell mode means to a caller: its ``gates`` in canonical (cuDNN ``lin_layer_id``) order,
    whether it has a cell state and whether it takes a recurrent projection (``num_proj``)."""

    gates: tuple[str, ...]
    has_cell_state: bool
    supports_projection: bool


# Declared here for both backends; the engine's table (``reference.modes.MODES``) must agree (a test holds it).
MODE_SHAPES: dict[str, ModeShape] = {
    "relu": ModeShape(("h",), False, False),
    "tanh": ModeShape(("h",), False, False),
    "lstm": ModeShape(("i", "f", "c", "o"), True, True),
    "gru": ModeShape(("r", "z", "h"), False, False),
    "classic_gru": ModeShape(("r", "z", "h"), False, False),
}


def new_model_token() -> int:
    """A token that names one model object: random, 122 bits, so a ``ForwardResult`` pickled in another
    process never matches a model there by chance (a counter restarts in every process)."""
    return uuid.uuid4().int


# ---- the config -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelConfig:
    """A model's validated constructor arguments (``input_mode`` resolved, ``dtype`` a NumPy dtype;
    ``bias_mode`` one of ``reference.layout.BIAS_MODES``)."""

    rnn_mode: str
    num_layers: int
    num_units: int
    input_size: int
    input_mode: str
    direction: str
    dtype: np.dtype
    dropout: float
    seed: int
    num_proj: int | None
    bias_mode: str = "double"
    cell_clip: tuple[float, float] | None = None  # the LSTM's (lclip, rclip): cudnnRNNSetClip_v9's MINMAX

    @property
    def num_dirs(self) -> int:
        return 2 if self.direction == "bidirectional" else 1

    @property
    def gates(self) -> tuple[str, ...]:
        """Gate names in canonical (cuDNN lin_layer_id) order: ``i f c o`` LSTM, ``r z h`` GRU, ``h`` RNN."""
        return MODE_SHAPES[self.rnn_mode].gates

    @property
    def has_cell_state(self) -> bool:
        return MODE_SHAPES[self.rnn_mode].has_cell_state

    @property
    def state_width(self) -> int:
        """Hr: the width of h and of each direction's output (num_proj or num_units)."""
        return self.num_proj or self.num_units

    def layout_spec(self) -> LayoutSpec:
        """What fixes the parameter layout (``reference.layout``)."""
        return LayoutSpec(num_gates=len(self.gates), num_layers=self.num_layers, num_dirs=self.num_dirs,
                          num_units=self.num_units, input_size=self.input_size, num_proj=self.num_proj,
                          skip_input=self.input_mode == "skip_input", bias_mode=self.bias_mode)

    def attributes(self) -> dict[str, object]:
        """A model's public attributes of its config, by name (``rnn_mode`` is its class's)."""
        return {name: getattr(self, name) for name in ("num_layers", "num_units", "input_size", "input_mode",
                                                        "direction", "num_dirs", "dtype", "dropout", "seed",
                                                        "num_proj", "bias_mode", "cell_clip")}

    def arguments(self) -> str:
        """The constructor arguments as a model's ``repr`` shows them (``num_proj`` and ``bias_mode`` where not
        their defaults)."""
        proj = f", num_proj={self.num_proj}" if self.num_proj is not None else ""
        bias = f", bias_mode={self.bias_mode!r}" if self.bias_mode != "double" else ""
        clip = f", cell_clip={self.cell_clip!r}" if self.cell_clip is not None else ""
        return (f"num_layers={self.num_layers}, num_units={self.num_units}, input_size={self.input_size}, "
                f"input_mode={self.input_mode!r}, direction={self.direction!r}, dtype={self.dtype.name}, "
                f"dropout={self.dropout}, seed={self.seed}{proj}{bias}{clip}")


def model_config(rnn_mode: str, num_layers: int, num_units: int, input_size: int, input_mode: str = "linear_input",
                 direction: str = "unidirectional", dtype: object = np.float32, dropout: float = 0.0, seed: int = 0,
                 num_proj: int | None = None, bias_mode: str = "double",
                 cell_clip: tuple[float, float] | None = None) -> ModelConfig:
    """Every backend's constructor checks, in argument order: the config, or a ``TypeError``/``ValueError``
    naming the argument. ``input_mode="auto_select"`` resolves by TensorFlow's rule; ``num_proj`` is the
    LSTM's: the other modes refuse one (a ``TypeError``, as for an argument their constructors lack);
    ``bias_mode`` is one of ``reference.layout.BIAS_MODES`` (cuDNN's ``cudnnRNNBiasMode_t``); ``cell_clip`` the
    LSTM's ``(lclip, rclip)`` (``checks.cell_clip``)."""
    checks.one_of("rnn_mode", rnn_mode, tuple(MODE_SHAPES))
    num_layers = checks.int_at_least("num_layers", num_layers, 1)
    num_units = checks.int_at_least("num_units", num_units, 1)
    input_size = checks.int_at_least("input_size", input_size, 1)
    checks.one_of("input_mode", input_mode, INPUT_MODES)
    if input_mode == "auto_select":  # TensorFlow's rule (ToRNNInputMode)
        input_mode = "skip_input" if input_size == num_units else "linear_input"
    if input_mode == "skip_input" and input_size != num_units:
        raise ValueError(f"input_mode='skip_input' requires input_size == num_units, "
                         f"got input_size={input_size}, num_units={num_units}")
    checks.one_of("direction", direction, DIRECTIONS)
    dtype = storage_dtype(dtype)
    if isinstance(dropout, (bool, np.bool_)) or not isinstance(dropout, (int, float, np.floating, np.integer)):
        raise TypeError(f"dropout must be a float in [0, 1], got {checks.shown(dropout)}")
    if not 0.0 <= dropout <= 1.0:  # also refuses NaN; compares an int too large for a float exactly
        raise ValueError(f"dropout must be in [0, 1], got {checks.shown(dropout)}")
    seed = checks.int_at_least("seed", seed, 0)
    if num_proj is not None and not MODE_SHAPES[rnn_mode].supports_projection:
        raise TypeError(f"num_proj is an LSTM's (a recurrent projection: rnn_mode 'lstm'); rnn_mode {rnn_mode!r} "
                        f"takes none, got {checks.shown(num_proj)}")
    if num_proj is not None:
        num_proj = checks.int_at_least("num_proj", num_proj, 1)
        if num_proj >= num_units:
            raise ValueError(f"num_proj must be in 1..num_units-1 = 1..{num_units - 1} "
                             f"(cuDNN takes projSize == hiddenSize as 'no projection'), got {num_proj}")
    checks.one_of("bias_mode", bias_mode, tuple(BIAS_MODES))
    if cell_clip is not None and rnn_mode != "lstm":
        raise TypeError(f"cell_clip is an LSTM's (its cell state clipped: rnn_mode 'lstm'); rnn_mode {rnn_mode!r} "
                        f"takes none, got {checks.shown(cell_clip)}")
    return ModelConfig(rnn_mode, num_layers, num_units, input_size, input_mode, direction, dtype, float(dropout),
                       seed, num_proj, bias_mode, None if cell_clip is None else checks.cell_clip(cell_clip))


# ---- results ----------------------------------------------------------------------------------------


class ReserveContract(Protocol):
    """What every backend's reserve (``ForwardResult.reserve``) holds besides its own: the model it comes
    from, whether it is a training pass, its layout and its validated lengths. ``dropout_masks`` are the
    keep-masks where a backend can give them (empty otherwise)."""

    model_token: int
    is_training: bool
    time_major: bool
    sequence_lengths: np.ndarray | None
    dropout_masks: tuple
    batch_sizes: np.ndarray | None  # a packed call's (``reference.PackedSequence``), else None


class ForwardResult(NamedTuple):
    """``output [T, B, D*Hr]``, ``output_h [L*D, B, Hr]``, ``output_c [L*D, B, H]`` (``None`` unless LSTM);
    after a packed input, ``output`` is a :class:`reference.PackedSequence` of the same ``batch_sizes``."""

    output: np.ndarray
    output_h: np.ndarray
    output_c: np.ndarray | None
    reserve: ReserveContract


class Gradients(NamedTuple):
    """Gradients of a forward call's inputs, in that call's layout and the model's dtype.

    ``input [T, B, input_size]`` (a :class:`reference.PackedSequence` after a packed input), ``input_h [L*D, B,
    Hr]``, ``input_c [L*D, B, H]`` (``None`` unless LSTM), ``params [params_size()]`` in the opaque layout
    (``params_to_canonical`` splits it per tensor).
    """

    input: np.ndarray
    input_h: np.ndarray
    input_c: np.ndarray | None
    params: np.ndarray


def training_reserve(fwd: object, model_token: int, reserve_type: type):
    """The reserve of ``fwd`` when it is a training ``forward()`` result of the model ``model_token`` names;
    the error says which of the three it is not."""
    if not isinstance(fwd, ForwardResult) or not isinstance(fwd.reserve, reserve_type):
        raise TypeError(f"fwd must be the ForwardResult of this model's forward(), got {type(fwd).__name__}")
    reserve = fwd.reserve
    if reserve.model_token != model_token:
        raise ValueError("fwd comes from another model's forward(); backward needs this model's own result")
    if not reserve.is_training:
        raise ValueError("backward needs a forward pass run with is_training=True "
                         "(TensorFlow: 'To use CudnnRNN in gradients, is_training must be set to True')")
    return reserve


def caller_layout(a, time_major: bool, dtype: np.dtype):
    """A ``[T, B, ...]`` (or ``[L*D, B, ...]``) result as ``dtype`` in the caller's layout: as is when
    ``time_major``, else the first two axes swapped (contiguous). Array methods only, so the cuDNN
    backend passes CuPy arrays through the same function."""
    a = a.astype(dtype, copy=False)
    return a if time_major else a.transpose(1, 0, 2).copy()


# ---- a call's arguments -----------------------------------------------------------------------------

# A backend's array check: ``(name, value, ndim, dims_doc)`` -> an array of its kind, of the model's dtype
# and of rank ``ndim`` (``reference.checks.array`` for NumPy), or the error naming the argument.
ArrayCheck = Callable[[str, object, int, str], Any]


class ForwardArguments(NamedTuple):
    """A forward call's checked arguments: ``input`` as given (the caller's layout; a packed input's ``data``),
    the states time-major (``None`` where not given), ``T`` and ``B``, the two flags as bools, the fill, and a
    packed input's checked ``batch_sizes`` (``None`` for an unpacked one)."""

    input: Any
    input_h: Any | None
    input_c: Any | None
    T: int
    B: int
    time_major: bool
    is_training: bool
    padding_fill: np.generic = np.float64(0.0)  # in the model's dtype
    batch_sizes: np.ndarray | None = None


def forward_arguments(config: ModelConfig, array: ArrayCheck, input_data: object, input_h: object,
                      input_c: object, is_training: object, time_major: object,
                      padding_fill: object = 0.0, sequence_lengths: object = None) -> ForwardArguments:
    """The checks of ``forward``'s arguments that both backends make, in this order (each backend then
    checks ``params``, and ``sequence_lengths`` of an unpacked input; a packed input's lengths are its
    ``batch_sizes``, and it takes neither ``sequence_lengths``, ``time_major=False`` nor a fill)."""
    time_major = checks.flag("time_major", time_major)
    is_training = checks.flag("is_training", is_training)
    fill = checks.padding_fill(padding_fill, config.dtype)
    if isinstance(input_data, PackedSequence):
        return _packed_arguments(config, array, input_data, input_h, input_c, is_training, time_major, fill,
                                 sequence_lengths)
    seq_doc = "[T, B, input_size]" if time_major else "[B, T, input_size]"
    x = array("input_data", input_data, 3, seq_doc)
    T, B = x.shape[:2] if time_major else x.shape[1::-1]
    if T < 1 or B < 1 or x.shape[2] != config.input_size:
        raise ValueError(f"input_data must have shape {seq_doc} with T >= 1, B >= 1, "
                         f"input_size = {config.input_size}, got {x.shape}")
    h0, c0 = _states(config, array, "input_h", input_h, "input_c", input_c, B, time_major)
    return ForwardArguments(x, h0, c0, T, B, time_major, is_training, fill)


def _packed_arguments(config: ModelConfig, array: ArrayCheck, packed: PackedSequence, input_h: object,
                      input_c: object, is_training: bool, time_major: bool, fill: np.generic,
                      sequence_lengths: object) -> ForwardArguments:
    """:func:`forward_arguments` of a packed ``input_data``: its ``batch_sizes`` a host NumPy array (cuDNN
    reads the lengths on the host, as PyTorch keeps ``batch_sizes`` on the CPU), its ``data`` an array of
    the backend's."""
    if not time_major:
        raise ValueError("time_major must be True with a packed input_data: cuDNN's packed layout is "
                         "sequence-major, and the states beside it are [num_layers*num_dirs, B, ...]")
    if sequence_lengths is not None:
        raise ValueError("sequence_lengths must be None with a packed input_data: its batch_sizes give the "
                         "lengths")
    if checks.fills(fill):
        raise ValueError(f"padding_fill must be 0.0 with a packed input_data: a packed output has no padding, "
                         f"got {fill!r}")
    batch_sizes = packing.check_batch_sizes("input_data.batch_sizes", packed.batch_sizes)
    doc = "[sum(batch_sizes), input_size]"
    data = array("input_data.data", packed.data, 2, doc)
    checks.shape("input_data.data", data, (int(batch_sizes.sum()), config.input_size), doc)
    T, B = len(batch_sizes), int(batch_sizes[0])
    h0, c0 = _states(config, array, "input_h", input_h, "input_c", input_c, B, True)
    return ForwardArguments(data, h0, c0, T, B, True, is_training, fill, batch_sizes)


def backward_arguments(config: ModelConfig, array: ArrayCheck, T: int, B: int, tm: bool, output_backprop: object,
                       output_h_backprop: object, output_c_backprop: object,
                       batch_sizes: np.ndarray | None = None) -> tuple[Any, Any | None, Any | None]:
    """The checks of ``backward``'s gradients that both backends make (``T``, ``B``, ``tm``, ``batch_sizes``:
    the forward call's sizes, ``time_major`` and, for a packed call, its batch sizes): ``(output_backprop as
    given, or a packed one's data; output_h_backprop, output_c_backprop)``, the states time-major or ``None``.
    After a packed call ``output_backprop`` is a :class:`reference.PackedSequence` of the same batch sizes."""
    width = config.num_dirs * config.state_width
    if batch_sizes is not None:
        if not isinstance(output_backprop, PackedSequence):
            raise TypeError(f"output_backprop must be a reference.PackedSequence like the forward call's output, "
                            f"got {type(output_backprop).__name__}")
        sizes = packing.check_batch_sizes("output_backprop.batch_sizes", output_backprop.batch_sizes)
        if not np.array_equal(sizes, batch_sizes):
            raise ValueError(f"output_backprop.batch_sizes must be the forward call's {batch_sizes.tolist()}, got "
                             f"{checks.shown(sizes.tolist())}")
        doc = "[sum(batch_sizes), num_dirs*Hr]"
        dy = array("output_backprop.data", output_backprop.data, 2, doc)
        checks.shape("output_backprop.data", dy, (int(batch_sizes.sum()), width), doc)
    else:
        seq_doc = "[T, B, num_dirs*Hr]" if tm else "[B, T, num_dirs*Hr]"
        dy = array("output_backprop", output_backprop, 3, seq_doc)
        checks.shape("output_backprop", dy, ((T, B) if tm else (B, T)) + (width,), seq_doc)
    return (dy, *_states(config, array, "output_h_backprop", output_h_backprop, "output_c_backprop",
                         output_c_backprop, B, tm))


def _states(config: ModelConfig, array: ArrayCheck, h_name: str, h: object, c_name: str, c: object, B: int,
            time_major: bool) -> tuple[Any | None, Any | None]:
    """``h [L*D, B, Hr]`` and an LSTM's ``c [L*D, B, H]`` time-major (``None`` where not given); a mode without
    a cell state refuses ``c``."""
    h = _state(config, array, h_name, h, B, config.state_width, time_major)
    if not config.has_cell_state:
        return h, checks.no_cell_state(c_name, c, config.rnn_mode)
    return h, _state(config, array, c_name, c, B, config.num_units, time_major)


def _state(config: ModelConfig, array: ArrayCheck, name: str, value: object, B: int, width: int,
           time_major: bool):
    if value is None:
        return None
    LD = config.num_layers * config.num_dirs
    width_name = "H" if width == config.num_units else "num_proj"
    doc = f"[num_layers*num_dirs, B, {width_name}]" if time_major else f"[B, num_layers*num_dirs, {width_name}]"
    state = array(name, value, 3, doc)
    checks.shape(name, state, (LD, B, width) if time_major else (B, LD, width), doc)
    return state if time_major else state.transpose(1, 0, 2)


# ---- TensorFlow's __call__ --------------------------------------------------------------------------


class NoCellStateCall:
    """TensorFlow's ``__call__`` for modes without a cell state, over any class with ``forward``."""

    def __call__(
        self,
        input_data: np.ndarray,
        input_h: np.ndarray | None,
        params: np.ndarray,
        is_training: bool = False,
        sequence_lengths: Sequence[int] | np.ndarray | None = None,
        time_major: bool = True,
        *,
        padding_fill: float = 0.0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(output [T, B, D*H], output_h [L*D, B, H])`` (``output`` packed after a packed input); see
        ``forward``."""
        result = self.forward(input_data, input_h, params, None, is_training, sequence_lengths, time_major,
                              padding_fill=padding_fill)
        return result.output, result.output_h


class LSTMCall:
    """TensorFlow's ``__call__`` for the LSTM (``input_c`` before ``params``), over any class with ``forward``."""

    def __call__(
        self,
        input_data: np.ndarray,
        input_h: np.ndarray | None,
        input_c: np.ndarray | None,
        params: np.ndarray,
        is_training: bool = False,
        sequence_lengths: Sequence[int] | np.ndarray | None = None,
        time_major: bool = True,
        *,
        padding_fill: float = 0.0,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(output [T, B, D*Hr], output_h [L*D, B, Hr], output_c [L*D, B, H])`` (``output`` packed after a
        packed input); see ``forward``."""
        result = self.forward(input_data, input_h, params, input_c, is_training, sequence_lengths, time_major,
                              padding_fill=padding_fill)
        return result.output, result.output_h, result.output_c
