"""cuDNN 9's RNN API through ctypes (``libcudnn.so.9``), CuPy for device memory and streams.

``cudnn_backend.CudnnRNNRelu``, ``CudnnRNNTanh``, ``CudnnLSTM`` and ``CudnnGRU`` have the reference's
constructor and methods plus ``math_type`` ("fma": true FP32, the float32 default; "tensor_op", the
float16 default; "default", the float64 default) and ``algo``. ``available()`` never raises and names
what is missing; ``versions()`` reports the stack.
Importing this package needs neither CuPy nor cuDNN nor a GPU.
"""

from __future__ import annotations

import warnings
from functools import lru_cache

from . import _lib
from ._lib import CudnnError, LibraryNotFound
from .model import MODELS, BackendUnavailable, CudnnGRU, CudnnLSTM, CudnnRNNRelu, CudnnRNNTanh


@lru_cache(maxsize=1)
def available() -> tuple[bool, str]:
    """``(True, what runs)`` or ``(False, everything that is missing)``; never raises. Warnings raised while
    CuPy, CUDA and cuDNN start are recorded and named in the answer, never raised: a process whose warning
    filters make them errors (a test suite's) must not find the backend unavailable for that."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok, why = _probe()
    if caught:
        said = "; ".join(sorted({f"{w.category.__name__}: {' '.join(str(w.message).split())}" for w in caught}))
        why = f"{why} (warnings at start-up: {said[:500]})"
    return ok, why


def _probe() -> tuple[bool, str]:
    missing: list[str] = []
    cupy = lib = None
    try:
        import cupy
    except Exception as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "cupy":
            missing.append("CuPy is not installed; install the 'gpu' extra (cupy-cuda13x)")
        else:  # a dependency of CuPy's missing, or a broken CUDA install raising at import
            why = " ".join(str(exc).split())  # CuPy's own import error is a banner of many lines
            missing.append(f"CuPy is installed but does not import ({type(exc).__name__}: {why})")
    try:
        lib = _lib.load()
    except Exception as exc:
        missing.append(f"{exc}; install the 'gpu' extra (nvidia-cudnn-cu13)")
    if cupy is not None:
        try:
            if cupy.cuda.runtime.getDeviceCount() < 1:
                missing.append("no CUDA GPU")
        except Exception as exc:
            missing.append(f"no CUDA GPU ({type(exc).__name__}: {exc})")
    if cupy is not None and not missing:
        try:
            _run_a_kernel(cupy)
        except Exception as exc:
            missing.append(f"CuPy cannot run its kernels ({type(exc).__name__}: {exc}); CuPy compiles them at "
                           "run time: install cupy-cuda13x[ctk] or a CUDA toolkit")
    if missing:
        return False, "; ".join(missing)
    try:
        cudnn_cuda = int(lib.cdll.cudnnGetCudartVersion()) // 1000
        cupy_cuda = int(cupy.cuda.runtime.runtimeGetVersion()) // 1000
        if cudnn_cuda != cupy_cuda:
            return False, f"cuDNN was built for CUDA {cudnn_cuda}, CuPy runs CUDA {cupy_cuda}: match the wheels"
        from .descriptors import Handle

        Handle(lib).close()
        return True, f"cuDNN {lib.version_string} on {_device_name(_device_properties(cupy))}"
    except Exception as exc:
        return False, f"cuDNN could not start: {type(exc).__name__}: {exc}"


def _run_a_kernel(cupy) -> None:
    """Run the kinds of CuPy kernels the backend runs (a select, a cast, a reduction): a GPU whose CuPy
    cannot compile kernels (no CUDA headers) passes every other check, then fails in every forward pass."""
    selected = cupy.where(cupy.arange(4) < 2, cupy.zeros(4, "float16"), 1).astype("float32")
    if float(selected.sum()) != 2.0:
        raise RuntimeError(f"a select and a sum gave {selected!r}, expected [0, 0, 1, 1]")


def versions() -> dict:
    """cuDNN, the CUDA runtime cuDNN was built with, CuPy, the CUDA runtime and driver, the device."""
    ok, why = available()
    info: dict = {"available": ok, "reason": why}
    try:
        lib = _lib.load()
        info.update(cudnn=lib.version_string, cudnn_library=lib.path, cudnn_cudart=int(lib.cdll.cudnnGetCudartVersion()))
    except Exception as exc:
        info["cudnn"] = f"unavailable: {exc}"
    try:
        import cupy

        info.update(cupy=cupy.__version__, cuda_runtime=int(cupy.cuda.runtime.runtimeGetVersion()),
                    cuda_driver=int(cupy.cuda.runtime.driverGetVersion()))
        props = _device_properties(cupy)
        info.update(device=_device_name(props),
                    compute_capability=f"{props['major']}.{props['minor']}",
                    multiprocessors=int(props["multiProcessorCount"]))
    except Exception as exc:
        info.setdefault("cupy", f"unavailable: {type(exc).__name__}: {exc}")
    return info


def _device_properties(cupy) -> dict:
    return cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)


def _device_name(props: dict) -> str:
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else name


__all__ = ["BackendUnavailable", "CudnnError", "CudnnGRU", "CudnnLSTM", "CudnnRNNRelu", "CudnnRNNTanh",
           "LibraryNotFound", "MODELS", "available", "versions"]
