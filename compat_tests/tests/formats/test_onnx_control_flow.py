"""ONNX recurrent nodes inside control flow (If branches, Loop bodies): the whole model is refused naming each
node and where it lies, and ``--node NAME`` reads one node as a one-layer model that computes what
onnxruntime computes down that branch."""

from __future__ import annotations

import numpy as np
import pytest

from compat_tests import cli
from compat_tests.config import RNNConfig, make_case
from compat_tests.tests.helpers import LSTM_INITS, B, H, I, X, _lstm_node, model

onnx = pytest.importorskip("onnx", reason="ONNX graphs need the onnx package (the test extra)")


onnxruntime = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from compat_tests.interop.onnx_model import import_model  # noqa: E402

CFG = RNNConfig("lstm", num_units=3, input_size=2, seq_len=4, batch=2, dtype="float32", initial_state=False)


@pytest.fixture(scope="module")
def branched():
    """``If(pick)``: its then_branch an LSTM ``fast`` on the main graph's initializers, its else_branch an LSTM
    ``slow`` on Constant nodes of its own; the cases of both (other seeds, other weights)."""
    pytest.importorskip("onnx", reason="ONNX graphs need the onnx package (the test extra)")
    from onnx import TensorProto, helper, numpy_helper

    from reference.formats import onnx as onnx_weights

    model = CFG.model()
    cases = {name: make_case(CFG.with_(seed=seed)) for name, seed in (("fast", 1), ("slow", 2))}
    wrb = {name: onnx_weights.to_onnx(model, c.weights, c.biases)[0] for name, c in cases.items()}
    H = CFG.num_units
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [CFG.seq_len, 1, CFG.batch, H])
    then_branch = helper.make_graph([helper.make_node("LSTM", ["X", "fast_W", "fast_R", "fast_B"], ["Y"], name="fast",
                                                      hidden_size=H)], "then", [], [y])
    constants = [helper.make_node("Constant", [], [f"slow_{k}"], value=numpy_helper.from_array(wrb["slow"][k]))
                 for k in ("W", "R", "B")]
    else_branch = helper.make_graph(constants + [helper.make_node("LSTM", ["X", "slow_W", "slow_R", "slow_B"], ["Y"],
                                                                  name="slow", hidden_size=H)], "else", [], [y])
    graph = helper.make_graph(
        [helper.make_node("If", ["pick"], ["Y"], name="pick", then_branch=then_branch, else_branch=else_branch)],
        "branched", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [CFG.seq_len, CFG.batch, 2]),
                     helper.make_tensor_value_info("pick", TensorProto.BOOL, [])], [y],
        initializer=[numpy_helper.from_array(wrb["fast"][k], f"fast_{k}") for k in ("W", "R", "B")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=10)
    return proto, cases


def test_the_whole_model_is_refused_naming_every_recurrent_node_and_where_it_lies(branched):
    from compat_tests.interop.onnx_model import import_model

    proto, _ = branched
    with pytest.raises(ValueError) as refused:
        import_model(proto)
    message = str(refused.value)
    for part in ("lies inside the else_branch subgraph of If node pick", "--node NAME",  # (attributes by name)
                 "LSTM fast (the then_branch of If node pick)", "LSTM slow (the else_branch of If node pick)"):
        assert part in message, message
    with pytest.raises(ValueError, match=r"no recurrent node is named 'nope'; the file's recurrent nodes: LSTM "
                                         r"slow \(the else_branch"):
        import_model(proto, {"node": "nope"})


@pytest.mark.parametrize("name", ["fast", "slow"])
def test_a_node_is_read_wherever_it_lies_with_its_own_weights(branched, name):
    from compat_tests.interop.onnx_model import import_model

    proto, cases = branched
    model, weights, biases = import_model(proto, {"node": name})
    assert (model.rnn_mode, model.num_layers, model.num_units, model.input_size) == ("lstm", 1, 3, 2)
    want = cases[name]
    assert all(np.array_equal(a, b) for a, b in zip(weights + biases, want.weights + want.biases, strict=True))


def test_the_node_read_computes_what_onnxruntime_computes_down_its_branch(branched, tmp_path, capsys):
    """``rnn-compat infer --node`` on the file against onnxruntime running the graph with ``pick`` false."""
    ort = pytest.importorskip("onnxruntime")
    proto, cases = branched
    (tmp_path / "m.onnx").write_bytes(proto.SerializeToString())
    x = cases["slow"].x
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["infer", str(tmp_path / "m.onnx"), str(tmp_path / "x.npy"), "--node", "slow", "--out",
                     str(tmp_path / "y.npz")]) == 0
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    [theirs] = session.run(None, {"X": x, "pick": np.array(False)})
    with np.load(tmp_path / "y.npz", allow_pickle=False) as y:
        np.testing.assert_allclose(y["output"], theirs[:, 0], rtol=0, atol=1e-6)
    assert cli.main(["convert", str(tmp_path / "m.onnx"), "--node", "slow", "--to", "checkpoint",
                     str(tmp_path / "ck.npz")]) == 0
    capsys.readouterr()
    assert cli.main(["convert", str(tmp_path / "ck.npz"), "--node", "slow", "--to", "torch",
                     str(tmp_path / "t.safetensors")]) == 2
    assert "a node name applies to ONNX files (onnx) and frozen TensorFlow graphs (tf, .pb), not to checkpoint" in capsys.readouterr().err


def test_a_recurrent_node_inside_an_if_is_refused_naming_it_and_the_if():
    branch = helper.make_graph([_lstm_node("inner_lstm"), helper.make_node("Identity", ["Y_h"], ["out"])], "then",
                               [], [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["X"], ["out2"])], "else", [],
                              [helper.make_tensor_value_info("out2", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("If", ["cond"], ["Y_h"], then_branch=branch, else_branch=other, name="maybe")]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["T", "B", I]),
              helper.make_tensor_value_info("cond", TensorProto.BOOL, [])]
    proto = model(nodes, ("Y_h",), LSTM_INITS, inputs)
    session = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    assert session.run(None, {"X": X, "cond": np.array(True)})[0].shape == (1, B, H)  # onnxruntime runs it
    with pytest.raises(ValueError, match=r"recurrent node inner_lstm \(LSTM\) lies inside the then_branch subgraph "
                                         r"of If node maybe"):
        import_model(proto)


def test_a_recurrent_node_in_a_loop_body_is_refused_naming_the_loop():
    body = helper.make_graph([_lstm_node("step"), helper.make_node("Identity", ["c"], ["c_out"])], "body",
                             [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                             [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Loop", ["n", ""], ["Y_hs"], body=body, name="steps")]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["T", "B", I]),
              helper.make_tensor_value_info("n", TensorProto.INT64, [])]
    with pytest.raises(ValueError, match="recurrent node step .* inside the body subgraph of Loop node steps"):
        import_model(model(nodes, ("Y_hs",), LSTM_INITS, inputs))
