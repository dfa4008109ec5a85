"""The ONNX importer's shape arithmetic (``compat_tests.interop.onnx_stack``: what an exporter computes a
layout op's shape with) against onnxruntime, op by op, on Hypothesis-drawn integer tensors and attributes:
clamped and negative bounds, negative steps, the attribute form of opset 9's Slice, negative gather
indices, Shape's start and end. (Not against onnx's reference evaluator: its Slice slices as Python does,
which differs from the spec's clamping for a negative step whose start lies before the first element.)"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from compat_tests.interop import onnx_stack  # noqa: E402

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
