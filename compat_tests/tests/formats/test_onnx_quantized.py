"""onnxruntime's dynamically quantized LSTMs (``com.microsoft.DynamicQuantizeLSTM``): refused as they are, read
with ``--dequantize`` as float LSTMs over the dequantized weights (measured against onnxruntime's own
output), and damaged quantized nodes refused naming them."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

from compat_tests import cli
from compat_tests.interop import convert, onnx_dequantize
from compat_tests.tests.helpers import LSTM_INITS, model

onnx = pytest.importorskip("onnx", reason="ONNX graphs need the onnx package (the test extra)")


onnxruntime = pytest.importorskip("onnxruntime")


torch = pytest.importorskip("torch")


ort = pytest.importorskip("onnxruntime")


quantization = pytest.importorskip("onnxruntime.quantization")
from onnx import helper  # noqa: E402

from compat_tests.interop.onnx_model import import_model  # noqa: E402

T, B, I, H, L = 7, 3, 5, 16, 2


def _models(tmp_path, per_channel: bool):
    """A two-layer bidirectional ``nn.LSTM`` exported to ONNX, and onnxruntime's dynamic quantization of it."""
    torch.manual_seed(3)
    lstm = torch.nn.LSTM(I, H, L, bidirectional=True).eval()
    stream = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter announces its deprecation
        torch.onnx.export(lstm, (torch.zeros(T, B, I),), stream, dynamo=False, opset_version=17, input_names=["x"])
    (tmp_path / "float.onnx").write_bytes(stream.getvalue())
    quantization.quantize_dynamic(tmp_path / "float.onnx", tmp_path / "int8.onnx", per_channel=per_channel,
                                  weight_type=quantization.QuantType.QInt8)
    return lstm, tmp_path / "float.onnx", tmp_path / "int8.onnx"


def _ort(path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_a_dynamically_quantized_lstm_is_refused_by_name():
    """onnxruntime's ``com.microsoft.DynamicQuantizeLSTM`` (what ``quantize_dynamic`` makes of an LSTM)."""
    node = helper.make_node("DynamicQuantizeLSTM", ["X", "W", "R", "B"], ["Y"], domain="com.microsoft",
                            hidden_size=LSTM_INITS["R"].shape[2], name="qlstm")
    proto = model([node], ("Y",), LSTM_INITS)
    proto.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(ValueError, match=r"holds node qlstm, a com.microsoft DynamicQuantizeLSTM, which is not read: "
                                         r"its weights are int8"):
        import_model(proto)


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_a_quantized_lstm_reads_only_dequantized_and_runs_near_onnxruntimes_own(tmp_path, per_channel):
    """Refused as it is; dequantized, each weight lies within half a quantization step of PyTorch's float
    weight (the rounding ``quantize_dynamic`` made), and the model's output lies nearer onnxruntime's own
    output on the quantized model than the float model's does (what is left is onnxruntime's quantization
    of the inputs at run time)."""
    lstm, float_path, int8_path = _models(tmp_path, per_channel)
    assert "DynamicQuantizeLSTM" in {n.op_type for n in onnx.load(int8_path).graph.node}
    with pytest.raises(ValueError, match="DynamicQuantizeLSTM, which is not read: .*--dequantize"):
        convert.read("auto", int8_path)
    read = convert.read("auto", int8_path, {"dequantize": True})
    exact = convert.read("auto", float_path)
    assert read.note == onnx_dequantize.NOTE and exact.note is None
    assert repr(read.model) == repr(exact.model)
    proto = onnx.load(int8_path)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    for node in (n for n in proto.graph.node if n.op_type == "DynamicQuantizeLSTM"):
        for quantized, scale in ((node.input[1], node.input[8]), (node.input[2], node.input[10])):
            assert inits[quantized].dtype == np.int8 and inits[scale].shape == ((2, 4 * H) if per_channel else (2,))
    steps = [np.max(inits[n.input[k]]) for n in proto.graph.node if n.op_type == "DynamicQuantizeLSTM" for k in (8, 10)]
    for got, want in zip(read.weights, exact.weights):
        assert np.max(np.abs(got - want)) <= max(steps) / 2 * (1 + 1e-6)
    x = np.random.default_rng(4).uniform(-1, 1, (T, B, I)).astype(np.float32)
    model = read.model
    dequantized = model.forward(x, None, model.canonical_to_params(read.weights, read.biases), is_training=False).output
    onnxruntime_int8, onnxruntime_float = _ort(int8_path, x), _ort(float_path, x)
    ours = np.max(np.abs(dequantized.reshape(onnxruntime_int8.shape) - onnxruntime_int8))
    quantization_error = np.max(np.abs(onnxruntime_float - onnxruntime_int8))
    assert 0 < ours < quantization_error, (ours, quantization_error)


def test_dequantize_is_said_in_the_output_and_refused_where_there_is_nothing_to_dequantize(tmp_path, capsys):
    _, float_path, int8_path = _models(tmp_path, per_channel=False)
    np.save(tmp_path / "x.npy", np.zeros((T, B, I), np.float32))
    assert cli.main(["infer", str(int8_path), str(tmp_path / "x.npy"), "--out", str(tmp_path / "y.npz")]) == 2
    assert "--dequantize" in capsys.readouterr().err
    assert cli.main(["infer", str(int8_path), str(tmp_path / "x.npy"), "--dequantize",
                     "--out", str(tmp_path / "y.npz")]) == 0
    assert "note: " in capsys.readouterr().err
    with np.load(tmp_path / "y.npz", allow_pickle=False) as y:
        assert str(y["note"]) == onnx_dequantize.NOTE
    assert cli.main(["infer", str(int8_path), str(tmp_path / "x.npy"), "--dequantize", "--state",
                     str(tmp_path / "y.npz"), "--out", str(tmp_path / "z.npz")]) == 2  # bidirectional: no next chunk
    assert "cannot seed a bidirectional model's next chunk" in capsys.readouterr().err
    with pytest.raises(ValueError, match="holds no com.microsoft DynamicQuantizeLSTM node"):
        convert.read("auto", float_path, {"dequantize": True})
    with pytest.raises(ValueError, match="dequantize applies to ONNX files"):
        convert.read("auto", tmp_path / "y.npz", {"dequantize": True})


@pytest.mark.parametrize("change, message", [
    (lambda inits, node: inits.__setitem__(node.input[8], np.ones(3, np.float32)), r"W_scale must be \[2\]"),
    (lambda inits, node: inits.__setitem__(node.input[1], inits[node.input[1]].astype(np.float32)),
     "W must be int8 or uint8"),
    (lambda inits, node: inits.__setitem__(node.input[9], inits[node.input[9]].astype(np.uint8)),
     "W_zero_point int8, got float32 and uint8"),
    (lambda inits, node: inits.__setitem__(node.input[10], np.full(2, np.inf, np.float32)),
     "R_scale holds a value that is not finite"),
], ids=["scale-shape", "float-weights", "zero-point-type", "infinite-scale"])
def test_a_damaged_quantized_node_is_refused_naming_it(tmp_path, change, message):
    _, _, int8_path = _models(tmp_path, per_channel=False)
    proto = onnx.load(int8_path)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    node = next(n for n in proto.graph.node if n.op_type == "DynamicQuantizeLSTM")
    change(inits, node)
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(onnx.numpy_helper.from_array(v, k) for k, v in inits.items())
    onnx.save(proto, tmp_path / "bad.onnx")
    with pytest.raises(ValueError, match=message) as refused:
        convert.read("auto", tmp_path / "bad.onnx", {"dequantize": True})
    assert "bad.onnx" in str(refused.value)
