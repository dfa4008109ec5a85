"""The GPU suite: real cuDNN against the float64 reference (``pytest -m gpu``; skipped elsewhere with the
reason ``cudnn_backend.available()`` gives).

The comparisons of outputs, states and every gradient run through the generic peer tests
(``test_forward.py``, ``test_backward.py``: the ``cudnn``, ``cudnn-tf32`` and ``torch-cuda`` peers carry the
``gpu`` marker). This file holds what only cuDNN has: its weight-space layout, its buffer round trips,
its dropout, and resource hygiene.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudnn_backend
from compat_tests.compare import Recorded, compare_peer
from compat_tests.config import RNNConfig, forward_case, make_case, misaligned
from compat_tests.peers import PEERS
from compat_tests.peers.cudnn_gpu import gradients
from compat_tests.strategies import rnn_configs
from compat_tests.test_layout import random_bits
from compat_tests.tolerances import (DROPOUT_RATE_SIGMAS, DROPOUT_SCALE_RTOL, GPU_CALLS_POOL_BYTES,
                                     GPU_CALLS_RSS)

OK, WHY = cudnn_backend.available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not OK, reason=f"cuDNN backend unavailable: {WHY}")]
CUDNN_CAPS = PEERS["cudnn"].capabilities


def cudnn_model(cfg: RNNConfig, **options):
    return cfg.model(models=cudnn_backend.MODELS, **options)


@given(cfg=rnn_configs(CUDNN_CAPS))
def test_weight_space_layout_is_the_references(cfg):
    """The check that the opaque layout did not change between cuDNN generations: every region's kind,
    pseudo-layer, lin layer id, offset and shape, and the buffer's size."""
    gpu = cudnn_model(cfg)
    ref = cfg.model()
    try:
        assert gpu.params_size() == ref.params_size(), (gpu.params_size(), ref.params_size())
        for got, want in zip(gpu.opaque_layout(), ref.opaque_layout()):
            assert got == want, f"first differing region: cuDNN {got} vs reference {want}"
        assert len(gpu.opaque_layout()) == len(ref.opaque_layout())
    finally:
        gpu.close()


@given(cfg=rnn_configs(CUDNN_CAPS), seed=st.integers(0, 2**32 - 1))
def test_canonical_round_trips_through_cudnns_buffer_bit_for_bit(cfg, seed):
    import cupy

    gpu = cudnn_model(cfg)
    rng = np.random.default_rng(seed)
    try:
        w_shapes, b_shapes = gpu.canonical_shapes()
        weights = [random_bits(rng, s, gpu.dtype) for s in w_shapes]
        biases = [random_bits(rng, s, gpu.dtype) for s in b_shapes]
        back_w, back_b = gpu.params_to_canonical(gpu.canonical_to_params(weights, biases))
        for got, sent in zip(back_w + back_b, weights + biases):
            assert cupy.asnumpy(got).tobytes() == sent.tobytes()
        params = random_bits(rng, gpu.params_size(), gpu.dtype)
        again = cupy.asnumpy(gpu.canonical_to_params(*gpu.params_to_canonical(params)))
        covered = np.zeros(gpu.params_size(), dtype=bool)  # padding, if cuDNN has any, comes back as zeros:
        for region in gpu.opaque_layout():  # the layout test reports it, this one checks the tensors
            covered[region.offset : region.offset + region.size] = True
        assert again[covered].tobytes() == params[covered].tobytes()
        assert not again[~covered].any()
    finally:
        gpu.close()


@given(cfg=rnn_configs(CUDNN_CAPS, dtypes_=("float32", "float64")))
def test_a_buffer_packed_by_the_reference_runs_on_cudnn_unchanged(cfg):
    import cupy

    case = make_case(cfg)
    gpu, ref = cudnn_model(cfg), cfg.model()
    try:
        own = gpu.canonical_to_params(case.weights, case.biases)
        packed = ref.canonical_to_params(case.weights, case.biases)
        assert cupy.asnumpy(own).tobytes() == packed.tobytes()
        a = gpu.forward(case.x, case.h0, own, input_c=case.c0, is_training=False,
                        sequence_lengths=case.lengths, time_major=cfg.time_major)
        b = gpu.forward(case.x, case.h0, packed, input_c=case.c0, is_training=False,
                        sequence_lengths=case.lengths, time_major=cfg.time_major)
        for x, y in zip(a[:3], b[:3]):
            if x is not None:
                assert cupy.array_equal(x, y)
    finally:
        gpu.close()


@pytest.fixture
def closing():
    """Models registered here are closed even when the test fails (no handles leak into later tests)."""
    models = []
    yield models.append
    for model in models:
        model.close()


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


@pytest.mark.parametrize("disturbance", ["params_overwritten", "nan_in_padded_input", "other_batch_in_between",
                                         "misaligned_buffers"])
def test_backward_reads_what_forward_read(disturbance, closing):
    """Gradients stay the reference's (within the cudnn budget) when, between forward and backward, the
    caller overwrites its params with NaN, or the padding of the input held NaN all along, or (persist_dynamic,
    whose plan is compiled per batch size) another batch size ran, or the caller's buffers start off cudaMalloc's
    alignment. persist_dynamic runs full-length sequences: persistent algorithms are reported not to take
    variable lengths, and a refusal there would skip the test instead of checking the rebuild."""
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
        pytest.skip(f"{algo} does not run {cfg.short()} here: {exc}")
    if disturbance == "params_overwritten":
        params.fill(np.nan)
    if disturbance == "other_batch_in_between":
        other = cfg.with_(batch=2, lengths=None)
        forward_case(gpu, other, make_case(other), is_training=True)
    grads = gpu.backward(fwd, case.dy, dh, dc, params_backprop_out=d_params)
    assert d_params is None or grads.params is d_params
    verdict = compare_peer(Recorded("cudnn", gradients=gradients(cfg, gpu, grads)), cfg, case, backward=True)
    assert verdict.passed, verdict.explain()


@pytest.mark.parametrize("algo", ["standard", "persist_static", "persist_static_small_h", "persist_dynamic"])
@pytest.mark.parametrize("math_type", [None, "default", "tensor_op"])
def test_algorithms_and_math_types_run_or_say_why_not(algo, math_type, closing):
    """Every algo x math type either agrees with the reference within its peer's budget (FMA: cudnn;
    default and tensor ops, which may use TF32: cudnn-tf32) or fails with a named cuDNN status, never
    silently (tensor-op math is not documented for FLOAT data: this records whether cuDNN takes it)."""
    cfg = RNNConfig("gru", num_units=64, input_size=32, seq_len=20, batch=8, dtype="float32")
    case = make_case(cfg)
    try:
        gpu = cudnn_model(cfg, math_type=math_type, algo=algo)
        closing(gpu)
        out = gpu.forward(case.x, case.h0, gpu.canonical_to_params(case.weights, case.biases), is_training=False)
    except cudnn_backend.CudnnError as exc:
        assert exc.status.startswith("CUDNN_STATUS_") and exc.function
        pytest.skip(f"{algo}/{math_type}: {exc}")
    import cupy

    from compat_tests.compare import judge_results
    from compat_tests.conditioning import sensitivity
    from compat_tests.config import Outputs, ground_truth

    truth = ground_truth(cfg, case)
    peer = "cudnn-tf32" if math_type in ("tensor_op", "default") else "cudnn"
    got = Outputs(cupy.asnumpy(out.output), cupy.asnumpy(out.output_h), None)
    verdict = judge_results(peer, cfg, got, truth, sensitivity(cfg, case, truth))
    assert verdict.passed, verdict.explain()


def test_float16_layer_rounding_decision_matches_cudnn(monkeypatch, closing):
    """precision.ROUND_LAYER_OUTPUTS_TO_STORAGE is a guess about cuDNN's HALF data; this settles it: cuDNN's
    float16 output must be closer to the reference with the flag as it is than with it flipped."""
    import cupy

    import reference.model as model_module
    from compat_tests.metrics import ulp_distance

    cfg = RNNConfig("gru", num_layers=3, num_units=64, input_size=32, seq_len=30, batch=16, dtype="float16")
    case = make_case(cfg)
    gpu = cudnn_model(cfg)
    closing(gpu)
    got = cupy.asnumpy(gpu.forward(case.x, case.h0, gpu.canonical_to_params(case.weights, case.biases),
                                   is_training=False).output)
    distance = {}
    for flag in (True, False):
        monkeypatch.setattr(model_module, "ROUND_LAYER_OUTPUTS_TO_STORAGE", flag)
        ref = PEERS["reference"].forward(cfg, case).output
        distance[flag] = float(ulp_distance(got, ref.astype(np.float64)).mean())
    from reference import precision

    assert distance[precision.ROUND_LAYER_OUTPUTS_TO_STORAGE] <= distance[not precision.ROUND_LAYER_OUTPUTS_TO_STORAGE], \
        f"cuDNN float16 is closer to the other choice: mean ulp distance {distance}"


@pytest.mark.parametrize("p", [0.25, 0.5])
def test_dropout_keeps_one_minus_p_and_scales_by_its_inverse(p, closing):
    """A 2-layer relu RNN whose second layer is the identity (W = I, R = 0, biases 0) shows layer 1's
    dropped-out input directly: a fraction p of zeros, the rest scaled by 1 / (1 - p)."""
    import cupy

    H, T, B = 64, 20, 16
    cfg = RNNConfig("relu", num_layers=2, num_units=H, input_size=H, seq_len=T, batch=B, dtype="float32",
                    initial_state=False)
    case = make_case(cfg)
    weights, biases = list(case.weights), [np.zeros_like(b) for b in case.biases]
    weights[0] = np.abs(weights[0]) + 0.1  # layer 0: positive outputs for positive inputs
    weights[1] = np.zeros_like(weights[1])
    weights[2], weights[3] = np.eye(H, dtype=np.float32), np.zeros_like(weights[3])
    x = np.abs(case.x) + 0.1
    gpu = cudnn_backend.CudnnRNNRelu(2, H, H, dropout=p, seed=1234)
    plain = cudnn_backend.CudnnRNNRelu(2, H, H)
    closing(gpu)
    closing(plain)
    params = gpu.canonical_to_params(weights, biases)
    expected = cupy.asnumpy(plain.forward(x, None, plain.canonical_to_params(weights, biases), is_training=False).output)
    train = cupy.asnumpy(gpu.forward(x, None, params, is_training=True).output)
    infer = cupy.asnumpy(gpu.forward(x, None, params, is_training=False).output)
    np.testing.assert_array_equal(infer, expected)  # inference ignores dropout
    dropped = train == 0
    n = dropped.size
    assert abs(dropped.mean() - p) <= DROPOUT_RATE_SIGMAS * np.sqrt(p * (1 - p) / n)
    np.testing.assert_allclose(train[~dropped], expected[~dropped] / (1 - p), rtol=DROPOUT_SCALE_RTOL)


def test_tf32_divergence_is_measured_within_its_budget():
    """TF32 is shown, not hidden: cudnn-tf32 is a peer of its own, judged by its own (wider) budget. If
    default math did not engage TF32 for this shape, the test says so instead of passing vacuously."""
    cfg = RNNConfig("lstm", num_layers=2, num_units=256, input_size=128, seq_len=50, batch=32, dtype="float32")
    fma = compare_peer(PEERS["cudnn"], cfg)
    tf32 = compare_peer(PEERS["cudnn-tf32"], cfg)
    assert fma.passed, fma.explain()
    assert tf32.passed, tf32.explain()
    fma_ulp, tf32_ulp = fma.verdicts["output"].stats.max_ulp, tf32.verdicts["output"].stats.max_ulp
    if tf32_ulp <= 16 * max(fma_ulp, 1.0):
        pytest.skip(f"default math did not engage TF32 here: max ulp FMA {fma_ulp:g}, default {tf32_ulp:g}")


def test_no_growth_over_many_calls(closing):
    import cupy

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
    calls(2000)
    with open("/proc/self/statm") as f:
        rss_after = int(f.read().split()[1])
    assert pool.used_bytes() <= used + GPU_CALLS_POOL_BYTES
    assert (rss_after - rss) * 4096 < GPU_CALLS_RSS
