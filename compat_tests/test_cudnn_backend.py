"""The cuDNN backend on a machine without a GPU: availability, argument validation, and the host-side part
of the binding (library loading, descriptors, status -> CudnnError), which cuDNN answers without a device.

The host-side tests need ``libcudnn.so.9`` (the ``gpu`` extra, e.g. ``pip install -e '.[gpu]'``) and skip
with that reason elsewhere. Everything that needs a device is in ``test_gpu.py``.
"""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

import cudnn_backend
from compat_tests import fake_cuda
from compat_tests.tolerances import DESCRIPTOR_CHURN_RSS
from cudnn_backend import _lib

try:
    LIB = _lib.load()
    NO_LIBRARY = None
except _lib.LibraryNotFound as exc:
    LIB, NO_LIBRARY = None, str(exc)
if fake_cuda.is_fake(LIB):  # a dry run (gpu_run.sh on a CPU): no libcudnn to ask
    LIB, NO_LIBRARY = None, "compat_tests.fake_cuda is in place of it"

needs_library = pytest.mark.skipif(LIB is None, reason=f"host-side cuDNN tests need libcudnn.so.9: {NO_LIBRARY}")


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


@pytest.mark.parametrize(("dims", "strides", "packed"), [
    ((1, 6, 4), (24, 4, 1), True),
    ((1, 6, 1), (6, 1, 1), True),
    ((1, 6, 1), (999, 1, 7), True),  # the stride of a size-1 dimension is never used
    ((1, 6, 4), (24, 1, 6), False),  # column-major
    ((6, 4), (5, 1), False),  # padded rows
    ((6, 4), (4,), False),
])
def test_weight_regions_must_be_packed_row_major(dims, strides, packed):
    from cudnn_backend.model import _is_packed

    assert _is_packed(dims, strides) is packed


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
    from cudnn_backend.descriptors import DropoutDescriptor, RNNDescriptor

    with DropoutDescriptor(LIB) as dropout, RNNDescriptor(LIB) as rnn:
        with pytest.raises(cudnn_backend.CudnnError) as info:
            rnn.set(algo=0, mode=3, bias_mode=2, direction=0, input_mode=0, data_type=0, math_prec=0, math_type=3,
                    input_size=4, hidden_size=8, proj_size=0, num_layers=1, dropout=dropout, aux_flags=1)
    err = info.value
    assert err.status == "CUDNN_STATUS_BAD_PARAM" and err.code == 2000
    assert "projSize" in err.detail and err.function == "cudnnSetRNNDescriptor_v8"
    assert "CUDNN_STATUS_BAD_PARAM" in str(err)


@needs_library
def test_rnn_data_descriptor_checks_lengths():
    from cudnn_backend.descriptors import RNNDataDescriptor

    with RNNDataDescriptor(LIB) as d:
        d.set(0, _lib.SEQ_MAJOR_UNPACKED, 5, 3, 7, [5, 2, 3], ctypes.c_float(0.0))
        with pytest.raises(cudnn_backend.CudnnError, match="BAD_PARAM"):
            d.set(0, _lib.SEQ_MAJOR_UNPACKED, 5, 3, 7, [6, 2, 3], None)


@needs_library
@pytest.mark.parametrize("dims", [(2, 4, 8), (1, 1, 1), (6, 3, 5)])
def test_tensor_descriptor_is_fully_packed(dims):
    from cudnn_backend.descriptors import TensorDescriptor

    with TensorDescriptor(LIB) as t:
        dtype, got, strides = t.set(_lib.DATA_TYPE["float32"], dims).get()
    assert dtype == 0 and got == dims and strides == (dims[1] * dims[2], dims[2], 1)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@needs_library
def test_descriptors_are_released_deterministically_and_do_not_grow():
    from cudnn_backend.descriptors import DropoutDescriptor, RNNDataDescriptor, RNNDescriptor, TensorDescriptor

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


def test_weight_regions_must_be_packed_row_major_to_be_read_as_such():
    """``cudnnGetTensorNdDescriptor``'s answer for a weight region, judged before its offsets are trusted."""
    from cudnn_backend.model import _is_packed

    assert _is_packed([1, 4, 3], [12, 3, 1]) and _is_packed([1, 4, 3], [99, 3, 1])  # a size-1 dim's stride is unused
    assert not _is_packed([1, 4, 3], [12, 1, 4])  # column-major
    assert not _is_packed([1, 4, 3], [12, 4, 1])  # padded rows
    assert not _is_packed([1, 4, 3], [3, 1]) and not _is_packed([4, 3], [12, 3, 1])  # ranks disagree
