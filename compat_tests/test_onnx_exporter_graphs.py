"""ONNX graphs as exporters make them: ``W``, ``R`` and ``B`` given by ``Constant`` nodes or small constant
subgraphs (Constant -> Transpose / Unsqueeze / Cast / Concat / Slice ...) rather than initializers are folded from
the file alone and read, computing what onnxruntime computes; recurrent nodes the importer cannot take (inside
an ``If`` or ``Loop`` subgraph, ``com.microsoft``'s ``DynamicQuantizeLSTM``, weights fed at run time or computed
by other ops) are refused naming what was found and why, not as a graph without recurrent nodes. Graphs are
built with ``onnx.helper`` and run by onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from compat_tests.interop.onnx_model import import_model  # noqa: E402

H, I, T, B = 3, 2, 4, 2
RNG = np.random.default_rng(44)
LSTM_W = {"W": RNG.normal(size=(1, 4 * H, I)), "R": RNG.normal(size=(1, 4 * H, H)), "B": RNG.normal(size=(1, 8 * H))}
GRU_W = {"W": RNG.normal(size=(2, 3 * H, I)), "R": RNG.normal(size=(2, 3 * H, H)), "B": RNG.normal(size=(2, 6 * H))}


def const(name: str, array) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(array), name))


def model(nodes, outputs=("Y", "Y_h"), inits=(), inputs=None, opset=17):
    inputs = inputs or [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["T", "B", I])]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                                                   for n in outputs],
                              initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def ort_run(proto, x):
    session = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"X": x})


def reference_run(proto, x):
    m, weights, biases = import_model(proto)
    return m, m.forward(x, None, m.canonical_to_params(weights, biases), is_training=False)


X = RNG.uniform(-1, 1, (T, B, I)).astype(np.float32)


def test_weights_from_constants_and_constant_subgraphs_read_as_onnxruntime_runs_them():
    f32 = {k: v.astype(np.float32) for k, v in LSTM_W.items()}
    nodes = [const("W", f32["W"]),
             const("R_t", f32["R"][0].T.copy()),  # stored transposed, without the direction axis
             helper.make_node("Transpose", ["R_t"], ["R_2d"], perm=[1, 0]),
             helper.make_node("Unsqueeze", ["R_2d", "axis0"], ["R"]),
             const("B_wide", LSTM_W["B"]),  # float64, cast to the graph's float32
             helper.make_node("Cast", ["B_wide"], ["B"], to=TensorProto.FLOAT),
             helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h", "Y_c"], hidden_size=H)]
    proto = model(nodes, ("Y", "Y_h", "Y_c"), {"axis0": np.array([0], np.int64)})
    y, y_h, y_c = ort_run(proto, X)
    m, got = reference_run(proto, X)
    assert m.rnn_mode == "lstm"
    np.testing.assert_allclose(got.output, y[:, 0], atol=1e-5)
    np.testing.assert_allclose(got.output_c, y_c, atol=1e-5)


def test_a_bidirectional_gru_whose_weights_are_concatenated_and_sliced_constants():
    f32 = {k: v.astype(np.float32) for k, v in GRU_W.items()}
    nodes = [const("W_fw", f32["W"][:1]), const("W_bw", f32["W"][1:]),
             helper.make_node("Concat", ["W_fw", "W_bw"], ["W"], axis=0),
             const("R_all", np.concatenate([f32["R"], np.zeros((1, 3 * H, H), np.float32)])),
             const("start", np.array([0], np.int64)), const("end", np.array([2], np.int64)),
             helper.make_node("Slice", ["R_all", "start", "end"], ["R"]),
             helper.make_node("Reshape", ["B_flat", "b_shape"], ["B"]),
             helper.make_node("GRU", ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=H, direction="bidirectional",
                              linear_before_reset=1)]
    proto = model(nodes, inits={"B_flat": f32["B"].reshape(-1), "b_shape": np.array([2, 6 * H], np.int64)})
    y, y_h = ort_run(proto, X)
    m, got = reference_run(proto, X)
    assert (m.rnn_mode, m.direction) == ("gru", "bidirectional")
    np.testing.assert_allclose(got.output, y.transpose(0, 2, 1, 3).reshape(T, B, 2 * H), atol=1e-5)
    np.testing.assert_allclose(got.output_h, y_h, atol=1e-5)


def _lstm_node(name="lstm"):
    return helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h", "Y_c"], hidden_size=H, name=name)


LSTM_INITS = {k: v.astype(np.float32) for k, v in LSTM_W.items()}


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


def test_a_dynamically_quantized_lstm_is_refused_by_name():
    """onnxruntime's ``com.microsoft.DynamicQuantizeLSTM`` (what ``quantize_dynamic`` makes of an LSTM)."""
    node = helper.make_node("DynamicQuantizeLSTM", ["X", "W", "R", "B"], ["Y"], domain="com.microsoft",
                            hidden_size=H, name="qlstm")
    proto = model([node], ("Y",), LSTM_INITS)
    proto.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(ValueError, match=r"holds node qlstm, a com.microsoft DynamicQuantizeLSTM, which is not read: "
                                         r"its weights are int8"):
        import_model(proto)


@pytest.mark.parametrize(("make_w", "match"), [
    (lambda: ([], [helper.make_tensor_value_info("W", TensorProto.FLOAT, [1, 4 * H, I])]),
     "weight 'W' is fed at run time"),
    (lambda: ([helper.make_node("MatMul", ["Wa", "Wb"], ["W"], name="mm"), const("Wa", np.ones((1, 4 * H, 1),
                                                                                             np.float32)),
               const("Wb", np.ones((1, 1, I), np.float32))], []),
     "weight 'W' is computed by MatMul node mm: only initializers and constants moved by"),
])
def test_weights_the_file_does_not_fix_are_refused_naming_why(make_w, match):
    extra_nodes, extra_inputs = make_w()
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["T", "B", I]), *extra_inputs]
    inits = {k: v for k, v in LSTM_INITS.items() if k != "W"}
    with pytest.raises(ValueError, match=match):
        import_model(model([*extra_nodes, _lstm_node()], ("Y", "Y_h", "Y_c"), inits, inputs))


def test_constant_ops_that_grow_the_data_are_refused_before_anything_is_made():
    """A Concat of an input with itself, node after node, doubles the data at each: 40 nodes in a few hundred
    bytes would ask for terabytes. Refused before the evaluator runs; a Concat of two different constants
    (the bidirectional GRU above) is not."""
    nodes = [const("seed", np.zeros((1, 1, 1), np.float32))]
    for k in range(40):
        nodes.append(helper.make_node("Concat", [f"g{k - 1}" if k else "seed"] * 2, [f"g{k}"], axis=2))
    nodes.append(helper.make_node("LSTM", ["X", "g39", "R", "B"], ["Y", "Y_h", "Y_c"], hidden_size=H))
    proto = model(nodes, ("Y", "Y_h", "Y_c"), {"R": LSTM_INITS["R"], "B": LSTM_INITS["B"]})
    with pytest.raises(ValueError, match=r"would make up to \d+ values from the 1 the file holds"):
        import_model(proto)


def test_activation_alpha_of_sigmoid_and_tanh_is_ignored_as_onnxruntime_ignores_it():
    """ONNX's ``activation_alpha``/``activation_beta`` scale only the activations that take them (HardSigmoid,
    LeakyRelu, ...; those are refused); onnxruntime computes a Sigmoid/Tanh node alike with or without them, and
    so does the reader."""
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h", "Y_c"], hidden_size=H,
                            activations=["Sigmoid", "Tanh", "Tanh"], activation_alpha=[2.0, 3.0, 4.0],
                            activation_beta=[0.5, 0.5, 0.5])
    proto = model([node], ("Y", "Y_h", "Y_c"), LSTM_INITS, opset=14)
    y, y_h, y_c = ort_run(proto, X)
    _, got = reference_run(proto, X)
    np.testing.assert_allclose(got.output, y[:, 0], atol=1e-5)
    np.testing.assert_allclose(got.output_c, y_c, atol=1e-5)
