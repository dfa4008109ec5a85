"""ONNX graphs as exporters write them: PyTorch's TorchScript and dynamo exporters (single graphs and the
TORCHSCRIPT_SWEEP / DYNAMO_SWEEP sweeps) load as their modules, and weights given by Constant nodes or small
constant subgraphs (as tf2onnx/keras2onnx-like exporters write them) are folded from the file alone."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

from compat_tests.config import Outputs, RNNConfig, make_case
from compat_tests.judge.compare import assert_agree_within_policy
from compat_tests.run import run_reference
from compat_tests.tests.helpers import (
    DYNAMO_SWEEP,
    GRU_W,
    LSTM_INITS,
    LSTM_W,
    TORCHSCRIPT_SWEEP,
    B,
    H,
    I,
    T,
    X,
    _lstm_node,
    _onnxruntime,
    model,
    ort_run,
    reference_run,
)
from reference.formats import torch as torch_format


onnx = pytest.importorskip("onnx", reason="ONNX graphs need the onnx package (the test extra)")


onnxruntime = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from compat_tests.interop.onnx_model import import_model  # noqa: E402


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


def const(name: str, array) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(array), name))


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
