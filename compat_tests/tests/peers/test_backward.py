"""Backward pass: finite differences, peers' autograd, padding, accumulation, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import reference
from compat_tests.config import RNNConfig, make_case
from compat_tests.judge.compare import compare_peer
from compat_tests.judge.known_divergences import known
from compat_tests.judge.tolerances import FINITE_DIFFERENCE_RTOL, FINITE_DIFFERENCE_STEP
from compat_tests.run import forward_case
from compat_tests.strategies import rnn_configs

TINY = dict(max_layers=2, max_units=3, max_input=3, max_time=4, max_batch=2)


class Problem:
    """``loss = <y, dy> + <h_n, dh> + <c_n, dc>`` of a config, as a function of each input array, with the
    reference's analytic gradient. Each evaluation uses a fresh model with the same dropout seed, so every
    evaluation draws the same dropout masks."""

    def __init__(self, cfg: RNNConfig, dropout: float):
        self.cfg, self.dropout = cfg, dropout
        self.case = make_case(cfg)
        model = cfg.model(dropout=dropout, seed=5)
        self.args = {"x": self.case.x, "h0": self.case.h0, "c0": self.case.c0,
                     "params": model.canonical_to_params(self.case.weights, self.case.biases)}
        if self.args["h0"] is None:  # gradients of the zero initial state are defined too
            self.args["h0"] = np.zeros_like(self.case.dh)
        if cfg.has_cell_state and self.args["c0"] is None:
            self.args["c0"] = np.zeros_like(self.case.dc)

    def _forward(self, args):
        model = self.cfg.model(dropout=self.dropout, seed=5)
        fwd = model.forward(args["x"], args["h0"], args["params"], input_c=args["c0"], is_training=True,
                            sequence_lengths=self.case.lengths, time_major=self.cfg.time_major)
        return model, fwd

    def loss(self, **changes) -> float:
        _, fwd = self._forward({**self.args, **changes})
        total = np.vdot(fwd.output, self.case.dy) + np.vdot(fwd.output_h, self.case.dh)
        return float(total + (0.0 if fwd.output_c is None else np.vdot(fwd.output_c, self.case.dc)))

    def gradients(self) -> dict[str, np.ndarray]:
        model, fwd = self._forward(self.args)
        g = model.backward(fwd, self.case.dy, self.case.dh, self.case.dc)
        return {"x": g.input, "h0": g.input_h, "c0": g.input_c, "params": g.params}

    def directional(self, name: str, direction: np.ndarray, step: float) -> float:
        base = self.args[name]
        return (self.loss(**{name: base + step * direction}) - self.loss(**{name: base - step * direction})) / (2 * step)


@given(cfg=rnn_configs(dtypes_=("float64",), **TINY), dropout=st.sampled_from([0.0, 0.5]), data=st.data())
def test_gradients_match_central_finite_differences(cfg, dropout, data):
    problem = Problem(cfg, dropout if cfg.num_layers > 1 else 0.0)
    grads = problem.gradients()
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="probe_seed"))
    h = FINITE_DIFFERENCE_STEP
    scale = max(1.0, abs(problem.loss()))
    for name, grad in grads.items():
        if grad is None:
            continue
        coordinates = rng.choice(grad.size, size=min(grad.size, 8), replace=False)
        probes = [np.eye(1, grad.size, k).reshape(grad.shape) for k in coordinates]
        probes += [rng.standard_normal(grad.shape) for _ in range(2)]
        for v in probes:
            fd, fd_half = problem.directional(name, v, h), problem.directional(name, v, h / 2)
            analytic = float(np.vdot(grad, v))
            tol = FINITE_DIFFERENCE_RTOL * max(scale, abs(analytic))
            if abs(fd - fd_half) > tol:  # a kink (relu at 0) within the step: not differentiable here
                continue
            assert abs(fd - analytic) <= tol, (
                f"d loss / d {name} along a probe: finite difference {fd!r}, backward {analytic!r}")


@pytest.mark.laddered
@given(data=st.data())
def test_peer_gradients_match_float64_reference(grad_peer, data):
    cfg = data.draw(rnn_configs(grad_peer.capabilities), label="config")
    comparison = compare_peer(grad_peer, cfg, backward=True)
    assert comparison.passed, comparison.explain()


def _backward(cfg: RNNConfig, case=None, **kwargs):
    case = case or make_case(cfg)
    model = cfg.model()
    fwd = forward_case(model, cfg, case, is_training=True)
    return model, fwd, model.backward(fwd, case.dy, case.dh, case.dc, **kwargs)


@pytest.mark.parametrize("padding", [np.nan, 1e3], ids=["nan", "finite"])
@given(data=st.data())
def test_padded_steps_give_and_receive_no_gradient(grad_peer, padding, data, request):
    """Garbage (NaN, or a large finite value) in the padded inputs and in the padded output gradients: every
    gradient stays finite, the padded inputs' gradient is exactly zero, and (finite garbage) the gradients
    are those of the case's own padding, bit for bit."""
    if not grad_peer.capabilities.lengths:
        pytest.skip(f"{grad_peer.name} takes no sequence lengths")
    ledger = [known(grad_peer.name, "padded_nan_gradients", mode) for mode in grad_peer.capabilities.modes]
    if np.isnan(padding) and all(ledger):  # the modes are drawn below: only a divergence of every mode fits
        request.applymarker(pytest.mark.xfail(reason=ledger[0].reason, strict=True))
    cfg = data.draw(rnn_configs(grad_peer.capabilities, dtypes_=tuple(d for d in grad_peer.capabilities.dtypes
                                                                      if d != "float16")), label="config")
    lengths = data.draw(st.lists(st.integers(1, cfg.seq_len), min_size=cfg.batch, max_size=cfg.batch),
                        label="lengths")
    assume(min(lengths) < cfg.seq_len)
    cfg = cfg.with_(lengths=tuple(lengths))
    case = make_case(cfg)
    x, dy = case.x.copy(), case.dy.copy()
    time_axis = 0 if cfg.time_major else 1
    for b, n in enumerate(lengths):
        np.moveaxis(x, time_axis, 0)[n:, b] = padding
        np.moveaxis(dy, time_axis, 0)[n:, b] = padding
    with np.errstate(invalid="ignore"):
        grads = grad_peer.backward(cfg, case._replace(x=x, dy=dy))
    dx = np.moveaxis(grads.d_input, time_axis, 0)
    for b, n in enumerate(lengths):
        assert (dx[n:, b] == 0).all(), "gradient of a padded step's input must be exactly zero"
    for name, g in grads._asdict().items():
        assert g is None or np.isfinite(g).all(), f"padding leaked into {name}"
    if np.isfinite(padding):
        clean = grad_peer.backward(cfg, case)
        for name, g in grads._asdict().items():
            assert g is None or np.array_equal(g, getattr(clean, name)), f"padding changed {name}"


@given(cfg=rnn_configs(dtypes_=("float16", "float32", "float64")), seed=st.integers(0, 2**32 - 1))
def test_accumulating_into_a_buffer_adds_the_fresh_gradient(cfg, seed):
    """cuDNN's BackwardWeights adds into its dweight buffer; the reference offers the same."""
    model, fwd, fresh = _backward(cfg)
    buffer = np.random.default_rng(seed).standard_normal(model.params_size()).astype(model.dtype)
    expected = buffer + fresh.params
    case = make_case(cfg)
    out = model.backward(fwd, case.dy, case.dh, case.dc, params_backprop_out=buffer)
    assert out.params is buffer
    np.testing.assert_array_equal(buffer, expected)
    for a, b in zip(out[:3], fresh[:3]):
        if b is not None:
            np.testing.assert_array_equal(a, b)


@given(cfg=rnn_configs(dtypes_=("float32", "float64")))
def test_backward_reads_what_forward_read(cfg):
    """Inference may read the caller's arrays in place; a training pass must not keep them, since its trace
    outlives the call: the caller may change ``params``, its inputs or the returned results before backward
    (the time-major input and output, and a batch-major batch of one, were kept as they were)."""
    model, _, expected = _backward(cfg)
    case = make_case(cfg)
    params = model.canonical_to_params(case.weights, case.biases)
    fwd = forward_case(model, cfg, case, is_training=True, params=params)
    for a in (params, case.x, case.h0, case.c0, *fwd[:3]):
        if a is not None:
            a[...] = np.nan
    got = model.backward(fwd, case.dy, case.dh, case.dc)
    for a, b in zip(got, expected):
        if b is not None:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mode", ["tanh", "lstm", "gru"])
def test_none_backprops_mean_zeros(mode):
    cfg = RNNConfig(mode, num_layers=2, seq_len=5, batch=3)
    model, fwd, _ = _backward(cfg)
    dy = make_case(cfg).dy
    with_none = model.backward(fwd, dy)
    with_zeros = model.backward(fwd, dy, np.zeros_like(fwd.output_h),
                                None if fwd.output_c is None else np.zeros_like(fwd.output_c))
    for a, b in zip(with_none, with_zeros):
        if b is not None:
            np.testing.assert_array_equal(a, b)


def test_params_gradient_splits_into_canonical_tensors():
    cfg = RNNConfig("lstm", num_layers=2, num_units=5, input_size=3, num_proj=2, direction="bidirectional")
    model, _, grads = _backward(cfg)
    weights, biases = model.params_to_canonical(grads.params)
    assert [w.shape for w in weights] == model.canonical_shapes()[0]
    assert [b.shape for b in biases] == model.canonical_shapes()[1]


@pytest.fixture
def trained():
    cfg = RNNConfig("lstm", num_layers=2, num_units=4, input_size=3, direction="bidirectional", seq_len=5, batch=2,
                    dtype="float32")
    model, fwd, _ = _backward(cfg)
    return model, fwd, make_case(cfg)


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"output_backprop": np.zeros((5, 2, 7), np.float32)}, ValueError, r"output_backprop must have shape \[T, B, num_dirs\*Hr\] = \(5, 2, 8\)"),
        ({"output_backprop": np.zeros((5, 2, 8), np.float64)}, TypeError, r"output_backprop must have dtype float32"),
        ({"output_backprop": np.zeros((5, 8), np.float32)}, ValueError, r"output_backprop must be 3-D"),
        ({"output_h_backprop": np.zeros((4, 3, 4), np.float32)}, ValueError, r"output_h_backprop must have shape"),
        ({"output_c_backprop": np.zeros((4, 2, 4), np.float16)}, TypeError, r"output_c_backprop must have dtype"),
        ({"params_backprop_out": np.zeros(3, np.float32)}, ValueError, r"params_backprop_out must have shape"),
        ({"params_backprop_out": "buffer"}, TypeError, r"params_backprop_out must be a numpy.ndarray"),
    ],
)
def test_backward_rejects(trained, changes, error, match):
    model, fwd, case = trained
    args = dict(output_backprop=case.dy, output_h_backprop=case.dh, output_c_backprop=case.dc)
    args.update(changes)
    with pytest.raises(error, match=match):
        model.backward(fwd, **args)


def test_backward_rejects_a_read_only_accumulation_buffer(trained):
    model, fwd, case = trained
    buffer = np.zeros(model.params_size(), np.float32)
    buffer.flags.writeable = False
    with pytest.raises(ValueError, match="params_backprop_out must be writeable"):
        model.backward(fwd, case.dy, params_backprop_out=buffer)


def test_backward_needs_a_training_forward(trained):
    model, _, case = trained
    params = model.canonical_to_params(case.weights, case.biases)
    inference = model.forward(case.x, case.h0, params, input_c=case.c0, is_training=False)
    with pytest.raises(ValueError, match="is_training=True"):
        model.backward(inference, case.dy)


def test_backward_needs_this_models_forward(trained):
    model, fwd, case = trained
    twin = RNNConfig("lstm", num_layers=2, num_units=4, input_size=3, direction="bidirectional",
                     dtype="float32").model()
    with pytest.raises(ValueError, match="another model"):
        twin.backward(fwd, case.dy)
    with pytest.raises(TypeError, match="ForwardResult"):
        model.backward((fwd.output, fwd.output_h), case.dy)


def test_output_c_backprop_is_refused_without_a_cell_state():
    cfg = RNNConfig("gru", seq_len=3, batch=2)
    model, fwd, _ = _backward(cfg)
    with pytest.raises(ValueError, match="output_c_backprop must be None"):
        model.backward(fwd, make_case(cfg).dy, output_c_backprop=np.zeros((1, 2, 4)))


def test_gradients_type_is_public():
    assert reference.Gradients._fields == ("input", "input_h", "input_c", "params")


WIDE = [  # widths past the reference's 32-feature layout-change blocks, not a multiple of them
    RNNConfig("lstm", num_layers=2, num_units=37, input_size=70, direction="bidirectional", num_proj=33,
              seq_len=5, batch=3, lengths=(5, 2, 4), time_major=False),
    RNNConfig("gru", num_layers=2, num_units=40, input_size=33, direction="bidirectional", seq_len=4, batch=2),
    RNNConfig("relu", num_layers=1, num_units=65, input_size=64, seq_len=3, batch=2, lengths=(3, 1),
              time_major=False, weight_scale=0.5),
]


@pytest.mark.parametrize("cfg", WIDE, ids=lambda c: c.mode)
def test_wide_layers_forward_and_gradients_match_peer(grad_peer, cfg):
    why = grad_peer.capabilities.unsupported(cfg)
    if why:
        pytest.skip(why)
    comparison = compare_peer(grad_peer, cfg, backward=True)
    assert comparison.passed, comparison.explain()
