"""Foreign ONNX graphs: layout ops between layers, Reshape shape arithmetic, PyTorch exporter sweeps, and
which nodes are refused (computing another function) or loaded.

Every test needs the onnx package and skips without it; the module itself imports without it (its tables
hold plain data and tensor builders, called only inside the tests), so the rest of the suite still collects
on a machine without onnx (the GPU image: ``test_optional_packages.py``)."""

from __future__ import annotations

import io
import itertools
import re
from functools import partial

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compat_tests.judge.compare import assert_agree_within_policy
from compat_tests.config import Outputs, RNNConfig, make_case
from compat_tests.judge.metrics import error_stats
from compat_tests.run import run_reference
from reference.formats import onnx as onnx_format
from reference.formats import torch as torch_format


@pytest.fixture(autouse=True)
def _needs_onnx():
    """Every test here reads or writes ONNX graphs: skipped where the onnx package is not installed."""
    pytest.importorskip("onnx", reason="ONNX graphs need the onnx package (the test extra)")


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


def _foreign_onnx(cfg: RNNConfig, case, node_attrs: dict | None = None, peephole: bool = False):
    """``cfg``'s unidirectional stack as a foreign exporter writes it: a node per layer (named rnn0, rnn1,
    ...) chained through Squeeze, no config in the metadata (no B under ``bias_mode="none"``);
    ``node_attrs[layer]`` adds attributes."""
    from onnx import TensorProto, helper, numpy_helper

    H, inits, nodes, x = cfg.num_units, [], [], "X"
    for layer, wrb in enumerate(onnx_format.to_onnx(cfg.model(), case.weights, case.biases)):
        names = [x]
        for k in wrb:  # W, R[, B]
            inits.append(numpy_helper.from_array(wrb[k], f"{k}{layer}"))
            names.append(f"{k}{layer}")
        if peephole:
            inits.append(numpy_helper.from_array(np.full((1, 3 * H), 0.5, np.float32), f"P{layer}"))
            names += [""] * (7 - len(names)) + [f"P{layer}"]
        attrs = {**onnx_format.ATTRIBUTES[cfg.mode], "hidden_size": H, **(node_attrs or {}).get(layer, {})}
        nodes.append(helper.make_node(onnx_format.OPS[cfg.mode], names, [f"Y{layer}"], name=f"rnn{layer}", **attrs))
        nodes.append(helper.make_node("Squeeze", [f"Y{layer}", "axis1"], [f"S{layer}"]))
        x = f"S{layer}"
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "axis1"))
    graph = helper.make_graph(nodes, "foreign", [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(case.x.shape))],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=10)


def _onnxruntime(proto, x: np.ndarray, optimized: bool = True, extra: dict | None = None) -> np.ndarray:
    """The first output of ``proto`` on ``x`` fed to its first input (``X`` in the graphs made here) and the
    ``extra`` inputs; not ``optimized``: every node as the ONNX spec defines it (onnxruntime's graph optimizer
    removes a Dropout whatever its training_mode)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if not optimized:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x, **(extra or {})})[0]


def _dynamo_export(torch, module, example, **kwargs):
    """``torch.onnx.export(module, (example,), dynamo=True, **kwargs)``'s ModelProto, the exporter quiet (it
    warns and logs what it skips, torchvision's ops) and from a fresh state (``torch._dynamo.reset()``: what it
    writes for a module otherwise depends on what it exported before in the process: a batch-first T fixed in
    the graph's input after one module, only in a Reshape inside it when alone); skips the test without
    onnxscript, which it needs."""
    import logging
    import warnings

    pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            torch._dynamo.reset()
            return torch.onnx.export(module, (example,), dynamo=True, verbose=False, **kwargs).model_proto
        finally:
            logging.disable(logging.NOTSET)


def _no_initial_state(cfg: RNNConfig):
    """``cfg`` (float32, zero initial states: a foreign graph here has none) and its case."""
    cfg = cfg.with_(initial_state=False, dtype="float32")
    return cfg, make_case(cfg)


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


def _rewire_second_layer(proto, x: str, before: list | None = None, layer0_outputs: tuple[str, ...] = ("Y0",)):
    """``proto`` (``_foreign_onnx``'s 2-layer graph) with node rnn1 reading ``x``, ``before`` inserted ahead
    of rnn1, and rnn0 writing ``layer0_outputs``."""
    rnn0, rnn1 = (next(n for n in proto.graph.node if n.name == name) for name in ("rnn0", "rnn1"))
    del rnn0.output[:]
    rnn0.output.extend(layer0_outputs)
    rnn1.input[0] = x
    at = list(proto.graph.node).index(rnn1)
    for k, node in enumerate(before or []):
        proto.graph.node.insert(at + k, node)
    return proto


STACK_BREAKS = {  # rnn1's input X, nodes inserted before it, rnn0's outputs, what the refusal says
    "side-by-side": ("X", [], ("Y0",), "node rnn1 reads X from 'X', which no node computes, not from the output Y "
                                       "of the recurrent node before it, rnn0"),
    "computation-between": ("A0", [("Relu", ["S0"], ["A0"], "act")], ("Y0",),
                            "node rnn1 reads X from Relu node act's output 'A0', not from the output Y"),
    "layout-then-computation": ("I0", [("Relu", ["S0"], ["A0"], "act"), ("Identity", ["A0"], ["I0"], "copy")],
                                ("Y0",), "node rnn1 reads X from Relu node act's output 'A0' through Identity, not"),
    "final-state": ("Yh0", [], ("Y0", "Yh0"), "node rnn1 reads X from GRU node rnn0's output 'Yh0', not from the "
                                              "output Y of the recurrent node before it, rnn0"),
}


@pytest.mark.parametrize("case_name", STACK_BREAKS)
def test_recurrent_nodes_that_are_not_one_stack_are_refused(case_name):
    """Two recurrent nodes read as layers 0 and 1 only when the second reads the first's Y through layout
    ops alone. Each variant here runs in onnxruntime to something other than the stack (checked), so
    reading it as one would give a model that silently disagrees with the file."""
    pytest.importorskip("onnxruntime")
    from onnx import helper

    from compat_tests.interop import onnx_model

    x, before, outputs, match = STACK_BREAKS[case_name]
    cfg, case = _no_initial_state(RNNConfig("gru", num_layers=2, num_units=4, input_size=4, seq_len=5, batch=2,
                                            weight_scale=3.0))
    plain = _onnxruntime(_foreign_onnx(cfg, case), case.x)
    variant = _rewire_second_layer(_foreign_onnx(cfg, case), x, [helper.make_node(op, i, o, name=n)
                                                                 for op, i, o, n in before], outputs)
    got = _onnxruntime(variant, case.x)
    assert got.shape != plain.shape or error_stats(got, plain.astype(np.float64)).max_abs > 1e-3, \
        "the variant computes what the stack does: not a test of the importer"
    with pytest.raises(ValueError, match=re.escape(match)):
        onnx_model.import_model(variant)


def test_layout_ops_between_layers_and_anything_before_the_first_keep_a_stack():
    """The control: Identity and Dropout (inference) between the layers, and a Relu ahead of the first
    layer (outside the stack: the model's input is what the first node reads), still load as the stack."""
    from onnx import helper

    from compat_tests.interop import onnx_model

    cfg, case = _no_initial_state(RNNConfig("gru", num_layers=2, num_units=4, input_size=4, seq_len=5, batch=2))
    proto = _rewire_second_layer(_foreign_onnx(cfg, case), "D0", [helper.make_node("Identity", ["S0"], ["I0"]),
                                                                 helper.make_node("Dropout", ["I0"], ["D0"])])
    rnn0 = next(n for n in proto.graph.node if n.name == "rnn0")
    rnn0.input[0] = "XR"
    proto.graph.node.insert(0, helper.make_node("Relu", ["X"], ["XR"]))
    model, weights, biases = onnx_model.import_model(proto)
    assert repr(model) == repr(cfg.model())
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, case.weights + case.biases, strict=True))


def _bidirectional_stack(link: list[tuple], constants: dict[str, list] | None = None,
                         fixed: tuple[bool, bool] = (False, False), sizes: tuple[int, int] = (5, 2)):
    """A 2-layer bidirectional GRU (H=4; its case at ``sizes`` T, B) as ``export_model`` writes it, its output
    alone, with the layout ops from layer 0's ``Y0`` to layer 1's input ``layer0_output`` replaced by
    ``link`` (``(op, inputs, output, attributes)`` each) over ``constants``, and its input ``X`` fixed to
    the case's T and B where ``fixed`` says so instead of symbolic; with its config and case."""
    from onnx import helper, numpy_helper

    from compat_tests.interop import onnx_model

    cfg, case = _no_initial_state(RNNConfig("gru", num_layers=2, num_units=4, input_size=3, seq_len=sizes[0],
                                            batch=sizes[1], direction="bidirectional", weight_scale=3.0))
    proto = onnx_model.export_model(cfg.model(), case.weights, case.biases, with_lengths=False, with_states=False)
    graph = proto.graph
    old = [n for n in graph.node if n.output[0] in ("Yt0", "layer0_output")]
    at = list(graph.node).index(old[0])
    for n in old:
        graph.node.remove(n)
    for k, (op, inputs, output, attrs) in enumerate(link):
        graph.node.insert(at + k, helper.make_node(op, inputs, [output], name=f"link{k}", **_built(attrs)))
    dtypes = {bool: np.bool_, float: np.float32, int: np.int64}
    graph.initializer.extend(numpy_helper.from_array(np.array(v, dtypes[type(np.ravel(v)[0].item())]), k)
                             for k, v in (constants or {}).items())
    graph.node.remove(next(n for n in graph.node if n.output[0] == "output_h"))  # layer 1's batch may change
    graph.output.remove(next(o for o in graph.output if o.name == "output_h"))
    for dim, size, fix in zip(graph.input[0].type.tensor_type.shape.dim, case.x.shape, fixed):
        if fix:
            dim.dim_value = size
    return proto, cfg, case


_EXPORTED_LINK = [("Transpose", ["Y0"], "Yt0", {"perm": [0, 2, 1, 3]}), ("Reshape", ["Yt0", "y_shape"], "layer0_output", {})]


LINK_BREAKS = {  # layout ops from Y0 [T, D, B, H] to layer 1's X, the constants they read, what the refusal says
    "reshape-without-transpose": ([("Reshape", ["Y0", "y_shape"], "layer0_output", {})], {},
                                  "node layer1 reads the output Y of layer0 rearranged by Reshape into [3, 2, 8] "
                                  "(replayed at T=3, B=2, D=2, H=4), not as a stack's next layer reads it, "
                                  "[T, B, D*H] = [3, 2, 8]"),
    "time-and-batch-swapped": ([("Transpose", ["Y0"], "Yt0", {"perm": [2, 0, 1, 3]}), _EXPORTED_LINK[1]], {},
                               "rearranged by Transpose, Reshape into [2, 3, 8]"),
    "training-dropout": ([*_EXPORTED_LINK[:1], ("Reshape", ["Yt0", "y_shape"], "Yr0", {}),
                          ("Dropout", ["Yr0", "ratio", "training"], "layer0_output", {"seed": 1})],
                         {"ratio": 0.5, "training": True}, "Dropout node link2 between recurrent nodes layer0 and "
                                                          "layer1: its training_mode is true, so it drops elements"),
}


@pytest.mark.parametrize("case_name", LINK_BREAKS)
def test_layout_ops_that_move_steps_or_directions_out_of_place_are_refused(case_name):
    """Layout ops alone between two recurrent nodes do not make a stack: replayed on a Y whose elements
    carry their (time, batch, direction, hidden) index, they must hand the next node its input as the
    stack's next layer reads it. Each variant here runs in onnxruntime, unoptimized, to something other than
    the stack (checked), with shapes that fit, so reading it as one would silently disagree with the file."""
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    link, constants, match = LINK_BREAKS[case_name]
    plain, cfg, case = _bidirectional_stack(_EXPORTED_LINK)
    variant = _bidirectional_stack(link, constants)[0]
    want, got = _onnxruntime(plain, case.x, optimized=False), _onnxruntime(variant, case.x, optimized=False)
    assert got.shape != want.shape or error_stats(got, want.astype(np.float64)).max_abs > 1e-3, \
        "the variant computes what the stack does: not a test of the importer"
    with pytest.raises(ValueError, match=re.escape(match)):
        onnx_model.import_model(variant)


SIZE_BREAKS = {  # link, constants, the case's T and B, which of them X fixes, Y0's declared shape, the refusal
    "sizes-written-out-that-fit-the-replay-sizes": (
        [_EXPORTED_LINK[0], ("Reshape", ["Yt0", "sizes"], "layer0_output", {})], {"sizes": [-1, 2, 8]}, (4, 1),
        (True, True), None, "into [2, 2, 8] (replayed at T=4, B=1, D=2, H=4)"),
    "sizes-written-out-for-another-run": (
        [_EXPORTED_LINK[0], ("Reshape", ["Yt0", "sizes"], "layer0_output", {})], {"sizes": [3, -1, 8]}, (6, 4),
        (True, True), None, "into [3, 8, 8] (replayed at T=6, B=4, D=2, H=4)"),
    "a-batch-written-out-with-batch-free": (
        [_EXPORTED_LINK[0], ("Reshape", ["Yt0", "sizes"], "layer0_output", {})], {"sizes": [-1, 2, 8]}, (5, 4),
        (False, False), None, "into [9, 2, 8] (replayed at T=3, B=6, D=2, H=4)"),
    "a-squeeze-without-axes-at-one-step": (
        [_EXPORTED_LINK[0], ("Squeeze", ["Yt0"], "S0", {}), ("Reshape", ["S0", "sizes"], "layer0_output", {})],
        {"sizes": [0, -1, 8]}, (1, 2), (False, False), None, "into [2, 1, 8] (replayed at T=1, B=2, D=2, H=4)"),
    "sizes-declared-but-not-enforced": (
        [_EXPORTED_LINK[0], ("Reshape", ["Yt0", "sizes"], "layer0_output", {})], {"sizes": [5, 2, 8]}, (2, 5),
        (False, False), [5, 2, 2, 4], "shape [5, 2, 8] does not hold the 48 elements of [3, 2, 2, 4]"),
}


@pytest.mark.parametrize("case_name", SIZE_BREAKS)
def test_layout_ops_right_only_at_some_sizes_are_refused(case_name):
    """The replay runs at the sizes the graph's input fixes (onnxruntime enforces those; a shape the file
    merely declares for Y, it does not), and where a size is free at several, 1 among them: sizes written
    out in a Reshape that fit one replay, or a Squeeze without axes that drops time at T=1, would otherwise
    pass. Each variant runs in onnxruntime, at the case's sizes, to something other than the stack (checked)."""
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    from compat_tests.interop import onnx_model

    link, constants, sizes, fixed, declared, match = SIZE_BREAKS[case_name]
    plain, cfg, case = _bidirectional_stack(_EXPORTED_LINK, sizes=sizes)
    variant = _bidirectional_stack(link, constants, fixed, sizes)[0]
    if declared is not None:
        variant.graph.value_info.append(helper.make_tensor_value_info("Y0", TensorProto.FLOAT, declared))
    want, got = _onnxruntime(plain, case.x, optimized=False), _onnxruntime(variant, case.x, optimized=False)
    assert got.shape != want.shape or error_stats(got, want.astype(np.float64)).max_abs > 1e-3, \
        "the variant computes what the stack does: not a test of the importer"
    with pytest.raises(ValueError, match=re.escape(match)):
        onnx_model.import_model(variant)


def _built(attrs: dict) -> dict:
    """``attrs`` with every value that is a builder (a ``partial`` of :func:`_tensor` or :func:`_tensor_of`,
    so that the tables need no onnx at import) replaced by what it builds; other values as they are."""
    return {k: v() if isinstance(v, partial) else v for k, v in attrs.items()}


def _tensor_of(value: float):
    """A one-element float32 TensorProto (a ConstantOfShape's value)."""
    from onnx import numpy_helper

    return numpy_helper.from_array(np.array([value], np.float32))


def _tensor(data_type: int, external: bool = False):
    """A 3-element int64-sized TensorProto of ``data_type``, its data in the file or, ``external``, in another."""
    from onnx import TensorProto

    t = TensorProto(data_type=data_type, dims=[3], raw_data=np.array([0, 0, -1], np.int64).tobytes())
    if external:
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value="shape.bin")
    return t


MALFORMED_LINKS = {  # link, constants, what the refusal says
    "perm-an-int": ([("Transpose", ["Y0"], "Yt0", {"perm": 2}), _EXPORTED_LINK[1]], {},
                    "Transpose node link0 between recurrent nodes layer0 and layer1: its perm must be a list of "
                    "integers, got 2"),
    "axis-a-float": ([_EXPORTED_LINK[0], ("Flatten", ["Yt0"], "F0", {"axis": 1.5}),
                      ("Reshape", ["F0", "y_shape"], "layer0_output", {})], {},
                     "Flatten node link1 between recurrent nodes layer0 and layer1: its axis must be an integer"),
    "shape-of-floats": ([_EXPORTED_LINK[0], ("Reshape", ["Yt0", "sizes"], "layer0_output", {})],
                        {"sizes": [5.0, 2.0, 8.0]}, "its shape must be a 1-D integer tensor, got float32 of shape [3]"),
    "constant-of-unknown-type": ([_EXPORTED_LINK[0], ("Constant", [], "c", {"value": partial(_tensor, 999)}),
                                  ("Reshape", ["Yt0", "c"], "layer0_output", {})], {},
                                 "Constant node link1 cannot be read"),
    "constant-in-another-file": ([_EXPORTED_LINK[0],
                                  ("Constant", [], "c", {"value": partial(_tensor, 7, external=True)}),
                                  ("Reshape", ["Yt0", "c"], "layer0_output", {})], {},
                                 "attribute 'value' of Constant node link1 keeps its data in another file "
                                 "(shape.bin)"),
}


@pytest.mark.parametrize("case_name", MALFORMED_LINKS)
def test_a_malformed_layout_op_is_a_value_error_naming_it(case_name):
    """Attributes and constants of the wrong type, or a constant kept in another file (never opened on the
    model's say-so), are a ValueError naming the node, not a TypeError or KeyError from deep inside."""
    from compat_tests.interop import onnx_model

    link, constants, match = MALFORMED_LINKS[case_name]
    with pytest.raises(ValueError, match=re.escape(match)):
        onnx_model.import_model(_bidirectional_stack(link, constants)[0])


def test_a_shape_a_caller_may_feed_and_a_foreign_domain_op_are_not_layout_ops_of_the_file():
    """An initializer that is also a graph input is a default a caller may override (onnxruntime then reads
    the fed value), and a Transpose of another domain is not ONNX's: neither tells what the link does."""
    from onnx import TensorProto, helper

    from compat_tests.interop import onnx_model

    fed = _bidirectional_stack(_EXPORTED_LINK)[0]
    fed.graph.input.append(helper.make_tensor_value_info("y_shape", TensorProto.INT64, [3]))
    with pytest.raises(ValueError, match=re.escape("Reshape node link1 between recurrent nodes layer0 and layer1: "
                                                   "its shape (input 1) is fed at run time (graph input 'y_shape'), "
                                                   "so what the op does to the layer's output cannot be told")):
        onnx_model.import_model(fed)
    foreign = _bidirectional_stack(_EXPORTED_LINK)[0]
    next(n for n in foreign.graph.node if n.name == "link0").domain = "com.example"
    with pytest.raises(ValueError, match=re.escape("node layer1 reads X from Transpose node link0's output 'Yt0' "
                                                   "through Reshape, not from the output Y")):
        onnx_model.import_model(foreign)


LINK_KEEPS = {  # layout ops that carry Y0 [T, D, B, H] to [T, B, D*H] some other way, their constants, static X
    "literal-sizes": ([_EXPORTED_LINK[0], ("Reshape", ["Yt0", "sizes"], "layer0_output", {})],
                      {"sizes": [5, 2, 8]}, (True, True)),
    "flatten-and-back": ([_EXPORTED_LINK[0], ("Flatten", ["Yt0"], "F0", {"axis": 2}),
                          ("Reshape", ["F0", "sizes"], "layer0_output", {})], {"sizes": [5, -1, 8]}, (True, True)),
    "unsqueeze-squeeze-identity": ([*_EXPORTED_LINK[:1], ("Reshape", ["Yt0", "y_shape"], "Yr0", {}),
                                    ("Unsqueeze", ["Yr0", "front"], "U0", {}), ("Squeeze", ["U0", "front"], "S0", {}),
                                    ("Identity", ["S0"], "layer0_output", {})], {"front": [0]}, (False, False)),
}


@pytest.mark.parametrize("case_name", LINK_KEEPS)
def test_layout_ops_that_keep_every_element_in_place_load_as_the_stack(case_name):
    """The control: other layout ops that hand layer 1 its input in place (sizes written out where the graph
    fixes them, a Flatten undone, an Unsqueeze undone) run in onnxruntime to the stack's output bit for bit,
    and load as the stack."""
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    link, constants, fixed = LINK_KEEPS[case_name]
    plain, cfg, case = _bidirectional_stack(_EXPORTED_LINK)
    variant = _bidirectional_stack(link, constants, fixed)[0]
    assert _onnxruntime(variant, case.x).tobytes() == _onnxruntime(plain, case.x).tobytes()
    model, weights, biases = onnx_model.import_model(variant)
    assert repr(model) == repr(cfg.model())
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, case.weights + case.biases, strict=True))


def test_sizes_too_large_to_replay_are_refused_before_any_is_allocated():
    """A graph that fixes huge sizes and writes them out in a Reshape (here T=10^7, B=10^3: 8*10^10 labels)
    is refused with advice instead of allocating the labels of a whole layer output."""
    from compat_tests.interop import onnx_model

    T, B = 10**7, 10**3
    proto = _bidirectional_stack([_EXPORTED_LINK[0], ("Reshape", ["Yt0", "sizes"], "layer0_output", {})],
                                 {"sizes": [T, B, 8]})[0]
    for dim, size in zip(proto.graph.input[0].type.tensor_type.shape.dim, (T, B)):
        dim.dim_value = size
    with pytest.raises(ValueError, match=re.escape(f"the sizes the graph fixes (T={T}, B={B}, D=2, H=4) are too "
                                                   f"many elements to replay them at; export with T and B free")):
        onnx_model.import_model(proto)


def _shape_of(tensor: str, out: str, start: int, end: int) -> list[tuple]:
    """Link ops computing ``out``: the dims ``[start, end)`` of ``tensor`` (Shape, then Slice)."""
    return [("Shape", [tensor], f"{out}_all", {}), ("Slice", [f"{out}_all", f"at{start}", f"at{end}"], out, {})]


_AT = {f"at{k}": [k] for k in range(5)}


_DYNAMO_LINK = [  # what PyTorch's dynamo exporter writes with dynamic axes: [T, B] of Yt0, then D*H by Mul
    _EXPORTED_LINK[0], *_shape_of("Yt0", "tb", 0, 2), *_shape_of("Yt0", "d", 2, 3), *_shape_of("Yt0", "h", 3, 4),
    ("Mul", ["d", "h"], "dh", {}), ("Concat", ["tb", "dh"], "computed", {"axis": 0}),
    ("Reshape", ["Yt0", "computed"], "layer0_output", {})]


SHAPE_KEEPS = {  # links whose Reshape's shape shape arithmetic computes, their constants: each the stack
    "dynamo-exporter": (_DYNAMO_LINK, _AT),
    "sliced-and-minus-one": ([_EXPORTED_LINK[0], *_shape_of("Yt0", "tb", 0, 2),
                              ("Concat", ["tb", "minus_one"], "computed", {"axis": 0}),
                              ("Reshape", ["Yt0", "computed"], "layer0_output", {})], {**_AT, "minus_one": [-1]}),
    "shapes-with-start-and-end": ([_EXPORTED_LINK[0], ("Shape", ["Yt0"], "tb", {"start": 0, "end": -2}),
                                   ("Shape", ["Yt0"], "d", {"start": 2, "end": 3}), ("Shape", ["Yt0"], "h", {"start": -1}),
                                   ("Mul", ["d", "h"], "dh", {}), ("Concat", ["tb", "dh"], "computed", {"axis": 0}),
                                   ("Reshape", ["Yt0", "computed"], "layer0_output", {})], {}),
    "gathered-cast-unsqueezed-from-y": ([("Shape", ["Y0"], "y_dims", {}),
                                         ("Gather", ["y_dims", "zero"], "t", {"axis": 0}),
                                         ("Gather", ["y_dims", "two"], "b", {"axis": 0}),
                                         ("Cast", ["t"], "t32", {"to": 6}), ("Cast", ["t32"], "t64", {"to": 7}),
                                         ("Unsqueeze", ["t64", "front"], "t1", {}), ("Unsqueeze", ["b", "front"], "b1", {}),
                                         ("Sub", ["dh_plus_one", "one"], "dh", {}),
                                         ("Concat", ["t1", "b1", "dh"], "computed", {"axis": 0}), _EXPORTED_LINK[0],
                                         ("Reshape", ["Yt0", "computed"], "layer0_output", {})],
                                        {"zero": 0, "two": 2, "front": [0], "one": [1], "dh_plus_one": [9]}),
}


@pytest.mark.parametrize("case_name", SHAPE_KEEPS)
def test_a_reshape_whose_shape_arithmetic_computes_the_stack_loads(case_name):
    """A Reshape's shape computed at run time from the shapes of the link's own tensors (``Shape``, then
    Slice, Gather, Cast, Unsqueeze, Sub, Mul, Concat), as PyTorch's dynamo exporter writes with dynamic
    axes, is evaluated at each size the replay runs at: these run in onnxruntime to the stack's output bit
    for bit (checked), and load as the stack."""
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    link, constants = SHAPE_KEEPS[case_name]
    plain, cfg, case = _bidirectional_stack(_EXPORTED_LINK)
    variant = _bidirectional_stack(link, constants)[0]
    assert _onnxruntime(variant, case.x).tobytes() == _onnxruntime(plain, case.x).tobytes()
    model, weights, biases = onnx_model.import_model(variant)
    assert repr(model) == repr(cfg.model())
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, case.weights + case.biases, strict=True))


SHAPE_BREAKS = {  # shape arithmetic that computes something other than the stack, constants, the case's T
    # and B, the refusal
    "computed-without-the-transpose": ([*_shape_of("Y0", "t", 0, 1), *_shape_of("Y0", "b", 2, 3),
                                        ("Concat", ["t", "b", "minus_one"], "computed", {"axis": 0}),
                                        ("Reshape", ["Y0", "computed"], "layer0_output", {})],
                                       {**_AT, "minus_one": [-1]}, (5, 2),
                                       "rearranged by Reshape into [3, 2, 8] (replayed at T=3, B=2, D=2, H=4), not as "
                                       "a stack's next"),
    "time-and-batch-read-swapped": ([_EXPORTED_LINK[0], *_shape_of("Yt0", "t", 0, 1), *_shape_of("Yt0", "b", 1, 2),
                                     ("Concat", ["b", "t", "minus_one"], "computed", {"axis": 0}),
                                     ("Reshape", ["Yt0", "computed"], "layer0_output", {})],
                                    {**_AT, "minus_one": [-1]}, (5, 2),
                                    "rearranged by Transpose, Reshape into [2, 3, 8] (replayed at T=3, B=2"),
    "right-only-at-some-sizes": ([_EXPORTED_LINK[0], *_shape_of("Yt0", "t", 0, 1), ("Sub", ["t", "at1"], "t_less", {}),
                                  ("Concat", ["minus_one", "t_less", "dh"], "computed", {"axis": 0}),
                                  ("Reshape", ["Yt0", "computed"], "layer0_output", {})],
                                 {**_AT, "minus_one": [-1], "dh": [8]}, (4, 6),
                                 "is computed by Sub node link3, which adds to or subtracts from a size"),
    # T + (T-1)(T-3)(T-4) is T at every T the check replays (3, 1, 4), and 4 at T=2: a helper's audit
    "a-polynomial-right-at-every-size-replayed": (
        [_EXPORTED_LINK[0], *_shape_of("Yt0", "t", 0, 1), *_shape_of("Yt0", "b", 1, 2),
         ("Sub", ["t", "at1"], "t1", {}), ("Sub", ["t", "at3"], "t3", {}), ("Sub", ["t", "at4"], "t4", {}),
         ("Mul", ["t1", "t3"], "p2", {}), ("Mul", ["p2", "t4"], "p3", {}), ("Add", ["t", "p3"], "tt", {}),
         ("Concat", ["tt", "minus_one", "dh"], "s1", {"axis": 0}), ("Reshape", ["Yt0", "s1"], "r1", {}),
         ("Transpose", ["r1"], "t_1", {"perm": [1, 0, 2]}), ("Concat", ["b", "t", "dh"], "s2", {"axis": 0}),
         ("Reshape", ["t_1", "s2"], "r2", {}), ("Transpose", ["r2"], "layer0_output", {"perm": [1, 0, 2]})],
        {**_AT, "minus_one": [-1], "dh": [8]}, (2, 2), "which adds to or subtracts from a size: such arithmetic can "
                                                      "be right at the sizes the check replays and wrong at others"),
    "a-size-as-an-index": ([_EXPORTED_LINK[0], ("Shape", ["Yt0"], "dims", {}), *_shape_of("Yt0", "t", 0, 1),
                            ("Gather", ["dims", "t"], "picked", {"axis": 0}),
                            ("Concat", ["picked", "minus_one", "dh"], "computed", {"axis": 0}),
                            ("Reshape", ["Yt0", "computed"], "layer0_output", {})],
                           {**_AT, "minus_one": [-1], "dh": [8]}, (3, 4),
                           "is computed by Gather node link4, whose indices, bounds, axes or shape derive from a size"),
}


@pytest.mark.parametrize("case_name", SHAPE_BREAKS)
def test_a_reshape_whose_shape_arithmetic_moves_elements_out_of_place_is_refused(case_name):
    """Shape arithmetic is replayed, not trusted: a shape computed without the Transpose (directions
    interleaved), or with time and batch read from each other's axes, runs in onnxruntime to something other
    than the stack (checked), and is refused at the replay's sizes; one that adds to a size, or indexes by
    one, which can be right at every size replayed and wrong at others (checked), is refused as such."""
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    link, constants, sizes, match = SHAPE_BREAKS[case_name]
    plain, cfg, case = _bidirectional_stack(_EXPORTED_LINK, sizes=sizes)
    variant = _bidirectional_stack(link, constants, sizes=sizes)[0]
    want, got = _onnxruntime(plain, case.x), _onnxruntime(variant, case.x)
    assert got.shape != want.shape or error_stats(got, want.astype(np.float64)).max_abs > 1e-3, \
        "the variant computes what the stack does: not a test of the importer"
    with pytest.raises(ValueError, match=re.escape(match)):
        onnx_model.import_model(variant)


_UNTOLD = "so what the op does to the layer's output cannot be told from the file"


SHAPE_UNKNOWNS = {  # a Reshape's shape that the replay cannot evaluate, constants, the refusal after "its shape (input 1) "
    "shape-of-the-graph-input": ([_EXPORTED_LINK[0], *_shape_of("X", "tb", 0, 2),
                                  ("Concat", ["tb", "minus_one"], "computed", {"axis": 0}),
                                  ("Reshape", ["Yt0", "computed"], "layer0_output", {})], {**_AT, "minus_one": [-1]},
                                 "is computed at run time from the shape of 'X', which is not a tensor of the link "
                                 f"(the Y before it or a layout op's output), {_UNTOLD}"),
    "computed-from-data": ([_EXPORTED_LINK[0], ("ReduceMax", ["Yt0"], "peak", {"keepdims": 0}),
                            ("Cast", ["peak"], "n", {"to": 7}), ("Unsqueeze", ["n", "at0"], "n1", {}),
                            ("Concat", ["minus_one", "n1", "dh"], "computed", {"axis": 0}),
                            ("Reshape", ["Yt0", "computed"], "layer0_output", {})],
                           {**_AT, "minus_one": [-1], "dh": [8]},
                           "is computed at run time by ReduceMax node link1, which is not shape arithmetic"),
    "a-fed-value-through-arithmetic": ([_EXPORTED_LINK[0], ("Concat", ["X_sizes"], "computed", {"axis": 0}),
                                        ("Reshape", ["Yt0", "computed"], "layer0_output", {})], {},
                                       f"is fed at run time (graph input 'X_sizes'), {_UNTOLD}"),
    "cast-to-float": ([_EXPORTED_LINK[0], *_shape_of("Yt0", "tb", 0, 2), ("Cast", ["tb"], "f", {"to": 1}),
                       ("Concat", ["f", "minus_one"], "computed", {"axis": 0}),
                       ("Reshape", ["Yt0", "computed"], "layer0_output", {})], {**_AT, "minus_one": [-1]},
                      "is computed by Cast node link3, which fails: it casts to type 1, not int32 or int64"),
    "float-constants": ([_EXPORTED_LINK[0], *_shape_of("Yt0", "tb", 0, 2), ("Mul", ["tb", "halves"], "f", {}),
                         ("Concat", ["f", "minus_one"], "computed", {"axis": 0}),
                         ("Reshape", ["Yt0", "computed"], "layer0_output", {})],
                        {**_AT, "minus_one": [-1], "halves": [0.5]},
                        f"is computed by Mul node link3 from float32 values, not from the integers of shape "
                        f"arithmetic, {_UNTOLD}"),
    "too-many-values": ([_EXPORTED_LINK[0], ("Concat", ["many", "many"], "computed", {"axis": 0}),
                         ("Reshape", ["Yt0", "computed"], "layer0_output", {})], {"many": list(range(600))},
                        "is computed by Concat node link1, which fails: it would make 1200 values, more than the "
                        "1024 of shape arithmetic"),
    "too-many-values-read": ([_EXPORTED_LINK[0], ("Identity", ["many"], "computed", {}),
                              ("Reshape", ["Yt0", "computed"], "layer0_output", {})], {"many": list(range(2000))},
                             f"is computed by Identity node link1 from 2000 values, not from the few integers of shape "
                             f"arithmetic, {_UNTOLD}"),
    "a-broadcast-too-large": ([_EXPORTED_LINK[0], ("Mul", ["column", "row"], "computed", {}),
                               ("Reshape", ["Yt0", "computed"], "layer0_output", {})],
                              {"column": [[k] for k in range(1000)], "row": [list(range(1000))]},
                              "is computed by Mul node link1, which fails: it would make 1000000 values"),
    "too-deep": ([_EXPORTED_LINK[0], *_shape_of("Yt0", "s0", 0, 3),
                  *[("Identity", [f"s{k}"], f"s{k + 1}", {}) for k in range(70)],
                  ("Concat", ["s70", "minus_one"], "computed", {"axis": 0}),
                  ("Reshape", ["Yt0", "computed"], "layer0_output", {})], {**_AT, "minus_one": [-1]},
                 f"is computed at run time by more than 64 chained ops, {_UNTOLD}"),
}


@pytest.mark.parametrize("case_name", SHAPE_UNKNOWNS)
def test_a_reshape_whose_shape_is_not_shape_arithmetic_is_refused(case_name):
    """A shape computed from anything but the link's own tensors' shapes by the few integer ops of shape
    arithmetic (from the graph's input, from data, from a value fed at run time, through or from floats, as
    more than a few values, or through an endless chain) cannot be told from the file, and is refused naming
    why."""
    from onnx import TensorProto, helper

    from compat_tests.interop import onnx_model

    link, constants, match = SHAPE_UNKNOWNS[case_name]
    proto = _bidirectional_stack(link, constants)[0]
    if case_name == "a-fed-value-through-arithmetic":
        proto.graph.input.append(helper.make_tensor_value_info("X_sizes", TensorProto.INT64, [3]))
    reshape = next(n.name for n in proto.graph.node if n.output[0] == "layer0_output")
    with pytest.raises(ValueError, match=re.escape(f"Reshape node {reshape} between recurrent nodes layer0 and "
                                                   f"layer1: its shape (input 1) {match}")):
        onnx_model.import_model(proto)


def _start_from(slot: int, source: list[tuple], constants: dict[str, np.ndarray]):
    """The 2-layer GRU of ``_foreign_onnx`` (T=5, B=2, H=4) whose second node reads input ``slot``
    (4 sequence_lens, 5 initial_h) from ``start``, computed by ``source`` (``(op, inputs, attributes)`` each,
    output ``s0``, ``s1``, ...; the last is ``start``) over ``constants`` (those named ``*_default`` also graph
    inputs, defaults a caller may override); with its config and case."""
    from onnx import TensorProto, helper, numpy_helper

    cfg, case = _no_initial_state(RNNConfig("gru", num_layers=2, num_units=4, input_size=4, seq_len=5, batch=2))
    proto = _foreign_onnx(cfg, case)
    names = [f"s{k}" for k in range(len(source) - 1)] + ["start"]
    at = [n.name for n in proto.graph.node].index("rnn1")
    for k, (op, inputs, attrs) in enumerate(source):
        proto.graph.node.insert(at + k, helper.make_node(op, inputs, [names[k]], name=f"start{k}", **_built(attrs)))
    proto.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in constants.items())
    proto.graph.input.extend(helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
                             for k, v in constants.items() if k.endswith("_default"))  # a caller may override it
    rnn1 = next(n for n in proto.graph.node if n.name == "rnn1")
    rnn1.input.extend([""] * (slot + 1 - len(rnn1.input)))
    rnn1.input[slot] = "start"
    return proto, cfg, case


_ZEROS = np.zeros((1, 2, 4), np.float32)


_SHAPE = np.array([1, 2, 4], np.int64)


STARTS_REFUSED = {  # slot, source ops, constants, what the refusal says after "node rnn1 reads its "
    "a-nonzero-initial-state": (5, [("Identity", ["h"], {})], {"h": _ZEROS + 0.5},
                                "initial_h from initializer 'h', which is not all zeros"),
    "constant-of-shape-of-another-value": (5, [("ConstantOfShape", ["shape"], {"value": partial(_tensor_of, 0.5)})],
                                           {"shape": _SHAPE}, "initial_h from ConstantOfShape node start0, whose "
                                                              "value is not zero"),
    "a-nonzero-default-of-a-graph-input": (5, [("Identity", ["h_default"], {})], {"h_default": _ZEROS + 0.5},
                                           "initial_h from initializer 'h_default', which is not all zeros"),
    "a-state-computed-from-zeros": (5, [("Sigmoid", ["zeros"], {})], {"zeros": _ZEROS},
                                    "initial_h from Sigmoid node start0"),
    "fixed-sequence-lengths": (4, [("Identity", ["lengths"], {})], {"lengths": np.array([3, 5], np.int32)},
                               "sequence_lens from initializer 'lengths', fixed in the file"),
}


@pytest.mark.parametrize("case_name", STARTS_REFUSED)
def test_a_node_that_starts_from_what_the_file_fixes_is_refused(case_name):
    """A layer whose initial state the file fixes to something other than zeros, or whose sequence lengths
    it fixes, runs in onnxruntime to something other than the stack (checked); the model read from the
    weights would start from the caller's states and lengths, so the file is refused."""
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    slot, source, constants, match = STARTS_REFUSED[case_name]
    plain = _foreign_onnx(*_no_initial_state(RNNConfig("gru", num_layers=2, num_units=4, input_size=4, seq_len=5,
                                                       batch=2)))
    variant, cfg, case = _start_from(slot, source, constants)
    want, got = _onnxruntime(plain, case.x), _onnxruntime(variant, case.x)
    assert error_stats(got, want.astype(np.float64)).max_abs > 1e-3, \
        "the variant computes what the stack does: not a test of the importer"
    with pytest.raises(ValueError, match=re.escape(f"node rnn1 reads its {match}: the model read from its weights "
                                                   f"starts from the caller's")):
        onnx_model.import_model(variant)


STARTS_KEPT = {  # zeros written out as exporters write them, and a state the caller feeds
    "expanded-zero": (5, [("Expand", ["zero", "shape"], {})], {"zero": np.zeros(1, np.float32), "shape": _SHAPE}),
    "constant-of-shape-zero-sliced": (5, [("ConstantOfShape", ["shape2"], {"value": partial(_tensor_of, 0.0)}),
                                          ("Slice", ["s0", "one", "two"], {})],
                                      {"shape2": np.array([2, 2, 4], np.int64), "one": np.array([1], np.int64),
                                       "two": np.array([2], np.int64)}),
    "negative-zeros": (5, [("Identity", ["h"], {})], {"h": -_ZEROS}),
}


@pytest.mark.parametrize("case_name", STARTS_KEPT)
def test_a_node_that_starts_from_zeros_the_file_writes_out_loads(case_name):
    """The control: zero states written out (Expand of a zero, a sliced ConstantOfShape of zero, -0.0) run in
    onnxruntime to the stack's output bit for bit (checked), and load as the stack."""
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    slot, source, constants = STARTS_KEPT[case_name]
    variant, cfg, case = _start_from(slot, source, constants)
    plain = _foreign_onnx(cfg, case)
    assert _onnxruntime(variant, case.x).tobytes() == _onnxruntime(plain, case.x).tobytes()
    model, weights, biases = onnx_model.import_model(variant)
    assert repr(model) == repr(cfg.model())


def test_a_layer_that_reads_a_dropout_mask_is_refused():
    """A Dropout's second output is its mask, not the tensor it passed on: a node reading it is not fed the
    layer before (onnxruntime would not even take the mask's bool as X), so the graph is not a stack."""
    from onnx import helper

    from compat_tests.interop import onnx_model

    proto = _bidirectional_stack([*_EXPORTED_LINK[:1], ("Reshape", ["Yt0", "y_shape"], "Yr0", {})])[0]
    at = [n.output[0] for n in proto.graph.node].index("Yr0") + 1
    proto.graph.node.insert(at, helper.make_node("Dropout", ["Yr0"], ["passed", "layer0_output"], name="drop"))
    with pytest.raises(ValueError, match=re.escape("node layer1 reads X from Dropout node drop's output "
                                                   "'layer0_output', not from the output Y")):
        onnx_model.import_model(proto)


def test_a_batch_major_stack_is_read_by_its_layout():
    """``layout=1`` (ONNX: X ``[B, T, I]``, Y ``[B, T, D, H]``; onnxruntime refuses it, so this reads the
    spec): batch-major nodes chained by a Reshape alone are a stack; a time-major node reading the same
    tensor would take batch for time, and is refused."""
    from onnx import helper

    from compat_tests.interop import onnx_model

    def batch_major(second: int):
        proto = _bidirectional_stack([("Reshape", ["Y0", "y_shape"], "layer0_output", {})])[0]
        for node, layout in zip([n for n in proto.graph.node if n.op_type == "GRU"], (1, second)):
            node.attribute.append(helper.make_attribute("layout", layout))
        return proto

    model = onnx_model.import_model(batch_major(1))[0]
    assert (model.num_layers, model.num_dirs) == (2, 2)
    with pytest.raises(ValueError, match=re.escape("rearranged by Reshape into [2, 3, 8] (replayed at T=3, B=2, "
                                                   "D=2, H=4), not as a stack's next layer reads it, [T, B, D*H]")):
        onnx_model.import_model(batch_major(0))


@pytest.mark.parametrize("mode, direction, batch_first", [
    ("relu", "bidirectional", False), ("lstm", "bidirectional", False), ("gru", "bidirectional", False),
    ("lstm", "unidirectional", False), ("gru", "bidirectional", True)], ids=lambda v: str(v))
def test_a_graph_pytorchs_exporter_wrote_loads_with_the_weights_pytorch_had(mode, direction, batch_first):
    """A real foreign exporter: ``torch.onnx.export`` (the TorchScript exporter) of a 2-layer nn.RNN/LSTM/GRU,
    whose layers it chains through Transpose and Reshape (bidirectional) or Squeeze (unidirectional) among
    its own shape arithmetic, with batch_first a Transpose before and after the stack, loads as that model
    with the weights PyTorch held, bit for bit."""
    torch = pytest.importorskip("torch")
    import warnings

    from compat_tests.interop import onnx_model

    cfg = RNNConfig(mode, num_layers=2, num_units=4, input_size=3, direction=direction, dtype="float32")
    case, model = make_case(cfg), cfg.model()
    kwargs = dict(bidirectional=direction == "bidirectional", batch_first=batch_first)
    module = {"relu": lambda: torch.nn.RNN(3, 4, 2, nonlinearity="relu", **kwargs),
              "lstm": lambda: torch.nn.LSTM(3, 4, 2, **kwargs), "gru": lambda: torch.nn.GRU(3, 4, 2, **kwargs)}[mode]()
    module.load_state_dict({k: torch.from_numpy(v) for k, v in
                            torch_format.to_state_dict(model, case.weights, case.biases).items()})
    stream, x = io.BytesIO(), case.x.transpose(1, 0, 2).copy() if batch_first else case.x
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter announces its deprecation
        torch.onnx.export(module, (torch.from_numpy(x),), stream, dynamo=False, opset_version=17)
    import onnx

    proto = onnx.load_from_string(stream.getvalue())
    assert len([n for n in proto.graph.node if n.op_type in ("RNN", "LSTM", "GRU")]) == 2
    got, weights, biases = onnx_model.import_model(proto)
    assert repr(got) == repr(model)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, case.weights + case.biases, strict=True))


# The exporter sweeps' rows (the sweep fixture runs their pairwise rows outside the thorough profile).
TORCHSCRIPT_SWEEP = list(itertools.product(("relu", "lstm", "gru"), (2, 3), (False, True), (False, True),
                                           (False, True), (11, 13, 17), (False, True)))
DYNAMO_SWEEP = [(*row, 2 + k % 2, k % 4 < 2) for k, row in  # (layers, bias in turn)
                enumerate(itertools.product(("gru", "lstm"), (False, True), (False, True), (False, True)))]


def test_every_graph_of_a_sweep_of_pytorchs_exporter_loads_as_its_module(sweep):
    """The stack check refuses no graph PyTorch's exporter writes: 288 modules (RNN(relu), LSTM, GRU; 2 and 3
    layers; uni- and bidirectional; batch_first or not; with and without bias; opsets 11, 13 and 17, whose
    Squeeze takes its axes as an attribute or an input; static and dynamic axes; all 288 under the thorough
    profile, otherwise the 10 that hold every pair of these values), each loading as its module's config with
    the weights of its state_dict, bit for bit."""
    torch = pytest.importorskip("torch")
    import warnings

    import onnx

    from compat_tests.interop import onnx_model

    classes = {"relu": lambda *a, **kw: torch.nn.RNN(*a, nonlinearity="relu", **kw), "lstm": torch.nn.LSTM,
               "gru": torch.nn.GRU}
    torch.manual_seed(0)
    for mode, layers, bidirectional, batch_first, bias, opset, dynamic in sweep(TORCHSCRIPT_SWEEP):
        module = classes[mode](3, 4, layers, bidirectional=bidirectional, batch_first=batch_first, bias=bias)
        stream = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter announces its deprecation
            torch.onnx.export(module, (torch.zeros((2, 5, 3) if batch_first else (5, 2, 3)),), stream, dynamo=False,
                              opset_version=opset, input_names=["x"],
                              dynamic_axes={"x": {0: "a", 1: "b"}} if dynamic else None)
        got, weights, biases = onnx_model.import_model(onnx.load_from_string(stream.getvalue()))
        state = {k: v.detach().numpy() for k, v in module.state_dict().items()}
        want = torch_format.from_state_dict(got, state)
        assert (got.rnn_mode, got.num_layers, got.num_dirs, got.bias_mode) == \
            (mode, layers, 2 if bidirectional else 1, "double" if bias else "none")
        assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, want[0] + want[1], strict=True)), \
            (mode, layers, bidirectional, batch_first, bias, opset, dynamic)


def test_every_graph_of_a_sweep_of_pytorchs_dynamo_exporter_loads_and_runs_as_its_module(sweep):
    """PyTorch 2.13's default exporter (``dynamo=True``, through onnxscript) writes a GRU or LSTM as ONNX
    nodes, and with dynamic axes computes the Reshape between layers by shape arithmetic. 16 modules (GRU,
    LSTM; uni- and bidirectional; batch_first or not; static and dynamic axes; 2 or 3 layers, with or without
    bias in turn; all 16 under the thorough profile, otherwise the 6 that hold every pair of these values) each load as the module's config with the weights of its state_dict, bit for bit, and a
    dynamic graph runs in onnxruntime at another batch size (B=3, where free; the exporter fixes T in the
    Reshape between layers, whatever the graph's input says) to the reference's outputs within the policy."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")

    from compat_tests.interop import onnx_model

    torch.manual_seed(0)
    for mode, bidirectional, batch_first, dynamic, layers, bias in sweep(DYNAMO_SWEEP):
        module = {"gru": torch.nn.GRU, "lstm": torch.nn.LSTM}[mode](3, 4, layers, bias=bias, batch_first=batch_first,
                                                                   bidirectional=bidirectional).eval()
        example = torch.zeros((2, 5, 3) if batch_first else (5, 2, 3))
        dims = {0: torch.export.Dim("b"), 1: torch.export.Dim("t")} if batch_first else \
            {0: torch.export.Dim("t"), 1: torch.export.Dim("b")}
        proto = _dynamo_export(torch, module, example, dynamic_shapes=(dims,) if dynamic else None)
        label = (mode, bidirectional, batch_first, dynamic, layers, bias)
        got, weights, biases = onnx_model.import_model(proto)
        assert (got.rnn_mode, got.num_layers, got.num_dirs, got.bias_mode) == \
            (mode, layers, 2 if bidirectional else 1, "double" if bias else "none"), label
        want = torch_format.from_state_dict(got, {k: v.detach().numpy() for k, v in module.state_dict().items()})
        assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, want[0] + want[1], strict=True)), label
        if dynamic:  # at B=3 where the exporter left it free, at the example's T: from a fresh state it fixes
            # T in the Reshape between layers even where the graph's input leaves T free
            fixed = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim][:2]
            _, B = (fixed[::-1] if batch_first else fixed)
            cfg = RNNConfig(mode, num_layers=layers, num_units=4, input_size=3, seq_len=5, batch=B or 3,
                            direction=got.direction, dtype="float32", initial_state=False, bias_mode=got.bias_mode)
            case = make_case(cfg)._replace(weights=weights, biases=biases)
            y = _onnxruntime(proto, case.x.transpose(1, 0, 2).copy() if batch_first else case.x)
            expected = run_reference(cfg, case)
            y = y.transpose(1, 0, 2) if batch_first else y
            assert_agree_within_policy(cfg, case, Outputs(y, expected.output_h, expected.output_c), expected,
                                       peer="onnxruntime")


def test_sizes_a_stack_fixes_hold_for_every_layer_after():
    """Two chained 2-layer modules exported with only B dynamic: onnx's shape inference loses T=5 behind the
    first module's computed Reshape, though the graph fixes it (onnxruntime refuses another T). The check
    carries the sizes a layer's output fixes to the layers after it, so the 4-layer stack loads, and runs in
    onnxruntime at another batch to the reference's outputs (a helper's audit found it refused)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import onnx_model

    class Chained(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.GRU(3, 4, 2, bidirectional=True)
            self.b = torch.nn.GRU(8, 4, 2, bidirectional=True)

        def forward(self, x):
            return self.b(self.a(x)[0])[0]

    torch.manual_seed(0)
    proto = _dynamo_export(torch, Chained().eval(), torch.zeros(5, 2, 3), dynamic_shapes=({1: torch.export.Dim("b")},))
    model, weights, biases = onnx_model.import_model(proto)
    assert (model.rnn_mode, model.num_layers, model.num_dirs) == ("gru", 4, 2)
    cfg = RNNConfig("gru", num_layers=4, num_units=4, input_size=3, direction="bidirectional", seq_len=5, batch=3,
                    dtype="float32", initial_state=False)
    case = make_case(cfg)._replace(weights=weights, biases=biases)
    expected = run_reference(cfg, case)
    y = _onnxruntime(proto, case.x)
    assert_agree_within_policy(cfg, case, Outputs(y, expected.output_h, None), expected, peer="onnxruntime")


def test_an_initializer_a_caller_may_override_fixes_no_size():
    """An initializer that is also a graph input is a default: here the shape of a Reshape ahead of the stack,
    which would fix T=5, B=2 and so let a Reshape between the layers write those sizes out. Fed another
    shape, onnxruntime runs the graph to something other than the stack (checked), so it is refused
    (a helper's audit found it accepted)."""
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    from compat_tests.interop import onnx_model

    def reshaped_ahead(proto):
        graph = proto.graph
        next(n for n in graph.node if n.op_type == "GRU").input[0] = "X_r"
        graph.node.insert(0, helper.make_node("Reshape", ["X", "x_shape"], ["X_r"], name="ahead"))
        graph.initializer.append(numpy_helper.from_array(np.array([5, 2, 3], np.int64), "x_shape"))
        graph.input.append(helper.make_tensor_value_info("x_shape", TensorProto.INT64, [3]))
        return proto

    variant = reshaped_ahead(_bidirectional_stack([_EXPORTED_LINK[0], ("Reshape", ["Yt0", "sizes"], "layer0_output", {})],
                                                  {"sizes": [5, 2, 8]})[0])
    plain, cfg, case = _bidirectional_stack(_EXPORTED_LINK, sizes=(2, 5))
    plain = reshaped_ahead(plain)

    fed = {"x_shape": np.array(case.x.shape, np.int64)}
    want, got = _onnxruntime(plain, case.x, extra=fed), _onnxruntime(variant, case.x, extra=fed)
    assert got.shape != want.shape or error_stats(got, want.astype(np.float64)).max_abs > 1e-3
    with pytest.raises(ValueError, match=re.escape("shape [5, 2, 8] does not hold the 48 elements of [3, 2, 2, 4]")):
        onnx_model.import_model(variant)


def test_an_rnn_that_pytorchs_dynamo_exporter_unrolls_is_refused_with_advice():
    """PyTorch's dynamo exporter writes ``nn.RNN`` as MatMul, Add and Tanh per step, no RNN node: the refusal
    says so and how to export one that loads (the TorchScript exporter writes RNN nodes; checked)."""
    torch = pytest.importorskip("torch")
    import warnings

    import onnx

    from compat_tests.interop import onnx_model

    module, example = torch.nn.RNN(3, 4, 2).eval(), torch.zeros(5, 2, 3)
    unrolled = _dynamo_export(torch, module, example)
    stream = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter announces its deprecation
        torch.onnx.export(module, (example,), stream, dynamo=False)
    with pytest.raises(ValueError, match=re.escape("the ONNX graph has no GRU, LSTM or RNN node: it computes with "
                                                   "MatMul or Gemm, perhaps a recurrence unrolled into steps")):
        onnx_model.import_model(unrolled)
    assert onnx_model.import_model(onnx.load_from_string(stream.getvalue()))[0].rnn_mode == "tanh"


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
