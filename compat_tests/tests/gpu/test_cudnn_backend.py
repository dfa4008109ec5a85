"""The cuDNN backend on a machine without a GPU: availability, argument validation, and the host-side part
of the binding (library loading, descriptors, status -> CudnnError), which cuDNN answers without a device.

The host-side tests need ``libcudnn.so.9`` (``make test-cudnn-host`` installs the ``nvidia-cudnn-cu13`` wheel and
runs them; so does the ``gpu`` extra) and skip with that reason elsewhere. They hold the backend against the
real library: the descriptor it asks for, for every config, and which configs cuDNN refuses. Everything that
needs a device is in ``test_gpu.py``.
"""

from __future__ import annotations

import ctypes
import gc
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudnn_backend
import reference
from compat_tests.gpu import fake_cuda
from compat_tests.judge.tolerances import DESCRIPTOR_CHURN_RSS
from compat_tests.peers.base import Capabilities
from compat_tests.strategies import rnn_configs
from cudnn_backend import _lib
from cudnn_backend import model as backend_model
from cudnn_backend.descriptors import DropoutDescriptor, RNNDataDescriptor, RNNDescriptor, TensorDescriptor

try:
    LIB = _lib.load()
    NO_LIBRARY = None
except _lib.LibraryNotFound as exc:
    LIB, NO_LIBRARY = None, str(exc)


if fake_cuda.is_fake(LIB):  # a dry run (gpu_run.sh on a CPU): no libcudnn to ask
    LIB, NO_LIBRARY = None, "compat_tests.gpu.fake_cuda is in place of it"


needs_library = pytest.mark.skipif(
    LIB is None, reason=f"host-side cuDNN tests need libcudnn.so.9 (`make test-cudnn-host` installs it): {NO_LIBRARY}")


def test_available_never_raises_and_names_what_is_missing():
    ok, why = cudnn_backend.available()
    assert isinstance(ok, bool) and why
    if not ok:
        assert any(word in why for word in ("CuPy", "libcudnn", "GPU", "CUDA", "cuDNN")), why


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"num_units": 0}, ValueError, "num_units"),
    ({"direction": "sideways"}, ValueError, "direction"),
    ({"dtype": np.int8}, TypeError, "dtype"),
    ({"math_type": "tf32"}, ValueError, "math_type"),
    ({"algo": "fastest"}, ValueError, "algo"),
    ({"dropout": 1.0}, ValueError, r"dropout must be in \[0, 1\) for the cuDNN backend"),
])
def test_bad_arguments_are_refused_before_the_gpu_is_touched(kwargs, error, match):
    args = {"num_layers": 1, "num_units": 4, "input_size": 3, **kwargs}
    with pytest.raises(error, match=match):
        cudnn_backend.CudnnGRU(**args)


@pytest.mark.parametrize(("model", "kwargs"), [
    (cudnn_backend.CudnnLSTM, {"num_proj": 2, "algo": "persist_dynamic"}),
    (cudnn_backend.CudnnGRU, {"dtype": np.float64, "algo": "persist_static_small_h"}),
])
def test_an_algo_cudnn_refuses_for_the_config_is_refused_by_name(model, kwargs):
    """``ALGO_LIMITS``, before the GPU is touched (whether cuDNN agrees is checked where a cuDNN loads)."""
    with pytest.raises(ValueError, match=f"algo must be one of .* got '{kwargs['algo']}'"):
        model(1, 4, 3, **kwargs)


@pytest.mark.parametrize(("dims", "strides", "packed"), [
    ((1, 6, 4), (24, 4, 1), True),
    ((1, 6, 1), (6, 1, 1), True),
    ((1, 6, 1), (999, 1, 7), True),  # the stride of a size-1 dimension is never used
    ((1, 4, 3), (99, 3, 1), True),
    ((1, 6, 4), (24, 1, 6), False),  # column-major
    ((6, 4), (5, 1), False),  # padded rows
    ((1, 4, 3), (12, 4, 1), False),
    ((6, 4), (4,), False),  # ranks disagree
    ((4, 3), (12, 3, 1), False),
])
def test_weight_regions_must_be_packed_row_major(dims, strides, packed):
    """``cudnnGetTensorNdDescriptor``'s answer for a weight region, judged before its offsets are trusted."""
    assert backend_model._is_packed(dims, strides) is packed


@pytest.mark.skipif(not hasattr(cudnn_backend.available, "__wrapped__"),
                    reason="available() is replaced here (a dry run: compat_tests/gpu/fake_site, FAKE_CUDA_UNAVAILABLE)")
def test_available_tells_a_missing_cupy_from_a_broken_one(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy: ModuleNotFoundError, name "cupy"
    ok, why = cudnn_backend.available.__wrapped__()
    assert not ok and "CuPy is not installed" in why
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text("import cuda_runtime_missing_for_this_test\n")
    monkeypatch.delitem(sys.modules, "cupy")
    monkeypatch.syspath_prepend(str(tmp_path))
    ok, why = cudnn_backend.available.__wrapped__()
    assert not ok and "CuPy is installed but does not import" in why and "cuda_runtime_missing_for_this_test" in why


@pytest.mark.skipif(cudnn_backend.available()[0], reason="this machine has a working cuDNN")
def test_constructing_without_a_gpu_says_why():
    with pytest.raises(cudnn_backend.BackendUnavailable, match="unavailable"):
        cudnn_backend.CudnnLSTM(1, 4, 3, num_proj=2)


@needs_library
def test_the_library_is_cudnn_9_and_its_sublibraries_load():
    assert LIB.version // 10000 == 9
    assert LIB.version_string.startswith("9.")
    LIB.call("cudnnAdvVersionCheck")  # the RNN sub-library answers


@needs_library
def test_a_failed_call_raises_cudnn_error_with_status_name_and_detail():
    with DropoutDescriptor(LIB) as dropout, RNNDescriptor(LIB) as rnn:
        with pytest.raises(cudnn_backend.CudnnError) as info:
            rnn.set(algo=0, cell_mode=3, bias_mode=2, dir_mode=0, input_mode=0, data_type=0, math_prec=0, math_type=3,
                    input_size=4, hidden_size=8, proj_size=0, num_layers=1, dropout=dropout, aux_flags=1)
    err = info.value
    assert err.status == "CUDNN_STATUS_BAD_PARAM" and err.code == 2000
    assert "projSize" in err.detail and err.function == "cudnnSetRNNDescriptor_v8"
    assert "CUDNN_STATUS_BAD_PARAM" in str(err)


@needs_library
def test_status_names_are_cudnns_own():
    """``cudnnGetErrorString`` names every status in the fallback table alike; an unknown code (cuDNN says
    ``CUDNN_UNKNOWN_STATUS``) keeps its number."""
    assert {code: LIB.status_name(code) for code in _lib.STATUS_NAMES} == _lib.STATUS_NAMES
    assert LIB.status_name(1234) == "CUDNN_STATUS_1234"


@needs_library
def test_rnn_data_descriptor_checks_lengths():
    with RNNDataDescriptor(LIB) as d:
        d.set(0, _lib.SEQ_MAJOR_UNPACKED, 5, 3, 7, [5, 2, 3], ctypes.c_float(0.0))
        with pytest.raises(cudnn_backend.CudnnError, match="BAD_PARAM"):
            d.set(0, _lib.SEQ_MAJOR_UNPACKED, 5, 3, 7, [6, 2, 3], None)


@needs_library
def test_rnn_data_descriptor_takes_the_packed_layout_with_sorted_lengths():
    """What the backend hands cuDNN for a ``reference.PackedSequence``: ``SEQ_MAJOR_PACKED``, ``maxSeqLength``
    the longest length, the lengths sorted, no ``paddingFill``."""
    with RNNDataDescriptor(LIB) as d:
        d.set(0, _lib.SEQ_MAJOR_PACKED, 4, 3, 7, [4, 2, 1], None)


@needs_library
@pytest.mark.parametrize("dims", [(2, 4, 8), (1, 1, 1), (6, 3, 5)])
def test_tensor_descriptor_is_fully_packed(dims):
    with TensorDescriptor(LIB) as t:
        dtype, got, strides = t.set(_lib.DATA_TYPE["float32"], dims).get()
    assert dtype == 0 and got == dims and strides == (dims[1] * dims[2], dims[2], 1)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@needs_library
def test_descriptors_are_released_deterministically_and_do_not_grow():
    def churn(n):
        for _ in range(n):
            with TensorDescriptor(LIB) as t:
                t.set(0, (2, 3, 4))
            d = RNNDataDescriptor(LIB).set(0, _lib.SEQ_MAJOR_UNPACKED, 4, 2, 3, [4, 1], None)
            d.close()
            d.close()  # idempotent
            RNNDescriptor(LIB), DropoutDescriptor(LIB)  # left to the finaliser
        gc.collect()

    churn(1000)  # warm up allocator pools
    before = _rss_bytes()
    churn(10_000)
    assert _rss_bytes() - before < DESCRIPTOR_CHURN_RSS, "10,000 descriptor lifetimes must not grow the process"
    t = TensorDescriptor(LIB)
    assert t.alive
    t.close()
    assert not t.alive


@needs_library
@pytest.mark.parametrize(("kind", "use"), [
    (TensorDescriptor, lambda d: d.get()),
    (TensorDescriptor, lambda d: d.set(0, (2, 3, 4))),
    (RNNDataDescriptor, lambda d: d.set(0, _lib.SEQ_MAJOR_UNPACKED, 3, 2, 4, [3, 1], None)),
    (RNNDescriptor, lambda d: d.get()),
], ids=["tensor-get", "tensor-set", "rnn-data-set", "rnn-get"])
def test_a_closed_descriptor_is_refused_not_used(kind, use):
    """``close()`` leaves a NULL behind, which cuDNN refuses as a bad parameter instead of reading freed memory."""
    descriptor = kind(LIB)
    descriptor.close()
    with pytest.raises(cudnn_backend.CudnnError) as info:
        use(descriptor)
    assert info.value.status == "CUDNN_STATUS_BAD_PARAM" and info.value.detail


def _run_child(code: str, *args: str) -> subprocess.CompletedProcess:
    """Python code in a fresh process (none of cuDNN loaded), from the repository root."""
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          cwd=Path(cudnn_backend.__file__).parent.parent)


@pytest.mark.parametrize("shim", ["any ELF library", pytest.param("the real shim", marks=needs_library)])
def test_a_library_without_its_sublibraries_is_an_error_not_a_crash(shim, tmp_path):
    """``libcudnn.so.9`` copied away from its sub-libraries (the real one, or any ELF library in its place) and
    loaded in a fresh process: an ``OSError`` naming the first sub-library missing, before anything is called.
    The real shim's own behaviour on a call there is to print ``Invalid handle. Cannot load symbol`` and abort."""
    import _ctypes

    lonely = tmp_path / _lib.LIBRARY
    shutil.copyfile(LIB.path if shim == "the real shim" else _ctypes.__file__, lonely)
    child = _run_child("import sys\nfrom cudnn_backend import _lib\ntry:\n    _lib.Library(sys.argv[1])\n"
                       "except (OSError, AttributeError) as exc:\n    print('refused:', exc)\n", str(lonely))
    assert child.returncode == 0 and "Invalid handle" not in child.stdout + child.stderr, child
    elsewhere = _run_child(f"import ctypes\nctypes.CDLL({_lib.SUBLIBRARIES[0]!r})").returncode == 0
    if not elsewhere:  # a system cuDNN on the loader's path would supply them
        assert f"refused: {lonely} loads but its sub-library {_lib.SUBLIBRARIES[0]} does not" in child.stdout, child


def _backend_takes(spec, algo: str, math_type: str) -> bool:
    """Whether the cuDNN backend's constructor takes this config (``spec``: its reference model), by its checks
    beyond the reference's."""
    try:
        backend_model.check_options(spec, math_type, algo)
    except ValueError:
        return False
    return True


def _cudnn_takes(fields: dict) -> tuple[bool, dict | str]:
    """Whether the installed cuDNN's ``cudnnSetRNNDescriptor_v8`` takes these arguments (asked on the host),
    with what ``cudnnGetRNNDescriptor_v8`` then reads back, or the status it refused them with."""
    with DropoutDescriptor(LIB) as dropout, RNNDescriptor(LIB) as rnn:
        try:
            rnn.set(**fields, dropout=dropout)
        except cudnn_backend.CudnnError as exc:
            return False, exc.status
        got = rnn.get()
        assert got.pop("dropout") == dropout.ptr.value
        return True, got


@needs_library
@given(cfg=rnn_configs(Capabilities(modes=tuple(_lib.RNN_MODE))), algo=st.sampled_from(backend_model.ALGOS),
       math_type=st.sampled_from(backend_model.MATH_TYPES))
def test_cudnn_takes_the_backends_descriptor_exactly_when_the_backend_takes_the_config(cfg, algo, math_type):
    """The arguments the backend hands ``cudnnSetRNNDescriptor_v8`` for every config the reference takes, every
    algo and math type: the installed cuDNN takes them where the backend's own checks (``ALGO_LIMITS``) do and
    refuses them where those refuse, and holds exactly what it was given."""
    spec = cfg.model()
    fields = backend_model.descriptor_fields(spec, algo, math_type)
    takes, held = _cudnn_takes(fields)
    assert _backend_takes(spec, algo, math_type) == takes, held
    assert not takes or held == fields


# A config every mode takes, to change one argument of at a time.
_BASE = dict(num_layers=2, num_units=6, input_size=4, input_mode="linear_input", direction="unidirectional",
             dtype=np.float32, dropout=0.0, seed=0, num_proj=None)


def _base_fields(mode: str, **change: int) -> dict:
    """The backend's descriptor arguments for ``_BASE`` in ``mode``, with ``change`` made to them."""
    return {**backend_model.descriptor_fields(reference.make_model(mode, **_BASE), "standard", "fma"), **change}


@needs_library
@pytest.mark.parametrize(("mode", "change", "reference_args", "status"), [
    ("gru", {"proj_size": 3}, {"num_proj": 3}, "CUDNN_STATUS_NOT_SUPPORTED"),  # no projection but the LSTM's
    ("tanh", {"proj_size": 3}, {"num_proj": 3}, "CUDNN_STATUS_NOT_SUPPORTED"),
    ("lstm", {"proj_size": 7}, {"num_proj": 7}, "CUDNN_STATUS_NOT_SUPPORTED"),  # wider than num_units
    ("lstm", {"hidden_size": 0, "proj_size": 0}, {"num_units": 0}, "CUDNN_STATUS_BAD_PARAM"),
    ("lstm", {"input_size": 0}, {"input_size": 0}, "CUDNN_STATUS_BAD_PARAM"),
    ("relu", {"num_layers": 0}, {"num_layers": 0}, "CUDNN_STATUS_BAD_PARAM"),
])
def test_what_the_reference_refuses_cudnn_refuses(mode, change, reference_args, status):
    assert _cudnn_takes(_base_fields(mode, **change)) == (False, status)
    with pytest.raises(ValueError, match=next(iter(reference_args))):
        reference.make_model(mode, **{**_BASE, **reference_args})


@needs_library
@pytest.mark.parametrize(("change", "reference_args"), [
    ({"input_mode": _lib.INPUT_MODE["skip_input"]}, {"input_mode": "skip_input"}),  # input_size 4 != num_units 6
    ({"proj_size": 6}, {"num_proj": 6}),  # == num_units
])
def test_where_the_reference_is_stricter_than_cudnns_descriptor(change, reference_args):
    """Two configs cuDNN's descriptor takes and the reference refuses: skip_input with input_size != num_units
    (TensorFlow refuses it; cuDNN documents nothing for the width mismatch), and num_proj == num_units, which
    cuDNN documents as the projection disabled (so the reference's num_proj always means a projection matrix)."""
    fields = _base_fields("lstm", **change)
    assert _cudnn_takes(fields) == (True, fields)
    with pytest.raises(ValueError, match=next(iter(reference_args))):
        reference.make_model("lstm", **{**_BASE, **reference_args})
