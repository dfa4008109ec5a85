"""Reading ONNX graphs into a model: import_model/export_model round trips, foreign graphs of each cuDNN cell,
and the refusals of what a graph's nodes cannot be (clip, coupled gates, peepholes, other activations, reverse
direction, a shape or config that disagrees, unreadable or external initializers, fuzzed nodes)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compat_tests.config import Outputs, RNNConfig, make_case
from compat_tests.judge.compare import assert_agree_within_policy
from compat_tests.judge.metrics import error_stats
from compat_tests.run import run_reference
from compat_tests.tests.helpers import (
    LSTM_INITS,
    H,
    X,
    _foreign_onnx,
    _no_initial_state,
    _onnxruntime,
    model,
    ort_run,
    reference_run,
)


onnx = pytest.importorskip("onnx", reason="ONNX graphs need the onnx package (the test extra)")


onnxruntime = pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402

ONNX_EDITS = ["drop an attribute", "change an int attribute", "change a string attribute", "empty a list attribute",
              "reshape an initializer", "rename a node input", "change the op type", "garble the config"]


def _edit_onnx(proto, edit: str, data) -> None:
    import onnx
    from onnx import numpy_helper

    node = data.draw(st.sampled_from([n for n in proto.graph.node if n.op_type in ("GRU", "LSTM", "RNN")] or [None]),
                     label="node")
    attributes = list(node.attribute) if node is not None else []
    if edit == "drop an attribute" and attributes:
        node.attribute.remove(data.draw(st.sampled_from(attributes), label="attribute"))
    elif edit.startswith("change") and edit.endswith("attribute") or edit == "empty a list attribute":
        kind = {"change an int attribute": onnx.AttributeProto.INT,
                "change a string attribute": onnx.AttributeProto.STRING,
                "empty a list attribute": onnx.AttributeProto.STRINGS}[edit]
        chosen = [a for a in attributes if a.type == kind]
        if chosen:
            a = data.draw(st.sampled_from(chosen), label="attribute")
            if kind == onnx.AttributeProto.INT:
                a.i = data.draw(st.sampled_from([0, -1, 1, 7, 10**9]), label="value")
            elif kind == onnx.AttributeProto.STRING:
                a.s = data.draw(st.sampled_from([b"", b"reverse", b"forward", b"sideways"]), label="value")
            else:
                del a.strings[:]
    elif edit == "reshape an initializer" and proto.graph.initializer:
        t = data.draw(st.sampled_from(list(proto.graph.initializer)), label="initializer")
        a = numpy_helper.to_array(t)
        shape = data.draw(st.sampled_from(["flat", "row", "empty"]), label="reshape")
        a = a.reshape(-1) if shape == "flat" else a.reshape(1, -1) if shape == "row" else a[..., :0]
        t.CopyFrom(numpy_helper.from_array(a, t.name))
    elif edit == "rename a node input" and node is not None and len(node.input) > 1:
        node.input[data.draw(st.integers(0, len(node.input) - 1), label="input")] = data.draw(
            st.sampled_from(["", "nope", "X"]), label="name")
    elif edit == "change the op type" and node is not None:
        node.op_type = data.draw(st.sampled_from(["GRU", "LSTM", "RNN", "Conv"]), label="op type")
    elif edit == "garble the config" and proto.metadata_props:
        proto.metadata_props[0].value = data.draw(st.sampled_from(["{}", "[]", '{"rnn_mode": 3}', "x"]), label="config")


@pytest.mark.parametrize("mode", ["lstm", "gru", "relu", "classic_gru"])
@given(data=st.data())
def test_an_onnx_graph_with_wrong_nodes_loads_or_is_refused(mode, data):
    """Attributes dropped or changed, initializers reshaped, inputs renamed, ops swapped, with or without our
    config in its metadata (without it the config is read off the nodes): a model that runs, or a
    ValueError/TypeError, never a KeyError, an IndexError or a request for exabytes."""
    from compat_tests.interop import onnx_model

    cfg = RNNConfig(mode, num_layers=2, num_units=3, input_size=2, direction="bidirectional", dtype="float32")
    case = make_case(cfg)
    proto = onnx_model.export_model(cfg.model(), case.weights, case.biases)
    if data.draw(st.booleans(), label="drop our config"):
        del proto.metadata_props[:]
    for edit in data.draw(st.lists(st.sampled_from(ONNX_EDITS), min_size=1, max_size=3), label="edits"):
        _edit_onnx(proto, edit, data)
    try:
        model, weights, biases = onnx_model.import_model(proto)
    except (ValueError, TypeError):
        return
    model(np.zeros((2, 1, model.input_size), model.dtype), None, *([None] if model.rnn_mode == "lstm" else []),
          model.canonical_to_params(weights, biases))


def test_an_exported_graph_whose_node_was_changed_no_longer_matches_its_config():
    """Our config in the metadata names the cell; a node edited to compute another (the GRU's
    linear_before_reset dropped: the textbook candidate) is refused rather than read by the config."""
    from compat_tests.interop import onnx_model

    cfg = RNNConfig("gru", num_layers=2, num_units=3, input_size=2, direction="bidirectional", dtype="float32")
    case = make_case(cfg)
    proto = onnx_model.export_model(cfg.model(), case.weights, case.biases)
    node = [n for n in proto.graph.node if n.op_type == "GRU"][1]
    node.attribute.remove(next(a for a in node.attribute if a.name == "linear_before_reset"))
    with pytest.raises(ValueError, match="computes a bidirectional 'classic_gru' layer, but the model is a "
                                         "bidirectional 'gru' RNN"):
        onnx_model.import_model(proto)


@pytest.mark.parametrize("damage", ["unknown data type", "data in another file"])
def test_an_onnx_initializer_that_cannot_be_read_from_the_file_is_refused(damage, tmp_path):
    import onnx

    from compat_tests.interop import onnx_model

    cfg = RNNConfig("gru", num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    proto = onnx_model.export_model(cfg.model(), case.weights, case.biases)
    w = next(t for t in proto.graph.initializer if t.name.startswith("W"))
    if damage == "unknown data type":
        w.data_type, match = 999, f"initializer '{w.name}' cannot be read: KeyError: 999"
    else:  # a model may point at any file; nothing is opened on its say-so
        w.data_location, match = onnx.TensorProto.EXTERNAL, f"initializer '{w.name}' keeps its data in another file"
        location = w.external_data.add()
        location.key, location.value = "location", "/etc/passwd"
        w.ClearField("raw_data")
    path = tmp_path / "m.onnx"
    path.write_bytes(proto.SerializeToString())
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}: {match}"):
        onnx_model.import_model(path)


def test_an_onnx_graph_whose_layers_share_initializers_loads():
    """Tied weights (or an optimizer merging equal initializers): two bidirectional layers over three
    initializers, fewer than their four pseudo-layers. The layer-count guard must count nodes, not tensors."""
    from onnx import TensorProto, helper, numpy_helper

    from compat_tests.interop import onnx_model

    cfg = RNNConfig("gru", num_layers=2, num_units=3, input_size=6, direction="bidirectional", dtype="float32")
    model = cfg.model()
    case = make_case(cfg)
    n = len(case.weights) // 2  # layer 1 takes layer 0's tensors (its input width 2H = 6 = input_size)
    weights, biases = case.weights[:n] * 2, case.biases[:n] * 2
    exported = {t.name: t for t in onnx_model.export_model(model, weights, biases).graph.initializer}
    shared = [numpy_helper.from_array(numpy_helper.to_array(exported[f"{k}0"]), k) for k in "WRB"]
    attrs = dict(hidden_size=3, direction="bidirectional", linear_before_reset=1)
    nodes = [helper.make_node("GRU", ["X", "W", "R", "B"], ["Y0"], **attrs),
             helper.make_node("Transpose", ["Y0"], ["Y0t"], perm=[0, 2, 1, 3]),  # [T, D, B, H] -> [T, B, D*H]
             helper.make_node("Reshape", ["Y0t", "y_shape"], ["X1"]),
             helper.make_node("GRU", ["X1", "W", "R", "B"], ["Y1"], **attrs)]
    shared.append(numpy_helper.from_array(np.array([0, 0, -1], np.int64), "y_shape"))
    graph = helper.make_graph(nodes, "tied", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [5, 1, 6])],
                              [helper.make_tensor_value_info("Y1", TensorProto.FLOAT, None)], initializer=shared)
    loaded, got_weights, got_biases = onnx_model.import_model(helper.make_model(graph))
    assert (loaded.num_layers, loaded.num_dirs) == (2, 2)
    assert all(np.array_equal(a, b) for a, b in zip(got_weights + got_biases, weights + biases, strict=True))


@pytest.mark.parametrize("bias_mode", ["double", "none"], ids=["with-B", "without-B"])
@pytest.mark.parametrize("mode", ["relu", "tanh", "lstm", "gru", "classic_gru"])
def test_a_foreign_onnx_graph_of_a_cudnn_cell_loads_as_that_cell(mode, bias_mode):
    """The control for the refusals below: a plain foreign graph loads bit for bit and onnxruntime runs it
    to the reference's outputs; without B, as a bias-free model (``bias_mode="none"``, cuDNN's
    ``CUDNN_RNN_NO_BIAS``)."""
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    cfg, case = _no_initial_state(RNNConfig(mode, num_layers=2, num_units=4, input_size=3, seq_len=5, batch=2,
                                            bias_mode=bias_mode))
    proto = _foreign_onnx(cfg, case)
    model, weights, biases = onnx_model.import_model(proto)
    assert repr(model) == repr(cfg.model())
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, case.weights + case.biases, strict=True))
    expected = run_reference(cfg, case)
    got = Outputs(_onnxruntime(proto, case.x), expected.output_h, expected.output_c)  # the graph outputs y only
    assert_agree_within_policy(cfg, case, got, expected, peer="onnxruntime")


FOREIGN_NODES = {  # mode, layers, node attributes, peephole input, what the refusal says
    "clip": ("lstm", 1, {0: {"clip": 0.25}}, False, "node rnn0: clip=0.25 has no cuDNN equivalent"),
    "input_forget": ("lstm", 1, {0: {"input_forget": 1}}, False, "node rnn0: input_forget=1 has no cuDNN equivalent"),
    "peepholes": ("lstm", 1, {}, True, r"node rnn0: peephole weights \(input P, 'P0'\) have no cuDNN equivalent"),
    "gru-activations": ("gru", 1, {0: {"activations": ["Sigmoid", "Relu"]}}, False,
                        r"node rnn0: activations \['Sigmoid', 'Relu'\] are not a cuDNN cell's \(Sigmoid, Tanh\)"),
    "lstm-activations": ("lstm", 1, {0: {"activations": ["HardSigmoid", "Tanh", "Tanh"]}}, False,
                         r"activations \['HardSigmoid', 'Tanh', 'Tanh'\] are not a cuDNN cell's"),
    "rnn-activation": ("tanh", 1, {0: {"activations": ["Sigmoid"]}}, False,
                       r"node rnn0: activations \['Sigmoid'\] are not a cuDNN cell's \(Tanh or Relu\)"),
    "second-layer-textbook": ("gru", 2, {1: {"linear_before_reset": 0}}, False,
                              "node rnn1 computes a unidirectional 'classic_gru' layer, but the model is a "
                              "unidirectional 'gru' RNN"),
    "second-layer-relu": ("tanh", 2, {1: {"activations": ["Relu"]}}, False,
                          "node rnn1 computes a unidirectional 'relu' layer, but the model is a unidirectional 'tanh'"),
}


@pytest.mark.parametrize("case_name", FOREIGN_NODES)
def test_a_foreign_onnx_node_that_computes_another_function_is_refused(case_name):
    """Clipping, coupled gates, peepholes, other activations, or a layer unlike the first: onnxruntime computes
    another function than the plain graph's (checked here), so reading only W, R and B would give a model
    that silently disagrees with the file. Each is refused naming the node and what it carries."""
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    mode, layers, attrs, peephole, match = FOREIGN_NODES[case_name]
    cfg, case = _no_initial_state(RNNConfig(mode, num_layers=layers, num_units=4, input_size=3, seq_len=6, batch=2,
                                            weight_scale=3.0))
    plain, variant = _foreign_onnx(cfg, case), _foreign_onnx(cfg, case, attrs, peephole)
    error = error_stats(_onnxruntime(variant, case.x), _onnxruntime(plain, case.x).astype(np.float64))
    assert error.max_abs > 1e-3, "the variant computes what the plain graph does: not a test of the importer"
    with pytest.raises(ValueError, match=match):
        onnx_model.import_model(variant)


@pytest.mark.parametrize(("attrs", "match"), [
    ({"direction": "reverse"}, "node rnn0: direction 'reverse' has no cuDNN equivalent"),
    ({"hidden_size": 7}, re.escape("node rnn0: hidden_size 7 disagrees with R's shape [1, 12, 4]")),
])
def test_a_foreign_onnx_node_that_disagrees_with_cudnn_in_shape_or_direction_is_refused(attrs, match):
    from compat_tests.interop import onnx_model

    cfg, case = _no_initial_state(RNNConfig("gru", num_units=4, input_size=3))
    with pytest.raises(ValueError, match=match):
        onnx_model.import_model(_foreign_onnx(cfg, case, {0: attrs}))


def test_a_foreign_onnx_rnn_node_without_activations_is_tanh():
    """ONNX's RNN defaults to Tanh."""
    from compat_tests.interop import onnx_model

    cfg, case = _no_initial_state(RNNConfig("tanh", num_units=4, input_size=3))
    proto = _foreign_onnx(cfg, case)
    node = next(n for n in proto.graph.node if n.op_type == "RNN")
    node.attribute.remove(next(a for a in node.attribute if a.name == "activations"))
    assert onnx_model.import_model(proto)[0].rnn_mode == "tanh"


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
