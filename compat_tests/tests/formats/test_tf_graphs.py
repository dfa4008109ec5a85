"""Frozen TensorFlow graphs (``reference.formats.tf_graph``), against what TensorFlow 2.21 built, froze and ran.

``compat_tests/data/tf_graphs/`` (``scripts/make_tf_graph_fixtures.py``; ``provenance.json`` names the version):
LSTM stacks under TensorFlow's cell names, frozen and then run by TensorFlow (``outputs.npz``), and graphs of
the ``CudnnRNN``/``CudnnRNNV2``/``CudnnRNNV3`` ops over an opaque ``params`` variable, frozen beside the same
weights saved by TensorFlow's ``Saver`` under its canonical names. TensorFlow has no CPU kernel for the cuDNN
ops, so those graphs are read, not run, by TensorFlow; their buffers hold the weights in cuDNN's layout as the
reference packs it (the layout's own tests are the GPU ladder's and ``test_layout.py``'s).
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from compat_tests import cli
from compat_tests.config import Case, Outputs, RNNConfig, make_case
from compat_tests.interop import convert
from compat_tests.judge.compare import Recorded, compare_peer
from reference import checkpoint
from reference.chain import load_chain
from reference.formats import tf as tf_format
from reference.formats import tf_bundle, tf_graph
from reference.formats.protobuf import field
from reference.model import make_model

DATA = Path(__file__).resolve().parents[2] / "data" / "tf_graphs"


PROVENANCE = json.loads((DATA / "provenance.json").read_text())


CUDNN = sorted(n for n in PROVENANCE["fixtures"] if n.startswith("cudnn_"))


def outputs(name: str) -> dict[str, np.ndarray]:
    with np.load(DATA / "outputs.npz", allow_pickle=False) as data:
        return {k.split(":", 1)[1]: data[k] for k in data.files if k.startswith(f"{name}:")}


def test_a_frozen_stack_of_cells_reads_and_runs_as_tensorflow_ran_it():
    """``MultiRNNCell`` of two ``CudnnCompatibleLSTMCell``s frozen: read off its ``Const`` nodes' names and
    shapes, it is the two-layer LSTM, and runs to what TensorFlow's ``LSTMBlockCell`` computed in the frozen
    graph, within the policy."""
    layers = [RNNConfig.from_dict(c) for c in PROVENANCE["fixtures"]["lstm_stack"]["layers"]]
    ck = checkpoint.load(DATA / "lstm_stack.pb")
    cfg = layers[0].with_(num_layers=2)
    assert repr(ck.model) == repr(cfg.model())
    ran = outputs("lstm_stack")
    tensorflow = Recorded("tensorflow LSTMBlockCell, frozen", outputs=Outputs(
        ran["layer1/output"], np.stack([ran["layer0/output_h"], ran["layer1/output_h"]]),
        np.stack([ran["layer0/output_c"], ran["layer1/output_c"]])))
    verdict = compare_peer(tensorflow, cfg, Case(ck.weights, ck.biases, ran["x"], None, None, None))
    assert verdict.passed, verdict.explain()


def test_a_frozen_uneven_stack_reads_as_a_chain_each_layer_as_tensorflow_ran_it():
    """Layers of 6 and 3 units are not one cuDNN stack: refused as one, read as a chain whose every layer,
    on the input TensorFlow gave it, runs to what TensorFlow computed, within the policy."""
    path = DATA / "lstm_uneven.pb"
    with pytest.raises(ValueError, match="differ in size"):
        checkpoint.load(path)
    chain = load_chain(path)
    layers = [RNNConfig.from_dict(c) for c in PROVENANCE["fixtures"]["lstm_uneven"]["layers"]]
    assert [repr(layer.model) for layer in chain.layers] == [repr(cfg.model()) for cfg in layers]
    ran = outputs("lstm_uneven")
    x = ran["x"]
    for k, (layer, cfg) in enumerate(zip(chain.layers, layers)):
        tensorflow = Recorded("tensorflow LSTMBlockCell, frozen", outputs=Outputs(
            ran[f"layer{k}/output"], ran[f"layer{k}/output_h"][None], ran[f"layer{k}/output_c"][None]))
        verdict = compare_peer(tensorflow, cfg, Case(layer.weights, layer.biases, x, None, None, None))
        assert verdict.passed, (k, verdict.explain())
        x = ran[f"layer{k}/output"]


@pytest.mark.parametrize("name", CUDNN)
def test_a_cudnn_ops_opaque_buffer_reads_as_the_weights_tensorflow_saved(name):
    """A ``CudnnRNN*`` op's frozen ``params``: the config from the op's attributes and its inputs' shapes (or,
    where ``input_h``'s shape is unknown, from the buffer's size: refused while the size fits several, listed,
    then read with the layers given), and the weights, written under TensorFlow's canonical names, bit for
    bit what TensorFlow's ``Saver`` saved of the same model."""
    fixture = PROVENANCE["fixtures"][name]
    cfg = RNNConfig.from_dict(fixture["config"])
    path = DATA / f"{name}.pb"
    options = {}
    if fixture["input_h_shape_unknown"]:
        with pytest.raises(ValueError, match=f"fit .* configurations .*num_layers={cfg.num_layers}, "
                                             f"num_units={cfg.num_units}, input_size={cfg.input_size}") as refused:
            checkpoint.load(path)
        assert str(path) in str(refused.value) and "--num-layers" in str(refused.value)
        options = {"num_layers": cfg.num_layers}
    ck = checkpoint.load(path, options)
    assert repr(ck.model) == repr(cfg.model())
    got = tf_format.to_tf(ck.model, ck.weights, ck.biases)
    saved = tf_bundle.read(DATA / f"{name}.ckpt")
    assert sorted(got) == sorted(saved)
    assert all(got[k].dtype == saved[k].dtype and got[k].tobytes() == saved[k].tobytes() for k in got)


def test_the_opaque_buffer_of_a_tensorflow_issue_fits_its_model_alone():
    """TensorFlow's issue tracker: a 3-layer bidirectional CudnnLSTM of 143 units (input 143) whose opaque
    kernel holds 1,315,600 values, where its user counted 1,312,168 (one bias vector a gate). Per direction:
    layer 0 holds 4*143*(143 + 143) + 8*143 = 164,736 values, layers 1 and 2 4*143*(286 + 143) + 8*143 =
    246,532 each: 2 * 657,800 = 1,315,600, and one bias a gate fewer is 1,315,600 - 6*4*143 = 1,312,168. With
    the input size alone known, the size fits that model and no other."""
    assert tf_graph.size_candidates(1_315_600, 4, 2, None, False, {"input_size": 143}) == [
        {"num_layers": 3, "num_units": 143, "input_size": 143}]
    assert tf_graph.size_candidates(1_312_168, 4, 2, None, False, {"input_size": 143}) == []


def test_a_buffer_size_that_fits_several_models_gives_each():
    """A unidirectional tanh RNN on inputs of 2: one layer of 5 units holds 5*2 + 5*5 + 2*5 = 45 values, two
    layers of 3 hold (3*2 + 3*3 + 2*3) + (3*3 + 3*3 + 2*3) = 21 + 24 = 45, and eleven layers of 1 hold
    (2 + 1 + 2) + 10 * (1 + 1 + 2) = 45."""
    assert tf_graph.size_candidates(45, 1, 1, None, False, {"input_size": 2}) == [
        {"num_layers": 1, "num_units": 5, "input_size": 2}, {"num_layers": 2, "num_units": 3, "input_size": 2},
        {"num_layers": 11, "num_units": 1, "input_size": 2}]
    assert tf_graph.size_candidates(45, 1, 1, None, False, {"input_size": 2, "num_layers": 2}) == [
        {"num_layers": 2, "num_units": 3, "input_size": 2}]


@pytest.mark.parametrize("mode, proj", [("relu", None), ("tanh", None), ("gru", None), ("lstm", None), ("lstm", 3)])
def test_the_buffer_count_is_the_models(mode, proj):
    """``params_size`` (the count the size search solves) is each model's own buffer size."""
    gates = {"relu": 1, "tanh": 1, "gru": 3, "lstm": 4}[mode]
    for layers in (1, 2, 3):
        for dirs in (1, 2):
            for skip in (False, True):
                for units, width in ((5, 5), (7, 7)) if skip else ((5, 3), (4, 9)):
                    model = make_model(mode, layers, units, width, "skip_input" if skip else "linear_input",
                                       "bidirectional" if dirs == 2 else "unidirectional", num_proj=proj)
                    assert tf_graph.params_size(gates, layers, units, width, dirs, proj, skip) == \
                        model.params_size(), (layers, dirs, skip, units, width)


def test_a_frozen_graph_runs_in_infer_and_converts_to_every_format(tmp_path):
    """``rnn-compat infer`` runs a frozen graph's CudnnRNN op, and ``convert`` takes it to every format that
    writes, each read back to the same weights."""
    pytest.importorskip("onnx")
    fixture = PROVENANCE["fixtures"]["cudnn_lstm_bidirectional_v3"]
    cfg = RNNConfig.from_dict(fixture["config"])
    path = DATA / "cudnn_lstm_bidirectional_v3.pb"
    case = make_case(cfg)
    np.save(tmp_path / "x.npy", case.x)
    assert cli.main(["infer", str(path), str(tmp_path / "x.npy"), "--out", str(tmp_path / "y.npz")]) == 0
    ck = checkpoint.load(path)
    want = ck.model.forward(case.x, None, ck.model.canonical_to_params(ck.weights, ck.biases), is_training=False)
    with np.load(tmp_path / "y.npz", allow_pickle=False) as y:
        assert y["output"].tobytes() == want.output.tobytes()
    for fmt, name in (("checkpoint", "m.safetensors"), ("torch", "m.pt"), ("keras", "m.npz"), ("onnx", "m.onnx"),
                      ("tf", "m.ckpt")):
        assert cli.main(["convert", "--from", "tf", "--to", fmt, str(path), str(tmp_path / name)]) == 0
        back = convert.read(fmt, tmp_path / name)
        assert repr(back.model) == repr(ck.model), fmt
        assert all(a.tobytes() == b.tobytes() for a, b in zip(back.weights, ck.weights)), fmt


def _attr(key: str, value: bytes) -> bytes:
    return field(5, field(1, key.encode()) + field(2, value))


def _tensor(dtype: int, shape, content: bytes = b"", floats: bytes = b"") -> bytes:
    dims = b"".join(field(2, field(1, d)) for d in shape)
    return field(8, field(1, dtype) + field(2, dims) + (field(4, content) if content else b"")
                 + (field(5, floats) if floats else b""))


def _node(name: str, op: str, inputs=(), **attrs: bytes) -> bytes:
    return field(1, field(1, name.encode()) + field(2, op.encode()) + b"".join(field(3, i.encode()) for i in inputs)
                 + b"".join(_attr(k, v) for k, v in attrs.items()))


def _const(name: str, values: np.ndarray) -> bytes:
    return _node(name, "Const", dtype=field(6, 1), value=_tensor(1, values.shape, values.astype("<f4").tobytes()))


def _placeholder(name: str, shape) -> bytes:
    return _node(name, "Placeholder", dtype=field(6, 1), shape=field(7, b"".join(field(2, field(1, d)) for d in shape)))


def _cudnn(name: str, params: str, mode: str = "rnn_tanh", op: str = "CudnnRNN") -> bytes:
    return _node(name, op, ("x", "h", "h", params), T=field(6, 1), rnn_mode=field(2, mode.encode()))


def _tanh_graph(*extra: bytes, params: str = "w", mode: str = "rnn_tanh") -> bytes:
    """A one-layer tanh CudnnRNN (input 2, 3 units: 3*2 + 3*3 + 2*3 = 21 values) and ``extra`` nodes."""
    return (_placeholder("x", (4, 1, 2)) + _placeholder("h", (1, 1, 3)) + _const("w", np.arange(21.0))
            + _cudnn("rnn", params, mode) + b"".join(extra))


def _write(tmp_path: Path, data: bytes, name: str = "g.pb") -> Path:
    (tmp_path / name).write_bytes(data)
    return tmp_path / name


def test_a_graph_made_here_reads_as_its_op_says(tmp_path):
    """The control of the hostile graphs below: the graph they vary reads as its op and shapes say."""
    ck = checkpoint.load(_write(tmp_path, _tanh_graph()))
    assert repr(ck.model) == repr(make_model("tanh", 1, 3, 2, dtype="float32"))
    assert ck.model.canonical_to_params(ck.weights, ck.biases).tolist() == list(range(21))


@pytest.mark.parametrize("graph, message", [
    (_tanh_graph(params="v") + _node("v", "VarHandleOp"), "reads its params from the VarHandleOp node 'v', not a "
                                                          "constant"),
    (_tanh_graph(params="i1") + _node("i1", "Identity", ("i2",)) + _node("i2", "Identity", ("i1",)),
     "more than 1000 Identity"),
    (_tanh_graph(params="missing"), "names node 'missing', which the graph does not hold"),
    (_tanh_graph(mode="rnn_sigmoid"), "rnn_mode is 'rnn_sigmoid', expecting one of"),
    (_tanh_graph(_cudnn("rnn2", "w")), r"holds 2 CudnnRNN ops: 'rnn' \(CudnnRNN, rnn_tanh\), 'rnn2' .*\(--node NAME"),
    (_tanh_graph(_const("x", np.zeros(3))), "names node 'x' twice"),
    (_placeholder("x", (4, 1, 2)) + _placeholder("h", (1, 1, 3)) + _const("w", np.arange(22.0)) + _cudnn("rnn", "w"),
     "holds 22 values, which fit no configuration"),
    (_placeholder("x", (4, 1, 2)) + _placeholder("h", (1, 1, 3))
     + _node("w", "Const", dtype=field(6, 1), value=_tensor(1, (21,), b"\0" * 80)) + _cudnn("rnn", "w"),
     "holds 80 bytes for its .21. float32 values, which take 84"),
    (_const("rnn/multi_rnn_cell/cell_0/lstm_cell/kernel", np.zeros((7, 12)))
     + _const("rnn/multi_rnn_cell/cell_0/lstm_cell/bias", np.zeros(12)),
     "holds no recurrent weights: no CudnnRNN op.*lstm_cell tensors .*forget_bias"),
    (_const("dense/kernel", np.zeros((3, 2))), r"holds no recurrent weights.*\['dense/kernel'\]"),
    (field(1, 1) + field(2, b"\x0a\x00"), "a SavedModel"),
    (b"node {\n  name: 'x'\n}\n", "protobuf|not a string|GraphDef|a message"),
    (b"", "holds no node"),
], ids=["unfrozen", "identity-cycle", "dangling-input", "unknown-mode", "two-ops", "duplicate-name",
        "size-fits-nothing", "lying-content", "tf1-lstm-cell", "no-rnn", "saved-model", "text-format", "empty"])
def test_a_hostile_graph_is_refused_naming_the_file_and_why(tmp_path, graph, message):
    path = _write(tmp_path, graph)
    with pytest.raises(ValueError, match=message) as refused:
        checkpoint.load(path)
    assert str(path) in str(refused.value)


def test_a_node_name_picks_one_of_several_ops_and_applies_to_graphs_alone(tmp_path):
    path = _write(tmp_path, _tanh_graph(_cudnn("rnn2", "w")))
    assert checkpoint.load(path, {"node": "rnn2"}).model.num_units == 3
    with pytest.raises(ValueError, match="holds no CudnnRNN op named 'nope'; its recurrent ops: 'rnn'"):
        checkpoint.load(path, {"node": "nope"})
    with pytest.raises(ValueError, match="a node name picks a CudnnRNN op of a frozen TensorFlow graph"):
        checkpoint.load(DATA / "cudnn_gru_v1_unknown_state.ckpt", {"node": "rnn"})
    with pytest.raises(ValueError, match="a name map applies to safetensors and .npz files"):
        checkpoint.load(path, {"names": {"a": "b"}})


def test_a_constant_that_repeats_its_last_value_is_read_as_tensorflow_fills_it_and_checked_first(tmp_path):
    """TensorFlow fills a constant whose typed values are fewer than its shape with the last one: read so; a
    buffer that claims 10^12 values on four bytes' word is refused before anything of its size is made."""
    filled = (_placeholder("x", (4, 1, 2)) + _placeholder("h", (1, 1, 3))
              + _node("w", "Const", dtype=field(6, 1), value=_tensor(1, (21,), floats=np.array([1, 2], "<f4").tobytes()))
              + _cudnn("rnn", "w"))
    ck = checkpoint.load(_write(tmp_path, filled))
    assert ck.model.canonical_to_params(ck.weights, ck.biases).tolist() == [1.0] + [2.0] * 20
    units = 500_000  # one layer of 500,000 units on inputs of 2: 500,000 * (2 + 500,000 + 2) values
    huge = (_placeholder("x", (4, 1, 2)) + _placeholder("h", (1, 1, units))
            + _node("w", "Const", dtype=field(6, 1), value=_tensor(1, (units * (units + 4),),
                                                                   floats=np.ones(1, "<f4").tobytes()))
            + _cudnn("rnn", "w"))
    path = _write(tmp_path, huge, "huge.pb")
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="hold 1 values in all, fewer than the"):
            checkpoint.load(path)
        assert tracemalloc.get_traced_memory()[1] < 50 << 20
    finally:
        tracemalloc.stop()


def test_every_truncation_of_a_tensorflow_graph_loads_the_same_weights_or_is_refused_naming_it(tmp_path):
    data = (DATA / "cudnn_tanh_v2_auto_select.pb").read_bytes()
    whole = checkpoint.load(DATA / "cudnn_tanh_v2_auto_select.pb")
    path = tmp_path / "cut.pb"
    for end in range(len(data)):
        path.write_bytes(data[:end])
        try:
            ck = checkpoint.load(path)
        except ValueError as exc:
            assert str(path) in str(exc), (end, exc)
            continue
        assert all(a.tobytes() == b.tobytes() for a, b in zip(ck.weights + ck.biases, whole.weights + whole.biases))
