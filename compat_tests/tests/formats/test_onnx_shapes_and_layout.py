"""What lies between recurrent nodes in an ONNX graph (``compat_tests.interop.onnx_stack``): the layout ops that
make two nodes one stack, the shape arithmetic that computes a Reshape's shape (replayed; checked op by op
against onnxruntime), and the initial states and sequence lengths a file fixes."""

from __future__ import annotations

import re
from functools import partial

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compat_tests.config import RNNConfig
from compat_tests.judge.metrics import error_stats
from compat_tests.tests.helpers import _foreign_onnx, _no_initial_state, _onnxruntime


onnx = pytest.importorskip("onnx", reason="ONNX graphs need the onnx package (the test extra)")


onnxruntime = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from compat_tests.interop import onnx_stack  # noqa: E402


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


INT64 = np.iinfo(np.int64)


dims = st.lists(st.integers(1, 5), min_size=1, max_size=4)


bound = st.one_of(st.integers(-7, 7), st.sampled_from([INT64.max, INT64.min, -INT64.max]))


def _onnx(op: str, inputs: dict[str, np.ndarray | None], attrs: dict, opset: int) -> np.ndarray:
    """What onnxruntime computes for one ``op`` node at ``opset`` (an input given as None: left out)."""
    node = helper.make_node(op, [k if v is not None else "" for k, v in inputs.items()], ["out"], **attrs)
    fed = {k: v for k, v in inputs.items() if v is not None}
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                                                          v.shape) for k, v in fed.items()],
                              [helper.make_tensor_value_info("out", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, fed)[0]


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype and np.array_equal(got, want), (got, want)


@given(dims, st.one_of(st.none(), st.integers(-6, 6)), st.one_of(st.none(), st.integers(-6, 6)))
def test_shape_takes_the_dims_onnx_does(shape, start, end):
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    data = np.zeros(shape, np.int64)
    _same(onnx_stack._shape(attrs, data.shape), _onnx("Shape", {"data": data}, attrs, 21))


@st.composite
def slices(draw, attribute_form: bool):
    """A tensor and Slice bounds over some of its axes (steps only in the input form, opset 10 on)."""
    shape = draw(dims)
    data = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    axes = draw(st.permutations(range(len(shape))).map(lambda p: p[: draw(st.integers(1, len(shape)))]))
    axes = [k - len(shape) if draw(st.booleans()) else k for k in axes]  # negative axes as well
    starts, ends = (draw(st.lists(bound, min_size=len(axes), max_size=len(axes))) for _ in range(2))
    steps = None if attribute_form else draw(st.lists(st.sampled_from([-3, -2, -1, 1, 2, 3]), min_size=len(axes),
                                                      max_size=len(axes)))
    return data, starts, ends, axes, steps


@given(slices(attribute_form=False), st.booleans())
def test_slice_takes_the_elements_onnx_does(drawn, with_axes):
    data, starts, ends, axes, steps = drawn
    if not with_axes:  # axes default to 0, 1, ...: bounds for the leading axes
        axes = list(range(len(axes)))
    bounds = {"starts": starts, "ends": ends, "axes": axes if with_axes else None, "steps": steps}
    arrays = {k: None if v is None else np.array(v, np.int64) for k, v in bounds.items()}
    want = _onnx("Slice", {"data": data, **arrays}, {}, 13)
    got = onnx_stack._slice({}, [data, *arrays.values()])
    _same(got, want)


@given(slices(attribute_form=True))
def test_opset_9_slice_attributes_take_the_elements_onnx_does(drawn):
    data, starts, ends, axes, _ = drawn
    attrs = {"starts": starts, "ends": ends, "axes": axes}
    _same(onnx_stack._slice(attrs, [data]), _onnx("Slice", {"data": data}, attrs, 9))


@given(dims, st.data())
def test_gather_takes_the_elements_onnx_does(shape, data):
    tensor = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[axis]
    indices = np.array(data.draw(st.one_of(st.integers(-n, n - 1),
                                           st.lists(st.integers(-n, n - 1), min_size=1, max_size=3))), np.int64)
    _same(onnx_stack._gather({"axis": axis}, [tensor, indices]),
          _onnx("Gather", {"data": tensor, "indices": indices}, {"axis": axis}, 13))


@given(st.sampled_from(["Add", "Sub", "Mul"]), st.lists(st.integers(-1000, 1000), min_size=1, max_size=4),
       st.integers(-1000, 1000))
def test_integer_arithmetic_computes_what_onnx_does(op, a, b):
    a, b = np.array(a, np.int64), np.array([b], np.int64)  # broadcast as ONNX's multidirectional rule
    _same(onnx_stack._SHAPE_OPS[op]({}, [a, b]), _onnx(op, {"A": a, "B": b}, {}, 14))


def test_integer_arithmetic_and_casts_refuse_to_wrap_around():
    """ONNX's int64 arithmetic wraps around silently; a shape that did would be nonsense, so it is refused."""
    big = np.array([INT64.max], np.int64)
    with pytest.raises(ValueError, match="overflow int64"):
        onnx_stack._SHAPE_OPS["Mul"]({}, [big, np.array([2], np.int64)])
    with pytest.raises(ValueError, match="overflow int32"):
        onnx_stack._SHAPE_OPS["Cast"]({"to": TensorProto.INT32}, [np.array([2**31], np.int64)])
