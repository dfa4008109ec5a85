"""Packed sequences: cuDNN's ``CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED``, PyTorch's ``PackedSequence``
(``reference.PackedSequence``, ``reference.pack``, ``reference.unpack``).

- packing is PyTorch's (``pack_padded_sequence``'s data and batch sizes, its ``pad_packed_sequence``'s padding),
  the outside oracle of the order;
- the plain cells of ``reference.spec`` take and give packed sequences, their gradients held against central
  finite differences of the packed data; the engine (and a model bound to its parameters, and a chain of
  models) against those cells under every mode, bias mode and the clip; the cuDNN backend on the fake hands
  cuDNN the packed buffer with a packed data descriptor;
- a packed call refuses what has no meaning for it (``time_major=False``, ``sequence_lengths``, a fill, an
  unpacked ``output_backprop``, other batch sizes), and bad packed input, by name before any work;
- the peers that have packing (the reference, torch-cpu: a ``PackedSequence`` of ``reference.pack``'s arrays)
  agree with the float64 truth under it (cuDNN's: the GPU ladder's ``packed`` rung); those without say why,
  and the grids run every mode packed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cudnn_backend
import reference
from compat_tests.config import MODE_NAMES, Outputs, RNNConfig, make_case
from compat_tests.gpu import fake_cuda
from compat_tests.judge.compare import assert_agree_within_policy, assert_peer_agrees
from compat_tests.peers import PEERS
from compat_tests.run import forward_case, ground_truth, ground_truth_backward, packed_like, padded
from compat_tests.strategies import examples, lengths_for, rnn_configs
from compat_tests.tests.helpers import TINY, engine_against_spec, failures, finite_difference_failures, same_bits
from reference import PackedSequence, pack, spec, unpack
from reference.chain import Chain
from reference.checkpoint import Checkpoint
from reference.layout import BIAS_MODES

PACKED = (True,)


CLIPS = (None, (-0.25, 0.25))


@st.composite
def sorted_batches(draw, max_time: int = 6, max_batch: int = 5):
    """``(x [T, B, 3], lengths [B])``, lengths non-increasing (or ``None``: all ``T``)."""
    T, B = draw(st.integers(1, max_time)), draw(st.integers(1, max_batch))
    lengths = draw(lengths_for(T, B))
    lengths = None if lengths is None else tuple(sorted(lengths, reverse=True))
    seed = draw(st.integers(0, 2**32 - 1))
    return np.random.default_rng(seed).standard_normal((T, B, 3)), lengths


@given(batch=sorted_batches(), time_major=st.booleans())
def test_packing_is_pytorchs(batch, time_major):
    """``pack`` gives what ``torch.nn.utils.rnn.pack_padded_sequence`` gives (data, batch sizes), either layout;
    ``unpack`` gives back the padded batch with zeros (or the fill) past each length, as
    ``pad_packed_sequence`` does, and the lengths."""
    torch = pytest.importorskip("torch")
    x, lengths = batch
    T, B = x.shape[:2]
    full = np.full(B, T) if lengths is None else np.array(lengths)
    given_x = x if time_major else np.ascontiguousarray(x.transpose(1, 0, 2))
    packed = pack(given_x, lengths, time_major=time_major)
    theirs = torch.nn.utils.rnn.pack_padded_sequence(torch.from_numpy(given_x), torch.from_numpy(full),
                                                     batch_first=not time_major)
    assert np.array_equal(packed.data, theirs.data.numpy()) and packed.data.dtype == x.dtype
    assert packed.batch_sizes.tolist() == theirs.batch_sizes.tolist()
    assert packed.lengths.tolist() == full.tolist()
    for fill in (0.0, -1.0):
        back, got_lengths = unpack(packed, padding_fill=fill, time_major=time_major)
        want, _ = torch.nn.utils.rnn.pad_packed_sequence(theirs, batch_first=not time_major, padding_value=fill)
        assert got_lengths.tolist() == full.tolist()
        assert back.shape[:2] == ((int(full.max()), B) if time_major else (B, int(full.max())))
        assert np.array_equal(back, want.numpy())


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda x: pack(x, [2, 3]), ValueError, "lengths must be non-increasing to pack .* sort the batch first"),
    (lambda x: pack(x, [4, 1]), ValueError, r"sequence_lengths must each be in 1..T = 1..3"),
    (lambda x: pack(x[0]), ValueError, r"x must be 3-D with shape \[T, B, width\]"),
    (lambda x: pack(list(x)), TypeError, "x must be a numpy.ndarray"),
    (lambda x: unpack((x, np.array([2, 1]))), TypeError, "packed must be a reference.PackedSequence"),
    (lambda x: unpack(PackedSequence(x[0], np.array([1, 2]))), ValueError,
     r"packed.batch_sizes must be non-increasing with every entry >= 1"),
    (lambda x: unpack(PackedSequence(x[0], np.array([2, 0]))), ValueError, "every entry >= 1"),
    (lambda x: unpack(PackedSequence(x[0], np.array([2.0, 1.0]))), TypeError, "batch_sizes must hold integers"),
    (lambda x: unpack(PackedSequence(x[0], np.array([[2]]))), ValueError, r"1-D with shape \[T\]"),
    (lambda x: unpack(PackedSequence(x[0], np.array([2, 2]))), ValueError,
     r"packed.data must be a float numpy.ndarray \[sum\(batch_sizes\), width\] = \[4, width\], got \(2, 3\)"),
])
def test_bad_packing_is_refused_by_name(call, error, match):
    with pytest.raises(error, match=match):
        call(np.zeros((3, 2, 3)))


@settings(max_examples=examples(100))
@given(cfg=rnn_configs(dtypes_=("float64",), packed_=PACKED, bias_modes_=tuple(BIAS_MODES), cell_clips_=CLIPS,
                       **TINY),
       seed=st.integers(0, 2**32 - 1))
def test_spec_gradients_match_central_finite_differences_of_the_packed_data(cfg, seed):
    bad = finite_difference_failures(cfg, make_case(cfg), seed=seed)
    assert not bad, "\n".join(bad)


@settings(max_examples=examples(100))
@given(cfg=rnn_configs(packed_=PACKED, bias_modes_=tuple(BIAS_MODES), cell_clips_=CLIPS),
       dropout=st.sampled_from([0.0, 0.5]), seed=st.integers(0, 2**32 - 1))
def test_engine_matches_the_spec_cells_on_packed_sequences(cfg, dropout, seed):
    """Every mode, dtype, bias mode, length, direction, projection, skip_input and clip the strategies draw,
    packed: the engine's inference and training outputs and every gradient are the spec's within the policy.
    (Fewer examples than ``test_spec.py``'s, which runs the same cells unpacked: what is new here is the packing
    at the edges, in the engine and in the spec.)"""
    assert cfg.packed and cfg.time_major
    bad = failures(engine_against_spec(cfg, make_case(cfg), dropout, seed))
    assert not bad, "\n".join(bad)


@given(cfg=rnn_configs(packed_=PACKED, **TINY))
def test_packed_and_padded_are_one_function(cfg):
    """The spec on the packed batch is the spec on the padded one with its lengths, bit for bit, forward and
    backward: packing changes where the steps lie, nothing of what they compute. The padded output's steps past
    each length are zeros; no packed element stands for them."""
    case = make_case(cfg).astype(np.float64)
    net = spec.Network.of(cfg.model("float64"))
    x = pack(case.x, case.lengths)
    out = spec.forward(net, case.weights, case.biases, x, case.h0, case.c0)
    want = spec.forward(net, case.weights, case.biases, case.x, case.h0, case.c0, lengths=case.lengths)
    assert isinstance(out.output, PackedSequence) and np.array_equal(out.output.batch_sizes, x.batch_sizes)
    assert same_bits((unpack(out.output, total_length=cfg.seq_len)[0], *out[1:]), want)
    assert out.output.data.shape == (int(x.batch_sizes.sum()), cfg.num_dirs * cfg.state_width)
    grads = spec.backward(net, case.weights, case.biases, x, case.h0, case.c0, pack(case.dy, case.lengths), case.dh,
                          case.dc)
    flat = spec.backward(net, case.weights, case.biases, case.x, case.h0, case.c0, case.dy, case.dh, case.dc,
                         lengths=case.lengths)
    assert same_bits((unpack(grads.input, total_length=cfg.seq_len)[0], grads.input_h, grads.input_c), flat[:3])
    assert same_bits(grads.weights + grads.biases, flat.weights + flat.biases)


@settings(max_examples=examples(60))
@given(cfg=rnn_configs(packed_=PACKED, bias_modes_=tuple(BIAS_MODES)))
def test_a_bound_model_and_a_chain_take_packed_sequences(cfg):
    """``BoundRNN.forward`` and ``__call__`` on a packed batch are the model's ``forward`` bit for bit; a chain
    of one-layer models runs it packed through every layer, as the stacked model does within the policy."""
    model = cfg.model()
    case = make_case(cfg).astype(model.dtype)
    params = model.canonical_to_params(case.weights, case.biases)
    x = pack(case.x, case.lengths)
    want = model.forward(x, case.h0, params, input_c=case.c0, is_training=False)
    got = model.bind(params).forward(x, case.h0, case.c0)
    assert np.array_equal(got.output.batch_sizes, x.batch_sizes)
    assert same_bits((got.output.data, *got[1:3]), (want.output.data, *want[1:3]))
    called = model.bind(params)(x, case.h0, case.c0)
    assert same_bits((called[0].data, *called[1:]), (want.output.data, *want[1:1 + len(called) - 1]))
    if cfg.num_layers == 1 or cfg.num_proj is not None or cfg.input_mode == "skip_input":
        return  # a chain's layers are the stack's, one one-layer model each
    chain = Chain([Checkpoint(m, w, b, {}) for m, w, b in layers_of(cfg, case)])
    run = chain.forward(x, [case.h0[k * cfg.num_dirs:(k + 1) * cfg.num_dirs] for k in range(cfg.num_layers)]
                        if case.h0 is not None else None,
                        None if case.c0 is None else
                        [case.c0[k * cfg.num_dirs:(k + 1) * cfg.num_dirs] for k in range(cfg.num_layers)])
    assert isinstance(run.output, PackedSequence) and np.array_equal(run.output.batch_sizes, x.batch_sizes)
    chained = Outputs(unpack(run.output, total_length=cfg.seq_len)[0], np.concatenate(run.output_h),
                      None if run.output_c is None else np.concatenate(run.output_c))
    assert_agree_within_policy(cfg, case, chained, ground_truth(cfg, case))


def layers_of(cfg: RNNConfig, case) -> list[tuple]:
    """``(model, weights, biases)`` of each layer of ``cfg``'s stack as a one-layer model: the canonical lists
    hold every pseudo-layer's matrices in order, then their biases, so each layer's are a run of each list."""
    out, weights, biases = [], list(case.weights), list(case.biases)
    for layer in range(cfg.num_layers):
        width = cfg.input_size if layer == 0 else cfg.num_dirs * cfg.state_width
        model = cfg.with_(num_layers=1, input_size=width).model()
        w_count, b_count = (len(shapes) for shapes in model.canonical_shapes())
        out.append((model, weights[:w_count], biases[:b_count]))
        weights, biases = weights[w_count:], biases[b_count:]
    return out


def test_the_cudnn_backend_hands_cudnn_the_packed_buffer_on_the_fake(monkeypatch):
    """The data descriptors say ``SEQ_MAJOR_PACKED`` with the sorted lengths and no ``paddingFill``, the
    buffers cuDNN reads and writes are the packed data (``sum(lengths)`` rows), and the results are the
    reference's, bit for bit, forward and backward."""
    from cudnn_backend import _lib

    lib = fake_cuda.install(monkeypatch)
    cfg = RNNConfig("lstm", num_layers=2, num_units=3, input_size=2, direction="bidirectional", seq_len=4, batch=3,
                    lengths=(4, 2, 1), packed=True, dtype="float64")
    case = make_case(cfg)
    gpu, ref = cfg.model(models=cudnn_backend.MODELS), cfg.model()
    fwd = forward_case(gpu, cfg, case, is_training=True)
    want = forward_case(ref, cfg, case, is_training=True)
    call = lib.compute[-1]
    x_desc, y_desc = lib.data[call.values["x_desc"]], lib.data[call.values["y_desc"]]
    assert (x_desc.layout, y_desc.layout) == (_lib.SEQ_MAJOR_PACKED, _lib.SEQ_MAJOR_PACKED)
    assert x_desc.lengths == y_desc.lengths == [4, 2, 1] and y_desc.fill is None
    assert call.snapshots["x"].size == 7 * 2 and call.snapshots["y"].size == 7 * 6
    assert np.array_equal(call.snapshots["x"].reshape(7, 2), pack(case.x, case.lengths).data)
    assert isinstance(fwd.output, PackedSequence) and np.array_equal(fwd.output.batch_sizes, [3, 2, 1, 1])
    assert same_bits((np.asarray(fwd.output.data), *map(np.asarray, fwd[1:3])), (want.output.data, *want[1:3]))
    dy = packed_like(cfg, case, case.dy)
    grads, ref_grads = gpu.backward(fwd, dy, case.dh, case.dc), ref.backward(want, dy, case.dh, case.dc)
    assert isinstance(grads.input, PackedSequence)
    assert same_bits((np.asarray(grads.input.data), *map(np.asarray, grads[1:3])),
                     (ref_grads.input.data, *ref_grads[1:3]))


def _packed_model_calls(monkeypatch):
    """``(name, forward(x, **options), backward(result, dy))`` of the engine, a bound model and the cuDNN backend
    on the fake, for a GRU of 2 units over 2 inputs; and the fake cuDNN."""
    lib = fake_cuda.install(monkeypatch)
    out = []
    for name, model in (("reference", reference.CudnnGRU(1, 2, 2, dtype=np.float64)),
                        ("cudnn", cudnn_backend.MODELS["gru"](1, 2, 2, dtype=np.float64))):
        params = model.canonical_to_params(*(([np.zeros(s) for s in shapes]) for shapes in model.canonical_shapes()))
        out.append((name, lambda x, model=model, params=params, **o: model.forward(x, None, params, **o),
                    lambda r, dy, model=model: model.backward(r, dy)))
    bound = reference.CudnnGRU(1, 2, 2, dtype=np.float64)
    bound = bound.bind(np.zeros(bound.params_size()))
    out.append(("bound", lambda x, **o: bound.forward(x, **{k: v for k, v in o.items() if k != "is_training"}),
                None))
    return lib, out


@pytest.mark.parametrize(("options", "match"), [
    (dict(time_major=False), "time_major must be True with a packed input_data"),
    (dict(sequence_lengths=[2, 1]), "sequence_lengths must be None with a packed input_data"),
    (dict(padding_fill=-1.0), "padding_fill must be 0.0 with a packed input_data"),
    (dict(padding_fill=-0.0), "padding_fill must be 0.0 with a packed input_data"),
])
def test_a_packed_call_refuses_what_has_no_meaning_for_it(options, match, monkeypatch):
    lib, calls = _packed_model_calls(monkeypatch)
    x = pack(np.zeros((2, 2, 2)), [2, 1])
    for name, forward, _ in calls:
        with pytest.raises(ValueError, match=match):
            forward(x, is_training=False, **options)
    assert not lib.compute, "cuDNN ran before the refusal"


def test_the_spec_refuses_what_a_packed_x_has_no_meaning_for():
    net = spec.Network("gru", 1, 2, 2)
    entries = net.canonical_entries()
    weights = [np.zeros(shape) for kind, _, _, shape in entries if kind == "weight"]
    biases = [np.zeros(shape) for kind, _, _, shape in entries if kind == "bias"]
    x = pack(np.zeros((2, 2, 2)), [2, 1])
    for options, match in ((dict(time_major=False), "a packed x takes neither time_major=False nor lengths"),
                           (dict(lengths=[2, 1]), "a packed x takes neither time_major=False nor lengths"),
                           (dict(padding_fill=-1.0), "padding_fill must be 0.0 with a packed x")):
        with pytest.raises(ValueError, match=match):
            spec.forward(net, weights, biases, x, **options)
    result = spec.forward(net, weights, biases, x)
    with pytest.raises(ValueError, match="d_output.batch_sizes must be x's"):
        spec.backward(net, weights, biases, x, None, None, PackedSequence(np.zeros((3, 2)), np.array([1, 1, 1])))
    with pytest.raises(TypeError, match="d_output must be a reference.PackedSequence"):
        spec.backward(net, weights, biases, x, None, None, np.zeros((2, 2, 2)))
    assert isinstance(result.output, PackedSequence)


@pytest.mark.parametrize(("x", "error", "match"), [
    (PackedSequence(np.zeros((3, 2)), np.array([1, 2])), ValueError, "input_data.batch_sizes must be non-increasing"),
    (PackedSequence(np.zeros((3, 2)), [2, 1]), TypeError, "input_data.batch_sizes must be a numpy.ndarray"),
    (PackedSequence(np.zeros((4, 2)), np.array([2, 1])), ValueError,
     r"input_data.data must have shape \[sum\(batch_sizes\), input_size\] = \(3, 2\), got \(4, 2\)"),
    (PackedSequence(np.zeros((3, 2), np.float32), np.array([2, 1])), TypeError,
     "input_data.data must have dtype float64"),
    (PackedSequence(np.zeros((3, 2, 1)), np.array([2, 1])), ValueError, "input_data.data must be 2-D"),
])
def test_bad_packed_input_is_refused_by_name_before_any_work(x, error, match, monkeypatch):
    lib, calls = _packed_model_calls(monkeypatch)
    for name, forward, _ in calls:
        with pytest.raises(error, match=match):
            forward(x, is_training=False)
    assert not lib.compute, "cuDNN ran before the refusal"


def test_backward_after_a_packed_call_takes_its_packed_gradient_only(monkeypatch):
    _, calls = _packed_model_calls(monkeypatch)
    x = pack(np.ones((2, 2, 2)), [2, 1])
    for name, forward, backward in calls:
        if backward is None:
            continue
        result = forward(x, is_training=True)
        with pytest.raises(TypeError, match="output_backprop must be a reference.PackedSequence"):
            backward(result, np.zeros((2, 2, 2)))
        with pytest.raises(ValueError, match=r"output_backprop.batch_sizes must be the forward call's \[2, 1\]"):
            backward(result, PackedSequence(np.zeros((3, 2)), np.array([1, 1, 1])))
        with pytest.raises(ValueError, match=r"output_backprop.data must have shape .* = \(3, 2\)"):
            backward(result, PackedSequence(np.zeros((3, 3)), np.array([2, 1])))
        grads = backward(result, PackedSequence(np.ones((3, 2)), np.array([2, 1])))
        assert isinstance(grads.input, PackedSequence) and grads.input.data.shape == (3, 2), name


def test_a_config_carries_packed_through_json_and_refuses_what_packing_cannot_hold():
    cfg = RNNConfig("gru", seq_len=3, batch=2, lengths=(3, 1), packed=True)
    assert cfg.to_dict()["packed"] is True and RNNConfig.from_json(cfg.to_json()) == cfg and "packed" in cfg.short()
    assert "packed" not in cfg.with_(packed=False).to_json(), "the default is written as before"
    for changes, match in ((dict(lengths=(1, 3)), "packed needs lengths sorted by decreasing length"),
                           (dict(time_major=False), "packed needs time_major and no padding_fill"),
                           (dict(padding_fill=-1.0), "packed needs time_major and no padding_fill")):
        with pytest.raises(ValueError, match=match):
            cfg.with_(**changes)
    with pytest.raises(TypeError, match="packed must be a bool"):
        cfg.with_(packed=1)


@pytest.mark.laddered
@settings(max_examples=examples(60))
@given(data=st.data())
def test_every_peer_with_packing_agrees_under_it(peer, data):
    """Each peer that declares ``packed`` (the reference; torch-cpu, handed a ``PackedSequence`` of
    ``reference.pack``'s data and batch sizes), forward and gradients, against the float64 truth (which runs the
    spec on the packed batch). (cuDNN's: the GPU ladder's ``packed`` rung.)"""
    if not peer.capabilities.packed:
        pytest.skip(f"{peer.name} has no packed layout: {dict(peer.capabilities.notes).get('packed')}")
    cfg = data.draw(rnn_configs(peer.capabilities, packed_=PACKED, bias_modes_=peer.capabilities.bias_modes),
                    label="config")
    assert cfg.packed
    assert_peer_agrees(peer, cfg)


@settings(max_examples=30)
@given(data=st.data(), name=st.sampled_from(["onnxruntime", "keras"]))
def test_the_strategies_never_draw_packing_for_a_peer_without_it(data, name):
    assert not data.draw(rnn_configs(PEERS[name].capabilities, packed_=(False, True)), label="config").packed


def test_the_peers_without_packing_say_why_and_the_grids_run_it():
    from compat_tests.cli import peer_summary
    from compat_tests.report.grids import GRIDS, plan

    cfg = RNNConfig("gru", seq_len=3, batch=2, lengths=(3, 1), dtype="float32", packed=True)
    for name, phrase in (("onnxruntime", "no packed layout"), ("keras", "no packed layout")):
        caps = PEERS[name].capabilities
        why = dict(caps.notes)["packed"]
        assert not caps.packed and phrase in why and caps.unsupported(cfg) == why, (name, why)
        assert peer_summary(PEERS[name])["lacks"]["packed sequences"] == why
    for name in ("reference", "torch-cpu", "cudnn", "cudnn-tf32"):
        assert PEERS[name].capabilities.packed, name
    for name, dtypes in (("default", {"float16", "float32", "float64"}), ("window", {"float32"})):
        held = {(c.mode, c.dtype) for study, c in GRIDS[name](0) if study == "compat" and c.packed}
        assert held == {(m, d) for m in MODE_NAMES for d in dtypes}, name
    units, skipped = plan([("compat", cfg)], [PEERS[n] for n in ("reference", "torch-cpu", "onnxruntime")])
    assert [u.backend for u in units] == ["reference", "torch-cpu"] and [b for b, _, _ in skipped] == ["onnxruntime"]
    truth = ground_truth(cfg, make_case(cfg))
    assert truth.output.shape == (3, 2, 4) and not truth.output[1:, 1].any(), "zeros past each length, padded"
    assert ground_truth_backward(cfg, make_case(cfg)).d_input.shape == (3, 2, 3)
    assert padded(cfg, pack(np.ones((3, 2, 1)), [3, 1])).shape == (3, 2, 1)
