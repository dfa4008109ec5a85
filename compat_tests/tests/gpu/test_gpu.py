"""The GPU suite beyond the ladder: what only cuDNN has and no rung asks (``pytest -m gpu``; skipped elsewhere
with the reason ``cudnn_backend.available()`` gives).

The comparisons of cuDNN's layout, outputs, states and every gradient, its dropout, algorithms and math types
are the ladder's (``test_gpu_ladder.py``, one rung a feature); ``torch-cuda`` runs through the generic peer
tests (``test_forward.py``, ``test_backward.py``). This file holds padding, what backward reads, and resource
hygiene.
"""

from __future__ import annotations

import gc

import pytest

import cudnn_backend
from compat_tests.config import RNNConfig, make_case
from compat_tests.judge.tolerances import GPU_CALLS_POOL_BYTES, GPU_CALLS_RSS
from compat_tests.tests.helpers import backward_reads_what_forward_read, cudnn_model

OK, WHY = cudnn_backend.available()


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not OK, reason=f"cuDNN backend unavailable: {WHY}")]


@pytest.mark.parametrize("mode", ["relu", "tanh", "lstm", "gru"])
def test_padded_outputs_are_zero_and_padded_input_gradients_are_zero(mode, closing):
    import cupy

    cfg = RNNConfig(mode, num_layers=2, num_units=6, input_size=4, direction="bidirectional", seq_len=7, batch=3,
                    lengths=(7, 2, 5), dtype="float32")
    case = make_case(cfg)
    gpu = cudnn_model(cfg)
    closing(gpu)
    params = gpu.canonical_to_params(case.weights, case.biases)
    fwd = gpu.forward(case.x, case.h0, params, input_c=case.c0, sequence_lengths=case.lengths)
    grads = gpu.backward(fwd, case.dy, case.dh, case.dc)
    y, dx = cupy.asnumpy(fwd.output), cupy.asnumpy(grads.input)
    for b, n in enumerate(cfg.lengths):
        assert not y[n:, b].any() and not dx[n:, b].any()
    with pytest.raises(ValueError, match="already backpropagated"):
        gpu.backward(fwd, case.dy)


@pytest.mark.parametrize("disturbance", ["params_overwritten", "nan_in_padded_input", "misaligned_buffers"])
def test_backward_reads_what_forward_read(disturbance, closing, request):
    backward_reads_what_forward_read(disturbance, closing, request)


def test_no_growth_over_many_calls(closing):
    """Neither CuPy's pool nor the process grows over 2,000 forward and backward calls after 100 (the budgets
    of ``tolerances.GPU_CALLS_*``). Where ``compat_tests.gpu.fake_cuda`` stands in for cuDNN (a dry run), each call
    is the reference's arithmetic on the CPU: 200 calls there run the test's and the binding's code, and the
    GPU's 2,000 find the smaller leaks."""
    import cupy

    from compat_tests.gpu import fake_cuda

    cfg = RNNConfig("gru", num_layers=2, num_units=32, input_size=16, seq_len=10, batch=4, dtype="float32")
    case = make_case(cfg)
    gpu = cudnn_model(cfg)
    closing(gpu)
    params = gpu.canonical_to_params(case.weights, case.biases)
    pool = cupy.get_default_memory_pool()

    def calls(n):
        for _ in range(n):
            fwd = gpu.forward(case.x, case.h0, params, is_training=True)
            gpu.backward(fwd, case.dy, case.dh)
        cupy.cuda.Device().synchronize()
        gc.collect()

    calls(100)
    used = pool.used_bytes()
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1])
    calls(200 if cupy is fake_cuda.cupy else 2000)
    with open("/proc/self/statm") as f:
        rss_after = int(f.read().split()[1])
    assert pool.used_bytes() <= used + GPU_CALLS_POOL_BYTES
    assert (rss_after - rss) * 4096 < GPU_CALLS_RSS
