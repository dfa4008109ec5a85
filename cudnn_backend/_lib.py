"""Find and load ``libcudnn.so.9``, declare every function it is called through, turn statuses into errors.

Loading order: the ``nvidia.cudnn`` package (the ``nvidia-cudnn-cu13`` wheel), then every ``sys.path``
entry's ``nvidia/cudnn/lib``, then the system's loader. The shim ``libcudnn.so.9`` forwards to sub-libraries
it opens itself on first use and aborts the process when one does not load, so those the backend calls
into are loaded first (a missing one is an ``OSError``), then ``cudnnAdvVersionCheck`` (the RNN library) and
``cudnnOpsVersionCheck`` run as an early health check. Every function gets full ``argtypes``/``restype``
(without them ctypes would pass a Python float as a C double where cuDNN wants a float, and truncate
``size_t`` to ``int``). Nothing here needs a GPU.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from ctypes import POINTER, c_char_p, c_double, c_float, c_int, c_int32, c_size_t, c_uint32, c_ulonglong, c_void_p
from functools import lru_cache
from pathlib import Path

LIBRARY = "libcudnn.so.9"
CUBLASLT = "libcublasLt.so.13"
# The sub-libraries the backend's functions live in (handles, versions and errors; tensors and dropout; RNNs).
SUBLIBRARIES = ("libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcudnn_adv.so.9")

# ---- enums (cuDNN 9 headers, cudnn_graph.h / cudnn_ops.h / cudnn_adv.h) ---------------------------------
DATA_TYPE = {"float32": 0, "float64": 1, "float16": 2}  # cudnnDataType_t FLOAT, DOUBLE, HALF
MATH_PREC = {"float32": 0, "float64": 1, "float16": 0}  # HALF data with FLOAT math, as PyTorch and TF
RNN_MODE = {"relu": 0, "tanh": 1, "lstm": 2, "gru": 3}  # cudnnRNNMode_t
DIRECTION = {"unidirectional": 0, "bidirectional": 1}  # cudnnDirectionMode_t
INPUT_MODE = {"linear_input": 0, "skip_input": 1}  # cudnnRNNInputMode_t
MATH_TYPE = {"default": 0, "tensor_op": 1, "fma": 3}  # cudnnMathType_t (2 = ALLOW_CONVERSION: not offered)
ALGO = {"standard": 0, "persist_static": 1, "persist_dynamic": 2, "persist_static_small_h": 3}
DOUBLE_BIAS = 2  # cudnnRNNBiasMode_t CUDNN_RNN_DOUBLE_BIAS: b_W and b_R per gate, as TF and PyTorch
CLIP_NONE, CLIP_MINMAX = 0, 1  # cudnnRNNClipMode_t
FWD_INFERENCE, FWD_TRAINING = 0, 1  # cudnnForwardMode_t
SEQ_MAJOR_UNPACKED, SEQ_MAJOR_PACKED, BATCH_MAJOR_UNPACKED = 0, 1, 2  # cudnnRNNDataLayout_t
PADDED_IO_ENABLED = 1  # auxFlags
WGRAD_MODE_ADD = 0  # cudnnWgradMode_t: the only mode documented for RNNs
PROJECTION_LIN_LAYER_ID = 8

# Status codes of cuDNN 9 (the 1000-blocks); cudnnGetErrorString names them, this table is the fallback.
STATUS_NAMES = {
    0: "CUDNN_STATUS_SUCCESS", 1001: "CUDNN_STATUS_NOT_INITIALIZED", 1002: "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH",
    1004: "CUDNN_STATUS_DEPRECATED", 1005: "CUDNN_STATUS_LICENSE_ERROR", 1008: "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED",
    2000: "CUDNN_STATUS_BAD_PARAM", 2002: "CUDNN_STATUS_BAD_PARAM_NULL_POINTER",
    2008: "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH", 3000: "CUDNN_STATUS_NOT_SUPPORTED",
    3007: "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH", 3009: "CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE",
    4000: "CUDNN_STATUS_INTERNAL_ERROR", 4003: "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED",
    4004: "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED", 5000: "CUDNN_STATUS_EXECUTION_FAILED",
    5001: "CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER", 5002: "CUDNN_STATUS_EXECUTION_FAILED_CUBLAS",
    5003: "CUDNN_STATUS_EXECUTION_FAILED_CUDART", 5004: "CUDNN_STATUS_EXECUTION_FAILED_CURAND",
}

P, I, I32, U32, SZ = c_void_p, c_int, c_int32, c_uint32, c_size_t
PP, PI, PSZ = POINTER(c_void_p), POINTER(c_int), POINTER(c_size_t)

# name -> (argtypes, restype); restype None means cudnnStatus_t (checked)
SIGNATURES: dict[str, tuple[list, object]] = {
    "cudnnGetVersion": ([], SZ),
    "cudnnGetCudartVersion": ([], SZ),
    "cudnnGetErrorString": ([I], c_char_p),
    "cudnnGetLastErrorString": ([c_char_p, SZ], "void"),
    "cudnnAdvVersionCheck": ([], None),
    "cudnnOpsVersionCheck": ([], None),
    "cudnnCreate": ([PP], None),
    "cudnnDestroy": ([P], None),
    "cudnnSetStream": ([P, P], None),
    "cudnnCreateTensorDescriptor": ([PP], None),
    "cudnnDestroyTensorDescriptor": ([P], None),
    "cudnnSetTensorNdDescriptor": ([P, I, I, PI, PI], None),
    "cudnnGetTensorNdDescriptor": ([P, I, PI, PI, PI, PI], None),
    "cudnnCreateDropoutDescriptor": ([PP], None),
    "cudnnDestroyDropoutDescriptor": ([P], None),
    "cudnnDropoutGetStatesSize": ([P, PSZ], None),
    "cudnnSetDropoutDescriptor": ([P, P, c_float, P, SZ, c_ulonglong], None),
    "cudnnCreateRNNDescriptor": ([PP], None),
    "cudnnDestroyRNNDescriptor": ([P], None),
    "cudnnSetRNNDescriptor_v8": ([P, I, I, I, I, I, I, I, I, I32, I32, I32, I32, P, U32], None),
    "cudnnGetRNNDescriptor_v8": ([P, PI, PI, PI, PI, PI, PI, PI, PI, POINTER(I32), POINTER(I32), POINTER(I32),
                                  POINTER(I32), PP, POINTER(U32)], None),
    "cudnnBuildRNNDynamic": ([P, P, I], None),
    "cudnnRNNSetClip_v9": ([P, I, c_double, c_double], None),
    "cudnnRNNGetClip_v9": ([P, PI, POINTER(c_double), POINTER(c_double)], None),
    "cudnnCreateRNNDataDescriptor": ([PP], None),
    "cudnnDestroyRNNDataDescriptor": ([P], None),
    "cudnnSetRNNDataDescriptor": ([P, I, I, I, I, I, PI, P], None),
    "cudnnGetRNNWeightSpaceSize": ([P, P, PSZ], None),
    "cudnnGetRNNTempSpaceSizes": ([P, P, I, P, PSZ, PSZ], None),
    "cudnnGetRNNWeightParams": ([P, P, I32, SZ, P, I32, P, PP, P, PP], None),
    "cudnnRNNForward": ([P, P, I, P, P, P, P, P, P, P, P, P, P, P, SZ, P, SZ, P, SZ, P], None),
    "cudnnRNNBackwardData_v8": ([P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, SZ, P, SZ, P, SZ, P], None),
    "cudnnRNNBackwardWeights_v8": ([P, P, I, P, P, P, P, P, P, P, SZ, P, SZ, P, SZ, P], None),
}


class CudnnError(RuntimeError):
    """A cuDNN call failed: ``status`` (the CUDNN_STATUS_* name), ``code``, ``detail``
    (``cudnnGetLastErrorString``), ``function``."""

    def __init__(self, function: str, code: int, status: str, detail: str) -> None:
        self.function, self.code, self.status, self.detail = function, code, status, detail
        super().__init__(f"{function} failed: {status} ({code})" + (f": {detail}" if detail else ""))


class LibraryNotFound(OSError):
    pass


def candidates() -> list[str]:
    """Where ``libcudnn.so.9`` is looked for, in order."""
    found: list[str] = []
    try:
        import nvidia.cudnn  # namespace package of the nvidia-cudnn-cu13 wheel

        found += [str(Path(p) / "lib" / LIBRARY) for p in nvidia.cudnn.__path__]
    except ImportError:
        pass
    found += [str(Path(entry) / "nvidia" / "cudnn" / "lib" / LIBRARY) for entry in sys.path if entry]
    system = ctypes.util.find_library("cudnn")
    found += [system] if system else []
    found.append(LIBRARY)  # the dynamic loader's own search (LD_LIBRARY_PATH, ldconfig)
    return list(dict.fromkeys(found))


def _preload_cublaslt() -> None:
    """cuDNN dlopens cuBLASLt by soname; load the wheel's copy first if it sits where RUNPATH won't look."""
    for entry in sys.path:
        path = Path(entry or ".") / "nvidia" / "cu13" / "lib" / CUBLASLT
        if path.is_file():
            try:
                ctypes.CDLL(str(path))
            except OSError:
                pass
            return


def _load_sublibraries(path: str) -> None:
    """Load every sub-library the backend calls into, as the shim at ``path`` would find it (beside itself,
    then through the loader), so that a missing one is an ``OSError`` here: the shim itself, on the first call
    whose sub-library does not load, prints ``Invalid handle. Cannot load symbol`` and aborts the process."""
    folder = Path(path).parent if os.sep in path else None
    for name in SUBLIBRARIES:
        tried = []
        for candidate in ([str(folder / name)] if folder else []) + [name]:
            try:
                ctypes.CDLL(candidate)
                break
            except OSError as exc:
                tried.append(str(exc))
        else:
            raise OSError(f"{path} loads but its sub-library {name} does not ({'; '.join(tried)}): "
                          f"the cuDNN install is incomplete")


class Library:
    """``libcudnn.so.9`` with every function declared; ``call(name, *args)`` raises :class:`CudnnError`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.cdll = ctypes.CDLL(path)
        _load_sublibraries(path)  # before the first call into the shim
        get_version = self.cdll.cudnnGetVersion
        get_version.argtypes, get_version.restype = [], c_size_t
        self.version = int(get_version())
        if self.version // 10000 != 9:  # before declaring the rest: cuDNN 8 lacks some of them
            raise LibraryNotFound(f"{path} is cuDNN {self.version}, this backend needs cuDNN 9")
        for name, (argtypes, restype) in SIGNATURES.items():
            fn = getattr(self.cdll, name)
            fn.argtypes = argtypes
            fn.restype = None if restype == "void" else (c_int if restype is None else restype)
        self.call("cudnnAdvVersionCheck")
        self.call("cudnnOpsVersionCheck")

    @property
    def version_string(self) -> str:
        v = self.version
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}"

    def last_error(self) -> str:
        buf = ctypes.create_string_buffer(4096)
        self.cdll.cudnnGetLastErrorString(buf, ctypes.sizeof(buf))
        return buf.value.decode(errors="replace").strip()

    def status_name(self, code: int) -> str:
        text = self.cdll.cudnnGetErrorString(code)
        name = text.decode(errors="replace") if text else ""
        return name if name.startswith("CUDNN_STATUS") else STATUS_NAMES.get(code, f"CUDNN_STATUS_{code}")

    def call(self, name: str, *args) -> None:
        code = getattr(self.cdll, name)(*args)
        if code != 0:
            raise CudnnError(name, code, self.status_name(code), self.last_error())


@lru_cache(maxsize=1)
def load() -> Library:
    """The loaded library (once per process); :class:`LibraryNotFound` says every place tried."""
    override = os.environ.get("RNN_COMPAT_CUDNN_LIBRARY")
    failures = []
    for path in ([override] if override else []) + candidates():
        if os.sep in path and not Path(path).is_file():
            continue
        _preload_cublaslt()
        try:
            return Library(path)
        except (OSError, AttributeError, CudnnError) as exc:  # not loadable, too old, a sub-library missing
            failures.append(str(exc) if str(exc).startswith(path) else f"{path}: {exc}")
    raise LibraryNotFound(f"no usable {LIBRARY} (tried the nvidia/cudnn/lib folders on sys.path and the system "
                          f"loader: {'; '.join(failures) or 'none there'})")


def ints(values) -> ctypes.Array:
    values = [int(v) for v in values]
    return (c_int * len(values))(*values)


__all__ = ["CudnnError", "Library", "LibraryNotFound", "load", "ints"]
