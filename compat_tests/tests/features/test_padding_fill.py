"""cuDNN's ``paddingFill`` (``padding_fill``): the value a forward pass writes to the output past each sequence's
length (zeros by default).

- the plain cells of ``reference.spec``, the engine, a model bound to its parameters and the cuDNN backend (on
  the fake) write exactly the fill there and change nothing else: every other output element, the final
  states and every gradient are bit for bit those of the zero-padded run;
- a bad fill is refused by name before any work; a config carries its fill through JSON (NaN and the
  infinities by name) and refuses one without lengths;
- a comparison checks a peer's fill element by element and judges the rest as before, so a peer that ignores
  the fill fails, naming the element;
- the peers that have it agree with the float64 truth under it (cuDNN's: the GPU ladder's ``padding_fill``
  rung); those without it say why, and the strategies never draw a fill for them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cudnn_backend
from compat_tests import cli
from compat_tests.config import Outputs, RNNConfig, make_case
from compat_tests.gpu import fake_cuda
from compat_tests.judge.compare import Recorded, assert_peer_agrees, compare_peer, unfilled
from compat_tests.peers import PEERS
from compat_tests.run import forward_case, ground_truth
from compat_tests.strategies import examples, rnn_configs
from compat_tests.tests.helpers import TINY, same_bits
from reference import checkpoint, spec
from reference.chain import load_chain

FILLS = (-1.0, 1000.0, math.nan, -math.inf, -0.0)  # each fits float16; -0.0 differs from the default in its bits


RAGGED = frozenset({"ragged"})


def steps(y: np.ndarray, time_major: bool) -> np.ndarray:
    return y if time_major else np.swapaxes(y, 0, 1)


def assert_filled(got: np.ndarray, zero_padded: np.ndarray, cfg: RNNConfig, fill: float,
                  lengths=None) -> None:
    """``got`` holds ``fill`` (its bits, in ``got``'s dtype) past each length (``cfg``'s, or ``lengths``) and is
    ``zero_padded`` bit for bit before it; in ``cfg``'s layout."""
    want = np.array(steps(zero_padded, cfg.time_major))
    for b, n in enumerate(cfg.lengths if lengths is None else lengths):
        want[n:, b] = np.asarray(fill).astype(got.dtype)
    want = steps(want, cfg.time_major)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes(), f"padding_fill {fill!r} on {cfg.short()}:\n{got}\nwant\n{want}"


@given(cfg=rnn_configs(require=RAGGED, **TINY), fill=st.sampled_from(FILLS))
def test_the_fill_goes_past_each_length_and_nowhere_else(cfg, fill):
    """The spec, the engine (inference and training, then backward), and the engine bound to its parameters."""
    case = make_case(cfg)
    model = cfg.model()
    params = model.canonical_to_params(case.weights, case.biases)
    run = lambda f, **kw: model.forward(case.x, case.h0, params, case.c0, sequence_lengths=case.lengths,  # noqa: E731
                                        time_major=cfg.time_major, padding_fill=f, **kw)
    for training in (False, True):
        plain, filled = run(0.0, is_training=training), run(fill, is_training=training)
        assert_filled(filled.output, plain.output, cfg, fill)
        assert same_bits(filled[1:3], plain[1:3])
    grads = [model.backward(r, case.dy, case.dh, case.dc) for r in (plain, filled)]
    assert same_bits(*grads), "the fill changed a gradient"
    bound = model.bind(params)
    got = bound.forward(case.x, case.h0, case.c0, case.lengths, cfg.time_major, padding_fill=fill)
    assert_filled(got.output, run(0.0, is_training=False).output, cfg, fill)
    called = bound(case.x, case.h0, case.c0, sequence_lengths=case.lengths, time_major=cfg.time_major,
                   padding_fill=fill)
    assert same_bits(called[:1], got[:1])

    truth = ground_truth(cfg, case)  # zero-padded (cfg's own fill is 0.0)
    net = spec.Network.of(cfg.model("float64"))
    f64 = case.astype(np.float64)
    filled = spec.forward(net, f64.weights, f64.biases, f64.x, f64.h0, f64.c0, lengths=f64.lengths,
                          time_major=cfg.time_major, padding_fill=fill)
    assert_filled(filled.output, truth.output, cfg, fill)
    assert same_bits(filled[1:], truth[1:])


def test_tensorflows_call_and_the_fake_cuda_backend_take_the_fill(monkeypatch):
    """``model(...)`` (TensorFlow's ``__call__``) passes the fill on; the cuDNN backend puts it in the output
    descriptor's ``paddingFill`` (in the data's type: here float16) and nowhere else, and returns it there."""
    cfg = RNNConfig("lstm", num_layers=2, num_units=3, input_size=2, direction="bidirectional", seq_len=4, batch=3,
                    lengths=(4, 1, 2), time_major=False, dtype="float16", padding_fill=-2.5)
    case = make_case(cfg)
    model = cfg.model()
    params = model.canonical_to_params(case.weights, case.biases)
    y, _, _ = model(case.x, case.h0, case.c0, params, sequence_lengths=case.lengths, time_major=False,
                    padding_fill=-2.5)
    assert_filled(y, model(case.x, case.h0, case.c0, params, sequence_lengths=case.lengths, time_major=False)[0],
                  cfg, -2.5)

    lib = fake_cuda.install(monkeypatch)
    gpu = cfg.model(models=cudnn_backend.MODELS)
    result = forward_case(gpu, cfg, case, is_training=True)
    assert_filled(np.asarray(result.output), y, cfg, -2.5)
    fills = [d.fill for d in lib.data.values()]
    assert sorted(fills, key=str) == [-2.5, None], fills  # y's descriptor has the fill, x's none


def test_infer_writes_the_fill_for_a_model_and_for_a_chain_and_refuses_one_that_does_not_fit(tmp_path, capsys):
    """``rnn-compat infer --padding-fill``: a checkpoint's model, and a stack of uneven layers run as a chain
    (the last layer's output filled; the layers before it pad with zeros, which no layer reads)."""
    cfg = RNNConfig("gru", num_layers=2, num_units=4, input_size=3, direction="bidirectional", seq_len=5, batch=3,
                    lengths=(5, 2, 1), dtype="float32")
    case = make_case(cfg)
    model = cfg.model()
    checkpoint.save(tmp_path / "m.npz", model, case.weights, case.biases)
    np.save(tmp_path / "x.npy", case.x)
    np.save(tmp_path / "lengths.npy", np.array(cfg.lengths))
    infer = ["infer", str(tmp_path / "m.npz"), str(tmp_path / "x.npy"), "--lengths", str(tmp_path / "lengths.npy")]
    assert cli.main(infer + ["--padding-fill", "nan", "--out", str(tmp_path / "y.npz")]) == 0
    with np.load(tmp_path / "y.npz", allow_pickle=False) as y:
        plain = model.forward(case.x, None, model.canonical_to_params(case.weights, case.biases),
                              is_training=False, sequence_lengths=case.lengths)  # from zero states, as infer
        assert_filled(y["output"], plain.output, cfg, math.nan)
    assert cli.main(infer + ["--padding-fill", "1e39", "--out", str(tmp_path / "big.npz")]) == 2
    assert "--padding-fill 1e+39: padding_fill must fit the model's dtype float32" in capsys.readouterr().err
    assert not (tmp_path / "big.npz").exists()

    uneven = Path(__file__).resolve().parents[2] / "data" / "tf_uneven"
    prefix = uneven / json.loads((uneven / "provenance.json").read_text())["prefix"]
    with np.load(uneven / "expected.npz", allow_pickle=False) as data:
        x = data["x"]
    lengths = [1] + [x.shape[0]] * (x.shape[1] - 1)
    np.save(tmp_path / "ux.npy", x)
    np.save(tmp_path / "ulengths.npy", np.array(lengths))
    assert cli.main(["infer", str(prefix), str(tmp_path / "ux.npy"), "--lengths", str(tmp_path / "ulengths.npy"),
                     "--padding-fill", "-7", "--out", str(tmp_path / "uy.npz")]) == 0
    chain = load_chain(prefix)
    with np.load(tmp_path / "uy.npz", allow_pickle=False) as y:
        assert_filled(y["output"], chain.forward(x, sequence_lengths=lengths).output, cfg.with_(lengths=None), -7.0,
                      lengths)
    with pytest.raises(TypeError, match="padding_fill must be a real number"):
        chain.forward(x, sequence_lengths=lengths, padding_fill="-7")


@pytest.mark.parametrize(("fill", "error", "match"), [
    ("0", TypeError, "padding_fill must be a real number"),
    (True, TypeError, "padding_fill must be a real number"),
    (None, TypeError, "padding_fill must be a real number"),
    (np.array([1.0]), TypeError, "padding_fill must be a real number"),
    (1e6, ValueError, "padding_fill must fit the model's dtype float16"),
    (10**400, ValueError, "padding_fill must fit the model's dtype float16"),
])
def test_a_bad_fill_is_refused_by_name_before_any_work(fill, error, match, monkeypatch):
    """By the engine, a bound model and the cuDNN backend (before any call into cuDNN), and by the spec in its
    float64 (which 1e6 fits)."""
    cfg = RNNConfig("gru", num_units=2, input_size=2, seq_len=3, batch=2, lengths=(3, 1), dtype="float16")
    case = make_case(cfg)
    model = cfg.model()
    params = model.canonical_to_params(case.weights, case.biases)
    lib = fake_cuda.install(monkeypatch)
    gpu = cfg.model(models=cudnn_backend.MODELS)
    gpu_params = gpu.canonical_to_params(case.weights, case.biases)
    calls = len(lib.compute)
    for forward in (lambda: model.forward(case.x, case.h0, params, sequence_lengths=case.lengths, padding_fill=fill),
                    lambda: model.bind(params).forward(case.x, case.h0, sequence_lengths=case.lengths,
                                                       padding_fill=fill),
                    lambda: gpu.forward(case.x, case.h0, gpu_params, sequence_lengths=case.lengths,
                                        padding_fill=fill)):
        with pytest.raises(error, match=match):
            forward()
    assert len(lib.compute) == calls, "the backend called cuDNN before refusing the fill"
    if fill != 1e6:
        f64 = case.astype(np.float64)
        with pytest.raises(error, match=match.replace("float16", "float64")):
            spec.forward(spec.Network.of(cfg.model("float64")), f64.weights, f64.biases, f64.x, lengths=f64.lengths,
                         padding_fill=fill)


def test_a_config_carries_its_fill_through_json_and_needs_lengths_for_one():
    base = dict(mode="gru", seq_len=3, batch=2, lengths=(3, 1))
    for fill, written in ((-1.0, -1.0), (math.inf, "inf"), (-math.inf, "-inf"), ("nan", "nan"), (-0.0, -0.0)):
        cfg = RNNConfig(**base, padding_fill=fill)
        assert cfg.to_dict()["padding_fill"] == written or (written == "nan" and cfg.to_dict()["padding_fill"] == "nan")
        again = RNNConfig.from_json(cfg.to_json())
        assert str(again.padding_fill) == str(cfg.padding_fill) and math.copysign(1, again.padding_fill) == \
            math.copysign(1, cfg.padding_fill)
        assert "fill=" in cfg.short()
    assert "padding_fill" not in RNNConfig(**base).to_json(), "the default is written as before"
    with pytest.raises(ValueError, match="padding_fill is written past each sequence's length: give lengths"):
        RNNConfig("gru", padding_fill=-1.0)
    with pytest.raises(ValueError, match=r"padding_fill must be a number or one of \('nan', 'inf', '-inf'\)"):
        RNNConfig(**base, padding_fill="NaN ")
    with pytest.raises(ValueError, match="must fit the model's dtype float16"):
        RNNConfig(**base, padding_fill=7e4, dtype="float16")


def test_a_peer_that_ignores_the_fill_fails_naming_the_element():
    cfg = RNNConfig("tanh", num_units=2, input_size=2, seq_len=3, batch=2, lengths=(3, 1), dtype="float32",
                    padding_fill=math.nan)
    case = make_case(cfg)
    zeros = Outputs(*ground_truth(cfg.with_(padding_fill=0.0), case))
    zeros = Outputs(*(None if a is None else a.astype(np.float32) for a in zeros))
    with pytest.raises(AssertionError, match=r"ignorant wrote 0.0 at step 1 of sequence 1 \(length 1\), past its "
                                             r"length, where padding_fill nan belongs \(4 such elements\)"):
        compare_peer(Recorded("ignorant", outputs=zeros), cfg, case)
    filled = zeros._replace(output=np.where(np.arange(3)[:, None, None] >= np.array([3, 1])[None, :, None],
                                            np.float32(np.nan), zeros.output))
    assert compare_peer(Recorded("filling", outputs=filled), cfg, case).passed
    assert unfilled("filling", cfg, filled).output.tobytes() == zeros.output.tobytes()


@pytest.mark.laddered
@settings(max_examples=examples(60))
@given(data=st.data())
def test_every_peer_with_the_fill_agrees_under_it(peer, data):
    """Each peer that declares ``padding_fill`` (the reference; torch-cpu through ``pad_packed_sequence``'s
    ``padding_value``), forward and gradients, against the float64 truth; the fill itself checked element by
    element. (cuDNN's: the GPU ladder's ``padding_fill`` rung.) Fewer examples than a property of its own: the
    fill's arithmetic is none, the peer's plumbing of it is what is under test, and every other feature is
    drawn here as elsewhere."""
    if not peer.capabilities.padding_fill:
        pytest.skip(f"{peer.name} pads with zeros only: {dict(peer.capabilities.notes).get('padding_fill')}")
    cfg = data.draw(rnn_configs(peer.capabilities, require=RAGGED, padding_fills_=FILLS), label="config")
    assert "padding_fill" in cfg.to_dict() or cfg.padding_fill == 0.0
    assert_peer_agrees(peer, cfg)


def test_the_peers_without_the_fill_say_why():
    from compat_tests.cli import peer_summary

    for name, phrase in (("onnxruntime", "sequence_lens entry as zeros"), ("keras", "zero_output_for_mask")):
        caps = PEERS[name].capabilities
        why = dict(caps.notes)["padding_fill"]
        assert not caps.padding_fill and phrase in why, (name, why)
        cfg = RNNConfig("gru", seq_len=3, batch=2, lengths=(3, 1), dtype="float32", padding_fill=-1.0)
        assert caps.unsupported(cfg) == why and caps.unsupported(cfg.with_(padding_fill=0.0)) is None
        assert peer_summary(PEERS[name])["lacks"]["padding_fill"] == why
    for name in ("reference", "torch-cpu", "cudnn", "cudnn-tf32"):
        assert PEERS[name].capabilities.padding_fill, name


@settings(max_examples=30)
@given(data=st.data(), name=st.sampled_from(["onnxruntime", "keras"]))
def test_the_strategies_never_draw_a_fill_for_a_peer_without_it(data, name):
    cfg = data.draw(rnn_configs(PEERS[name].capabilities, require=RAGGED, padding_fills_=FILLS), label="config")
    assert cfg.lengths is not None and "padding_fill" not in cfg.to_dict()


def test_the_default_and_window_grids_run_every_mode_with_a_fill_beside_zeros():
    """The default grid in every dtype, the window's (a GPU run's) in float32, each mode under -1 and NaN; the
    peers without the fill are left out of those units with their reason."""
    from compat_tests.config import MODE_NAMES
    from compat_tests.report.grids import GRIDS, plan

    for name, dtypes in (("default", {"float16", "float32", "float64"}), ("window", {"float32"})):
        held = {(cfg.mode, cfg.dtype, str(cfg.padding_fill)) for study, cfg in GRIDS[name](0) if study == "compat"}
        assert held >= {(m, d, f) for m in MODE_NAMES for d in dtypes for f in ("-1.0", "nan")}, name
    filled = [("compat", RNNConfig("gru", seq_len=3, batch=2, lengths=(3, 1), dtype="float32", padding_fill=-1.0))]
    units, skipped = plan(filled, [PEERS[n] for n in ("reference", "torch-cpu", "onnxruntime", "keras")])
    assert [u.backend for u in units] == ["reference", "torch-cpu"]
    assert {(b, why) for b, why, _ in skipped} == {(n, dict(PEERS[n].capabilities.notes)["padding_fill"])
                                                   for n in ("onnxruntime", "keras")}
