"""The plain cells of ``reference.spec`` are the truth; the engine (``reference.CudnnGRU`` etc.) is judged.

- the engine against the spec over every config the strategies draw, dropout included (the masks the
  engine drew, given to the spec): outputs, final states and every gradient, within the reference peer's
  budgets of the tolerance policy;
- the spec's gradients against central finite differences of the spec's own forward pass;
- bugs planted in the engine (a stacked ones row, a chunk boundary, the batch-1 projection) fail the
  engine-against-spec check and leave the truth as it was, bit for bit; a bug planted in a spec cell fails
  against finite differences and against PyTorch;
- the spec is NumPy alone, imports nothing of the engine, and refuses bad input naming the argument.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reference
from compat_tests.config import RNNConfig, make_case
from compat_tests.judge.compare import compare_peer
from compat_tests.strategies import rnn_configs
from compat_tests.tests.helpers import (
    ENGINE,
    SPEC_DIR,
    TINY,
    assert_caught_in_the_engine,
    engine_against_spec,
    failures,
    finite_difference_failures,
    imports_reached,
    random_masks,
)
from reference import recurrence, spec
from reference.spec import gru, network
from reference.spec.cell import input_term, recurrent_term, sigmoid


@given(cfg=rnn_configs(), dropout=st.sampled_from([0.0, 0.5, 1.0]), seed=st.integers(0, 2**32 - 1))
def test_engine_matches_the_spec_cells(cfg, dropout, seed):
    """Every mode, dtype, layout, length, direction, projection and skip_input the strategies draw, with and
    without dropout between layers: the engine is the spec within the reference peer's budgets (float64's
    for float64 models)."""
    bad = failures(engine_against_spec(cfg, make_case(cfg), dropout, seed))
    assert not bad, "\n".join(bad)


@given(cfg=rnn_configs(dtypes_=("float64",), **TINY), dropout=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_spec_gradients_match_central_finite_differences(cfg, dropout, seed):
    masks = random_masks(cfg, seed) if dropout and cfg.num_layers > 1 else ()
    bad = finite_difference_failures(cfg, make_case(cfg), 0.5 if masks else 0.0, masks, seed=seed)
    assert not bad, "\n".join(bad)


def ones_row_off(mp: pytest.MonkeyPatch) -> None:
    """Stacked steps whose row of ones (the biases' column of ``[W b R]``) holds 1.0001."""
    original = recurrence.stacked_inputs

    def planted(x_steps, state_width):
        stacked = original(x_steps, state_width)
        stacked[:, x_steps.shape[2]] = 1.0001
        return stacked

    mp.setattr(recurrence, "stacked_inputs", planted)


def chunk_boundary_off_by_one(mp: pytest.MonkeyPatch) -> None:
    """Chunks of 2 steps (``chunk_steps``), each chunk after the first prepared from the steps one before its
    own."""
    original = recurrence._step_inputs

    def planted(prepare, x, index, reverse, start, stop, stacked):
        shift = 1 if start > 0 else 0
        return original(prepare, x, index, reverse, start - shift, stop - shift, stacked)

    mp.setattr(recurrence, "chunk_steps", lambda T, step_bytes: 2)
    mp.setattr(recurrence, "_step_inputs", planted)


def batch1_bias_through_a_copy(mp: pytest.MonkeyPatch) -> None:
    """The input projection adds its biases to ``out.reshape(-1)``, each repeated ``T*B`` times: a flat view of
    a contiguous ``[G*H, T, B]`` buffer, but a copy of batch 1's (a transposed time-outer buffer), so at batch
    1 they are lost."""
    original = recurrence.input_projection

    def planted(x, params, bias, out, storage=None):
        original(x, params, np.zeros_like(bias), out, storage)
        flat = out.reshape(-1)
        flat += np.repeat(bias, out.shape[1] * out.shape[2])
        return out

    mp.setattr(recurrence, "input_projection", planted)


STACKED = RNNConfig("lstm", num_layers=2, num_units=4, input_size=3, direction="bidirectional", seq_len=5, batch=3,
                    lengths=(5, 2, 4), seed=4)


@pytest.mark.parametrize(("cfg", "plant", "dropout"), [
    (STACKED, ones_row_off, 0.0),
    (STACKED.with_(mode="tanh", num_layers=3, time_major=False), ones_row_off, 0.5),
    (RNNConfig("gru", num_layers=2, num_units=4, input_size=3, seq_len=6, batch=2, direction="bidirectional",
               seed=5), chunk_boundary_off_by_one, 0.0),
    (STACKED.with_(lengths=None), chunk_boundary_off_by_one, 0.0),
    (RNNConfig("gru", num_layers=2, num_units=4, input_size=3, seq_len=4, batch=1, seed=6),
     batch1_bias_through_a_copy, 0.0),
    (RNNConfig("lstm", num_units=4, input_size=3, seq_len=4, batch=1, num_proj=2, direction="bidirectional",
               dtype="float32", seed=7), batch1_bias_through_a_copy, 0.0),
], ids=["stacked-lstm", "stacked-tanh-dropout", "chunks-gru", "chunks-stacked-lstm", "batch1-gru",
        "batch1-lstm-float32"])
def test_a_bug_planted_in_the_engine_is_caught_there(cfg, plant, dropout):
    assert_caught_in_the_engine(cfg, plant, dropout)


def test_the_batch1_bug_is_caught_at_batch1_only():
    """The planted batch-1 bug leaves the batch-2 path (a contiguous buffer) right: the check fails where the
    bug is, not everywhere."""
    cfg = RNNConfig("gru", num_layers=2, num_units=4, input_size=3, seq_len=4, batch=2, seed=6)
    with pytest.MonkeyPatch.context() as mp:
        batch1_bias_through_a_copy(mp)
        assert not failures(engine_against_spec(cfg, make_case(cfg)))
        assert failures(engine_against_spec(cfg.with_(batch=1), make_case(cfg.with_(batch=1))))


def gru_bias_outside_the_reset(p, x, h, c, storage=None):
    """cuDNN's GRU step with ``b_Rh`` added outside the reset gate: ``n = tanh(W_h x + b_Wh + r * (R_h h)
    + b_Rh)`` (its cache as the right step's, so the right backward runs on it); float64 here, so ``storage``
    rounds nothing."""
    r = sigmoid(input_term(p, gru.R, x) + recurrent_term(p, gru.R, h))
    z = sigmoid(input_term(p, gru.Z, x) + recurrent_term(p, gru.Z, h))
    hn = recurrent_term(p, gru.N, h)
    n = np.tanh(input_term(p, gru.N, x) + r * (h @ p.R[gru.N].T) + p.b_R[gru.N])
    return (1.0 - z) * n + z * h, None, (x, h, r, z, h, hn, n)


BUGGY_SPEC = RNNConfig("gru", num_layers=2, num_units=3, input_size=2, seq_len=3, batch=2, lengths=(3, 2),
                       direction="bidirectional", weight_scale=2.0, seed=8)


def test_a_bug_planted_in_a_spec_cell_fails_against_finite_differences():
    case = make_case(BUGGY_SPEC)
    assert not finite_difference_failures(BUGGY_SPEC, case)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(network.CELLS, "gru", network.CELLS["gru"]._replace(step=gru_bias_outside_the_reset))
        assert finite_difference_failures(BUGGY_SPEC, case)


def test_a_bug_planted_in_a_spec_cell_fails_against_pytorch(available_peer):
    torch_cpu = available_peer("torch-cpu")
    assert compare_peer(torch_cpu, BUGGY_SPEC).passed
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(network.CELLS, "gru", network.CELLS["gru"]._replace(step=gru_bias_outside_the_reset))
        assert not compare_peer(torch_cpu, BUGGY_SPEC).passed
        assert not compare_peer(torch_cpu, BUGGY_SPEC, backward=True).passed


def test_the_spec_is_numpy_alone_and_imports_nothing_of_the_engine():
    """Every module the spec imports, followed through the reference's own modules, is NumPy, the standard
    library or the reference's checks, layout decisions and precision: no engine module, no framework."""
    found, seen = imports_reached(SPEC_DIR.glob("*.py"))
    for path, module in found:
        assert module not in ENGINE, f"{path.name} imports the engine's {module}"
        assert module.split(".")[0] not in ("torch", "onnx", "onnxruntime", "cupy", "keras", "tensorflow", "jax"), \
            module
    assert {p.stem for p in seen} >= {"checks", "layout", "precision"}
    assert not {p.stem for p in seen} & {m.split(".")[1] for m in ENGINE}


def _args(cfg: RNNConfig = RNNConfig("lstm", num_layers=2, num_units=4, input_size=3, num_proj=2)):
    case = make_case(cfg)
    return spec.Network.of(cfg.model()), case


@pytest.mark.parametrize(("change", "error", "match"), [
    (dict(weights=lambda c: c.weights[:-1]), ValueError, r"weights must hold 18 arrays"),
    (dict(weights=lambda c: [c.weights[0].T, *c.weights[1:]]), ValueError, r"weights\[0\] .* must have shape"),
    (dict(biases=lambda c: [b.astype(np.float32) for b in c.biases]), TypeError, r"biases\[0\] .* dtype float64"),
    (dict(x=lambda c: c.x[..., :2]), ValueError, r"x must have shape \[T, B, input_size\]"),
    (dict(x=lambda c: c.x.tolist()), TypeError, r"x must be a float16, float32 or float64"),
    (dict(h0=lambda c: c.h0[:, :1]), ValueError, r"h0 must have shape"),
    (dict(c0=lambda c: c.c0.astype(np.float32)), TypeError, r"c0 must have dtype float64"),
    (dict(lengths=lambda c: [5, 1]), ValueError, r"^lengths must each be in 1..T"),
    (dict(dropout=lambda c: 1.5, masks=lambda c: ()), ValueError, r"dropout must be a number in \[0, 1\]"),
    (dict(dropout=lambda c: 0.5, masks=lambda c: ()), ValueError, r"masks must hold num_layers - 1 = 1"),
    (dict(dropout=lambda c: 0.5, masks=lambda c: (np.ones((4, 2, 3), bool),)), ValueError, r"masks\[0\] must have"),
])
def test_spec_refuses_bad_input_naming_it(change, error, match):
    net, case = _args()
    args = dict(weights=case.weights, biases=case.biases, x=case.x, h0=case.h0, c0=case.c0)
    options = dict(lengths=None, dropout=0.0, masks=())
    for name, make in change.items():
        (args if name in args else options)[name] = make(case)
    with pytest.raises(error, match=match):
        spec.forward(net, *args.values(), **options)


def test_spec_backward_refuses_bad_gradients_naming_them():
    net, case = _args()
    good = (net, case.weights, case.biases, case.x, case.h0, case.c0)
    with pytest.raises(ValueError, match=r"d_output must have shape"):
        spec.backward(*good, case.dy[:, :, :1])
    with pytest.raises(ValueError, match=r"d_output_c must have shape"):
        spec.backward(*good, case.dy, case.dh, case.dc[:1])
    gru_net, gru_case = _args(RNNConfig("gru"))
    with pytest.raises(ValueError, match=r"d_output_c must be None for mode 'gru'"):
        spec.backward(gru_net, gru_case.weights, gru_case.biases, gru_case.x, gru_case.h0, None, gru_case.dy,
                      gru_case.dh, gru_case.dh)
    with pytest.raises(TypeError, match=r"net must be a reference.spec.Network"):
        spec.forward(reference.CudnnGRU(1, 4, 3, dtype=np.float64), gru_case.weights, gru_case.biases, gru_case.x)
    with pytest.raises(ValueError, match=r"Invalid mode"):
        spec.Network("lstmm", 1, 4, 3)


@given(cfg=rnn_configs(dtypes_=("float64", "float32"), **TINY))
def test_forward_and_backward_is_forward_and_backward_bit_for_bit(cfg):
    """One forward pass for both (what the backward comparison's overflow check reads): its outputs are
    ``forward``'s with zeros past each length, its gradients ``backward``'s, bit for bit, packed or padded."""
    from compat_tests.run import _spec_call, packed_like

    case = make_case(cfg)
    net, case, options = _spec_call(cfg, case, 0.0, ())
    args = (net, case.weights, case.biases, packed_like(cfg, case, case.x), case.h0, case.c0)
    grad_args = (packed_like(cfg, case, case.dy), case.dh, case.dc)
    out, grads = spec.forward_and_backward(*args, *grad_args, **options)
    want_out, want_grads = spec.forward(*args, **options), spec.backward(*args, *grad_args, **options)
    for got, want in zip([*out, *grads[:3], *grads.weights, *grads.biases],
                         [*want_out, *want_grads[:3], *want_grads.weights, *want_grads.biases], strict=True):
        got, want = (getattr(a, "data", a) for a in (got, want))  # (a packed sequence's data)
        assert (got is None and want is None) or np.array_equal(got, want, equal_nan=True)
