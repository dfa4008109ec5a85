"""The LSTM's cell clipping (cuDNN's ``cudnnRNNSetClip_v9`` with ``CUDNN_RNN_CLIP_MINMAX``; ``cell_clip=(lclip,
rclip)``; TensorFlow 1's ``LSTMCell(cell_clip=...)``).

- the plain cells of ``reference.spec``: a step by hand, where the clip engages on each side and where it does
  not, and every gradient against central finite differences;
- the engine (and a model bound to its parameters, step by step) against those cells under drawn clips, and
  the cuDNN backend on the fake: the clip reaches the descriptor and the results;
- a bad clip, or one on another mode, is refused by name before any work; a checkpoint carries the clip, and
  a format that cannot (PyTorch, Keras, ONNX, a TensorFlow bundle) refuses it by name;
- the peers that have it agree with the truth under it (cuDNN's: the GPU ladder's ``cell_clip`` rung); those
  without say why.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cudnn_backend
from compat_tests.config import Case, Outputs, RNNConfig, make_case
from compat_tests.gpu import fake_cuda
from compat_tests.judge.compare import Recorded, assert_agree_within_policy, assert_peer_agrees, compare_peer
from compat_tests.peers import PEERS
from compat_tests.peers.base import Capabilities
from compat_tests.run import forward_case, ground_truth
from compat_tests.strategies import examples, rnn_configs
from compat_tests.tests.helpers import (
    TINY,
    bound_case,
    engine_against_spec,
    failures,
    finite_difference_failures,
    run_stream,
    same_bits,
)
from reference import checkpoint, spec

CLIPS = ((-0.25, 0.25), (-1.0, 0.5), (0.0, 0.0), (-math.inf, 0.1))  # a point, and a side left open


LSTM = ("lstm",)


def sig(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v))


@pytest.mark.parametrize(("c0", "clip"), [(2.0, (-0.5, 0.5)), (-2.0, (-0.5, 0.5)), (0.1, (-0.5, 0.5)),
                                          (2.0, None)])
def test_one_step_by_hand(c0, clip):
    """One unit, one step, every weight 0 and every bias 0.25: each gate reads 0.5 (both biases), so
    ``c' = clip(σ(.5) c0 + σ(.5) tanh(.5))``, ``h' = σ(.5) tanh(c')``; the clipped ``c'`` is what comes back."""
    cfg = RNNConfig("lstm", num_units=1, input_size=1, seq_len=1, batch=1, cell_clip=clip)
    model = cfg.model()
    w_shapes, b_shapes = model.canonical_shapes()
    case = Case([np.zeros(s) for s in w_shapes], [np.full(s, 0.25) for s in b_shapes], np.ones((1, 1, 1)),
                np.zeros((1, 1, 1)), np.full((1, 1, 1), c0), None)
    c_sum = sig(0.5) * c0 + sig(0.5) * math.tanh(0.5)
    c_new = c_sum if clip is None else min(max(c_sum, clip[0]), clip[1])
    got = ground_truth(cfg, case)
    assert got.output_c.item() == pytest.approx(c_new, rel=1e-15)
    assert got.output_h.item() == pytest.approx(sig(0.5) * math.tanh(c_new), rel=1e-15)
    assert (clip is None or clip[0] < c_sum < clip[1]) == (c_new == c_sum)


@settings(max_examples=examples(100))
@given(cfg=rnn_configs(modes_=LSTM, dtypes_=("float64",), cell_clips_=CLIPS, **TINY), seed=st.integers(0, 2**32 - 1))
def test_spec_gradients_match_central_finite_differences_through_the_clip(cfg, seed):
    bad = finite_difference_failures(cfg.with_(weight_scale=2.0), make_case(cfg.with_(weight_scale=2.0)), seed=seed)
    assert not bad, "\n".join(bad)


@settings(max_examples=examples(150))
@given(cfg=rnn_configs(modes_=LSTM, cell_clips_=CLIPS), dropout=st.sampled_from([0.0, 0.5]),
       seed=st.integers(0, 2**32 - 1))
def test_engine_matches_the_spec_cells_under_a_clip(cfg, dropout, seed):
    """Every dtype, layout, length, direction, projection and skip_input the strategies draw, under each clip:
    the engine's inference and training outputs and every gradient are the spec's within the policy."""
    bad = failures(engine_against_spec(cfg, make_case(cfg), dropout, seed))
    assert not bad, "\n".join(bad)


def test_the_clip_changes_the_function_where_it_engages_and_the_engine_follows():
    """A bug planted in the engine (the clip dropped) fails the comparison with the spec: the clip engages."""
    cfg = RNNConfig("lstm", num_layers=2, num_units=4, input_size=3, seq_len=6, batch=3, weight_scale=2.0,
                    cell_clip=(-0.25, 0.25), dtype="float32", seed=5)
    case = make_case(cfg)
    unclipped = cfg.with_(cell_clip=None)
    truth = ground_truth(cfg, case)
    assert np.abs(truth.output_c).max() == 0.25, "the clip engages here"
    assert not failures(engine_against_spec(cfg, case))
    model = unclipped.model()
    wrong = forward_case(model, unclipped, case, is_training=False)
    comparison = compare_peer(Recorded("unclipped", Outputs(wrong.output, wrong.output_h, wrong.output_c)), cfg, case)
    assert not comparison.passed


STREAMABLE = Capabilities(bidirectional=False, lengths=False, batch_major=False, cell_clip=True)


@settings(max_examples=examples(60))
@given(cfg=rnn_configs(STREAMABLE, modes_=LSTM, cell_clips_=CLIPS[:2]))
def test_a_bound_model_and_its_streams_keep_the_clip(cfg):
    model, params, bound, case = bound_case(cfg)
    want = forward_case(model, cfg, case, is_training=False, params=params)
    assert same_bits(bound.forward(case.x, case.h0, case.c0)[:3], want[:3])
    assert_agree_within_policy(cfg, case, run_stream(bound, case), Outputs(*ground_truth(cfg, case)))


def test_the_cudnn_backend_sets_the_clip_and_computes_with_it_on_the_fake(monkeypatch):
    fake_cuda.install(monkeypatch)
    cfg = RNNConfig("lstm", num_layers=2, num_units=3, input_size=2, direction="bidirectional", seq_len=4, batch=2,
                    weight_scale=2.0, cell_clip=(-0.3, 0.4), dtype="float64")
    case = make_case(cfg)
    gpu = cfg.model(models=cudnn_backend.MODELS)
    assert gpu._rnn.get_clip() == (1, -0.3, 0.4)
    got = forward_case(gpu, cfg, case, is_training=False)
    want = forward_case(cfg.model(), cfg, case, is_training=False)
    assert np.array_equal(np.asarray(got.output_c), want.output_c) and np.abs(want.output_c).max() == 0.4
    plain = cfg.with_(cell_clip=None).model(models=cudnn_backend.MODELS)
    assert plain._rnn.get_clip() == (0, 0.0, 0.0), "no clip set where the model has none"


@pytest.mark.parametrize(("clip", "error", "match"), [
    ((1.0, -1.0), ValueError, "lclip <= rclip"),
    ((math.nan, 1.0), ValueError, "neither NaN"),
    ((0, True), TypeError, "pair .* of real numbers"),
    ((0.5,), TypeError, "a pair"),
    ("(0, 1)", TypeError, "a pair"),
])
def test_a_bad_clip_is_refused_by_name_before_any_work(clip, error, match, monkeypatch):
    import reference

    lib = fake_cuda.install(monkeypatch)
    for make in (lambda: reference.CudnnLSTM(1, 2, 2, cell_clip=clip),
                 lambda: cudnn_backend.MODELS["lstm"](1, 2, 2, cell_clip=clip),
                 lambda: spec.Network("lstm", 1, 2, 2, cell_clip=clip),
                 lambda: RNNConfig("lstm", cell_clip=clip)):
        with pytest.raises(error, match=f"cell_clip.*{match}|{match}"):
            make()
    assert not lib.rnns, "the backend made a descriptor before refusing the clip"
    with pytest.raises(TypeError, match="cell_clip is an LSTM's"):
        reference.CudnnGRU(1, 2, 2, cell_clip=(0.0, 1.0))


def test_a_checkpoint_carries_the_clip_and_formats_that_cannot_refuse_it(tmp_path):
    from compat_tests.interop import convert

    cfg = RNNConfig("lstm", num_units=3, input_size=2, cell_clip=(-0.5, 0.5), dtype="float32")
    case = make_case(cfg)
    model = cfg.model()
    checkpoint.save(tmp_path / "ck.npz", model, case.weights, case.biases)
    back = checkpoint.load(tmp_path / "ck.npz")
    assert back.model.cell_clip == (-0.5, 0.5) and repr(back.model) == repr(model)
    unclipped = cfg.with_(cell_clip=None).model()
    checkpoint.save(tmp_path / "plain.npz", unclipped, case.weights, case.biases)
    assert "cell_clip" not in checkpoint.load(tmp_path / "plain.npz").config, "written as before"
    for fmt, name in (("torch", "m.safetensors"), ("keras", "m.npz"), ("onnx", "m.onnx"), ("tf", "m")):
        if fmt == "onnx":
            pytest.importorskip("onnx")
        with pytest.raises(ValueError, match=r"cell_clip \(-0.5, 0.5\) cannot be held by"):
            convert.write(fmt, tmp_path / name, model, case.weights, case.biases)


@pytest.mark.laddered
@settings(max_examples=examples(60))
@given(data=st.data())
def test_every_peer_with_the_clip_agrees_under_it(peer, data):
    """Each peer that declares ``cell_clip`` (the reference), forward and gradients, against the float64
    truth. (cuDNN's: the GPU ladder's ``cell_clip`` rung.)"""
    if not peer.capabilities.cell_clip:
        pytest.skip(f"{peer.name} has no cell clip: {dict(peer.capabilities.notes).get('cell_clip')}")
    cfg = data.draw(rnn_configs(peer.capabilities, modes_=LSTM, cell_clips_=CLIPS), label="config")
    assert cfg.cell_clip is not None
    assert_peer_agrees(peer, cfg)


def test_the_peers_without_the_clip_say_why_and_the_grids_run_it():
    from compat_tests.cli import peer_summary
    from compat_tests.report.grids import GRIDS, plan

    cfg = RNNConfig("lstm", cell_clip=(-1.0, 1.0), dtype="float32")
    for name, phrase in (("torch-cpu", "no cell clipping"), ("onnxruntime", "not the cell state"),
                         ("keras", "no cell clipping")):
        caps = PEERS[name].capabilities
        why = dict(caps.notes)["cell_clip"]
        assert not caps.cell_clip and phrase in why and caps.unsupported(cfg) == why, (name, why)
        assert peer_summary(PEERS[name])["lacks"]["cell_clip"] == why
    for name in ("reference", "cudnn", "cudnn-tf32"):
        assert PEERS[name].capabilities.cell_clip, name
    for name, dtypes in (("default", {"float16", "float32", "float64"}), ("window", {"float32"})):
        clipped = [c for study, c in GRIDS[name](0) if study == "compat" and c.cell_clip is not None]
        assert {c.dtype for c in clipped} == dtypes and {c.cell_clip for c in clipped} == {(-0.25, 0.25), (-1.0, 0.5)}
    engaged = [c for study, c in GRIDS["window"](0) if study == "compat" and c.cell_clip is not None]
    assert all(np.isin(ground_truth(c, make_case(c)).output_c, c.cell_clip).any() for c in engaged), \
        "every clipped config of the window grid clips"
    units, skipped = plan([("compat", cfg)], [PEERS[n] for n in ("reference", "torch-cpu")])
    assert [u.backend for u in units] == ["reference"] and [b for b, _, _ in skipped] == ["torch-cpu"]
