"""ONNX recurrent nodes inside control flow (``If`` branches, ``Loop``/``Scan`` bodies), as exporters write them
(one branch per sample rate, say): the whole model is refused, naming every recurrent node and where it lies,
and ``--node NAME`` (options key ``node``) reads one node as a one-layer model wherever it lies, its weights
folded from the initializers and constants of the graphs it sees; the node read so computes what onnxruntime
computes running the graph down that branch."""

from __future__ import annotations

import numpy as np
import pytest

from compat_tests import cli
from compat_tests.config import RNNConfig, make_case

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
