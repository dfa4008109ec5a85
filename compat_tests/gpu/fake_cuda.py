"""A stand-in for CuPy and ``libcudnn.so.9`` on a CPU, so that every line of ``cudnn_backend`` that only runs
on a GPU is executed by the CPU suite (``test_cudnn_plumbing.py``).

It checks the plumbing, not cuDNN's numbers: every call's arguments are converted through the ctypes
``argtypes`` the backend declares (a wrong count or type raises), descriptors hold what was set, the weight
layout reported is the reference's (``dims {1, rows, cols}`` for a matrix, ``{1, n, 1}`` for a bias, as
NVIDIA's samples read them), and the compute calls record their pointers and a snapshot of the memory they
point to, so a test can check what the backend handed cuDNN. "Device" arrays are NumPy arrays whose
``.data.ptr`` is their host address.

The compute calls then do what cuDNN's documentation says they do, with the reference as the arithmetic
(dropout included, with the reference's masks): ``cudnnRNNForward`` reads ``x`` in its descriptor's layout, the states as ``[L*D, B, width]``,
writes ``y`` (``paddingFill`` past each length, NaN without one), ``hy``, ``cy``;
``cudnnRNNBackwardData_v8`` finds the forward pass by its reserve space and writes ``dx`` (NaN past each
length: cuDNN documents nothing there), ``dhx``, ``dcx``; ``cudnnRNNBackwardWeights_v8`` adds
the weight gradient into ``dw``; ``cudnnRNNSetClip_v9`` makes the descriptor's model again with that cell
clip. So a backend that moves data wrongly (a layout, a transpose, a buffer)
disagrees with the reference through this fake, while the arithmetic itself is never tested here.

:func:`install` puts both in place for a whole process: ``pytest --fake-cuda -m gpu`` dry-runs the GPU suite's
own code on a CPU (``test_cudnn_plumbing.py`` does, on every run).
"""

from __future__ import annotations

import collections
import ctypes
import functools
import itertools
import types
from dataclasses import dataclass, field

import numpy as np

import reference
from cudnn_backend import _lib
from reference import packing, precision, tf32
from reference.layout import BIAS_MODES

_DTYPES = {v: np.dtype(k) for k, v in _lib.DATA_TYPE.items()}
_MODES = {v: k for k, v in _lib.RNN_MODE.items()}


# ---- CuPy -----------------------------------------------------------------------------------------------

ALIGNMENT = 256  # what cudaMalloc (and CuPy's pool) gives; NumPy's own allocations are less aligned


class _Memory:
    def __init__(self, array: np.ndarray) -> None:
        self.ptr = array.ctypes.data if array.size else 0


class Device:
    """``cupy.cuda.Device``: ``Device()`` is the current device (``Device.current``, 0 unless a test moves it)."""

    current = 0

    def __init__(self, device_id: int | None = None) -> None:
        self.id = Device.current if device_id is None else device_id

    def synchronize(self) -> None:
        pass


class ndarray(np.ndarray):
    """A NumPy array posing as a CuPy one: ``.data.ptr`` is its address; copies are aligned as CuPy's; it lives
    on device ``device_id`` (0 unless a test moves it)."""

    device_id = 0

    @property
    def data(self) -> _Memory:
        return _Memory(self)

    @property
    def device(self) -> Device:
        return Device(self.device_id)

    def copy(self, order: str = "C") -> "ndarray":
        return _copy(self)

    def astype(self, dtype, *args, **kwargs) -> "ndarray":
        return _copy(self, dtype)


def _alloc(shape, dtype, fill) -> ndarray:
    dtype = np.dtype(dtype)
    shape = (shape,) if np.isscalar(shape) else tuple(shape)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    out = raw[start : start + nbytes].view(dtype).reshape(shape).view(ndarray)
    out.view(np.ndarray)[...] = fill
    return out


def _copy(a, dtype=None) -> ndarray:
    source = np.asarray(a, dtype=dtype)
    out = _alloc(source.shape, source.dtype, 0)
    np.copyto(out.view(np.ndarray), source)
    return out


def _make_cupy() -> types.ModuleType:
    cp = types.ModuleType("cupy")
    cp.__version__ = "fake"
    cp.ndarray, cp.uint8 = ndarray, np.uint8
    cp.asarray = lambda a, dtype=None: a if isinstance(a, ndarray) and dtype in (None, a.dtype) else _copy(a, dtype)
    cp.array = lambda a, dtype=None, order="C": _copy(a, dtype)
    cp.ascontiguousarray = lambda a: a if isinstance(a, ndarray) and a.flags.c_contiguous else _copy(a)
    cp.empty = lambda shape, dtype=float: _alloc(shape, dtype, 0x5A)  # never zero: garbage shows
    cp.empty_like = lambda a: _alloc(a.shape, a.dtype, 0x5A)
    cp.zeros = lambda shape, dtype=float: _alloc(shape, dtype, 0)
    cp.zeros_like = lambda a: _alloc(a.shape, a.dtype, 0)
    cp.where = lambda c, x, y: _copy(np.where(c, x, y))
    cp.arange = lambda *a, **k: _copy(np.arange(*a, **k))
    cp.concatenate = lambda arrays: _copy(np.concatenate(arrays))
    cp.asnumpy = lambda a: np.array(a).view(np.ndarray)
    cp.array_equal = np.array_equal

    class Stream:
        ptr = 0

        def synchronize(self) -> None:
            pass

    runtime = types.SimpleNamespace(
        getDeviceCount=lambda: 1, runtimeGetVersion=lambda: 13000, driverGetVersion=lambda: 13000,
        getDeviceProperties=lambda i: {"name": b"fake", "major": 9, "minor": 0, "multiProcessorCount": 1})
    class MemoryPool:
        def used_bytes(self) -> int:
            return 0  # nothing is on a device

    pool = MemoryPool()
    cp.get_default_memory_pool = lambda: pool
    cp.cuda = types.SimpleNamespace(Device=Device, get_current_stream=Stream, runtime=runtime)
    return cp


cupy = _make_cupy()


# ---- cuDNN ----------------------------------------------------------------------------------------------


def read(ptr: int, count: int, dtype) -> np.ndarray | None:
    """A copy of ``count`` elements at address ``ptr`` (``None`` for a NULL pointer)."""
    dtype = np.dtype(dtype)
    return None if not ptr else np.frombuffer(ctypes.string_at(ptr, count * dtype.itemsize), dtype).copy()


@dataclass
class DataDesc:
    dtype: np.dtype
    layout: int
    max_seq: int
    batch: int
    vector: int
    lengths: list[int]
    fill: float | None


@dataclass
class Call:
    """A compute call: its name, pointer arguments by role, and snapshots of the memory they point to."""

    name: str
    ptrs: dict[str, int]
    snapshots: dict[str, np.ndarray | None] = field(default_factory=dict)
    values: dict[str, int] = field(default_factory=dict)


def _value(arg) -> int:
    arg = getattr(arg, "_obj", arg)
    return int(getattr(arg, "value", arg) or 0)


def _set_out(arg, value) -> None:
    arg._obj.value = value


def write(ptr: int, array: np.ndarray) -> None:
    """Copy ``array``'s bytes (C order) to address ``ptr``."""
    data = np.ascontiguousarray(array).tobytes()
    ctypes.memmove(ptr, data, len(data))


# Faults a dry run can plant (``FAKE_CUDA_FAULTS=name,...``), each a wrong guess or an accident that a GPU
# window must survive: the GPU ladder's test (test_gpu_run.py) shows every other rung still reports.
FAULTS = {
    "skip_input_bias": "cuDNN computes skip_input models with each of layer 0's biases (b_W and b_R) counted twice",
    "float16_rounding": "cuDNN's float16 outputs come out rounded another way (1/64 relative above ours)",
    "persist_hang": "a persistent algorithm's forward pass never returns",
    "sticky_error": "setting a dropout rate above 0 raises a CUDA error that every later call raises again",
    "wide_single_bias": "for hidden sizes of 512 and up (the published sample's; no other rung's, which stay at 256 "
                        "or below) cuDNN runs as if the backend had asked for CUDNN_RNN_SINGLE_INP_BIAS: the "
                        "recurrent biases it packed are not read",
    "bias_mode_ignored": "cuDNN builds every RNN with CUDNN_RNN_DOUBLE_BIAS whatever biasMode the backend asked "
                         "for (the other bias modes' rung alone uses another)",
    "padding_fill_ignored": "cuDNN writes zeros past each length whatever paddingFill the output descriptor holds "
                            "(the padding_fill rung alone sets another)",
    "cell_clip_ignored": "cuDNN leaves the LSTM's cell state unclipped whatever cudnnRNNSetClip_v9 set (the "
                         "cell_clip rung alone sets a clip)",
    "packed_by_sequence": "cuDNN reads a SEQ_MAJOR_PACKED buffer sequence after sequence instead of step after "
                          "step (the packed rung alone uses that layout)",
    "tf32_other_ties": "cuDNN's TF32 math (float32 data, default or tensor-op math) rounds its GEMM operands to "
                       "nearest as the decided rule does, but breaks ties the other way (ties to even for ties away, "
                       "and the reverse): only operands at a tie tell, which the tf32 rung alone holds",
}
WIDE_UNITS = 512  # the hidden sizes wide_single_bias hits


def faults_from_environment() -> frozenset[str]:
    """The faults named by ``FAKE_CUDA_FAULTS`` (comma-separated); ``ValueError`` for an unknown name."""
    import os

    names = frozenset(n.strip() for n in os.environ.get("FAKE_CUDA_FAULTS", "").split(",") if n.strip())
    if names - set(FAULTS):
        raise ValueError(f"FAKE_CUDA_FAULTS must name faults among {sorted(FAULTS)}, got {sorted(names - set(FAULTS))}")
    return names


class FakeCudnn:
    """The parts of :class:`cudnn_backend._lib.Library` the backend uses, answered from the reference (with the
    ``faults`` planted, see :data:`FAULTS`). Its version is the GPU image's cuDNN (9.19), the oldest this
    project meets on a device."""

    version, version_string, path = 91900, "9.19.0", "fake-libcudnn.so.9"

    def __init__(self, faults: frozenset[str] = frozenset()) -> None:
        self.faults = faults
        self.sticky: str | None = None
        self._ids = itertools.count(0x1000, 0x10)
        self.tensors: dict[int, tuple[list[int], list[int]]] = {}
        self.data: dict[int, DataDesc] = {}
        self.rnns: dict[int, object] = {}  # descriptor -> the reference model of its settings
        self.rnn_settings: dict[int, dict[str, int]] = {}
        self.rnn_makers: dict = {}  # descriptor -> how its model is made (cudnnRNNSetClip_v9 makes it again)
        self.clips: dict = {}  # descriptor -> (clip mode, lclip, rclip) as set
        self.dropouts: dict[int, tuple[float, int]] = {}  # descriptor -> (rate, seed)
        # the latest calls only: a long run (test_gpu's 2,000-call growth check) must not grow the fake
        self.calls: collections.deque[str] = collections.deque(maxlen=1000)
        self.compute: collections.deque[Call] = collections.deque(maxlen=64)
        self._trained: dict[int, tuple] = {}  # reserve space -> (forward result, data descriptor, weight gradient)
        self.cdll = types.SimpleNamespace(cudnnGetCudartVersion=lambda: 13000,
                                          **{f"cudnnDestroy{k}": (lambda *a: 0) for k in
                                             ("", "TensorDescriptor", "RNNDescriptor", "RNNDataDescriptor",
                                              "DropoutDescriptor")})

    def call(self, name: str, *args) -> None:
        if self.sticky:
            raise RuntimeError(self.sticky)
        argtypes, _ = _lib.SIGNATURES[name]
        if len(args) != len(argtypes):
            raise TypeError(f"{name} takes {len(argtypes)} arguments, got {len(args)}")
        for i, (declared, arg) in enumerate(zip(argtypes, args)):
            try:
                declared.from_param(arg)
            except TypeError as exc:
                raise TypeError(f"{name} argument {i}: {exc}") from None
        self.calls.append(name)
        getattr(self, "_" + name, lambda *a: None)(*args)

    # descriptors
    def _create(self, out) -> None:
        _set_out(out, next(self._ids))

    _cudnnCreate = _cudnnCreateTensorDescriptor = _cudnnCreateRNNDescriptor = _create
    _cudnnCreateRNNDataDescriptor = _cudnnCreateDropoutDescriptor = _create

    def _cudnnSetTensorNdDescriptor(self, tensor_desc, data_type, nb_dims, dim_a, stride_a) -> None:
        self.tensors[_value(tensor_desc)] = (list(dim_a)[:nb_dims], list(stride_a)[:nb_dims])

    def _cudnnGetTensorNdDescriptor(self, tensor_desc, nb_dims_requested, data_type, nb_dims, dim_a, stride_a) -> None:
        d, s = self.tensors[_value(tensor_desc)]
        _set_out(nb_dims, len(d))
        for i, (a, b) in enumerate(zip(d, s)):
            dim_a[i], stride_a[i] = a, b

    def _cudnnSetRNNDataDescriptor(self, rnn_data_desc, data_type, layout, max_seq_length, batch_size, vector_size,
                                   seq_length_array, padding_fill) -> None:
        dtype = _DTYPES[data_type]
        fill = None if not _value(padding_fill) else float(read(_value(padding_fill), 1, dtype)[0])
        if fill is not None and "padding_fill_ignored" in self.faults:
            fill = 0.0
        self.data[_value(rnn_data_desc)] = DataDesc(dtype, layout, max_seq_length, batch_size, vector_size,
                                                    list(seq_length_array)[:batch_size], fill)

    def _cudnnDropoutGetStatesSize(self, handle, size_in_bytes) -> None:
        _set_out(size_in_bytes, 256)

    def _cudnnSetDropoutDescriptor(self, dropout_desc, handle, dropout, states, state_size_in_bytes, seed) -> None:
        if "sticky_error" in self.faults and float(dropout) > 0:
            self.sticky = ("cudaErrorIllegalAddress: an illegal memory access was encountered (planted fault "
                           "sticky_error: every later call fails too)")
            raise RuntimeError(self.sticky)
        self.dropouts[_value(dropout_desc)] = (float(dropout), int(seed))

    def _cudnnSetRNNDescriptor_v8(self, rnn_desc, algo, cell_mode, bias_mode, dir_mode, input_mode, data_type,
                                  math_prec, math_type, input_size, hidden_size, proj_size, num_layers, dropout_desc,
                                  aux_flags) -> None:
        self.rnn_settings[_value(rnn_desc)] = dict(algo=algo, bias_mode=bias_mode, math_prec=math_prec,
                                                   math_type=math_type, aux_flags=aux_flags)
        rate, seed = self.dropouts[_value(dropout_desc)]
        make = functools.partial(
            reference.make_model, _MODES[cell_mode], num_layers, hidden_size, input_size,
            "skip_input" if input_mode else "linear_input", "bidirectional" if dir_mode else "unidirectional",
            _DTYPES[data_type], rate, seed, proj_size if proj_size != hidden_size else None,
            bias_mode="double" if "bias_mode_ignored" in self.faults else
            next(name for name, m in BIAS_MODES.items() if m.cudnn == bias_mode))
        if _DTYPES[data_type] == np.float32 and math_type in (_lib.MATH_TYPE["default"], _lib.MATH_TYPE["tensor_op"]):
            make = functools.partial(self._tf32_model, make)  # tensor cores: TF32 math for float32 data
        self.rnn_makers[_value(rnn_desc)], self.clips[_value(rnn_desc)] = make, (0, 0.0, 0.0)
        self.rnns[_value(rnn_desc)] = make()

    def _tf32_model(self, make, **options):
        """The reference model of ``make`` under TF32 math, by the decided rule (``tf32_other_ties``: the other
        rule to nearest)."""
        model = make(math_type="tf32", **options)
        if "tf32_other_ties" in self.faults:  # (the fake's own wrong guess: the rule its model's GEMMs read by)
            model._operand = tf32.RULES["rne" if precision.TF32_ROUNDING == "rna" else "rna"]
        return model

    def _cudnnRNNSetClip_v9(self, rnn_desc, clip_mode, lclip, rclip) -> None:
        self.clips[_value(rnn_desc)] = (int(clip_mode), float(lclip), float(rclip))
        clipped = clip_mode == _lib.CLIP_MINMAX and "cell_clip_ignored" not in self.faults
        self.rnns[_value(rnn_desc)] = self.rnn_makers[_value(rnn_desc)](
            **({"cell_clip": (lclip, rclip)} if clipped else {}))

    def _cudnnRNNGetClip_v9(self, rnn_desc, clip_mode, lclip, rclip) -> None:
        mode, low, high = self.clips[_value(rnn_desc)]
        _set_out(clip_mode, mode)
        _set_out(lclip, low)
        _set_out(rclip, high)

    def _cudnnGetRNNWeightSpaceSize(self, handle, rnn_desc, weight_space_size) -> None:
        model = self.rnns[_value(rnn_desc)]
        _set_out(weight_space_size, model.params_size() * model.dtype.itemsize)

    def _cudnnGetRNNWeightParams(self, handle, rnn_desc, pseudo_layer, weight_space_size, weight_space, lin_layer_id,
                                 m_desc, m_addr, b_desc, b_addr) -> None:
        model = self.rnns[_value(rnn_desc)]
        regions = {(r.kind, r.pseudo_layer, r.lin_layer_id): r for r in model.opaque_layout()}
        for kind, tensor, addr in (("weight", m_desc, m_addr), ("bias", b_desc, b_addr)):
            r = regions.get((kind, pseudo_layer, lin_layer_id))
            _set_out(addr, None if r is None else _value(weight_space) + r.offset * model.dtype.itemsize)
            if r is not None:
                dims = [1, *r.shape] if kind == "weight" else [1, r.shape[0], 1]
                self.tensors[_value(tensor)] = (dims, [dims[1] * dims[2], dims[2], 1])

    def _cudnnGetRNNTempSpaceSizes(self, handle, rnn_desc, fwd_mode, x_desc, work_space_size,
                                   reserve_space_size) -> None:
        _set_out(work_space_size, 64)
        if reserve_space_size is not None:
            _set_out(reserve_space_size, 128)

    # compute: record what was handed over
    def _record(self, name: str, rnn_desc, dev_seq_lengths, x_desc, y_desc, h_desc, c_desc, pointers: dict,
                values: dict | None = None) -> None:
        model = self.rnns[_value(rnn_desc)]
        xd, yd = self.data[_value(x_desc)], self.data[_value(y_desc)]
        hd, cd = self.tensors[_value(h_desc)][0], self.tensors[_value(c_desc)][0]
        sizes = {"x": _elements(xd), "dx": _elements(xd), "y": _elements(yd), "dy": _elements(yd),
                 "w": model.params_size(), "dw": model.params_size()}
        sizes |= {k: int(np.prod(hd)) for k in ("hx", "hy", "dhy", "dhx")}
        sizes |= {k: int(np.prod(cd)) for k in ("cx", "cy", "dcy", "dcx")}
        ptrs = {k: _value(v) for k, v in pointers.items()} | {"seq_lengths": _value(dev_seq_lengths)}
        call = Call(name, ptrs, values=values or {})
        call.snapshots = {k: read(p, sizes[k], model.dtype) for k, p in ptrs.items() if k in sizes}
        call.snapshots["seq_lengths"] = read(ptrs["seq_lengths"], xd.batch, np.int32)
        call.values |= {"x_desc": _value(x_desc), "y_desc": _value(y_desc)}
        self.compute.append(call)

    def _cudnnRNNForward(self, handle, rnn_desc, fwd_mode, dev_seq_lengths, x_desc, x, y_desc, y, h_desc, hx, hy,
                         c_desc, cx, cy, weight_space_size, weight_space, work_space_size, work_space,
                         reserve_space_size, reserve_space) -> None:
        self._record("forward", rnn_desc, dev_seq_lengths, x_desc, y_desc, h_desc, c_desc,
                     dict(x=x, y=y, hx=hx, hy=hy, cx=cx, cy=cy, w=weight_space, reserve=reserve_space),
                     {"mode": fwd_mode})
        call, model, xd = self.compute[-1], self.rnns[_value(rnn_desc)], self.data[_value(x_desc)]
        snap = call.snapshots
        states = {k: None if snap[k] is None else snap[k].reshape(self.tensors[_value(d)][0])
                  for k, d in (("hx", h_desc), ("cx", c_desc))}
        training = fwd_mode == _lib.FWD_TRAINING
        if snap["seq_lengths"] is None or snap["seq_lengths"].tolist() != xd.lengths:
            raise ValueError(f"devSeqLengths {snap['seq_lengths']} is not a copy of the descriptor's {xd.lengths}")
        if "persist_hang" in self.faults and self.rnn_settings[_value(rnn_desc)]["algo"] != _lib.ALGO["standard"]:
            import time

            time.sleep(3600)
        fwd = model.forward(_time_major(snap["x"], xd, self.faults), states["hx"],
                            self._planted(model, snap["w"]),
                            input_c=states["cx"], is_training=training, sequence_lengths=snap["seq_lengths"],
                            time_major=True)
        if "float16_rounding" in self.faults and model.dtype == np.float16:
            fwd = fwd._replace(**{k: None if a is None else (a.astype(np.float32) * (1 + 2**-6)).astype(np.float16)
                                  for k, a in zip(("output", "output_h", "output_c"), fwd[:3])})
        y_desc = self.data[_value(y_desc)]
        write(call.ptrs["y"], _caller_layout(_pad(fwd.output, xd.lengths, y_desc.fill), xd))
        write(call.ptrs["hy"], fwd.output_h)
        if fwd.output_c is not None:
            write(call.ptrs["cy"], fwd.output_c)
        if training:
            self._trained[call.ptrs["reserve"]] = (fwd, xd, None)

    def _planted(self, model, params: np.ndarray) -> np.ndarray:
        """``params`` as the planted faults read them: ``skip_input_bias``, layer 0's biases doubled;
        ``wide_single_bias``, the recurrent biases (lin layer ids G..2G-1) of a wide model zeroed."""
        skip = "skip_input_bias" in self.faults and model.input_mode == "skip_input"
        wide = "wide_single_bias" in self.faults and model.num_units >= WIDE_UNITS
        if not (skip or wide):
            return params
        params = params.copy()
        for r in model.opaque_layout():
            if skip and r.kind == "bias" and r.pseudo_layer < model.num_dirs:
                params[r.offset : r.offset + r.size] *= 2
            if wide and r.kind == "bias" and r.lin_layer_id >= len(model.gates):
                params[r.offset : r.offset + r.size] = 0
        return params

    def _cudnnRNNBackwardData_v8(self, handle, rnn_desc, dev_seq_lengths, y_desc, y, dy, x_desc, dx, h_desc, hx, dhy,
                                 dhx, c_desc, cx, dcy, dcx, weight_space_size, weight_space, work_space_size,
                                 work_space, reserve_space_size, reserve_space) -> None:
        self._record("backward_data", rnn_desc, dev_seq_lengths, x_desc, y_desc, h_desc, c_desc,
                     dict(y=y, dy=dy, dx=dx, hx=hx, dhy=dhy, dhx=dhx, cx=cx, dcy=dcy, dcx=dcx, w=weight_space,
                          reserve=reserve_space))
        call, model = self.compute[-1], self.rnns[_value(rnn_desc)]
        snap = call.snapshots
        fwd, xd, _ = self._trained[call.ptrs["reserve"]]
        d_states = {k: None if snap[k] is None else snap[k].reshape(self.tensors[_value(d)][0])
                    for k, d in (("dhy", h_desc), ("dcy", c_desc))}
        grads = model.backward(fwd, _time_major(snap["dy"], self.data[_value(y_desc)], self.faults),
                               d_states["dhy"], d_states["dcy"])
        write(call.ptrs["dx"], _caller_layout(_pad(grads.input, xd.lengths, None), xd))
        write(call.ptrs["dhx"], grads.input_h)
        if grads.input_c is not None:
            write(call.ptrs["dcx"], grads.input_c)
        self._trained[call.ptrs["reserve"]] = (fwd, xd, grads.params)

    def _cudnnRNNBackwardWeights_v8(self, handle, rnn_desc, add_grad, dev_seq_lengths, x_desc, x, h_desc, hx, y_desc,
                                    y, weight_space_size, dweight_space, work_space_size, work_space,
                                    reserve_space_size, reserve_space) -> None:
        self._record("backward_weights", rnn_desc, dev_seq_lengths, x_desc, y_desc, h_desc, h_desc,
                     dict(x=x, hx=hx, y=y, dw=dweight_space, reserve=reserve_space), {"add_grad": add_grad})
        call = self.compute[-1]
        _, _, d_params = self._trained.pop(call.ptrs["reserve"])  # BackwardData came first, as documented
        write(call.ptrs["dw"], call.snapshots["dw"] + d_params)


def _pad(sequence: np.ndarray, lengths: list[int], fill: float | None) -> np.ndarray:
    """``sequence [T, B, V]`` with ``fill`` past each length, or NaN where cuDNN leaves them undefined."""
    out = sequence.copy()
    for b, n in enumerate(lengths):
        out[n:, b] = np.nan if fill is None else fill
    return out


def _elements(desc: DataDesc) -> int:
    """How many elements a data descriptor's memory holds: every step of every sequence, padded or packed."""
    if desc.layout == _lib.SEQ_MAJOR_PACKED:
        return sum(desc.lengths) * desc.vector
    return desc.max_seq * desc.batch * desc.vector


def _time_major(flat: np.ndarray, desc: DataDesc, faults: frozenset[str] = frozenset()) -> np.ndarray:
    """A sequence read from a data descriptor's memory, as ``[T, B, vector]`` (zeros past each length of a
    packed one). Planted fault ``packed_by_sequence``: packed memory read sequence after sequence."""
    if desc.layout == _lib.SEQ_MAJOR_UNPACKED:
        return flat.reshape(desc.max_seq, desc.batch, desc.vector)
    if desc.layout == _lib.BATCH_MAJOR_UNPACKED:
        return flat.reshape(desc.batch, desc.max_seq, desc.vector).transpose(1, 0, 2)
    if desc.layout == _lib.SEQ_MAJOR_PACKED:
        data = flat.reshape(-1, desc.vector)
        if "packed_by_sequence" in faults:
            out = np.zeros((desc.max_seq, desc.batch, desc.vector), dtype=flat.dtype)
            start = 0
            for b, n in enumerate(desc.lengths):
                out[:n, b] = data[start : start + n]
                start += n
            return out
        return reference.unpack(reference.PackedSequence(data, packing.batch_sizes_of(desc.lengths)))[0]
    raise NotImplementedError(f"the fake reads cuDNN's three data layouts, got layout {desc.layout}")


def _caller_layout(sequence: np.ndarray, desc: DataDesc) -> np.ndarray:
    """A ``[T, B, vector]`` sequence in a data descriptor's memory layout."""
    if desc.layout == _lib.SEQ_MAJOR_PACKED:
        return reference.pack(sequence, desc.lengths).data
    return sequence if desc.layout == _lib.SEQ_MAJOR_UNPACKED else sequence.transpose(1, 0, 2)


def is_fake(lib) -> bool:
    """Whether ``lib`` (what ``cudnn_backend._lib.load()`` returned) is this module's fake cuDNN, as in a dry
    run where ``install`` or ``compat_tests/gpu/fake_site`` put it in place."""
    return isinstance(lib, FakeCudnn)


def install(patch=None) -> FakeCudnn:
    """The fakes in place of CuPy and libcudnn, through ``patch`` (a ``pytest.MonkeyPatch``: undone with it),
    or for the rest of this process when none is given (``pytest --fake-cuda``)."""
    import sys

    import pytest

    import cudnn_backend
    from cudnn_backend import model as backend_model

    patch = patch or pytest.MonkeyPatch()
    lib = FakeCudnn(faults_from_environment())
    patch.setitem(sys.modules, "cupy", cupy)
    patch.setattr(_lib, "load", lambda: lib)
    patch.setattr(backend_model, "_HANDLES", {})  # no handle of a real cuDNN is handed to the fake
    ok, why = cudnn_backend.available.__wrapped__()  # the real check, answered by the fakes
    if not ok:
        raise RuntimeError(f"the fake CUDA stack does not pass cudnn_backend.available(): {why}")
    checked = lambda: (ok, why)  # noqa: E731
    checked.__wrapped__ = cudnn_backend.available.__wrapped__  # the check itself stays callable, as with the cache
    patch.setattr(cudnn_backend, "available", checked)
    return lib
