"""The public classes: configuration, parameters and the forward pass, with TensorFlow's semantics.

Shapes are written time-major; ``time_major=False`` swaps the first two axes of sequences *and* states
(TensorFlow ``CudnnRNNV3``). ``H`` is num_units, ``Hr`` the recurrent state width (num_proj or num_units),
``L`` num_layers, ``D`` num_dirs, ``G`` the gates per cell.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple, Sequence

import numpy as np

from . import buffers, checks, contract, layout, packing, precision, tf32
from .contract import (  # noqa: F401 (the shared contract, also importable from here as before)
    DIRECTIONS,
    INPUT_MODES,
    ForwardResult,
    Gradients,
    LSTMCall,
    NoCellStateCall,
    caller_layout,
    new_model_token,
    training_reserve,
)
from .layout import Region
from .modes import MODES, CellMode, clipped_lstm
from .precision import compute_dtype
from .backward import backprop_layers
from .formats.canonical import check_canonical
from .recurrence import PseudoLayerParams, StackTrace, run_layers
from .spec.cell import MATH_TYPES
from .streaming import BoundRNN


@dataclass(frozen=True)
class Reserve:
    """What a forward call keeps for the backward pass (the analogue of cuDNN's reserve space); the fields
    of :class:`reference.contract.ReserveContract` and the engine's trace.

    ``dropout_masks[l]`` is the boolean keep-mask applied to layer ``l``'s output (layout of the forward
    call: ``[T, B, D*Hr]`` time-major, ``[B, T, D*Hr]`` batch-major); empty without dropout.
    """

    model_token: int
    is_training: bool
    time_major: bool
    sequence_lengths: np.ndarray | None
    dropout_masks: tuple[np.ndarray, ...] = field(default=())
    trace: StackTrace | None = field(default=None, repr=False)  # is_training only
    batch_sizes: np.ndarray | None = None  # a packed call's; its masks and lengths are those of the padded batch


class _Stacking(NamedTuple):
    """How one field of :class:`PseudoLayerParams` is cut from the opaque buffer: its blocks' flat
    ``slices`` in compute order, the stacked ``shape``, and ``span``, the one slice they fill when they
    are consecutive (so the field can be a view), else ``None``."""

    slices: list[slice]
    shape: tuple[int, ...]
    span: slice | None


class _CudnnRNN:
    """A cuDNN RNN of one cell mode over an opaque parameter buffer (see the subclasses).

    ``bias_mode`` (keyword only) is cuDNN's ``cudnnRNNBiasMode_t``: ``"double"`` (the default: ``b_W`` and
    ``b_R`` per gate, as TensorFlow and PyTorch), ``"single_inp"`` (``b_W`` only), ``"single_rec"`` (``b_R``
    only) or ``"none"``. An absent bias is absent from the equations (``reference.spec``), from the canonical
    lists and from the opaque buffer (``reference.layout.bias_slots``); for the cuDNN GRU the single modes
    are different functions, since ``b_Rh`` sits inside ``r * (R_h h + b_Rh)``.

    ``cell_clip`` (keyword only, the LSTM's): ``(lclip, rclip)``, cuDNN's ``cudnnRNNSetClip_v9`` with
    ``CUDNN_RNN_CLIP_MINMAX``: each new cell state is clipped to ``[lclip, rclip]`` before ``tanh`` reads it,
    and the clipped state is carried and returned (``reference.spec.lstm``).

    ``math_type`` (keyword only): ``"fma"`` (the default) or, for float32 models, ``"tf32"``: every GEMM of the
    forward pass reads its operands rounded to TF32 (``reference.tf32``, by ``precision.TF32_ROUNDING``) and
    accumulates in float32, as a GPU's tensor cores under cuDNN's default math and PyTorch's ``allow_tf32``, and
    so does every GEMM of its backward pass (the gradients' products); nothing else changes.
    """

    rnn_mode: ClassVar[str]

    def __init__(
        self,
        num_layers: int,
        num_units: int,
        input_size: int,
        input_mode: str = "linear_input",
        direction: str = "unidirectional",
        dtype: object = np.float32,
        dropout: float = 0.0,
        seed: int = 0,
        num_proj: int | None = None,
        *,
        bias_mode: str = "double",
        cell_clip: tuple[float, float] | None = None,
        math_type: str = "fma",
    ) -> None:
        self._config = contract.model_config(self.rnn_mode, num_layers, num_units, input_size, input_mode,
                                             direction, dtype, dropout, seed, num_proj, bias_mode, cell_clip)
        vars(self).update(self._config.attributes())
        checks.one_of("math_type", math_type, MATH_TYPES)
        if math_type == "tf32" and self.dtype != np.float32:
            raise ValueError(f"math_type 'tf32' is float32's (TF32 tensor cores read float32 GEMM operands), got "
                             f"dtype {self.dtype}")
        self.math_type = math_type
        self._operand = None if math_type == "fma" else tf32.RULES[precision.TF32_ROUNDING]  # (read as made)
        self._mode: CellMode = MODES[self.rnn_mode] if self.cell_clip is None else clipped_lstm(*self.cell_clip)
        self._spec = self._config.layout_spec()
        regions = layout.canonical_layout(self._spec)
        self._weight_regions = [r for r in regions if r.kind == "weight"]
        self._bias_regions = [r for r in regions if r.kind == "bias"]
        self._regions = {(r.kind, r.pseudo_layer, r.lin_layer_id): r for r in regions}
        self._stacking = self._stacking_plan()
        self._params_size = layout.params_size(self._spec)
        self._rng = np.random.default_rng(self.seed)
        self._token = new_model_token()

    def __repr__(self) -> str:
        math = f", math_type={self.math_type!r}" if self.math_type != "fma" else ""
        return f"{type(self).__name__}({self._config.arguments()}{math})"

    @property
    def gates(self) -> tuple[str, ...]:
        """Gate names in canonical (cuDNN lin_layer_id) order: ``i f c o`` LSTM, ``r z h`` GRU, ``h`` RNN."""
        return self._mode.gates

    @property
    def state_width(self) -> int:
        """Hr: the width of h and of each direction's output (num_proj or num_units)."""
        return self._spec.state_width

    # ---- parameters -------------------------------------------------------------------------------

    def params_size(self) -> int:
        """Elements in the opaque parameter buffer."""
        return self._params_size

    def canonical_shapes(self) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
        """Shapes of the canonical weights and biases, in canonical order (the biases the bias mode has)."""
        return [r.shape for r in self._weight_regions], [r.shape for r in self._bias_regions]

    def canonical_regions(self) -> tuple[list[Region], list[Region]]:
        """The regions of the canonical weights and biases, in canonical order (each with its offset)."""
        return list(self._weight_regions), list(self._bias_regions)

    def opaque_layout(self) -> list[Region]:
        """Every tensor of the opaque buffer, in buffer order."""
        return layout.opaque_layout(self._spec)

    def canonical_to_params(self, weights: Sequence[np.ndarray], biases: Sequence[np.ndarray]) -> np.ndarray:
        """Pack canonical weights and biases (model dtype, canonical shapes) into a 1-D opaque buffer."""
        check_canonical(self, weights, biases)
        return layout.pack(self._weight_regions + self._bias_regions, list(weights) + list(biases),
                           self._params_size, self.dtype)

    def params_to_canonical(self, params: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Unpack a 1-D opaque buffer into canonical weights and biases (fresh arrays)."""
        self._check_params(params)
        return ([layout.view(params, r).copy() for r in self._weight_regions],
                [layout.view(params, r).copy() for r in self._bias_regions])

    def _check_params(self, params: object, name: str = "params") -> np.ndarray:
        params = checks.array(name, params, self.dtype, 1, "[params_size()]")
        checks.shape(name, params, (self._params_size,), "[params_size()]")
        return params

    def _stacking_plan(self) -> list[dict[str, _Stacking | None]]:
        """Per pseudo-layer, for each field of :class:`PseudoLayerParams`, how :meth:`_pseudo_layers` stacks it
        (gate blocks in the mode's compute order), or ``None`` where the buffer has no such matrix (skip_input's
        layer 0 has no input matrices). Row-major blocks stacked along their first axis are their flat slices
        one after another. A bias the bias mode lacks is planned as zeros (no slices): the engine adds it,
        ``v + 0 == v``, so every bias mode runs the one double-bias code path."""
        G, H, order = self._mode.num_gates, self.num_units, self._mode.gate_order

        def plan(kind: str, pl: int, lin_ids: Sequence[int]) -> _Stacking | None:
            regions = [self._regions.get((kind, pl, lin)) for lin in lin_ids]
            if regions[0] is None:
                return _Stacking([], (G * H,), None) if kind == "bias" else None
            slices = [slice(r.offset, r.offset + r.size) for r in regions]
            consecutive = all(a.stop == b.start for a, b in zip(slices, slices[1:]))
            return _Stacking(slices, (sum(r.shape[0] for r in regions), *regions[0].shape[1:]),
                             slice(slices[0].start, slices[-1].stop) if consecutive else None)

        recurrent = [G + g for g in order]
        return [{"W": plan("weight", pl, order), "b_W": plan("bias", pl, order),
                 "R": plan("weight", pl, recurrent), "b_R": plan("bias", pl, recurrent),
                 "P": plan("weight", pl, [layout.PROJECTION_LIN_LAYER_ID])}
                for pl in range(self.num_layers * self.num_dirs)]

    def _pseudo_layers(self, params: np.ndarray, copy: bool) -> list[PseudoLayerParams]:
        """Per pseudo-layer parameters, gate blocks stacked in the mode's compute order, in the compute dtype.
        With ``copy`` (a training pass, whose trace outlives the call while ``params`` may change) they are
        copies; else views of ``params`` where its blocks already lie in that order and dtype."""
        cdt = compute_dtype(self.dtype)
        viewable = not copy and params.dtype == cdt and params.flags.c_contiguous

        def stacked(plan: _Stacking | None) -> np.ndarray | None:
            if plan is None:
                return None
            if not plan.slices:  # a bias the bias mode lacks
                return np.zeros(plan.shape, cdt)
            if viewable and plan.span is not None:
                return params[plan.span].reshape(plan.shape)
            out = buffers.empty(plan.shape, cdt)
            np.concatenate([params[s] for s in plan.slices], out=out.reshape(-1))
            return out

        return [PseudoLayerParams(**{name: stacked(plan) for name, plan in fields.items()})
                for fields in self._stacking]

    # ---- forward ----------------------------------------------------------------------------------

    def forward(
        self,
        input_data: np.ndarray,
        input_h: np.ndarray | None,
        params: np.ndarray,
        input_c: np.ndarray | None = None,
        is_training: bool = True,
        sequence_lengths: Sequence[int] | np.ndarray | None = None,
        time_major: bool = True,
        *,
        padding_fill: float = 0.0,
    ) -> ForwardResult:
        """Run the network (TensorFlow ``CudnnRNNV3`` semantics).

        ``input_data [T, B, input_size]``, ``input_h [L*D, B, Hr]`` and ``input_c [L*D, B, H]`` (LSTM only;
        ``None`` = zeros), ``params [params_size()]``, ``sequence_lengths [B]`` each in ``1..T`` (steps past a
        length output ``padding_fill``, cuDNN's ``paddingFill``, zero by default, in the model's dtype, which
        it must fit; final states are taken at each sequence's last valid step). With ``time_major=False``
        the first two axes of ``input_data``, ``input_h``, ``input_c`` and of the results are swapped.
        ``input_data`` may be a :class:`reference.PackedSequence` (cuDNN's packed layout: ``data [sum(lengths),
        input_size]``, sequences sorted by decreasing length); ``output`` is then packed alike, the states are
        ``[L*D, B, ...]`` with ``B = batch_sizes[0]``, and ``sequence_lengths``, ``time_major=False`` and a
        fill are refused. Dropout applies between layers when ``is_training``.
        """
        args = contract.forward_arguments(self._config, self._array, input_data, input_h, input_c, is_training,
                                          time_major, padding_fill, sequence_lengths)
        params = self._check_params(params)
        return self._forward_layers(args, self._pseudo_layers(params, copy=args.is_training), sequence_lengths)

    def bind(self, params: np.ndarray) -> "BoundRNN":
        """This model bound to ``params``: a :class:`reference.BoundRNN` for inference and streaming, whose calls
        skip the parameter checks and unpacking (``docs/streaming.md``). Binding *copies* ``params``: a later
        change to the caller's buffer does not change the bound model."""
        return BoundRNN(self, self._check_params(params))

    def _forward_layers(self, args: contract.ForwardArguments, layers: Sequence[PseudoLayerParams],
                        sequence_lengths: Sequence[int] | np.ndarray | None) -> ForwardResult:
        """:meth:`forward` after its argument checks, over per pseudo-layer parameters (from
        :meth:`_pseudo_layers`, or a :class:`reference.BoundRNN`'s own)."""
        T, B, time_major, is_training = args.T, args.B, args.time_major, args.is_training
        if args.batch_sizes is not None:  # packed: run the padded batch (its padding is never read)
            x, lengths = packing.unpack(packing.PackedSequence(args.input, args.batch_sizes))
        else:
            x = args.input if time_major else args.input.transpose(1, 0, 2)
            lengths = None if sequence_lengths is None else checks.sequence_lengths(sequence_lengths, B, T)
        h0, c0 = self._zero_states(args.input_h, args.input_c, B)

        cdt = compute_dtype(self.dtype)
        masks = self._draw_dropout_masks(T, B) if is_training else ()
        keep = 1.0 - self.dropout
        scales = [m * (1.0 / keep if keep > 0 else 0.0) for m in masks]
        x_in = np.ascontiguousarray(x, dtype=cdt)
        if is_training and np.may_share_memory(x_in, x):  # the trace keeps it: backward must read what forward read
            x_in = x_in.copy()
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            y, h_n, c_n, trace = run_layers(
                self._mode, x_in, h0.astype(cdt),
                None if c0 is None else c0.astype(cdt),
                layers, self.num_dirs,
                None if lengths is None or (lengths == T).all() else lengths,
                self.dtype if self.dtype != cdt else None,  # float16 between layers (reference.precision)
                [s.astype(cdt) for s in scales], trace=is_training, storage=self.dtype, operand=self._operand,
            )
        out = functools.partial(caller_layout, time_major=time_major, dtype=self.dtype)
        reserve = Reserve(self._token, is_training, time_major, lengths,
                          tuple(m if time_major else m.transpose(1, 0, 2) for m in masks), trace, args.batch_sizes)
        if args.batch_sizes is not None:
            return ForwardResult(packing.pack(out(y), lengths), out(h_n),  # a copy, of the call's batch sizes
                                 None if c_n is None else out(c_n), reserve)
        output = out(y)
        if is_training and np.may_share_memory(output, y):  # y is the trace's: the caller may change its output
            output = output.copy()
        if lengths is not None:  # the padded steps hold zeros: the fill, where it is another value
            steps = output if time_major else output.transpose(1, 0, 2)
            for b, n in enumerate(lengths):
                steps[n:, b] = args.padding_fill
        return ForwardResult(output, out(h_n), None if c_n is None else out(c_n), reserve)

    # ---- backward ---------------------------------------------------------------------------------

    def backward(
        self,
        fwd: ForwardResult,
        output_backprop: np.ndarray,
        output_h_backprop: np.ndarray | None = None,
        output_c_backprop: np.ndarray | None = None,
        params_backprop_out: np.ndarray | None = None,
    ) -> Gradients:
        """Gradients of a training forward pass (TensorFlow ``CudnnRNNBackpropV3`` semantics).

        ``output_backprop`` has ``fwd.output``'s shape; ``output_h_backprop`` / ``output_c_backprop`` those of
        ``fwd.output_h`` / ``fwd.output_c`` (``None`` = zeros). ``output_backprop`` at padded steps is ignored.
        Returns fresh gradients; with ``params_backprop_out`` (a ``[params_size()]`` buffer of the model's
        dtype) the parameter gradient is *added* into that buffer, as cuDNN's ``BackwardWeights`` does
        (``CUDNN_WGRAD_MODE_ADD``), and the buffer is returned as ``Gradients.params``.
        Float16 models compute in float32 and round the gradients to float16.
        """
        reserve = training_reserve(fwd, self._token, Reserve)
        trace = reserve.trace
        T, B = trace.inputs[0].shape[:2]
        tm = reserve.time_major
        dy, dh, dc = contract.backward_arguments(self._config, self._array, T, B, tm, output_backprop,
                                                 output_h_backprop, output_c_backprop, reserve.batch_sizes)
        if reserve.batch_sizes is not None:  # the padded batch's gradient, zero past each length
            dy, _ = packing.unpack(packing.PackedSequence(dy, reserve.batch_sizes))
        dh, dc = self._zero_states(dh, dc, B)
        if params_backprop_out is not None:
            self._check_params(params_backprop_out, "params_backprop_out")
            if not params_backprop_out.flags.writeable:
                raise ValueError("params_backprop_out must be writeable (gradients are added into it)")

        cdt = compute_dtype(self.dtype)
        if not tm:
            dy = dy.transpose(1, 0, 2)
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            dx, dh0, dc0, grads = backprop_layers(self._mode, trace, self.num_dirs, dy.astype(cdt, copy=False),
                                                  dh.astype(cdt), None if dc is None else dc.astype(cdt),
                                                  self._operand)
            d_params = self._scatter(grads)
        out = functools.partial(caller_layout, time_major=tm, dtype=self.dtype)
        if params_backprop_out is not None:
            params_backprop_out += d_params
            d_params = params_backprop_out
        d_input = out(dx)
        if reserve.batch_sizes is not None:
            d_input = packing.pack(d_input, reserve.sequence_lengths)
        return Gradients(d_input, out(dh0), None if dc0 is None else out(dc0), d_params)

    def _scatter(self, grads: Sequence[PseudoLayerParams]) -> np.ndarray:
        """Per pseudo-layer stacked gradients (compute order) -> one opaque buffer in the storage dtype."""
        H, G = self.num_units, self._mode.num_gates
        position = {gate: k for k, gate in enumerate(self._mode.gate_order)}
        params = np.zeros(self._params_size, dtype=self.dtype)
        for (kind, pl, lin), region in self._regions.items():
            g = grads[pl]
            if lin == layout.PROJECTION_LIN_LAYER_ID:
                block = g.P
            else:
                stacked = (g.W if kind == "weight" else g.b_W) if lin < G else (g.R if kind == "weight" else g.b_R)
                k = position[lin % G]
                block = stacked[k * H : (k + 1) * H]
            params[region.offset : region.offset + region.size] = block.reshape(-1)
        return params

    def _array(self, name: str, value: object, ndim: int, dims_doc: str) -> np.ndarray:
        """The contract's array check (:data:`reference.contract.ArrayCheck`): a NumPy array of the model's dtype."""
        return checks.array(name, value, self.dtype, ndim, dims_doc)

    def _zero_states(self, h: np.ndarray | None, c: np.ndarray | None, B: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Checked time-major states with zeros for those not given: ``h [L*D, B, Hr]`` and an LSTM's
        ``c [L*D, B, H]`` (``None`` for the other modes)."""
        LD = self.num_layers * self.num_dirs
        h = np.zeros((LD, B, self.state_width), dtype=self.dtype) if h is None else h
        if self._config.has_cell_state and c is None:
            c = np.zeros((LD, B, self.num_units), dtype=self.dtype)
        return h, c

    def _draw_dropout_masks(self, T: int, B: int) -> tuple[np.ndarray, ...]:
        if self.dropout == 0.0:
            return ()
        shape = (T, B, self.num_dirs * self.state_width)
        return tuple(self._rng.random(shape) >= self.dropout for _ in range(self.num_layers - 1))


class _NoCellState(NoCellStateCall, _CudnnRNN):
    pass


class CudnnRNNRelu(_NoCellState):
    """cuDNN ``CUDNN_RNN_RELU``: ``h' = max(0, W x + b_W + R h + b_R)``."""

    rnn_mode = "relu"


class CudnnRNNTanh(_NoCellState):
    """cuDNN ``CUDNN_RNN_TANH``: ``h' = tanh(W x + b_W + R h + b_R)``."""

    rnn_mode = "tanh"


class CudnnGRU(_NoCellState):
    """cuDNN ``CUDNN_GRU`` (reset-after): ``h' = tanh(W_h x + r .* (R_h h + b_Rh) + b_Wh)``; gates r, z, h."""

    rnn_mode = "gru"


class ClassicGRU(_NoCellState):
    """Textbook GRU with CudnnGRU's weights and layout: ``h' = tanh(W_h x + R_h (r .* h) + b_Wh + b_Rh)``."""

    rnn_mode = "classic_gru"


class CudnnLSTM(LSTMCall, _CudnnRNN):
    """cuDNN ``CUDNN_LSTM`` (gates i, f, c, o; no peepholes, no forget bias), optional projection.

    With ``num_proj`` (cuDNN ``projSize``), ``h = (o * tanh(c)) @ P.T`` is both the output and the recurrent
    input: ``input_h``/``output_h`` are ``[L*D, B, num_proj]`` and ``output`` is ``[T, B, D*num_proj]``.
    """

    rnn_mode = "lstm"


MODELS: dict[str, type[_CudnnRNN]] = {
    cls.rnn_mode: cls for cls in (CudnnRNNRelu, CudnnRNNTanh, CudnnLSTM, CudnnGRU, ClassicGRU)
}


def make_model(rnn_mode: str, num_layers: int, num_units: int, input_size: int, input_mode: str = "linear_input",
               direction: str = "unidirectional", dtype: object = np.float32, dropout: float = 0.0, seed: int = 0,
               num_proj: int | None = None, *, models: dict | None = None, bias_mode: str = "double", **options):
    """A model of ``rnn_mode`` from ``models`` (default :data:`MODELS`; ``cudnn_backend.MODELS`` takes the
    same arguments plus its keyword ``options``), with every mode's constructor called alike: ``num_proj``
    goes only to the modes whose row in ``MODES`` supports a projection (the LSTM); for any other mode it
    must be ``None``. ``bias_mode`` goes to the constructor where it is not the default ``"double"`` (so a
    backend without bias modes still makes double-bias models, and refuses the others), ``cell_clip`` (in
    ``options``) where it is not ``None``."""
    table = MODELS if models is None else models
    checks.one_of("rnn_mode", rnn_mode, tuple(table))
    extra = {"num_proj": num_proj} if MODES[rnn_mode].supports_projection else {}
    if bias_mode != "double":
        options = {**options, "bias_mode": bias_mode}
    if "cell_clip" in options and options["cell_clip"] is None:  # (the default: a backend without clips takes it)
        options = {k: v for k, v in options.items() if k != "cell_clip"}
    if num_proj is not None and "num_proj" not in extra:
        raise ValueError(f"num_proj must be None for rnn_mode={rnn_mode!r} (a projection needs rnn_mode "
                         f"{' or '.join(repr(m) for m in table if MODES[m].supports_projection)}), "
                         f"got {num_proj!r}")
    return table[rnn_mode](num_layers, num_units, input_size, input_mode, direction, dtype, dropout, seed,
                           **extra, **options)
