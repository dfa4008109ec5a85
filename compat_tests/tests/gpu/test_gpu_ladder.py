"""The GPU suite's ladder (``compat_tests.gpu.ladder``): real cuDNN against the float64 reference, one rung a
feature, each test's id starting with its rung (``test_forward[03-bidirectional]``). ``pytest -m gpu`` runs
it like any test file; ``python -m compat_tests.gpu.ladder`` climbs it within a GPU window, rung by rung.

Rung 00 runs cuDNN's own published RNN sample (``compat_tests.judge.published``) and holds the backend to cuDNN's
published checksums and to the float64 truth. Every other rung's properties draw only that rung's configs
(``strategies.rung_configs``), so a wrong guess about cuDNN fails its own rung and leaves the others to report. Refusals cuDNN is entitled to (a persistent
algorithm that does not take a shape, tensor-op math for FLOAT data) pass with a note naming the status:
a skip here would hide the backend being unavailable, and ``--expect-cudnn`` fails every skip.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudnn_backend
from compat_tests.config import GradOutputs, Outputs, RNNConfig, make_case
from compat_tests.gpu import ladder as gpu_ladder
from compat_tests.judge.compare import compare_peer, judge_results, reproduce_command
from compat_tests.judge.tolerances import DROPOUT_RATE_SIGMAS, DROPOUT_SCALE_RTOL
from compat_tests.peers import PEERS
from compat_tests.run import ground_truth
from compat_tests.strategies import rung_configs
from compat_tests.tests.helpers import random_bits

OK, WHY = cudnn_backend.available()


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not OK, reason=f"cuDNN backend unavailable: {WHY}")]


def rungs(check: str):
    return pytest.mark.parametrize(("rung", "value"), [pytest.param(r, v, id=i) for r, v, i in gpu_ladder.cases(check)])


def draw_config(data, rung) -> RNNConfig:
    return data.draw(rung_configs(rung, PEERS[rung.peer].capabilities), label="config")


def judged(request, peer: str, cfg: RNNConfig, backward: bool = False) -> None:
    """Compare ``peer`` on ``cfg`` and assert it passed; if not (a verdict failed, or the peer broke the
    comparison's contract: a result of the wrong shape, a padding fill not written), record the one-line
    reproduce command for the ladder's table."""
    def record() -> None:
        request.node.user_properties.append(("reproduce", gpu_ladder.from_tree(reproduce_command(peer, cfg, backward))))

    try:
        comparison = compare_peer(PEERS[peer], cfg, backward=backward)
    except AssertionError:
        record()
        raise
    if not comparison.passed:
        record()
    assert comparison.passed, comparison.explain()


@rungs("published")
def test_published(rung, value, request, closing):
    """cuDNN's published RNN sample (T=20, 2 layers, H=I=512, B=64, float32, uniform weights, inputs and output
    gradients 1) through the backend, training forward, backward data and weights into a zeroed ``dw``, as the
    sample runs it. Its checksums (the whole ``dw`` buffer summed, as the sample sums it) must be within the
    policy's bound of every published run's (``tolerances.published_rtol``: float32 on both sides, and the
    print); every result within gamma_n (float32's worst case for the longest sum, ``float32_sum_rtol``) of the
    float64 truth, element by element (relative to the result's largest magnitude, at least 1) and in its
    checksums. The reference meets the published numbers on every CPU run (``test_published.py``), so missing
    them is the backend's fault, and meeting them while a later rung fails points at a guess of ours."""
    import cupy

    from compat_tests.judge import published
    from compat_tests.judge.tolerances import float32_sum_rtol, published_rtol
    from compat_tests.peers.cudnn_gpu import gradients

    cfg = published.config(value, "float32")
    case = published.case(cfg)
    gpu = cfg.model(models=cudnn_backend.MODELS)
    closing(gpu)
    fwd = gpu.forward(case.x, case.h0, gpu.canonical_to_params(case.weights, case.biases), input_c=case.c0,
                      is_training=True)
    outputs = Outputs(*(None if a is None else cupy.asnumpy(a) for a in fwd[:3]))
    grads = gpu.backward(fwd, case.dy, case.dh, case.dc)
    whole = GradOutputs(*(None if a is None else cupy.asnumpy(a) for a in grads))  # dw: cuDNN's whole buffer
    got = published.checksums(outputs, whole)
    problems = []
    for run in published.runs():
        for name, delta in published.relative(got, run.checksums.get(value, {})).items():
            bound = published_rtol(cfg, published.CHECKSUMS[name], rung.peer)
            if not abs(delta) <= bound:
                problems.append(f"{name} {got[name]:.7e} is {delta:+.2e} from cuDNN's published {run.name} value "
                                f"{run.checksums[value][name]:.6e} (bound {bound:.1e})")
    rtol = float32_sum_rtol(cfg)
    truth = published.run(cfg.with_(dtype="float64"))
    ours = (outputs, gradients(cfg, gpu, grads))  # the parameter gradient repacked in the reference's layout
    for name, delta in published.relative(got, published.checksums(*truth)).items():
        if not abs(delta) <= rtol:
            problems.append(f"{name} checksum is {delta:+.2e} from the float64 truth's (bound {rtol:.1e})")
    for mine, want in zip(ours, truth):
        for field, expected in want._asdict().items():
            if expected is None:
                continue
            error = float(np.abs(getattr(mine, field) - expected).max()) / max(1.0, float(np.abs(expected).max()))
            if not error <= rtol:
                problems.append(f"{field} is {error:.2e} (of its largest magnitude) from the float64 truth "
                                f"(bound {rtol:.1e})")
    golden = published.relative(got, published.golden(value))
    request.node.user_properties.append(("note", f"{value} checksums against cuDNN's published M40 run: " + ", ".join(
        f"{name} {delta:+.1e}" for name, delta in golden.items())))
    assert not problems, f"{value}: " + "; ".join(problems)


@rungs("layout")
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_layout(rung, value, data, seed, closing):
    """The weight space is the reference's region for region (kind, pseudo-layer, lin layer id, offset, shape)
    and in size; canonical tensors round-trip through cuDNN's buffer bit for bit (padding, if any, comes back
    as zeros); and the buffer the reference packs is byte for byte the one cuDNN's layout packs."""
    import cupy

    cfg = draw_config(data, rung)
    gpu, ref = cfg.model(models=cudnn_backend.MODELS), cfg.model()
    closing(gpu)
    assert gpu.params_size() == ref.params_size(), (gpu.params_size(), ref.params_size())
    for got, want in zip(gpu.opaque_layout(), ref.opaque_layout()):
        assert got == want, f"first differing region: cuDNN {got} vs reference {want}"
    assert len(gpu.opaque_layout()) == len(ref.opaque_layout())
    rng = np.random.default_rng(seed)
    w_shapes, b_shapes = gpu.canonical_shapes()
    weights = [random_bits(rng, s, gpu.dtype) for s in w_shapes]
    biases = [random_bits(rng, s, gpu.dtype) for s in b_shapes]
    packed = gpu.canonical_to_params(weights, biases)
    assert cupy.asnumpy(packed).tobytes() == ref.canonical_to_params(weights, biases).tobytes()
    back_w, back_b = gpu.params_to_canonical(packed)
    for got, sent in zip(back_w + back_b, weights + biases):
        assert cupy.asnumpy(got).tobytes() == sent.tobytes()
    params = random_bits(rng, gpu.params_size(), gpu.dtype)
    again = cupy.asnumpy(gpu.canonical_to_params(*gpu.params_to_canonical(params)))
    covered = np.zeros(gpu.params_size(), dtype=bool)
    for region in gpu.opaque_layout():
        covered[region.offset : region.offset + region.size] = True
    assert again[covered].tobytes() == params[covered].tobytes()
    assert not again[~covered].any()


@rungs("forward")
@given(data=st.data())
def test_forward(rung, value, data, request):
    judged(request, rung.peer, draw_config(data, rung))


@rungs("backward")
@given(data=st.data())
def test_backward(rung, value, data, request):
    judged(request, rung.peer, draw_config(data, rung), backward=True)


FLOAT16_EXACT_SHARE = 0.99


"""The least share of cuDNN's float16 outputs of ONE time step from a given state (tanh, GRU) the reference
must match exactly: the rule is per step, and there the H200 with cuDNN 9.19.0 matched 0.999 (tanh) and 1.000
(relu) of them (``reports/gpu/nvidia-h200-cudnn9.19.0/probes.md``, probe 5). Over 30 steps a rounding that
flips (cuDNN's float32 sums in another order than NumPy's, a tie broken the other way) carries on through the
state, so the shares there (0.917 tanh, 0.989 GRU, 0.920 three-layer GRU on the second run,
``reports/gpu/nvidia-h200-cudnn9.19.0-2``) say how far a difference travels, not which rule cuDNN follows:
those are compared with the other rules only."""


@rungs("float16_rounding")
def test_float16_rounding(rung, value, monkeypatch, closing, request):
    """``precision.HALF_ROUNDS`` (GEMM results before their biases, and the state, rounded to float16) is
    cuDNN's HALF data with FLOAT math; this settles it on every GPU run: for a one-layer tanh, a one-layer
    GRU and a three-layer GRU over 30 steps (H64 I32 B16), and for one step of a tanh and a GRU from a given
    state (B64), cuDNN's output agrees exactly (ulp distance 0) with the reference on a larger share of
    elements with the decision as it is than with any one rounding point removed (over one step, the GEMM
    results: the state shows only over several); over one step, on at least
    :data:`FLOAT16_EXACT_SHARE` of them; the LSTM's likewise (its cell state carried in float16 since the
    second run's probe 9; the 30-step share the second run measured, 0.73, was before that)."""
    import cupy

    from compat_tests.judge.metrics import ulp_distance
    from reference import precision

    decided = precision.HALF_ROUNDS
    variants = {"as decided": decided, **{f"without {p}": decided - {p} for p in sorted(decided)}}
    shares: dict[str, dict[str, float]] = {}
    one_step = dict(seq_len=1, batch=64, initial_state=True)
    runs = dict(seq_len=30, batch=16, initial_state=False)
    for name, mode, layers, shape in (("tanh L1", "tanh", 1, runs), ("gru L1", "gru", 1, runs),
                                      ("gru L3", "gru", 3, runs), ("lstm L1", "lstm", 1, runs),
                                      ("tanh step", "tanh", 1, one_step), ("gru step", "gru", 1, one_step),
                                      ("lstm step", "lstm", 1, one_step)):
        cfg = RNNConfig(mode, num_layers=layers, num_units=64, input_size=32, dtype="float16", **shape)
        case = make_case(cfg)
        gpu = cfg.model(models=cudnn_backend.MODELS)
        closing(gpu)
        got = cupy.asnumpy(gpu.forward(case.x, case.h0, gpu.canonical_to_params(case.weights, case.biases),
                                       input_c=case.c0, is_training=False).output)
        shares[name] = {}
        for variant, points in variants.items():
            monkeypatch.setattr(precision, "HALF_ROUNDS", frozenset(points))
            ref = PEERS["reference"].forward(cfg, case).output
            shares[name][variant] = float((ulp_distance(got, ref.astype(np.float64)) == 0).mean())
        monkeypatch.setattr(precision, "HALF_ROUNDS", decided)
    request.node.user_properties.append(("note", "float16 exact shares (cuDNN = reference): " + "; ".join(
        f"{name}: " + ", ".join(f"{v} {share:.3f}" for v, share in by.items()) for name, by in shares.items())))
    for name, by in shares.items():
        # one step writes its state once, as the output, which is float16 whatever the rule: "state" shows
        # only over several steps
        others = {v: share for v, share in by.items()
                  if v != "as decided" and not (name.endswith("step") and v == "without state")}
        assert all(by["as decided"] > share for share in others.values()), \
            f"{name}: a rounding point removed fits cuDNN's float16 as well or better: {by}"
        if name.endswith("step"):
            assert by["as decided"] >= FLOAT16_EXACT_SHARE, \
                f"{name}: cuDNN's float16 matches the reference exactly on {by['as decided']:.3f} of the elements"


def algorithm_run(request, closing, algo: str, math_type: str | None):
    """A GRU through ``algo`` with ``math_type``: it agrees with the reference within its peer's budget (FMA:
    cudnn, or cudnn-persist through a persistent algorithm, whose kernels approximate tanh and the sigmoid;
    default and tensor ops, which may use TF32: cudnn-tf32), or cuDNN refuses it with a named status,
    recorded as a note (never silently)."""
    import cupy

    from compat_tests.judge.conditioning import sensitivity

    cfg = RNNConfig("gru", num_units=64, input_size=32, seq_len=20, batch=8, dtype="float32")
    case = make_case(cfg)
    try:
        gpu = cfg.model(models=cudnn_backend.MODELS, math_type=math_type, algo=algo)
        closing(gpu)
        out = gpu.forward(case.x, case.h0, gpu.canonical_to_params(case.weights, case.biases), is_training=False)
    except cudnn_backend.CudnnError as exc:
        assert exc.status.startswith("CUDNN_STATUS_") and exc.function, exc
        request.node.user_properties.append(("note", f"{algo}/{math_type or 'fma'} refused: {exc}"))
        return
    truth = ground_truth(cfg, case)
    peer = ("cudnn-tf32" if math_type in ("tensor_op", "default") else "cudnn" if algo == "standard"
            else "cudnn-persist")
    got = Outputs(cupy.asnumpy(out.output), cupy.asnumpy(out.output_h), None)
    verdict = judge_results(peer, cfg, got, truth, sensitivity(cfg, case, truth))
    assert verdict.passed, verdict.explain()


@rungs("math_type")
def test_math_type(rung, value, request, closing):
    algorithm_run(request, closing, "standard", value)


@rungs("algorithm")
def test_algorithm(rung, value, request, closing):
    algorithm_run(request, closing, value, None)


@rungs("persist_rebuild")
def test_persist_rebuild(rung, value, request, closing):
    """persist_dynamic compiles its plan per batch size: gradients stay the reference's when another batch
    size ran between forward and backward."""
    from compat_tests.tests.helpers import backward_reads_what_forward_read

    backward_reads_what_forward_read("other_batch_in_between", closing, request)


@rungs("tf32_divergence")
def test_tf32_divergence(rung, value, request):
    """TF32 is shown, not hidden: cudnn-tf32 is a peer of its own, judged by its own (wider) budget. If
    default math did not engage TF32 for this shape, a note says so (the test does not pass vacuously)."""
    from compat_tests.judge.conditioning import sensitivity

    cfg = RNNConfig("lstm", num_layers=2, num_units=256, input_size=128, seq_len=50, batch=32, dtype="float32")
    case = make_case(cfg)
    truth = ground_truth(cfg, case)  # one truth and one condition estimate judge both math types
    kappa = sensitivity(cfg, case, truth)
    fma, tf32 = (judge_results(name, cfg, PEERS[name].forward(cfg, case), truth, kappa)
                 for name in ("cudnn", "cudnn-tf32"))
    assert fma.passed, fma.explain()
    assert tf32.passed, tf32.explain()
    fma_ulp, tf32_ulp = fma.verdicts["output"].stats.max_ulp, tf32.verdicts["output"].stats.max_ulp
    engaged = tf32_ulp > 16 * max(fma_ulp, 1.0)
    request.node.user_properties.append(("note", f"max ulp of the output: FMA {fma_ulp:g}, default math "
                                         f"{tf32_ulp:g}: TF32 {'engaged' if engaged else 'did not engage'}"))


def _ties(a: np.ndarray) -> np.ndarray:
    """``a`` (float32) moved to the point halfway between the two TF32 values around it: where truncation, ties to
    even and ties away part ways (down, even, up)."""
    from reference import tf32

    bits = np.ascontiguousarray(a, np.float32).view(np.uint32)
    return ((bits & ~tf32.LOW) | tf32.HALF).view(np.float32)


@rungs("tf32_rounding")
def test_tf32_rounding(rung, value, monkeypatch, closing, request):
    """The rule cuDNN's TF32 math rounds its float32 GEMM operands by (``precision.TF32_ROUNDING``): one step of a
    tanh, a GRU and an LSTM (H64 I32 B64, from a given state) whose weights, input and state all lie halfway
    between two TF32 values, where the three rules part ways, so cuDNN's output is nearest, element by element,
    to the prediction of the rule it follows. The decided rule must be nearest on a larger share than either
    other rule; where FMA math is nearest on the largest share, TF32 did not engage for the shape, and a note
    says so (the shares are noted either way: the evidence the decision needs)."""
    import cupy

    from reference import precision, tf32

    decided = precision.TF32_ROUNDING
    shares: dict[str, dict[str, float]] = {}
    for mode in ("tanh", "gru", "lstm"):
        cfg = RNNConfig(mode, num_units=64, input_size=32, seq_len=1, batch=64, dtype="float32", initial_state=True)
        case = make_case(cfg)
        case = case._replace(weights=[_ties(w) for w in case.weights], x=_ties(case.x), h0=_ties(case.h0))
        gpu = cfg.model(models=cudnn_backend.MODELS, math_type="default")
        closing(gpu)
        got = cupy.asnumpy(gpu.forward(case.x, case.h0, gpu.canonical_to_params(case.weights, case.biases),
                                       input_c=case.c0, is_training=False).output).astype(np.float64)
        predicted = {}
        for rule in tf32.RULES:
            monkeypatch.setattr(precision, "TF32_ROUNDING", rule)
            predicted[rule] = PEERS["reference-tf32"].forward(cfg, case).output.astype(np.float64)
        monkeypatch.setattr(precision, "TF32_ROUNDING", decided)
        predicted["fma"] = PEERS["reference"].forward(cfg, case).output.astype(np.float64)
        distance = {name: np.abs(got - p) for name, p in predicted.items()}
        nearest = np.min(np.stack(list(distance.values())), axis=0)
        shares[mode] = {name: float((d == nearest).mean()) for name, d in distance.items()}
    noted = "; ".join(f"{mode}: " + ", ".join(f"{name} {share:.3f}" for name, share in by.items())
                      for mode, by in shares.items())
    request.node.user_properties.append(("note", f"TF32 rules, shares of the output nearest each prediction: {noted}"))
    for mode, by in shares.items():
        if by["fma"] >= max(by[rule] for rule in tf32.RULES):
            request.node.user_properties.append(("note", f"{mode}: FMA math is nearest: TF32 did not engage"))
            continue
        others = {rule: share for rule, share in by.items() if rule not in (decided, "fma")}
        assert all(by[decided] > share for share in others.values()), \
            f"{mode}: another TF32 rule fits cuDNN's default math as well or better than {decided!r}: {by}"


@rungs("dropout")
def test_dropout(rung, value, closing):
    """A 2-layer relu RNN whose second layer is the identity (W = I, R = 0, biases 0) shows layer 1's
    dropped-out input directly: a fraction p of zeros, the rest scaled by 1 / (1 - p); inference ignores it."""
    import cupy

    p = float(value)
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
    np.testing.assert_array_equal(infer, expected)
    dropped = train == 0
    n = dropped.size
    assert abs(dropped.mean() - p) <= DROPOUT_RATE_SIGMAS * np.sqrt(p * (1 - p) / n)
    np.testing.assert_allclose(train[~dropped], expected[~dropped] / (1 - p), rtol=DROPOUT_SCALE_RTOL)
