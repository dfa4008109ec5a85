"""What this machine computes the reference with: its CPU, NumPy's BLAS and the SIMD loops of the ufuncs
a step calls.

The same NumPy computes float32 ``exp`` and ``tanh`` through other loops on other CPUs (AVX-512 where the
CPU has it, AVX2 where it has not), which may round differently in the last bits and run at very different
speeds (float32 ``exp``: 0.46-0.62 ns an element through the AVX-512 loop on one of the project's
machines, 1.4-2.4 ns through the AVX2 loop on another), and OpenBLAS picks its GEMM kernels by CPU at run
time: reports and benchmarks name both, so that numbers from two machines are not read as one.
"""

from __future__ import annotations

import ctypes
import platform

import numpy as np

# The ufuncs of the reference's steps whose loops NumPy picks by CPU, and the loop of each for a dtype.
STEP_UFUNCS = ("exp", "tanh", "divide", "multiply", "add")
_SIGNATURES = {np.float32: {1: "ff", 2: "fff"}, np.float64: {1: "dd", 2: "ddd"}}


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The first CPU's model name with its family and model numbers (from ``cpuinfo``; a virtual machine may
    name only the vendor's line, "AMD EPYC", where the numbers tell its generations apart), else what
    ``platform`` says, else ``"unknown"``."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                if not line.strip():  # the first processor is enough
                    break
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    name = fields.get("model name")
    if name is None:
        return platform.processor() or "unknown"
    numbers = [f"{key} {fields[key]}" for key in ("cpu family", "model") if key in fields]
    return f"{name} ({', '.join(numbers)})" if numbers else name


def numpy_blas() -> str:
    """NumPy's BLAS: its name and version, and for OpenBLAS the kernels it chose for this CPU at run time
    and its thread count (read from the library NumPy loaded; ``"?"`` where that cannot be read)."""
    try:
        info = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        text = f"{info.get('name', '?')} {info.get('version', '?')}"
    except (TypeError, KeyError):  # a NumPy whose show_config has no dicts
        return "?"
    lib = _loaded_openblas()
    if lib is None:
        return text
    core, threads = _openblas_call(lib, "get_corename", ctypes.c_char_p), _openblas_call(lib, "get_num_threads")
    core = core.decode() if isinstance(core, bytes) else "?"
    return f"{text}, {core} kernels, {threads if threads is not None else '?'} threads"


def _loaded_openblas() -> ctypes.CDLL | None:
    try:
        with open("/proc/self/maps") as f:  # the libraries this process has loaded
            mapped = {line.split()[-1] for line in f}
    except OSError:
        return None
    for path in sorted(p for p in mapped if "openblas" in p.rsplit("/", 1)[-1] and ".so" in p):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def _openblas_call(lib: ctypes.CDLL, name: str, restype=ctypes.c_int):
    """``openblas_NAME()`` under any of the prefixes and suffixes NumPy's builds give it, or ``None``."""
    for symbol in (f"scipy_openblas_{name}64_", f"scipy_openblas_{name}", f"openblas_{name}64_", f"openblas_{name}"):
        fn = getattr(lib, symbol, None)
        if fn is not None:
            fn.restype, fn.argtypes = restype, []
            return fn()
    return None


def numpy_simd() -> str:
    """The SIMD target of each :data:`STEP_UFUNCS` loop for float32 and float64 on this CPU, as NumPy
    dispatches them, e.g. ``"float32: exp X86_V3, tanh X86_V3, ...; float64: ..."``, or ``"?"`` on a NumPy
    without ``numpy.lib.introspect`` (before 2.0)."""
    try:
        from numpy.lib.introspect import opt_func_info
    except ImportError:
        return "?"
    info = opt_func_info(func_name="|".join(f"^{u}$" for u in STEP_UFUNCS))
    parts = []
    for dtype, signatures in _SIGNATURES.items():
        loops = []
        for ufunc in STEP_UFUNCS:
            loop = info.get(ufunc, {}).get(signatures[getattr(np, ufunc).nin], {})
            loops.append(f"{ufunc} {loop.get('current', '?')}")
        parts.append(f"{np.dtype(dtype).name}: {', '.join(loops)}")
    return "; ".join(parts)


def describe() -> dict:
    """The machine facts above, for a report's environment block or a benchmark's header."""
    return {"cpu": cpu_model(), "numpy_blas": numpy_blas(), "numpy_simd": numpy_simd()}
