"""The reference's classes over real cuDNN 9 (``cudnnRNNForward``, ``cudnnRNNBackwardData_v8``,
``cudnnRNNBackwardWeights_v8``), CuPy for device memory and streams.

Same constructor and methods as ``reference`` (plus ``math_type`` and ``algo``); arrays in may be NumPy or
CuPy, arrays out are CuPy. The parameter layout is whatever ``cudnnGetRNNWeightParams`` reports: never a
hard-coded offset. The config's validation, the results, the reserve's fields and the checks of a call's
arguments are the reference's contract (``reference.contract``), so bad arguments fail the same way, before
anything touches the GPU.

A :class:`reference.PackedSequence` input (its ``data`` NumPy or CuPy, its ``batch_sizes`` NumPy on the host)
runs in cuDNN's ``CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED`` as it is, and gives a packed output (CuPy ``data``).

Semantics kept equal to the reference where cuDNN leaves them open: outputs past a sequence's length hold
``padding_fill`` (the output descriptor's ``paddingFill``; zero by default); the input at padded steps is
zeroed in forward's private copy (it feeds the weight gradient's sums, where NaN padding would poison them)
and ``output_backprop`` there before ``BackwardData``;
the input gradient at padded steps is zeroed after it (cuDNN documents none of these); backward reads the
inputs, states and parameters forward read, whatever the caller did to its arrays in between; and a
``ForwardResult`` can be backpropagated once (``BackwardData`` writes into the reserve space). Forward and
backward of one result must run on the same CUDA stream (the reserve space is not synchronised across
streams). ``dropout`` must be below 1: cuDNN scales kept values by ``1/(1-dropout)``. A model lives on the
device current when it was made: it runs with that device current, on CuPy arrays of that device.
"""

from __future__ import annotations

import ctypes
import functools
from ctypes import byref, c_size_t, c_void_p
from dataclasses import dataclass, field
from typing import ClassVar, Sequence

import numpy as np

from reference import checks, contract, packing
from reference.contract import (ForwardResult, Gradients, LSTMCall, ModelConfig, NoCellStateCall, caller_layout,
                                training_reserve)
from reference.layout import BIAS_MODES, Region
from reference.packing import PackedSequence

from . import _lib
from .descriptors import DropoutDescriptor, Handle, RNNDataDescriptor, RNNDescriptor, TensorDescriptor

MATH_TYPES = tuple(_lib.MATH_TYPE)
# cuDNN's documented math types per data type: HALF allows DEFAULT or TENSOR_OP (PyTorch uses TENSOR_OP),
# DOUBLE only DEFAULT; FLOAT with FMA is true FP32 (DEFAULT would allow TF32 on Ampere and later).
DEFAULT_MATH_TYPE = {"float16": "tensor_op", "float32": "fma", "float64": "default"}
ALGOS = tuple(_lib.ALGO)
# paddingFill is read "as the same data type as that of the RNN data tensor": its bits in a host scalar of that size
_FILL = {"float16": ctypes.c_uint16, "float32": ctypes.c_uint32, "float64": ctypes.c_uint64}
# cudaMalloc's alignment; cuDNN computes region addresses from the weight space's base pointer and does not
# document what it needs, so a caller's view that starts elsewhere is copied (or accumulated via a copy).
DEVICE_ALIGNMENT = 256


# What cudnnSetRNNDescriptor_v8 refuses as CUDNN_STATUS_NOT_SUPPORTED, without a word of detail, whatever the
# device (asked on a host): (what, whether a model has it, the algos that run it). The backend refuses these
# first, naming the argument; test_cudnn_backend.py holds the table against whichever cuDNN 9 is installed.
ALGO_LIMITS = (
    ("a recurrent projection (num_proj)", lambda spec: spec.num_proj is not None, ("standard",)),
    ("float64", lambda spec: spec.dtype == np.float64, ("standard", "persist_dynamic")),
)


def check_options(spec: ModelConfig, math_type: str | None, algo: str) -> tuple[str, str]:
    """The backend's own checks of a config beyond the reference's (``spec``: its ``ModelConfig``, or a model
    of it, which has the same attributes), run before anything touches a GPU: ``(math_type, algo)`` with the
    math type's default filled in, or a ``ValueError`` naming the argument."""
    if math_type is None:  # what cuDNN documents per data type: FMA is true FP32
        math_type = DEFAULT_MATH_TYPE[spec.dtype.name]
    math_type = checks.one_of("math_type", math_type, MATH_TYPES)
    algo = checks.one_of("algo", algo, ALGOS)
    if spec.dropout >= 1.0:
        raise ValueError(f"dropout must be in [0, 1) for the cuDNN backend (cuDNN scales kept values by "
                         f"1/(1-dropout)), got {spec.dropout}")
    for what, applies, algos in ALGO_LIMITS:
        if applies(spec) and algo not in algos:
            raise ValueError(f"algo must be one of {algos} for {what} (cuDNN refuses the others), got {algo!r}")
    return math_type, algo


def descriptor_fields(spec: ModelConfig, algo: str, math_type: str) -> dict[str, int]:
    """``cudnnSetRNNDescriptor_v8``'s arguments for a model (``spec``: its ``ModelConfig``, or a model of it), by
    name, all but the dropout descriptor: what the backend asks cuDNN for. Needs no GPU."""
    dtype = spec.dtype.name
    return dict(algo=_lib.ALGO[algo], cell_mode=_lib.RNN_MODE[spec.rnn_mode],
                bias_mode=BIAS_MODES[spec.bias_mode].cudnn,
                dir_mode=_lib.DIRECTION[spec.direction], input_mode=_lib.INPUT_MODE[spec.input_mode],
                data_type=_lib.DATA_TYPE[dtype], math_prec=_lib.MATH_PREC[dtype], math_type=_lib.MATH_TYPE[math_type],
                input_size=spec.input_size, hidden_size=spec.num_units, proj_size=spec.num_proj or spec.num_units,
                num_layers=spec.num_layers, aux_flags=_lib.PADDED_IO_ENABLED)


class BackendUnavailable(RuntimeError):
    """The cuDNN backend cannot run here; the message says what is missing."""


_HANDLES: dict[tuple[int, int], Handle] = {}


def shared_handle(lib: _lib.Library) -> Handle:
    """One cuDNN handle per (thread, device), as PyTorch keeps them: ``cudnnCreate`` is expensive, and a
    handle must not be used from two threads at once. Bound to the current stream before every call."""
    import threading

    key = (threading.get_ident(), _cupy().cuda.Device().id)
    if key not in _HANDLES:
        _HANDLES[key] = Handle(lib)
    return _HANDLES[key]


def _cupy():
    import cupy

    return cupy


def _ptr(a) -> c_void_p:
    return c_void_p(None if a is None else a.data.ptr)


@dataclass(eq=False)
class CudnnReserve:
    """What a forward call keeps for backward: the fields of ``reference.contract.ReserveContract``,
    descriptors, device inputs/outputs, the reserve space."""

    model_token: int
    is_training: bool
    time_major: bool
    sequence_lengths: np.ndarray | None
    x_desc: RNNDataDescriptor
    y_desc: RNNDataDescriptor
    h_desc: TensorDescriptor
    c_desc: TensorDescriptor
    x: object
    y: object
    hx: object | None
    cx: object | None
    params: object
    dev_lengths: object
    reserve: object | None
    dropout_masks: tuple = ()  # cuDNN keeps its masks inside the reserve space: not retrievable
    consumed: bool = field(default=False)
    batch_sizes: np.ndarray | None = None  # a packed call's (x and y are then its packed data)


class _CudnnModel:
    rnn_mode: ClassVar[str]

    def __init__(self, num_layers: int, num_units: int, input_size: int, input_mode: str = "linear_input",
                 direction: str = "unidirectional", dtype: object = np.float32, dropout: float = 0.0, seed: int = 0,
                 num_proj: int | None = None, *, math_type: str | None = None, algo: str = "standard",
                 bias_mode: str = "double", cell_clip: tuple[float, float] | None = None) -> None:
        config = contract.model_config(self.rnn_mode, num_layers, num_units, input_size, input_mode, direction,
                                       dtype, dropout, seed, num_proj, bias_mode, cell_clip)
        self.math_type, self.algo = check_options(config, math_type, algo)
        vars(self).update(config.attributes(), gates=config.gates, state_width=config.state_width)
        self._config = config
        self._has_cell_state = config.has_cell_state
        self._token = contract.new_model_token()
        from . import available

        ok, why = available()
        if not ok:
            raise BackendUnavailable(f"the cuDNN backend is unavailable: {why}")
        cp = _cupy()
        self._lib = _lib.load()
        self._dtype_name = self.dtype.name
        self._data_type = _lib.DATA_TYPE[self._dtype_name]
        self._device = cp.cuda.Device().id
        self._handle = shared_handle(self._lib)
        self._handle.bind(cp.cuda.get_current_stream().ptr)
        self._dropout_desc = DropoutDescriptor(self._lib).set(
            self._handle, self.dropout, self.seed, lambda n: cp.empty(n, dtype=cp.uint8))
        cp.cuda.get_current_stream().synchronize()  # the RNG set-up kernel, before any later stream reads it
        self._built_batch: int | None = None  # persist_dynamic: the batch size of the compiled plan
        self._rnn = RNNDescriptor(self._lib).set(**descriptor_fields(config, self.algo, self.math_type),
                                                 dropout=self._dropout_desc)
        if config.cell_clip is not None:
            self._rnn.set_clip(*config.cell_clip)
        size = c_size_t()
        self._lib.call("cudnnGetRNNWeightSpaceSize", self._handle.ptr, self._rnn.ptr, byref(size))
        self._weight_bytes = size.value
        if size.value % self.dtype.itemsize:
            raise RuntimeError(f"cuDNN weight space of {size.value} bytes is not a whole number of {self.dtype}")
        self._params_size = size.value // self.dtype.itemsize
        self._layout = self._query_layout()
        self._weight_regions = sorted((r for r in self._layout if r.kind == "weight"),
                                      key=lambda r: (r.pseudo_layer, r.lin_layer_id))
        self._bias_regions = sorted((r for r in self._layout if r.kind == "bias"),
                                    key=lambda r: (r.pseudo_layer, r.lin_layer_id))

    def __repr__(self) -> str:
        return (f"cudnn_backend.{type(self).__name__}({self._config.arguments()}, math_type={self.math_type!r}, "
                f"algo={self.algo!r})")

    def close(self) -> None:
        """Release the descriptors now (they are also released when the model is collected); the cuDNN
        handle is shared per thread and device and lives as long as the process."""
        for owned in (self._rnn, self._dropout_desc):
            owned.close()

    # ---- parameters -------------------------------------------------------------------------------

    def _query_layout(self) -> list[Region]:
        """Every matrix and bias cuDNN reports, with its offset in the weight space, in buffer order."""
        cp = _cupy()
        space = cp.empty(self._weight_bytes, dtype=cp.uint8)
        base, item = space.data.ptr, self.dtype.itemsize
        m_desc, b_desc = TensorDescriptor(self._lib), TensorDescriptor(self._lib)
        G = len(self.gates)
        lin_ids = list(range(2 * G)) + ([_lib.PROJECTION_LIN_LAYER_ID] if self.num_proj else [])
        regions = []
        try:
            for pl in range(self.num_layers * self.num_dirs):
                for lin in lin_ids:
                    m_addr, b_addr = c_void_p(), c_void_p()
                    self._lib.call("cudnnGetRNNWeightParams", self._handle.ptr, self._rnn.ptr, pl, self._weight_bytes,
                                   c_void_p(base), lin, m_desc.ptr, byref(m_addr), b_desc.ptr, byref(b_addr))
                    for kind, addr, desc in (("weight", m_addr, m_desc), ("bias", b_addr, b_desc)):
                        if not addr.value:
                            continue  # absent: no bias for the projection, no layer-0 matrices with skip_input
                        _, dims, strides = desc.get()
                        offset, rest = divmod(addr.value - base, item)
                        if rest:
                            raise RuntimeError(f"cuDNN region {kind} {pl}/{lin} is not aligned to {self.dtype}")
                        if not _is_packed(dims, strides):  # the layout below reads row-major packed regions
                            raise RuntimeError(f"cuDNN region {kind} {pl}/{lin} has dims {dims} with strides "
                                               f"{strides}, not packed row-major")
                        size = int(np.prod(dims))
                        shape = (dims[-2], dims[-1]) if kind == "weight" and len(dims) >= 2 else (size,)
                        regions.append(Region(kind, pl, lin, offset, shape))
        finally:
            m_desc.close()
            b_desc.close()
        return sorted(regions, key=lambda r: r.offset)

    def params_size(self) -> int:
        """Elements in cuDNN's weight space (``cudnnGetRNNWeightSpaceSize`` / itemsize)."""
        return self._params_size

    def opaque_layout(self) -> list[Region]:
        """Every tensor as ``cudnnGetRNNWeightParams`` reports it, in buffer order."""
        return list(self._layout)

    def canonical_regions(self) -> tuple[list[Region], list[Region]]:
        return list(self._weight_regions), list(self._bias_regions)

    def canonical_shapes(self) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
        return [r.shape for r in self._weight_regions], [r.shape for r in self._bias_regions]

    def canonical_to_params(self, weights: Sequence, biases: Sequence):
        """A device weight space holding the canonical tensors (NumPy or CuPy, the model's dtype)."""
        cp = _cupy()
        params = cp.zeros(self._params_size, dtype=self.dtype)
        for name, tensors, regions in (("weights", weights, self._weight_regions),
                                       ("biases", biases, self._bias_regions)):
            if not isinstance(tensors, Sequence) or isinstance(tensors, (str, bytes)):
                raise TypeError(f"{name} must be a list of {len(regions)} arrays, got {type(tensors).__name__}")
            if len(tensors) != len(regions):
                raise ValueError(f"{name} must hold {len(regions)} tensors for {self!r}, got {len(tensors)}")
            for i, (tensor, region) in enumerate(zip(tensors, regions)):
                what = f"{name}[{i}] (pseudo_layer {region.pseudo_layer}, lin_layer_id {region.lin_layer_id})"
                tensor = _device_array(what, tensor, self.dtype, len(region.shape), str(list(region.shape)),
                                       self._device)
                checks.shape(what, tensor, region.shape, str(list(region.shape)))
                params[region.offset: region.offset + region.size] = tensor.reshape(-1)
        return params

    def params_to_canonical(self, params) -> tuple[list, list]:
        params = self._check_params("params", params)
        return ([params[r.offset: r.offset + r.size].reshape(r.shape).copy() for r in self._weight_regions],
                [params[r.offset: r.offset + r.size].reshape(r.shape).copy() for r in self._bias_regions])

    def _check_params(self, name: str, params):
        params = _device_array(name, params, self.dtype, 1, "[params_size()]", self._device)
        checks.shape(name, params, (self._params_size,), "[params_size()]")
        return _cupy().ascontiguousarray(params)  # cuDNN reads a bare pointer

    def _build_for(self, batch: int) -> None:
        """``persist_dynamic`` compiles a plan for one exact batch size: (re)build it when that changes,
        before forward and before backward (another batch may have run in between)."""
        if self.algo == "persist_dynamic" and self._built_batch != batch:
            self._lib.call("cudnnBuildRNNDynamic", self._handle.ptr, self._rnn.ptr, batch)
            self._built_batch = batch

    # ---- forward ----------------------------------------------------------------------------------

    def _array(self, name: str, value, ndim: int, dims_doc: str):
        """The contract's array check (``reference.contract.ArrayCheck``): a CuPy array on the model's device."""
        return _device_array(name, value, self.dtype, ndim, dims_doc, self._device)

    @staticmethod
    def _private(state):
        """A checked time-major state as a private contiguous device copy (aligned as CuPy allocates, and
        unchanged whatever the caller does to its array afterwards), or ``None`` (cuDNN's NULL: zeros)."""
        return None if state is None else _cupy().array(state, order="C")

    def _data_desc(self, layout: int, T: int, B: int, width: int, lengths: np.ndarray, fill: np.generic | None):
        """An RNN data descriptor; ``fill`` (a scalar of the model's dtype) its ``paddingFill``, or ``None``."""
        bits = None if fill is None else _FILL[self._dtype_name](int(np.asarray(fill).view(f"u{fill.itemsize}")))
        return RNNDataDescriptor(self._lib).set(self._data_type, layout, T, B, width, lengths, bits)

    def forward(self, input_data, input_h, params, input_c=None, is_training: bool = True,
                sequence_lengths=None, time_major: bool = True, *, padding_fill: float = 0.0) -> ForwardResult:
        """``cudnnRNNForward``: the reference's ``forward`` contract, on the GPU."""
        cp = _cupy()
        args = contract.forward_arguments(self._config, self._array, input_data, input_h, input_c, is_training,
                                          time_major, padding_fill, sequence_lengths)
        x, T, B, time_major, is_training = args.input, args.T, args.B, args.time_major, args.is_training
        packed = args.batch_sizes is not None
        LD, Hr, H = self.num_layers * self.num_dirs, self.state_width, self.num_units
        hx, cx = self._private(args.input_h), self._private(args.input_c)
        w = self._check_params("params", params)
        if is_training or w.data.ptr % DEVICE_ALIGNMENT:
            w = cp.array(w)  # aligned, and private: backward must read the weights forward read
        if packed:
            lengths = packing.lengths_of(args.batch_sizes)
            host_lengths = lengths.astype(np.int32)
        elif sequence_lengths is None:
            lengths, host_lengths = None, np.full(B, T, dtype=np.int32)
        else:
            host = cp.asnumpy(sequence_lengths) if isinstance(sequence_lengths, cp.ndarray) else sequence_lengths
            lengths = checks.sequence_lengths(host, B, T)
            host_lengths = lengths.astype(np.int32)

        x = cp.array(x, order="C")  # private copies (hx, cx: _states): backward must read what forward read
        valid = None if packed else _valid_steps(lengths, time_major, x.shape)
        if valid is not None:  # select, never multiply: the caller's padding may hold NaN
            x = cp.where(valid, x, 0).astype(self.dtype)
        layout = _lib.SEQ_MAJOR_PACKED if packed else _lib.SEQ_MAJOR_UNPACKED if time_major else \
            _lib.BATCH_MAJOR_UNPACKED
        x_desc = self._data_desc(layout, T, B, self.input_size, host_lengths, fill=None)
        y_desc = self._data_desc(layout, T, B, self.num_dirs * Hr, host_lengths,
                                 fill=None if packed else args.padding_fill)  # packed: no padding to fill
        h_desc = TensorDescriptor(self._lib).set(self._data_type, (LD, B, Hr))
        c_desc = TensorDescriptor(self._lib).set(self._data_type, (LD, B, H))
        y = cp.empty(x.shape[:-1] + (self.num_dirs * Hr,), dtype=self.dtype)  # [T, B, .], [B, T, .] or [sum, .]
        hy = cp.empty((LD, B, Hr), dtype=self.dtype)
        cy = cp.empty((LD, B, H), dtype=self.dtype) if self._has_cell_state else None
        dev_lengths = cp.asarray(host_lengths)
        mode = _lib.FWD_TRAINING if is_training else _lib.FWD_INFERENCE
        self._bind()
        self._build_for(B)
        work, reserve = self._temp_space(mode, x_desc)
        self._lib.call("cudnnRNNForward", self._handle.ptr, self._rnn.ptr, mode, _ptr(dev_lengths),
                       x_desc.ptr, _ptr(x), y_desc.ptr, _ptr(y), h_desc.ptr, _ptr(hx), _ptr(hy),
                       c_desc.ptr, _ptr(cx), _ptr(cy), self._weight_bytes, _ptr(w),
                       work.nbytes, _ptr(work), 0 if reserve is None else reserve.nbytes, _ptr(reserve))
        state = functools.partial(caller_layout, time_major=time_major, dtype=self.dtype)
        record = CudnnReserve(self._token, is_training, time_major, lengths, x_desc, y_desc, h_desc, c_desc,
                              x, y.copy() if is_training else y, hx, cx, w, dev_lengths, reserve,
                              batch_sizes=args.batch_sizes)
        output = PackedSequence(y, args.batch_sizes) if packed else y
        return ForwardResult(output, state(hy), None if cy is None else state(cy), record)

    def _bind(self) -> None:
        """This thread's handle on this model's device, bound to the current CuPy stream."""
        cp = _cupy()
        if cp.cuda.Device().id != self._device:
            raise ValueError(f"this model lives on CUDA device {self._device}, the current device is "
                             f"{cp.cuda.Device().id}: run it under `with cupy.cuda.Device({self._device}):`")
        self._handle = shared_handle(self._lib)
        self._handle.bind(cp.cuda.get_current_stream().ptr)

    def _temp_space(self, mode: int, x_desc: RNNDataDescriptor, with_reserve: bool = True):
        cp = _cupy()
        work, reserve = c_size_t(), c_size_t()
        self._lib.call("cudnnGetRNNTempSpaceSizes", self._handle.ptr, self._rnn.ptr, mode, x_desc.ptr,
                       byref(work), byref(reserve))
        keep = with_reserve and mode == _lib.FWD_TRAINING
        return cp.empty(max(work.value, 1), dtype=cp.uint8), cp.empty(reserve.value, dtype=cp.uint8) if keep else None

    # ---- backward ---------------------------------------------------------------------------------

    def backward(self, fwd: ForwardResult, output_backprop, output_h_backprop=None, output_c_backprop=None,
                 params_backprop_out=None) -> Gradients:
        """``cudnnRNNBackwardData_v8`` then ``cudnnRNNBackwardWeights_v8`` (``CUDNN_WGRAD_MODE_ADD`` into a
        zeroed buffer, or into ``params_backprop_out``); the reference's ``backward`` contract."""
        cp = _cupy()
        r = training_reserve(fwd, self._token, CudnnReserve)
        if r.consumed:
            raise ValueError("this ForwardResult was already backpropagated: cuDNN's BackwardData writes into "
                             "the reserve space, so run forward again")
        LD, Hr, H = self.num_layers * self.num_dirs, self.state_width, self.num_units
        packed = r.batch_sizes is not None
        if packed:
            T, B = len(r.batch_sizes), int(r.batch_sizes[0])
        else:
            T, B = r.y.shape[:2] if r.time_major else r.y.shape[1::-1]
        dy, dhy, dcy = contract.backward_arguments(self._config, self._array, T, B, r.time_major, output_backprop,
                                                   output_h_backprop, output_c_backprop, r.batch_sizes)
        dhy, dcy = self._private(dhy), self._private(dcy)
        if params_backprop_out is not None:
            if not isinstance(params_backprop_out, cp.ndarray) or not params_backprop_out.flags.c_contiguous:
                raise TypeError("params_backprop_out must be a contiguous cupy.ndarray (cuDNN adds into it on the "
                                "device)")
            dw = self._check_params("params_backprop_out", params_backprop_out)
            if dw.data.ptr % DEVICE_ALIGNMENT:
                dw = dw.copy()  # accumulated in an aligned copy, written back below
        else:
            dw = cp.zeros(self._params_size, dtype=self.dtype)

        dy = cp.array(dy, order="C")  # a contiguous copy: padded steps are zeroed below
        valid = None if packed else _valid_steps(r.sequence_lengths, r.time_major, r.y.shape)
        if valid is not None:  # select, never multiply: the caller's padding may hold NaN
            dy = cp.where(valid, dy, 0).astype(self.dtype)
        dx = cp.empty_like(r.x)
        dhx = cp.empty((LD, B, Hr), dtype=self.dtype)
        dcx = cp.empty((LD, B, H), dtype=self.dtype) if self._has_cell_state else None
        self._bind()
        self._build_for(B)
        work, _ = self._temp_space(_lib.FWD_TRAINING, r.x_desc, with_reserve=False)
        r.consumed = True
        self._lib.call("cudnnRNNBackwardData_v8", self._handle.ptr, self._rnn.ptr, _ptr(r.dev_lengths),
                       r.y_desc.ptr, _ptr(r.y), _ptr(dy), r.x_desc.ptr, _ptr(dx),
                       r.h_desc.ptr, _ptr(r.hx), _ptr(dhy), _ptr(dhx), r.c_desc.ptr, _ptr(r.cx), _ptr(dcy), _ptr(dcx),
                       self._weight_bytes, _ptr(r.params), work.nbytes, _ptr(work), r.reserve.nbytes, _ptr(r.reserve))
        self._lib.call("cudnnRNNBackwardWeights_v8", self._handle.ptr, self._rnn.ptr, _lib.WGRAD_MODE_ADD,
                       _ptr(r.dev_lengths), r.x_desc.ptr, _ptr(r.x), r.h_desc.ptr, _ptr(r.hx), r.y_desc.ptr, _ptr(r.y),
                       self._weight_bytes, _ptr(dw), work.nbytes, _ptr(work), r.reserve.nbytes, _ptr(r.reserve))
        if params_backprop_out is not None and dw is not params_backprop_out:
            params_backprop_out[...] = dw
            dw = params_backprop_out
        valid = None if packed else _valid_steps(r.sequence_lengths, r.time_major, r.x.shape)
        if valid is not None:  # cuDNN leaves padded steps of dx undefined (maybe NaN): select zeros
            dx = cp.where(valid, dx, 0).astype(self.dtype)
        state = functools.partial(caller_layout, time_major=r.time_major, dtype=self.dtype)
        d_input = PackedSequence(dx, r.batch_sizes) if packed else dx
        return Gradients(d_input, state(dhx), None if dcx is None else state(dcx), dw)


def _valid_steps(sequence_lengths: np.ndarray | None, time_major: bool, shape):
    """``True`` at valid steps, ``False`` past each length, broadcastable to a sequence of ``shape``."""
    if sequence_lengths is None:
        return None
    cp = _cupy()
    steps = cp.arange(shape[0] if time_major else shape[1])
    lengths = cp.asarray(sequence_lengths)
    mask = steps[:, None] < lengths[None, :]
    mask = mask if time_major else mask.T
    return mask[..., None]


def _is_packed(dims: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether a tensor of ``dims`` with ``strides`` (elements) is packed row-major; the stride of a
    dimension of size 1 is never used, so it may be anything."""
    expected = 1
    for dim, stride in zip(reversed(dims), reversed(strides)):
        if dim != 1 and stride != expected:
            return False
        expected *= dim
    return len(dims) == len(strides)


def _device_array(name: str, value, dtype: np.dtype, ndim: int, dims_doc: str, device: int):
    """A CuPy array of exactly ``dtype`` and rank ``ndim`` on the model's ``device``; NumPy input is copied
    to the device. One on another device is refused: cuDNN would read its pointer on the model's device, an
    illegal address that poisons the CUDA context, unless peer access happens to be on."""
    cp = _cupy()
    value = checks.array(name, value, dtype, ndim, dims_doc, kinds=(np.ndarray, cp.ndarray))
    if isinstance(value, cp.ndarray) and value.device.id != device:
        raise ValueError(f"{name} lives on CUDA device {value.device.id}, the model on device {device}: copy it "
                         f"there (cupy.asarray under `with cupy.cuda.Device({device}):`)")
    return cp.asarray(value)


class CudnnRNNRelu(NoCellStateCall, _CudnnModel):
    """cuDNN ``CUDNN_RNN_RELU`` on the GPU."""

    rnn_mode = "relu"


class CudnnRNNTanh(NoCellStateCall, _CudnnModel):
    """cuDNN ``CUDNN_RNN_TANH`` on the GPU."""

    rnn_mode = "tanh"


class CudnnGRU(NoCellStateCall, _CudnnModel):
    """cuDNN ``CUDNN_GRU`` (reset-after) on the GPU."""

    rnn_mode = "gru"


class CudnnLSTM(LSTMCall, _CudnnModel):
    """cuDNN ``CUDNN_LSTM`` on the GPU, with the optional projection (``projSize``)."""

    rnn_mode = "lstm"


MODELS = {cls.rnn_mode: cls for cls in (CudnnRNNRelu, CudnnRNNTanh, CudnnLSTM, CudnnGRU)}
