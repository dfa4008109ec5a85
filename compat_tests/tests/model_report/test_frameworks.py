"""A user's model file run in its own framework (``compat_tests.model_report.frameworks``): ONNX graphs that
PyTorch's exporter and our own exporter write, run whole in onnxruntime, give what the PyTorch module computes;
a Keras model with a head gives its recurrent layer's sequence, as a sub-model built here computes it;
TorchScript archives give what the module returns; files that hold no function, or would run their own code,
or keep their tensors in other files, are refused naming why."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from compat_tests.model_report import frameworks as fw

torch = pytest.importorskip("torch")
# torch.jit's and the TorchScript exporter's announcements of their own deprecation, and tracing's notes
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:torch"),
              pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")]

T, B, I, H = 5, 3, 3, 4
X = np.random.default_rng(7).uniform(-1, 1, (T, B, I)).astype(np.float32)


def _module(cls, layers, bidirectional, batch_first=False, seed=0):
    torch.manual_seed(seed)
    return cls(I, H, layers, bidirectional=bidirectional, batch_first=batch_first).eval()


def _torch_run(module, x, batch_first=False, lengths=None):
    """The module's own ``(output [T, B, D*H], h_n [L*D, B, H])`` on time-major ``x``."""
    xt = torch.from_numpy(np.ascontiguousarray(x.transpose(1, 0, 2) if batch_first else x))
    with torch.no_grad():
        if lengths is None:
            y, h = module(xt)
        else:
            packed = torch.nn.utils.rnn.pack_padded_sequence(xt, torch.from_numpy(lengths), batch_first=batch_first,
                                                             enforce_sorted=False)
            y, h = module(packed)
            y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=batch_first, total_length=x.shape[0])
    y = y.numpy()
    return (y.transpose(1, 0, 2) if batch_first else y), (h[0] if isinstance(h, tuple) else h).numpy()


def _export(module, path, batch_first=False, wrap=None):
    """``torch.onnx.export`` (the TorchScript exporter) of ``module`` (or of ``wrap``, a module around it)."""
    pytest.importorskip("onnx")
    x = torch.from_numpy(np.ascontiguousarray(X.transpose(1, 0, 2) if batch_first else X))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter announces its deprecation
        torch.onnx.export(wrap or module, (x,), str(path), dynamo=False)
    return path


@pytest.mark.parametrize("cls, layers, bidirectional, batch_first", [
    (torch.nn.LSTM, 2, True, False), (torch.nn.GRU, 1, False, True), (torch.nn.GRU, 2, True, True),
    (torch.nn.RNN, 2, False, False)], ids=lambda v: getattr(v, "__name__", str(v)))
def test_an_onnx_export_runs_in_onnxruntime_as_its_pytorch_module(tmp_path, cls, layers, bidirectional,
                                                                   batch_first):
    """The exported graph's outputs are its own, not ours (PyTorch's exporter ends in Concat/Transpose nodes):
    the last node's Y and every node's Y_h, in our layout, match the module within 1e-5; a batch_first
    module's graph (a Transpose before a layout=0 node) is fed batch-major."""
    pytest.importorskip("onnxruntime")
    module = _module(cls, layers, bidirectional, batch_first)
    run = fw.run_file(_export(module, tmp_path / "m.onnx", batch_first), "onnx", X, None, {})
    want_y, want_h = _torch_run(module, X, batch_first)
    D = 2 if bidirectional else 1
    assert run.framework.startswith("onnxruntime ") and run.framework.split()[1][0].isdigit()
    assert run.output.shape == (T, B, D * H) and run.output_h.shape == (layers * D, B, H)
    np.testing.assert_allclose(run.output, want_y, atol=1e-5)
    np.testing.assert_allclose(run.output_h, want_h, atol=1e-5)


class _Doubled(torch.nn.Module):
    """``rnn(2 * x)``: a Mul between the graph's input and the recurrent nodes, which the layout trace stops at."""

    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x):
        return self.rnn(2 * x)


def test_a_batch_major_graph_the_trace_cannot_follow_is_told_by_its_static_dims(tmp_path):
    """Mul then Transpose before the node: the static input dims [B, T, I] = [3, 5, 3] say batch-major."""
    pytest.importorskip("onnxruntime")
    module = _module(torch.nn.GRU, 1, True, batch_first=True)
    path = _export(module, tmp_path / "m.onnx", batch_first=True, wrap=_Doubled(module))
    run = fw.run_file(path, "onnx", X, None, {})
    want_y, want_h = _torch_run(module, 2 * X, batch_first=True)
    np.testing.assert_allclose(run.output, want_y, atol=1e-5)
    np.testing.assert_allclose(run.output_h, want_h, atol=1e-5)


def test_lengths_go_to_the_graphs_sequence_lens_and_initial_states_are_fed_zeros(tmp_path):
    """Our own exporter's graph (inputs sequence_lens, initial_h, initial_c; a node per layer): the lengths
    reach it, so the output is zero past each length and h_n is each sequence's last valid step's, as
    PyTorch computes on the packed sequence."""
    pytest.importorskip("onnxruntime")
    from compat_tests.interop import convert

    module = _module(torch.nn.LSTM, 2, True)
    torch.save(module.state_dict(), tmp_path / "sd.pt")
    read = convert.read("torch", tmp_path / "sd.pt")
    convert.write("onnx", tmp_path / "ours.onnx", read.model, read.weights, read.biases)
    lengths = np.array([5, 2, 4], np.int64)
    run = fw.run_file(tmp_path / "ours.onnx", "onnx", X, lengths, {})
    want_y, want_h = _torch_run(module, X, lengths=lengths)
    assert not run.output[2:, 1].any()
    np.testing.assert_allclose(run.output, want_y, atol=1e-5)
    np.testing.assert_allclose(run.output_h, want_h, atol=1e-5)


def test_a_graph_without_sequence_lens_ignores_the_lengths_and_its_own_outputs_come_back(tmp_path):
    pytest.importorskip("onnxruntime")
    module = _module(torch.nn.GRU, 1, False)
    run = fw.run_file(_export(module, tmp_path / "m.onnx"), "onnx", X, np.array([5, 2, 4]), {})
    want_y, _ = _torch_run(module, X)  # the whole sequences: the graph had nowhere to take the lengths
    np.testing.assert_allclose(run.output, want_y, atol=1e-5)
    assert run.output[2:, 1].any()


def test_an_onnx_file_with_external_data_is_refused_before_anything_is_opened(tmp_path):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    proto = onnx.load(str(_export(_module(torch.nn.GRU, 1, False), tmp_path / "m.onnx")))
    path = tmp_path / "external.onnx"
    onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin",
                    size_threshold=0)
    assert (tmp_path / "w.bin").exists()
    os.remove(tmp_path / "w.bin")  # a read of it would fail otherwise than the refusal
    with pytest.raises(ValueError, match="another file") as info:
        fw.run_file(path, "onnx", X, None, {})
    assert str(path) in str(info.value) and "w.bin" in str(info.value)


def test_a_graph_input_of_no_known_role_is_refused_naming_it(tmp_path):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    proto = onnx.load(str(_export(_module(torch.nn.GRU, 1, False), tmp_path / "m.onnx")))
    proto.graph.input.append(onnx.helper.make_tensor_value_info("mystery", onnx.TensorProto.FLOAT, [2]))
    onnx.save(proto, str(tmp_path / "odd.onnx"))
    with pytest.raises(ValueError, match="'mystery'"):
        fw.run_file(tmp_path / "odd.onnx", "onnx", X, None, {})


def _keras():
    os.environ.setdefault("KERAS_BACKEND", "torch")
    pytest.importorskip("h5py")
    return pytest.importorskip("keras")


def test_a_keras_model_with_a_head_gives_its_last_recurrent_layers_sequence(tmp_path):
    """Bidirectional GRU -> LSTM -> Dense: the LSTM's sequence, as a sub-model built here computes it (not the
    Dense head's output, which is of another width); no layer returns its state, so no output_h."""
    keras = _keras()
    keras.utils.set_random_seed(1)
    inp = keras.Input((None, I))
    hidden = keras.layers.LSTM(H, return_sequences=True)(
        keras.layers.Bidirectional(keras.layers.GRU(H, return_sequences=True))(inp))
    model = keras.Model(inp, keras.layers.Dense(2)(hidden))
    model.save(tmp_path / "m.keras")
    run = fw.run_file(tmp_path / "m.keras", "keras", X, None, {})
    want = keras.ops.convert_to_numpy(keras.Model(inp, hidden)(X.transpose(1, 0, 2))).transpose(1, 0, 2)
    assert run.framework.startswith("keras ") and "backend" in run.framework
    assert run.output.shape == (T, B, H) and run.output_h is None
    np.testing.assert_allclose(run.output, want, atol=1e-6)


def test_a_keras_layer_returning_its_last_step_gives_final_states_not_a_sequence(tmp_path):
    """Sequential(Bidirectional(LSTM) -> Dense), saved as .h5 too: the layer's last step is both directions'
    final state: output_h [2, B, H] (forward half, then backward), no output."""
    keras = _keras()
    keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.Input((T, I)), keras.layers.Bidirectional(keras.layers.LSTM(H)),
                              keras.layers.Dense(1)])
    last = keras.ops.convert_to_numpy(keras.Model(model.inputs[0], model.layers[0].output)(X.transpose(1, 0, 2)))
    model.save(tmp_path / "m.keras")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save(tmp_path / "m.h5")  # (the legacy format, which Keras warns of)
    for name in ("m.keras", "m.h5"):
        assert fw.unavailable(tmp_path / name, "keras") is None
        run = fw.run_file(tmp_path / name, "keras", X, None, {})
        assert run.output is None and run.output_h.shape == (2, B, H)
        np.testing.assert_allclose(run.output_h, np.stack([last[:, :H], last[:, H:]]), atol=1e-6)


def test_torchscript_archives_run_as_their_modules(tmp_path):
    """A traced batch_first GRU (its batch_first only a constant of the trace), a bare scripted nn.LSTM (no
    forward, its overloads) give the module's output and h_n; a scripted model with a Linear head, whose
    output is not [T, B, D*H], gives neither; a module returning the GRU's (output, h_n) gives h_n."""
    gru = _module(torch.nn.GRU, 2, True, batch_first=True)
    torch.jit.save(torch.jit.trace(gru, torch.zeros(B, T, I)), tmp_path / "traced.pt")
    lstm = _module(torch.nn.LSTM, 2, False, seed=3)
    torch.jit.save(torch.jit.script(lstm), tmp_path / "scripted.pt")
    torch.jit.save(torch.jit.script(torch.nn.Sequential(torch.nn.Linear(I, 4))), tmp_path / "linear.pt")
    for name, module, batch_first in (("traced.pt", gru, True), ("scripted.pt", lstm, False)):
        assert fw.unavailable(tmp_path / name, "torch") is None
        run = fw.run_file(tmp_path / name, "torch", X, None, {})
        want_y, want_h = _torch_run(module, X, batch_first)
        assert run.framework.startswith("torch ") and run.framework.endswith("(TorchScript)")
        np.testing.assert_allclose(run.output, want_y, atol=1e-6)
        np.testing.assert_allclose(run.output_h, want_h, atol=1e-6)
    with pytest.raises(ValueError, match="no nn.LSTM, nn.GRU or nn.RNN"):
        fw.run_file(tmp_path / "linear.pt", "torch", X, None, {})

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn, self.head = _module(torch.nn.GRU, 1, False), torch.nn.Linear(H, 2)

        def forward(self, x):
            return self.head(self.rnn(x)[0])

    torch.jit.save(torch.jit.script(Net()), tmp_path / "net.pt")
    assert fw.run_file(tmp_path / "net.pt", "torch", X, None, {})[1:] == (None, None)  # [T, B, 2]: the head's
    torch.jit.save(torch.jit.script(_Doubled(_module(torch.nn.GRU, 1, False))), tmp_path / "tuple.pt")
    assert fw.run_file(tmp_path / "tuple.pt", "torch", X, None, {}).output_h.shape == (1, B, H)


def test_files_that_cannot_run_in_their_framework_say_why(tmp_path):
    module = _module(torch.nn.GRU, 1, False)
    torch.save(module.state_dict(), tmp_path / "sd.pt")
    torch.save({"model": module.state_dict(), "epoch": 3}, tmp_path / "ck.pt")
    torch.save(module, tmp_path / "whole.pt")
    np.savez(tmp_path / "sd.npz", **{k: v.numpy() for k, v in module.state_dict().items()})
    for name in ("sd.pt", "ck.pt", "sd.npz"):
        assert fw.unavailable(tmp_path / name, "torch").startswith("a state_dict holds weights, not the function")
    assert "pickled module runs its own code" in fw.unavailable(tmp_path / "whole.pt", "torch")
    with pytest.raises(ValueError, match="pickled module") as info:
        fw.run_file(tmp_path / "whole.pt", "torch", X, None, {})
    assert str(tmp_path / "whole.pt") in str(info.value)
    assert "TensorFlow" in fw.unavailable(tmp_path / "frozen.pb", "tf")
    assert "TensorFlow" in fw.unavailable(tmp_path / "model.ckpt", "checkpoint")
    assert fw.framework_of(tmp_path / "frozen.pb", "tf") == "tensorflow"
    assert [fw.framework_of(tmp_path / "f", f) for f in ("onnx", "keras", "torch")] == ["onnxruntime", "keras",
                                                                                        "torch"]
    with pytest.raises(ValueError, match="unknown format"):
        fw.framework_of(tmp_path / "f", "caffe")
    with pytest.raises(TypeError, match=r"\[T, B, input_size\]"):
        fw.run_file(tmp_path / "sd.pt", "torch", X[0], None, {})
    keras = _keras()
    model = keras.Sequential([keras.Input((T, I)), keras.layers.LSTM(H)])
    model.save_weights(tmp_path / "m.weights.h5")
    assert "holds no architecture" in fw.unavailable(tmp_path / "m.weights.h5", "keras")
    os.rename(tmp_path / "m.weights.h5", tmp_path / "w.h5")  # weights alone: no model_config attribute
    assert "holds no architecture" in fw.unavailable(tmp_path / "w.h5", "keras")
