"""A model bound to its parameters: inference without the per-call unpacking, and one step at a time.

``model.bind(params)`` returns a :class:`BoundRNN`. Binding checks ``params`` once and unpacks them into
per pseudo-layer matrices in the compute dtype (gate blocks stacked in the engine's compute order,
``reference.recurrence.PseudoLayerParams``, the sigmoid gates' rows negated: ``recurrence.negated_gates``),
**copies** of the caller's buffer made read-only: a later change to ``params`` does not change the bound
model (bind again to take it).

- :meth:`BoundRNN.forward` / ``bound(...)``: the model's ``forward(is_training=False)`` / ``__call__``
  without ``params``, through the same code (``_CudnnRNN._forward_layers``): results bit for bit the model's.
- :meth:`BoundRNN.step`: one time step (``T = 1``) of a **unidirectional** model for a batch of streams,
  states in and out, through the engine's own step (``recurrence.fused_step``) and input projection
  (``recurrence.projector``, or the stacked ``[x; 1; h]`` step where the engine stacks) on buffers made
  once per batch size (and thread). A step is the model's ``forward`` of that one step, bit for bit;
  over ``T`` steps it is the whole-sequence call where that call's arithmetic per step is the same
  (``docs/streaming.md`` says where it is not, and by how much).
- :meth:`BoundRNN.stream`: a :class:`Stream`, ``B`` streams whose states stay inside in the engine's layout
  and compute dtype: :meth:`BoundRNN.step` without copying the states in and out, bit for bit.
"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
from typing import Callable, Sequence

import numpy as np

from . import checks, contract
from .contract import ForwardResult
from .precision import compute_dtype
from .recurrence import (
    PseudoLayerParams,
    fused_step,
    tf32_layer,
    negated_gates,
    projection_bias,
    projection_buffer,
    projector,
    stacks_input,
)

Array = np.ndarray


_ERRSTATE_IN_CONTEXT = int(np.__version__.split(".")[0]) >= 2
"""Whether NumPy keeps its error state in a context variable (NumPy 2); NumPy 1 keeps it per thread."""

_IGNORED = dict(over="ignore", invalid="ignore", under="ignore")


def _quiet_runner() -> Callable[[Callable[[Array], Array], Array], Array]:
    """``run(f, x)``: ``f(x)`` with NumPy ignoring overflow, invalid and underflow, as the model's forward
    does (overflow in the sigmoid's exp is its saturation, not an error). With NumPy 2, ``run`` is the
    ``run`` of a context of its own, empty but for that error state, made once: a tenth of the cost of
    ``np.errstate`` as a decorator, which makes its state anew at every call (``benchmarks/NOTES.md``),
    and it refuses to be entered twice at once (``RuntimeError``: one runner per thread). With NumPy 1,
    ``np.errstate`` around each call (its error state is the thread's, not a context's)."""
    if not _ERRSTATE_IN_CONTEXT:
        quiet = np.errstate(**_IGNORED)
        return lambda f, x: quiet(f)(x)
    context = contextvars.Context()
    context.run(np.errstate(**_IGNORED).__enter__)  # set in that context for good, never anywhere else
    return context.run


MAX_PLANS = 8
"""Batch sizes whose step buffers a bound model keeps per thread; beyond, the oldest are dropped."""


def _own(a: Array | None) -> Array | None:
    """A read-only copy of ``a`` with its own memory (not the engine's buffer cache: it lives as long as the
    bound model)."""
    if a is None:
        return None
    a = np.array(a, order="C")
    a.flags.writeable = False
    return a


def _bound_layer(mode, params: PseudoLayerParams) -> PseudoLayerParams:
    """A pseudo-layer's parameters as a bound model keeps them: its sigmoid gates negated where it can
    (``recurrence.negated_gates``: the same results, bit for bit, one call fewer a step), each array its
    own read-only copy."""
    params = negated_gates(mode, params)
    return dataclasses.replace(params, **{f.name: _own(getattr(params, f.name))
                                          for f in dataclasses.fields(params) if f.name != "negated_gates"})


class _LayerStream:
    """One layer of ``B`` streams on buffers made once, its state kept in the engine's layout (``h [Hr, B]``,
    an LSTM's ``c [H, B]``): the input projection of a step (``recurrence.projector``) or the stacked
    ``[x; 1; h]`` slot, then the engine's fused step. A forward call of ``T = 1`` does the same arithmetic on
    the same shapes and layouts (``recurrence.run_layers``).

    The state is ``h`` and ``c``: this layer's own buffers, or, for one step, the caller's memory where
    :meth:`load` may borrow it. :meth:`advance` never writes into the state it reads: two ``h`` buffers or
    two stacked slots in turn, and the engine's step alternates its ``c`` buffers by the parity ``t``."""

    __slots__ = ("run", "project", "xw_t", "slots", "k", "h_bufs", "h", "c", "c_own", "t")

    def __init__(self, mode, params: PseudoLayerParams, bias: Array, B: int, storage: np.dtype,
                 operand=None) -> None:
        GH, Hr = params.R.shape
        H = GH // mode.num_gates
        dtype = params.R.dtype
        if operand is not None:  # TF32 math: as recurrence.run_layers runs it (rounded weights, no stacked step)
            params = tf32_layer(params, operand)
        stacked = operand is None and stacks_input(mode, params, B, storage)
        self.run = fused_step(mode, params, B, None, bias if stacked else None, storage, operand)
        self.t = self.k = 0
        self.c_own = np.zeros((H, B), dtype) if mode.has_cell_state else None
        self.c = self.c_own
        self.project = self.xw_t = self.slots = self.h_bufs = None
        if stacked:  # recurrence.stacked_inputs' slots [x_t; 1; h]: the state in the h rows of slot k
            width = params.W.shape[1]
            both = np.zeros((2, width + 1 + Hr, B), dtype)
            both[:, width] = 1
            self.slots = tuple((slot, slot[:width], slot[width + 1 :]) for slot in both)  # slot, its x, its h
            self.h = self.slots[0][2]
        else:
            xw = projection_buffer(GH, 1, B, dtype)
            self.project, self.xw_t = projector(params, bias, xw, reused=True, storage=storage), xw[:, 0]
            if operand is not None and params.W is not None:  # the input, as the projection's GEMM reads it
                self.project = lambda x, project=self.project: project(operand(x))
            self.h_bufs = (np.zeros((Hr, B), dtype), np.empty((Hr, B), dtype))
            self.h = self.h_bufs[0]

    def load(self, h_rows: Array, c_rows: Array | None, borrow: bool) -> None:
        """Take the state from ``h_rows [B, Hr]`` and ``c_rows [B, H]`` (``None`` without a cell state; any
        float dtype, any strides). ``borrow``: read them where they lie, where the step can (for the next
        :meth:`advance` only, before which the caller's memory must not change), else copy them in."""
        if self.c_own is not None:  # the cell state meets only elementwise operations: any strides, the same bits
            view = c_rows.T
            if borrow and view.dtype == self.c_own.dtype:
                self.c = view
            else:
                np.copyto(self.c_own, view)
                self.c = self.c_own
        view = h_rows.T
        if self.slots is not None:  # stacked: into the slot the next step reads
            np.copyto(self.h, view)
        elif borrow and view.dtype == self.h_bufs[0].dtype and view.flags.c_contiguous:  # batch 1: rows are columns
            self.h = view
        else:
            self.h = self.h_bufs[0]
            np.copyto(self.h, view)

    def advance(self, x: Array) -> Array:
        """One step from ``x [B, in]`` (contiguous, compute dtype) and the state, whose place the new state
        takes; returns the new ``h [Hr, B]`` (this layer's buffer: read it before the step after next)."""
        t = self.t
        if self.slots is None:
            self.project(x)
            h_out = self.h_bufs[1] if self.h is self.h_bufs[0] else self.h_bufs[0]
            self.h, self.c = self.run(t, self.xw_t, self.h, self.c, h_out)
        else:
            k = self.k
            slot, slot_x, _ = self.slots[k]
            np.copyto(slot_x, x.T)
            self.h, self.c = self.run(t, None, slot, self.c, self.slots[1 - k][2])
            self.k = 1 - k
        self.t = t ^ 1
        return self.h


class _Layers:
    """The layers of ``B`` streams (one :class:`_LayerStream` each) and the layer outputs that the next layer
    reads (``[B, Hr]`` rows, rounded through the storage dtype where the engine rounds them)."""

    __slots__ = ("layers", "inputs", "rounded", "output_dtype", "enter")

    def __init__(self, mode, layers: Sequence[PseudoLayerParams], biases: Sequence[Array], B: int,
                 round_to: np.dtype | None, output_dtype: np.dtype, operand=None) -> None:
        self.enter = _quiet_runner()
        self.layers = [_LayerStream(mode, p, b, B, output_dtype, operand) for p, b in zip(layers, biases)]
        Hr, dtype = layers[0].R.shape[1], layers[0].R.dtype
        self.inputs = [np.empty((B, Hr), dtype) for _ in layers[1:]]
        self.rounded = None if round_to is None else np.empty((B, Hr), round_to)
        self.output_dtype = output_dtype

    def load(self, h: Array, c: Array | None, borrow: bool) -> None:
        """The states ``h [L, B, Hr]``, ``c [L, B, H]`` or ``None`` (:meth:`_LayerStream.load`)."""
        for layer, stream in enumerate(self.layers):
            stream.load(h[layer], None if c is None else c[layer], borrow)

    def store(self, h: Array, c: Array | None) -> None:
        """The states into ``h [L, B, Hr]`` and ``c [L, B, H]`` (or ``None``), of any float dtype."""
        for layer, stream in enumerate(self.layers):
            np.copyto(h[layer], stream.h.T)
            if c is not None:
                np.copyto(c[layer], stream.c.T)

    def run(self, x: Array) -> Array:
        """:meth:`advance` under NumPy's error state as the model's forward sets it (:func:`_quiet_runner`)."""
        return self.enter(self.advance, x)

    def advance(self, x: Array) -> Array:
        """One step of every layer from ``x [B, in]`` (contiguous, compute dtype); returns the output ``[B, Hr]``,
        a fresh array of the output dtype. Run it through :meth:`run`."""
        last = len(self.inputs)
        for layer, stream in enumerate(self.layers):
            h = stream.advance(x)
            if layer < last:  # the next layer's input
                x = self.inputs[layer]
                if self.rounded is None:
                    np.copyto(x, h.T)
                else:  # the engine's layer_output_dtype: float16 storage between layers
                    np.copyto(self.rounded, h.T)
                    np.copyto(x, self.rounded)
        return h.T.copy() if h.dtype == self.output_dtype else h.T.astype(self.output_dtype, order="C")


class Stream:
    """``B`` streams of a bound unidirectional model (``bound.stream(B, h, c)``), their states kept inside
    in the engine's layout and compute dtype: the fastest way to run a model one step at a time.

    ``step(x)`` advances every stream by one time step, ``x [B, input_size]`` of the model's dtype, and
    returns the output ``[B, Hr]`` (a fresh array of the model's dtype, the last layer's new ``h``); the new
    states stay inside. ``state()`` returns copies of them, ``reset(h=None, c=None)`` sets them (``None``:
    zeros). Step by step, a stream is :meth:`BoundRNN.step` with states carried in the compute dtype, bit
    for bit, without copying the states in and out at every step.

    A stream holds its own buffers and states: use it from one thread at a time (a stream per thread, or
    per conversation, from one bound model). With NumPy 2 a step entered while another runs raises
    ``RuntimeError`` (:func:`_quiet_runner`); ``state`` and ``reset`` are not guarded so."""

    def __init__(self, bound: "BoundRNN", batch_size: int, h: Array | None, c: Array | None) -> None:
        """Use ``bound.stream(batch_size, h, c)``."""
        bound._unidirectional("stream")
        self._bound = bound
        self.batch_size = B = checks.int_at_least("batch_size", batch_size, 1)
        self._layers = _Layers(bound._mode, bound._layers, bound._biases, B, bound._round_to, bound.dtype,
                               bound._operand)
        self._x_shape, self._dtype, self._cdt = (B, bound._I), bound.dtype, bound.compute_dtype
        self.reset(h, c)

    def __repr__(self) -> str:
        return f"Stream({self._bound.model!r}, batch_size={self.batch_size})"

    def step(self, x: Array) -> Array:
        """One time step of every stream: ``x [B, input_size]`` of the model's dtype -> the output ``[B, Hr]``."""
        if not (type(x) is np.ndarray and x.dtype == self._dtype and x.shape == self._x_shape):
            x = self._bound._step_input(x)
            if x.shape[0] != self.batch_size:
                raise ValueError(f"x must have shape [B, input_size] with B = {self.batch_size} (the stream's "
                                 f"batch_size), got {x.shape}")
        if x.dtype != self._cdt or not x.flags.c_contiguous:
            x = np.ascontiguousarray(x, dtype=self._cdt)
        return self._layers.run(x)

    def state(self) -> tuple[Array, Array | None]:
        """Copies of the states: ``(h [L, B, Hr], c [L, B, H])`` in the compute dtype, ``c`` ``None`` unless
        LSTM; they may be passed to :meth:`reset`, another stream or :meth:`BoundRNN.step`."""
        h, c = self._bound.zero_state(self.batch_size, self._cdt)
        self._layers.store(h, c)
        return h, c

    def reset(self, h: Array | None = None, c: Array | None = None) -> None:
        """Set the states from ``h [L, B, Hr]`` and the LSTM's ``c [L, B, H]`` (the model's dtype or its compute
        dtype; ``None``: zeros), checked as :meth:`BoundRNN.step` checks them, and copied in."""
        h, c = self._bound._step_states(h, c, self.batch_size)
        self._layers.load(h, c, borrow=False)


class BoundRNN:
    """A model bound to a copy of its parameters (``model.bind(params)``), for inference and streaming.

    Binding checks ``params`` and unpacks them once into read-only per-layer matrices in the compute dtype
    (float32 for float16 models): **copies**, so a later change to the caller's ``params`` does not reach
    the bound model. Inference only: no dropout, no backward pass.

    ``forward(input_data, input_h=None, input_c=None, sequence_lengths=None, time_major=True)`` and
    ``bound(input_data, input_h=None, input_c=None, *, sequence_lengths=None, time_major=True)`` are the
    model's ``forward(..., is_training=False)`` and ``__call__`` without ``params`` (every layout, direction,
    length and state the model takes), bit for bit the model's results.

    ``step(x, h=None, c=None, *, out_h=None, out_c=None)`` advances a batch of streams by one time step;
    **unidirectional models only** (a bidirectional model's backward direction starts at the end of the
    sequence, so it cannot stream: ``ValueError``). See :meth:`step`. ``stream(batch_size, h, c)`` returns a
    :class:`Stream`, which keeps the states inside: the fastest way to step.

    A bound model is safe to share between threads: the step's scratch buffers are per thread.
    """

    def __init__(self, model, params: Array) -> None:
        """Use ``model.bind(params)``; ``params`` checked by the model."""
        self.model = model
        self.dtype: np.dtype = model.dtype
        self.compute_dtype: np.dtype = compute_dtype(model.dtype)
        self._mode = model._mode
        self._layers = tuple(_bound_layer(self._mode, p) for p in model._pseudo_layers(params, copy=True))
        self._biases = tuple(_own(projection_bias(self._mode, p)) for p in self._layers)
        self._has_cell = model._config.has_cell_state
        self._L, self._Hr, self._H, self._I = model.num_layers, model.state_width, model.num_units, model.input_size
        self._round_to = model.dtype if model.dtype != self.compute_dtype else None  # between layers
        self._operand = model._operand  # TF32 math: how every GEMM reads its operands (None: FMA)
        self._local = threading.local()
        self._state_dtypes = (self.dtype, self.compute_dtype)

    def __repr__(self) -> str:
        return f"BoundRNN({self.model!r})"

    # ---- whole sequences --------------------------------------------------------------------------

    def forward(self, input_data: Array, input_h: Array | None = None, input_c: Array | None = None,
                sequence_lengths: Sequence[int] | Array | None = None, time_major: bool = True, *,
                padding_fill: float = 0.0) -> ForwardResult:
        """The model's ``forward(input_data, input_h, params, input_c, is_training=False, sequence_lengths,
        time_major, padding_fill=...)`` with the bound parameters: the same checks, code and results (a
        :class:`reference.PackedSequence` input too)."""
        model = self.model
        args = contract.forward_arguments(model._config, model._array, input_data, input_h, input_c, False,
                                          time_major, padding_fill, sequence_lengths)
        return model._forward_layers(args, self._layers, sequence_lengths)

    def __call__(self, input_data: Array, input_h: Array | None = None, input_c: Array | None = None, *,
                 sequence_lengths: Sequence[int] | Array | None = None,
                 time_major: bool = True, padding_fill: float = 0.0) -> tuple[Array, ...]:
        """``(output, output_h)``, or ``(output, output_h, output_c)`` for the LSTM: the model's ``__call__``
        (``is_training=False``) with the bound parameters. ``input_c`` is the LSTM's (``None`` otherwise)."""
        result = self.forward(input_data, input_h, input_c, sequence_lengths, time_major, padding_fill=padding_fill)
        return result[:3] if self._has_cell else result[:2]

    # ---- one step ---------------------------------------------------------------------------------

    def zero_state(self, batch_size: int, dtype: object = None) -> tuple[Array, Array | None]:
        """Zero states for :meth:`step`: ``(h [L, B, Hr], c [L, B, H])``, ``c`` ``None`` unless LSTM;
        ``dtype`` the model's (default) or its compute dtype (:meth:`step`)."""
        B = checks.int_at_least("batch_size", batch_size, 1)
        dtype = self.dtype if dtype is None else self._state_dtype("dtype", np.dtype(dtype))
        h = np.zeros((self._L, B, self._Hr), dtype)
        return h, np.zeros((self._L, B, self._H), dtype) if self._has_cell else None

    def step(self, x: Array, h: Array | None = None, c: Array | None = None, *, out_h: Array | None = None,
             out_c: Array | None = None) -> tuple[Array, ...]:
        """One time step of every stream of a batch: ``(output [B, Hr], h_new)``, or
        ``(output, h_new, c_new)`` for the LSTM.

        ``x [B, input_size]`` of the model's dtype; ``h [L, B, Hr]`` and the LSTM's ``c [L, B, H]``, time-major
        states as the model's ``input_h``/``input_c`` (``None``: zeros). States may also be of the compute
        dtype (float32 for a float16 model; both are rounded to float16 every step anyway, as the
        whole-sequence call carries them: ``reference.precision.HALF_ROUNDS``); ``h`` and ``c`` share one dtype, and
        the new states have it. ``out_h``/``out_c``: arrays of the states' shape and dtype to write the new
        states into (returned), else fresh arrays. They may be ``h``/``c`` themselves, or overlap ``x``, ``h``
        or ``c`` anyhow: the step reads all of its inputs before it writes any state, so an in-place update
        (``out_h=h``) is safe. ``out_h`` and ``out_c`` must not overlap each other (``ValueError``). ``output``
        is a fresh array of the model's dtype (the last layer's new ``h``).

        Unidirectional models only (``ValueError`` otherwise); no sequence lengths (each stream advances;
        keep a stream's old state yourself to hold it) and no batch-major states.
        Bit for bit the model's ``forward`` of ``x[None]`` from the same states (``is_training=False``).
        """
        self._unidirectional("step")
        x, h, c, out_h, out_c = self._step_arguments(x, h, c, out_h, out_c)
        layers = self._plan(x.shape[0])
        layers.load(h, c, borrow=True)  # every input is read before any state is written
        output = layers.run(np.ascontiguousarray(x, dtype=self.compute_dtype))
        layers.store(out_h, out_c)
        return (output, out_h, out_c) if self._has_cell else (output, out_h)

    def stream(self, batch_size: int = 1, h: Array | None = None, c: Array | None = None) -> Stream:
        """A :class:`Stream` of ``batch_size`` streams from the states ``h [L, B, Hr]`` and the LSTM's
        ``c [L, B, H]`` (``None``: zeros; copied in): one step at a time with the states kept inside, the
        fastest way to stream. Unidirectional models only (``ValueError``), as :meth:`step`."""
        return Stream(self, batch_size, h, c)

    def _unidirectional(self, what: str) -> None:
        if self.model.num_dirs != 1:
            raise ValueError(f"{what} needs a unidirectional model: a bidirectional model's backward direction "
                             "starts at the end of the sequence, so it cannot stream (use forward on whole "
                             "sequences)")

    def _plan(self, B: int) -> _Layers:
        plans = getattr(self._local, "plans", None)
        if plans is None:
            plans = self._local.plans = {}
        plan = plans.get(B)
        if plan is None:
            if len(plans) >= MAX_PLANS:
                del plans[next(iter(plans))]
            plan = plans[B] = _Layers(self._mode, self._layers, self._biases, B, self._round_to, self.dtype,
                                              self._operand)
        return plan

    def _step_arguments(self, x: object, h: object, c: object, out_h: object, out_c: object) -> tuple:
        """The checked arguments of :meth:`step`, zero states for ``None`` and fresh ``out_`` arrays; at once
        where they are plain arrays as they should be (the common case costs a few attribute reads)."""
        if type(x) is np.ndarray and x.dtype == self.dtype and x.ndim == 2 and x.shape[1] == self._I:
            B = x.shape[0]
            if (B and type(h) is np.ndarray and h.shape == (self._L, B, self._Hr) and h.dtype in self._state_dtypes
                    and (c is None if not self._has_cell else
                         type(c) is np.ndarray and c.dtype == h.dtype and c.shape == (self._L, B, self._H))
                    and (out_h is None or (out_h is h and h.flags.writeable))
                    and (out_c is None or (out_c is c and c.flags.writeable
                                           and (out_h is None or not np.may_share_memory(h, c))))):
                if out_h is None:
                    out_h = np.empty(h.shape, h.dtype)
                if c is not None and out_c is None:
                    out_c = np.empty(c.shape, c.dtype)
                return x, h, c, out_h, out_c
        x = self._step_input(x)
        h, c = self._step_states(h, c, x.shape[0])
        out_h, out_c = self._step_outputs(out_h, out_c, h, c)
        return x, h, c, out_h, out_c

    def _step_input(self, x: object) -> Array:
        x = checks.array("x", x, self.dtype, 2, "[B, input_size]")
        if x.shape[0] < 1 or x.shape[1] != self._I:
            raise ValueError(f"x must have shape [B, input_size] with B >= 1, input_size = {self._I}, got {x.shape}")
        return x

    def _state_dtype(self, name: str, dtype: np.dtype) -> np.dtype:
        if dtype not in self._state_dtypes:
            allowed = " or ".join(sorted({str(self.dtype), str(self.compute_dtype)}))
            raise TypeError(f"{name} must have dtype {allowed} (the model's dtype or its compute dtype), got {dtype}")
        return dtype

    def _state(self, name: str, value: object, shape: tuple[int, ...], dtype: np.dtype | None, doc: str) -> Array:
        """A state (or an ``out_`` buffer) of ``shape`` and ``dtype`` (``None``: either state dtype)."""
        if not isinstance(value, np.ndarray):
            raise TypeError(f"{name} must be a numpy.ndarray with shape {doc}, got {type(value).__name__}")
        checks.not_masked(name, value)
        if dtype is None:
            self._state_dtype(name, value.dtype)
        elif value.dtype != dtype:
            raise TypeError(f"{name} must have dtype {dtype} (the states' dtype), got {value.dtype}")
        checks.shape(name, value, shape, doc)
        return value

    def _step_states(self, h: object, c: object, B: int) -> tuple[Array, Array | None]:
        h_shape, c_shape = (self._L, B, self._Hr), (self._L, B, self._H)
        if h is not None:
            h = self._state("h", h, h_shape, None, "[num_layers, B, Hr]")
        if not self._has_cell:
            checks.no_cell_state("c", c, self.model.rnn_mode)
        elif c is not None:
            c = self._state("c", c, c_shape, None if h is None else h.dtype, "[num_layers, B, num_units]")
        dtype = h.dtype if h is not None else c.dtype if c is not None else self.dtype
        if h is None:
            h = np.zeros(h_shape, dtype)
        if self._has_cell and c is None:
            c = np.zeros(c_shape, dtype)
        return h, c

    def _step_outputs(self, out_h: object, out_c: object, h: Array, c: Array | None) -> tuple[Array, Array | None]:
        if out_h is None:
            out_h = np.empty(h.shape, h.dtype)
        else:
            out_h = self._writeable("out_h", self._state("out_h", out_h, h.shape, h.dtype, "h's"))
        if c is None:
            checks.no_cell_state("out_c", out_c, self.model.rnn_mode)
            return out_h, None
        if out_c is None:
            out_c = np.empty(c.shape, c.dtype)
        else:
            out_c = self._writeable("out_c", self._state("out_c", out_c, c.shape, c.dtype, "c's"))
            if np.may_share_memory(out_h, out_c):
                raise ValueError("out_h and out_c overlap: each new state needs memory of its own")
        return out_h, out_c

    @staticmethod
    def _writeable(name: str, value: Array) -> Array:
        if not value.flags.writeable:
            raise ValueError(f"{name} must be writeable (the new state is written into it)")
        return value
