"""The GPU suite beyond the ladder: what only cuDNN has and no rung asks (``pytest -m gpu``; skipped elsewhere
with the reason ``cudnn_backend.available()`` gives).

The comparisons of cuDNN's layout, outputs, states and every gradient, its dropout, algorithms and math types
are the ladder's (``test_gpu_ladder.py``, one rung a feature); ``torch-cuda`` runs through the generic peer
tests (``test_forward.py``, ``test_backward.py``). This file holds padding, what backward reads, and resource
hygiene.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import cudnn_backend
from compat_tests.judge.compare import Recorded, compare_peer
from compat_tests.config import RNNConfig, make_case
from compat_tests.run import forward_case, misaligned
from compat_tests.peers.cudnn_gpu import gradients
from compat_tests.judge.tolerances import GPU_CALLS_POOL_BYTES, GPU_CALLS_RSS

OK, WHY = cudnn_backend.available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not OK, reason=f"cuDNN backend unavailable: {WHY}")]


def cudnn_model(cfg: RNNConfig, **options):
    return cfg.model(models=cudnn_backend.MODELS, **options)


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


def backward_reads_what_forward_read(disturbance: str, closing, request) -> None:
    """Gradients stay the reference's (within the cudnn budget) when, between forward and backward, the
    caller overwrites its params with NaN, or the padding of the input held NaN all along, or (persist_dynamic,
    whose plan is compiled per batch size: the ladder's ``algorithms`` rung) another batch size ran, or the
    caller's buffers start off cudaMalloc's alignment. persist_dynamic runs full-length sequences: persistent
    algorithms are reported not to take variable lengths; a refusal is recorded as a note with its status."""
    import cupy

    algo = "persist_dynamic" if disturbance == "other_batch_in_between" else "standard"
    cfg = RNNConfig("lstm", num_layers=2, num_units=16, input_size=8, direction="bidirectional", seq_len=9,
                    batch=4, lengths=None if algo == "persist_dynamic" else (9, 3, 6, 1), dtype="float32")
    case = make_case(cfg)
    gpu = cudnn_model(cfg, algo=algo)
    closing(gpu)
    params = gpu.canonical_to_params(case.weights, case.biases)
    d_params, dh, dc = None, case.dh, case.dc
    if disturbance == "misaligned_buffers":
        params, d_params = misaligned(cupy, params), misaligned(cupy, cupy.zeros_like(params))
        dh, dc = misaligned(cupy, case.dh), misaligned(cupy, case.dc)
    x = case.x.copy()
    if disturbance == "nan_in_padded_input":
        for b, n in enumerate(cfg.lengths):
            x[n:, b] = np.nan
    try:
        fwd = forward_case(gpu, cfg, case._replace(x=x), is_training=True, params=params)
    except cudnn_backend.CudnnError as exc:
        request.node.user_properties.append(("note", f"{algo} does not run {cfg.short()} here: {exc}"))
        return
    if disturbance == "params_overwritten":
        params.fill(np.nan)
    if disturbance == "other_batch_in_between":
        other = cfg.with_(batch=2, lengths=None)
        forward_case(gpu, other, make_case(other), is_training=True)
    grads = gpu.backward(fwd, case.dy, dh, dc, params_backprop_out=d_params)
    assert d_params is None or grads.params is d_params
    verdict = compare_peer(Recorded("cudnn", gradients=gradients(cfg, gpu, grads)), cfg, case, backward=True)
    assert verdict.passed, verdict.explain()


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
