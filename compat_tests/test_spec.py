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

import ast
from pathlib import Path
from typing import Iterable

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reference
from compat_tests.judge.compare import Comparison, Recorded, compare_peer
from compat_tests.config import Case, GradOutputs, Outputs, RNNConfig, make_case
from compat_tests.run import forward_case, ground_truth, ground_truth_backward, packed_like, padded
from compat_tests.strategies import rnn_configs
from compat_tests.judge.tolerances import FINITE_DIFFERENCE_RTOL, FINITE_DIFFERENCE_STEP
from reference import recurrence, spec
from reference.spec import gru, network
from reference.spec.cell import input_term, recurrent_term, sigmoid

TINY = dict(max_layers=2, max_units=3, max_input=3, max_time=4, max_batch=2)


def engine_against_spec(cfg: RNNConfig, case: Case, dropout: float = 0.0, seed: int = 0) -> list[Comparison]:
    """The engine's inference outputs, and its training outputs and gradients (with ``dropout``, the masks
    its forward pass drew), each judged against the spec's truth by the reference peer's budgets."""
    model = cfg.model(dropout=dropout, seed=seed)
    params = model.canonical_to_params(case.weights, case.biases)
    inference = forward_case(model, cfg, case, is_training=False, params=params)
    fwd = forward_case(model, cfg, case, is_training=True, params=params)
    grads = model.backward(fwd, packed_like(cfg, case, case.dy), case.dh, case.dc)
    masks = fwd.reserve.dropout_masks
    training = Recorded("reference", outputs=Outputs(padded(cfg, fwd.output), *fwd[1:3]),
                        gradients=GradOutputs(padded(cfg, grads.input), grads.input_h, grads.input_c, grads.params))
    return [compare_peer(Recorded("reference", outputs=Outputs(padded(cfg, inference.output), *inference[1:3])), cfg,
                         case),
            compare_peer(training, cfg, case, dropout=dropout, masks=masks),
            compare_peer(training, cfg, case, backward=True, dropout=dropout, masks=masks)]


def failures(comparisons: list[Comparison]) -> list[str]:
    return [c.explain() for c in comparisons if not c.passed]


@given(cfg=rnn_configs(), dropout=st.sampled_from([0.0, 0.5, 1.0]), seed=st.integers(0, 2**32 - 1))
def test_engine_matches_the_spec_cells(cfg, dropout, seed):
    """Every mode, dtype, layout, length, direction, projection and skip_input the strategies draw, with and
    without dropout between layers: the engine is the spec within the reference peer's budgets (float64's
    for float64 models)."""
    bad = failures(engine_against_spec(cfg, make_case(cfg), dropout, seed))
    assert not bad, "\n".join(bad)


# ---- the spec's own gradients ------------------------------------------------------------------------


def finite_difference_failures(cfg: RNNConfig, case: Case, dropout: float = 0.0, masks=(), probes: int = 3,
                               seed: int = 0) -> list[str]:
    """Where ``reference.spec.backward`` disagrees with central finite differences of
    ``reference.spec.forward`` (float64) along ``probes`` coordinates and one random direction of each of
    ``x``, ``h0``, ``c0``, the weights and the biases: ``loss = <y, dy> + <h_n, dh> + <c_n, dc>`` (a packed
    config's ``x``, ``y`` and ``dy`` packed: the packed data is what moves)."""
    case = case.astype(np.float64)
    net = spec.Network.of(cfg.model("float64"))
    options = dict(lengths=None if cfg.packed else case.lengths, dropout=dropout, masks=masks,
                   time_major=cfg.time_major)
    batch_sizes = reference.pack(case.x, case.lengths).batch_sizes if cfg.packed else None
    sequence = (lambda a: reference.PackedSequence(a, batch_sizes)) if cfg.packed else (lambda a: a)  # noqa: E731
    data = (lambda s: s.data) if cfg.packed else (lambda s: s)  # noqa: E731
    dy = data(packed_like(cfg, case, case.dy))
    args = {"x": [data(packed_like(cfg, case, case.x))], "h0": [np.zeros_like(case.dh) if case.h0 is None else case.h0],
            "c0": [None if case.dc is None else np.zeros_like(case.dc) if case.c0 is None else case.c0],
            "weights": list(case.weights), "biases": list(case.biases)}

    def loss(a) -> float:
        out = spec.forward(net, a["weights"], a["biases"], sequence(a["x"][0]), a["h0"][0], a["c0"][0], **options)
        return float(np.vdot(data(out.output), dy) + np.vdot(out.output_h, case.dh)
                     + (0.0 if out.output_c is None else np.vdot(out.output_c, case.dc)))

    g = spec.backward(net, args["weights"], args["biases"], sequence(args["x"][0]), args["h0"][0], args["c0"][0],
                      sequence(dy), case.dh, case.dc, **options)
    grads = {"x": [data(g.input)], "h0": [g.input_h], "c0": [g.input_c], "weights": g.weights, "biases": g.biases}
    rng = np.random.default_rng(seed)
    h = FINITE_DIFFERENCE_STEP
    base = loss(args)
    scale = max(1.0, abs(base))
    found = []
    for name, grad in grads.items():
        if not grad or grad[0] is None:  # no c0 but for the LSTM, no bias with bias_mode "none"
            continue
        sizes = np.cumsum([0] + [a.size for a in grad])
        directions = []
        for k in rng.choice(sizes[-1], size=min(probes, sizes[-1]), replace=False):
            unit = [np.zeros_like(a) for a in grad]
            i = int(np.searchsorted(sizes, k, side="right")) - 1
            unit[i].reshape(-1)[k - sizes[i]] = 1.0
            directions.append(unit)
        directions.append([rng.standard_normal(a.shape) for a in grad])

        def along(v: list, step: float) -> tuple[float, float]:
            """The central difference along ``v``, and the forward one less the backward one."""
            moved = lambda sign: {**args, name: [a + sign * step * d for a, d in zip(args[name], v)]}  # noqa: E731
            up, down = loss(moved(1)), loss(moved(-1))
            return (up - down) / (2 * step), (up - 2 * base + down) / step

        for v in directions:
            (fd, jump), (fd_half, jump_half) = along(v, h), along(v, h / 2)
            analytic = sum(float(np.vdot(a, d)) for a, d in zip(grad, v))
            tol = FINITE_DIFFERENCE_RTOL * max(scale, abs(analytic))
            if abs(fd - fd_half) > tol:  # a kink (relu at 0) within the step: not differentiable here
                continue
            # A kink at the point itself (a relu input exactly 0, as where a layer's input and h0 are 0 and it
            # has no bias): the one-sided differences part by as much at half the step (a smooth loss's part
            # by half as much), while the central ones agree.
            if abs(jump_half) > tol and abs(jump - jump_half) < abs(jump_half) / 2:
                continue
            if abs(fd - analytic) > tol:
                found.append(f"d loss / d {name}: finite difference {fd!r}, spec backward {analytic!r}")
    return found


def random_masks(cfg: RNNConfig, seed: int) -> tuple[np.ndarray, ...]:
    lead = (cfg.seq_len, cfg.batch) if cfg.time_major else (cfg.batch, cfg.seq_len)
    rng = np.random.default_rng(seed)
    return tuple(rng.random((*lead, cfg.num_dirs * cfg.state_width)) >= 0.5 for _ in range(cfg.num_layers - 1))


@given(cfg=rnn_configs(dtypes_=("float64",), **TINY), dropout=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_spec_gradients_match_central_finite_differences(cfg, dropout, seed):
    masks = random_masks(cfg, seed) if dropout and cfg.num_layers > 1 else ()
    bad = finite_difference_failures(cfg, make_case(cfg), 0.5 if masks else 0.0, masks, seed=seed)
    assert not bad, "\n".join(bad)


# ---- bugs planted in the engine are caught there, and leave the truth alone ----------------------------


def _truth(cfg: RNNConfig, case: Case) -> list[np.ndarray]:
    return [a for a in (*ground_truth(cfg, case), *ground_truth_backward(cfg, case)) if a is not None]


def assert_caught_in_the_engine(cfg: RNNConfig, plant, dropout: float = 0.0) -> None:
    """The engine passes on ``cfg``; with the bug ``plant()`` installs it fails, and the truth computed
    under the bug is the truth computed without it, bit for bit."""
    case = make_case(cfg)
    assert not failures(engine_against_spec(cfg, case, dropout)), "the engine fails without the bug"
    truth = _truth(cfg, case)
    with pytest.MonkeyPatch.context() as mp:
        plant(mp)
        assert failures(engine_against_spec(cfg, case, dropout)), "the planted bug went unnoticed"
        under_the_bug = _truth(cfg, case)
    for a, b in zip(truth, under_the_bug, strict=True):
        np.testing.assert_array_equal(a, b)


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


# ---- a bug planted in a spec cell is caught by finite differences and by PyTorch ------------------------


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


# ---- what the spec is made of, and what it refuses ----------------------------------------------------

SPEC_DIR = Path(spec.__file__).parent
ENGINE = {"reference.recurrence", "reference.backward", "reference.buffers", "reference.modes", "reference.model"}


def _imports(path: Path) -> set[str]:
    """The modules ``path`` imports, relative imports resolved against its package."""
    package = ".".join(path.relative_to(SPEC_DIR.parent.parent).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module) if p)
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names}  # `from . import gru` imports a module
    return found


def imports_reached(paths: Iterable[Path]) -> tuple[list[tuple[Path, str]], set[Path]]:
    """Every ``(file, module it imports)`` from the files ``paths``, followed through the reference's own
    modules (not the package's ``__init__``), and the files of the reference's modules reached."""
    seen, todo, found = set(), list(paths), []
    reference_dir = SPEC_DIR.parent
    while todo:
        path = todo.pop()
        for module in _imports(path):
            found.append((path, module))
            parts = module.split(".")
            if parts[0] == "reference":
                candidate = reference_dir.joinpath(*parts[1:]).with_suffix(".py")
                if candidate.exists() and candidate not in seen:
                    seen.add(candidate)
                    todo.append(candidate)
    return found, seen


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
