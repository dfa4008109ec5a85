"""Owners of cuDNN handles and descriptors: created by the constructor, destroyed exactly once by
``close()``, by leaving a ``with`` block, or by the garbage collector (a ``weakref.finalize``).

Only :class:`Handle` and :class:`DropoutDescriptor` need a GPU; the others are host-side objects.
"""

from __future__ import annotations

import ctypes
import weakref
from ctypes import byref, c_int, c_size_t, c_void_p

from . import _lib
from ._lib import Library, ints


def _destroy(lib: Library, destroy: str, ptr: int) -> None:
    getattr(lib.cdll, destroy)(c_void_p(ptr))  # status ignored: nothing useful can be done at teardown


class Owned:
    """A cuDNN object created with ``create(&ptr)`` and destroyed with ``destroy(ptr)``."""

    _create: str
    _destroy: str

    def __init__(self, lib: Library) -> None:
        self.lib = lib
        ptr = c_void_p()
        lib.call(self._create, byref(ptr))
        self.ptr = ptr
        self._finalizer = weakref.finalize(self, _destroy, lib, self._destroy, ptr.value)

    @property
    def alive(self) -> bool:
        return self._finalizer.alive

    def close(self) -> None:
        """Destroy now (once); later calls with this object hand cuDNN a NULL, which it refuses."""
        self._finalizer()
        self.ptr = c_void_p(None)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Handle(Owned):
    """A cuDNN context on the current CUDA device; ``bind(stream_ptr)`` before each call sequence."""

    _create, _destroy = "cudnnCreate", "cudnnDestroy"

    def bind(self, stream_ptr: int) -> None:
        self.lib.call("cudnnSetStream", self.ptr, c_void_p(stream_ptr))


class TensorDescriptor(Owned):
    """A fully packed N-d tensor descriptor (used for h and c: ``[L*D, B, width]``)."""

    _create, _destroy = "cudnnCreateTensorDescriptor", "cudnnDestroyTensorDescriptor"

    def set(self, data_type: int, dims: tuple[int, ...]) -> "TensorDescriptor":
        strides = [1] * len(dims)
        for i in range(len(dims) - 2, -1, -1):
            strides[i] = strides[i + 1] * dims[i + 1]
        self.lib.call("cudnnSetTensorNdDescriptor", self.ptr, data_type, len(dims), ints(dims), ints(strides))
        return self

    def get(self, max_dims: int = 8) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        """``(data_type, dims, strides)``."""
        dt, nb = c_int(), c_int()
        dims, strides = (c_int * max_dims)(), (c_int * max_dims)()
        self.lib.call("cudnnGetTensorNdDescriptor", self.ptr, max_dims, byref(dt), byref(nb), dims, strides)
        n = nb.value
        return dt.value, tuple(dims[:n]), tuple(strides[:n])


class RNNDataDescriptor(Owned):
    """Sequences ``[T, B, V]`` (seq-major) or ``[B, T, V]`` (batch-major), padded, with host lengths."""

    _create, _destroy = "cudnnCreateRNNDataDescriptor", "cudnnDestroyRNNDataDescriptor"

    def set(self, data_type: int, layout: int, max_seq: int, batch: int, vector: int, lengths,
            fill: ctypes._SimpleCData | None) -> "RNNDataDescriptor":
        self._lengths = ints(lengths)  # cuDNN reads the host array during the call; keep it with the descriptor
        self._fill = fill
        self.lib.call("cudnnSetRNNDataDescriptor", self.ptr, data_type, layout, max_seq, batch, vector,
                      self._lengths, None if fill is None else ctypes.cast(byref(fill), c_void_p))
        return self


class RNNDescriptor(Owned):
    _create, _destroy = "cudnnCreateRNNDescriptor", "cudnnDestroyRNNDescriptor"
    # cudnnSetRNNDescriptor_v8's and cudnnGetRNNDescriptor_v8's arguments after the descriptor, in order, named as
    # the header names them (snake_case; test_cudnn_headers.py holds the two against each other), then the
    # dropout descriptor and aux_flags.
    FIELDS = ("algo", "cell_mode", "bias_mode", "dir_mode", "input_mode", "data_type", "math_prec", "math_type",
              "input_size", "hidden_size", "proj_size", "num_layers")

    def set(self, *, dropout: "DropoutDescriptor", aux_flags: int, **fields: int) -> "RNNDescriptor":
        """``cudnnSetRNNDescriptor_v8`` with every one of :attr:`FIELDS` by name (``descriptor_fields`` in
        ``cudnn_backend.model`` gives them for a model)."""
        if set(fields) != set(self.FIELDS):
            raise TypeError(f"RNNDescriptor.set takes {', '.join(self.FIELDS)}, dropout and aux_flags, "
                            f"got {', '.join(sorted(fields))}")
        self._dropout = dropout  # must outlive this descriptor
        self.lib.call("cudnnSetRNNDescriptor_v8", self.ptr, *(fields[name] for name in self.FIELDS), dropout.ptr,
                      aux_flags)
        return self

    def set_clip(self, lclip: float, rclip: float) -> "RNNDescriptor":
        """``cudnnRNNSetClip_v9``: the LSTM's cell state clipped to ``[lclip, rclip]`` (``CUDNN_RNN_CLIP_MINMAX``)."""
        self.lib.call("cudnnRNNSetClip_v9", self.ptr, _lib.CLIP_MINMAX, float(lclip), float(rclip))
        return self

    def get_clip(self) -> tuple[int, float, float]:
        """``cudnnRNNGetClip_v9``: ``(clip mode, lclip, rclip)`` as cuDNN holds them."""
        mode, lclip, rclip = c_int(), ctypes.c_double(), ctypes.c_double()
        self.lib.call("cudnnRNNGetClip_v9", self.ptr, byref(mode), byref(lclip), byref(rclip))
        return mode.value, lclip.value, rclip.value

    def get(self) -> dict[str, int]:
        """What cuDNN holds, by :meth:`set`'s argument names (``dropout``: the descriptor's address)."""
        fields = [c_int() for _ in self.FIELDS]
        dropout, aux_flags = c_void_p(), ctypes.c_uint32()
        self.lib.call("cudnnGetRNNDescriptor_v8", self.ptr, *map(byref, fields), byref(dropout), byref(aux_flags))
        return {**{name: f.value for name, f in zip(self.FIELDS, fields)}, "dropout": dropout.value,
                "aux_flags": aux_flags.value}


class DropoutDescriptor(Owned):
    """Dropout between layers; its RNG state lives in a device buffer that must outlive the descriptor.
    ``dropout == 0`` needs no state (PyTorch's ``cudnnSetDropoutDescriptor(d, h, 0, NULL, 0, 0)``)."""

    _create, _destroy = "cudnnCreateDropoutDescriptor", "cudnnDestroyDropoutDescriptor"

    def set(self, handle: Handle, dropout: float, seed: int, allocate) -> "DropoutDescriptor":
        """``allocate(nbytes)`` returns a device buffer with a ``.data.ptr`` (a CuPy array)."""
        if dropout == 0.0:
            self.states = None
            self.lib.call("cudnnSetDropoutDescriptor", self.ptr, handle.ptr, 0.0, None, 0, 0)
            return self
        size = c_size_t()
        self.lib.call("cudnnDropoutGetStatesSize", handle.ptr, byref(size))
        self.states = allocate(size.value)
        self.lib.call("cudnnSetDropoutDescriptor", self.ptr, handle.ptr, float(dropout),
                      c_void_p(self.states.data.ptr), size.value, seed)
        return self
