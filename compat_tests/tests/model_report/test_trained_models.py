"""The trained models of ``conftest.py`` are what they claim to be: trained (the task loss fell, the LSTM's
gates saturate), each correct export or port computes what its PyTorch module does in its own framework
(onnxruntime, Keras), which proves the hand-written ports independently of the project, each broken one
does not, by far more than rounding, and the ONNX graphs are the single recurrent nodes the exporter
writes. Every file is offered to the project's reader (``convert.read``)."""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import DIAGNOSES, MODES, TASK_T, drawn_input, import_keras, task_batch, torch_module

torch = pytest.importorskip("torch")

SAME = 1e-5  # a correct file against its module: float32 rounding
APART = 1e-3  # a broken file against its module: far more than rounding
SATURATED = 0.05  # a sigmoid's activation below it or above 1 - it is saturated
GOOD_SHARE = 0.05  # the share of the trained LSTM's input and forget gate activations that saturate, at least
X_T, X_B, X_SEED = 20, 5, 11  # the drawn input every file runs on
NODES = {"lstm": "LSTM", "gru": "GRU", "classic_gru": "GRU", "relu": "RNN", "tanh": "RNN"}


def _torch_run(module, x: np.ndarray, lengths: np.ndarray | None = None) -> list[np.ndarray]:
    """A time-major module's ``[output [T, B, D*H], h_n (, c_n)]`` on time-major ``x``; with ``lengths``, on
    the packed sequences (``pack_padded_sequence``), the output zero past each length."""
    xt = torch.from_numpy(x)
    with torch.no_grad():
        if lengths is None:
            y, state = module(xt)
        else:
            packed = torch.nn.utils.rnn.pack_padded_sequence(xt, torch.from_numpy(lengths), enforce_sorted=False)
            y, state = module(packed)
            y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=x.shape[0])
    return [a.numpy() for a in (y, *(state if isinstance(state, tuple) else (state,)))]


def _onnx_run(path, x: np.ndarray) -> list[np.ndarray]:
    """The graph at ``path`` run whole in onnxruntime on ``X = x``: its outputs ``Y, Y_h (, Y_c)``."""
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"X": x})


def _keras_run(path, x: np.ndarray) -> np.ndarray:
    """The Keras model at ``path`` run on time-major ``x`` (batch-major for Keras): its time-major output."""
    keras = import_keras()
    model = keras.saving.load_model(path)
    return np.asarray(keras.ops.convert_to_numpy(model(x.transpose(1, 0, 2), training=False))).transpose(1, 0, 2)


def _own_run(entry, x: np.ndarray) -> np.ndarray:
    """A unidirectional 1-layer file's output sequence ``[T, B, H]``, run in its own framework."""
    return _onnx_run(entry.path, x)[0] if entry.fmt == "onnx" else _keras_run(entry.path, x)


def _gap(a: np.ndarray, b: np.ndarray) -> float:
    """The largest difference of ``a`` from ``b``, in units of ``b``'s largest magnitude where that is over 1
    (a ReLU RNN's outputs grow)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))


def test_the_entries_are_the_promised_files(trained):
    """Every entry's file exists in its format; modes and diagnoses are the report's; a companion is a correct
    PyTorch file; only the lengths fault needs --lengths."""
    assert {"lstm_pt", "lstm2_pt", "gru_pt", "relu_pt", "bilstm_pt", "lstm_onnx", "gru_onnx", "relu_onnx",
            "gru_onnx_textbook", "lstm_onnx_reversed", "lstm_onnx_nolengths", "lstm_keras_port",
            "lstm_keras_swapped", "lstm_keras_doubled", "lstm_keras_hard_sigmoid", "gru_keras_port", "lstm_keras",
            "gru_keras", "relu_keras"} == set(trained)
    for name, entry in trained.items():
        assert entry.path.is_file() and entry.path.stat().st_size > 0, name
        assert entry.path.suffix == {"torch": ".pt", "onnx": ".onnx", "keras": ".keras"}[entry.fmt], name
        assert entry.mode in MODES and (entry.expect is None or entry.expect in DIAGNOSES), name
        assert entry.lengths == (entry.expect == "lengths_ignored"), name
        if entry.companion is not None:
            companion = trained[entry.companion]
            assert companion.fmt == "torch" and companion.expect is None, name
        assert (entry.expect is None) or entry.companion is not None, name


def test_every_trained_model_s_loss_fell_at_least_twofold(training_losses):
    """Training did train: each model's task loss at the end is at most half its first."""
    assert set(training_losses) == {"lstm_pt", "lstm2_pt", "gru_pt", "relu_pt", "bilstm_pt", "lstm_keras",
                                    "gru_keras", "relu_keras"}
    unfallen = {name: (first, last) for name, (first, last) in training_losses.items() if not last <= first / 2}
    assert unfallen == {}


def _lstm_gates(state: dict, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Layer 0 (forward) of an ``nn.LSTM`` of state_dict ``state`` run in NumPy (float64) on time-major ``x``:
    its input and forget gates' activations ``[2, T, B, H]`` and its output sequence ``[T, B, H]``."""
    w, r = state["weight_ih_l0"].astype(np.float64), state["weight_hh_l0"].astype(np.float64)
    b = (state["bias_ih_l0"] + state["bias_hh_l0"]).astype(np.float64)
    units = r.shape[1]
    h = c = np.zeros((x.shape[1], units))
    gates, ys = [], []
    for x_t in x.astype(np.float64):
        i, f, g, o = np.split(x_t @ w.T + h @ r.T + b, 4, axis=-1)
        i, f, o = (1 / (1 + np.exp(-v)) for v in (i, f, o))
        c = f * c + i * np.tanh(g)
        h = o * np.tanh(c)
        gates.append((i, f))
        ys.append(h)
    assert units * 4 == w.shape[0]
    return np.stack(gates, axis=1), np.stack(ys)


def _saturated_share(gates: np.ndarray) -> float:
    return float(np.mean((gates < SATURATED) | (gates > 1 - SATURATED)))


@pytest.mark.parametrize("name", ["lstm_pt"])
def test_the_trained_lstm_s_gates_saturate(trained_torch, name):
    """On the task's inputs, a good share (:data:`GOOD_SHARE`) of the trained LSTM's first layer's input and
    forget gate activations saturate (below 0.05 or above 0.95), where the same module untrained saturates
    almost none; the gates are measured in NumPy, whose run gives the module's own output."""
    module = trained_torch[name]
    x, _ = task_batch(TASK_T, 64, module.input_size, np.random.default_rng(1234))
    state = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    gates, y = _lstm_gates(state, x)
    if module.num_layers == 1:  # the NumPy run is the module's (its forward direction)
        assert _gap(y, _torch_run(module, x)[0][..., :module.hidden_size]) < SAME
    share = _saturated_share(gates)
    torch.manual_seed(0)
    fresh = {k: v.detach().numpy() for k, v in torch_module("lstm", module.hidden_size).state_dict().items()}
    untrained = _saturated_share(_lstm_gates(fresh, x)[0])
    assert share >= GOOD_SHARE and untrained < GOOD_SHARE / 5, (share, untrained)


@pytest.mark.parametrize("name", ["lstm_onnx", "gru_onnx", "relu_onnx"])
def test_each_correct_onnx_export_runs_as_its_module_in_onnxruntime(trained, trained_torch, name):
    """A single LSTM, GRU or RNN node (not an unrolled loop), with no sequence_lens, whose graph computes in
    onnxruntime what the PyTorch module computes: ``Y``, ``Y_h`` (and ``Y_c``) within 1e-5."""
    onnx = pytest.importorskip("onnx")
    entry = trained[name]
    proto = onnx.load(str(entry.path))
    (node,) = [n for n in proto.graph.node if n.op_type in ("LSTM", "GRU", "RNN")]
    assert node.op_type == NODES[entry.mode]
    assert not {"Loop", "Scan", "MatMul"} & {n.op_type for n in proto.graph.node}
    assert [i.name for i in proto.graph.input] == ["X"] and (len(node.input) < 5 or node.input[4] == "")
    x = drawn_input(3, X_T, X_B, X_SEED)
    want, got = _torch_run(trained_torch[entry.companion], x), _onnx_run(entry.path, x)
    assert len(got) == len(want) and all(_gap(g, w) < SAME for g, w in zip(got, want)), \
        [_gap(g, w) for g, w in zip(got, want)]


@pytest.mark.parametrize("name", ["lstm_keras_port", "gru_keras_port"])
def test_each_correct_keras_port_runs_as_its_module_in_keras(trained, trained_torch, name):
    """The hand-written port, loaded by Keras from its ``.keras`` file, computes the PyTorch module's output
    sequence within 1e-5: the conversion is right, independently of the project's."""
    entry = trained[name]
    x = drawn_input(3, X_T, X_B, X_SEED)
    gap = _gap(_keras_run(entry.path, x), _torch_run(trained_torch[entry.companion], x)[0])
    assert gap < SAME


@pytest.mark.parametrize("name, attribute, value", [("gru_onnx_textbook", "linear_before_reset", 0),
                                                    ("lstm_onnx_reversed", "direction", b"reverse"),
                                                    ("lstm_keras_swapped", None, None),
                                                    ("lstm_keras_doubled", None, None),
                                                    ("lstm_keras_hard_sigmoid", None, None)])
def test_each_broken_file_disagrees_with_its_module_in_its_own_framework(trained, trained_torch, name, attribute,
                                                                         value):
    """A broken file (an ONNX node's attribute changed, a Keras port's gates swapped or bias doubled) runs in
    its own framework far (> 1e-3) from the module it came from."""
    entry = trained[name]
    if attribute is not None:
        onnx = pytest.importorskip("onnx")
        (node,) = [n for n in onnx.load(str(entry.path)).graph.node if n.op_type in ("LSTM", "GRU", "RNN")]
        assert node.op_type == NODES[entry.mode]
        assert {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}[attribute] == value
    x = drawn_input(3, X_T, X_B, X_SEED)
    gap = _gap(_own_run(entry, x), _torch_run(trained_torch[entry.companion], x)[0])
    assert gap > APART


def test_the_export_without_lengths_ignores_them(trained, trained_torch):
    """``lstm_onnx_nolengths`` takes no lengths (``X`` its only input, no ``sequence_lens``): run on padded
    input, its final hidden state is the module's on packed sequences (``pack_padded_sequence``) only where a
    sequence runs to the padded length, and far from it where one is shorter."""
    onnx = pytest.importorskip("onnx")
    entry = trained["lstm_onnx_nolengths"]
    proto = onnx.load(str(entry.path))
    (node,) = [n for n in proto.graph.node if n.op_type == "LSTM"]
    assert [i.name for i in proto.graph.input] == ["X"] and node.input[4] == ""
    x, lengths = drawn_input(3, X_T, X_B, X_SEED), np.array([X_T, 3, X_T, 9, 14][:X_B], np.int64)
    packed = _torch_run(trained_torch[entry.companion], x, lengths)
    _, y_h, y_c = _onnx_run(entry.path, x)
    full = lengths == X_T
    assert _gap(y_h[:, full], packed[1][:, full]) < SAME and _gap(y_c[:, full], packed[2][:, full]) < SAME
    assert all(_gap(y_h[:, k], packed[1][:, k]) > APART for k in np.flatnonzero(~full))


@pytest.mark.parametrize("name", ["lstm_keras", "gru_keras", "relu_keras"])
def test_the_keras_trained_models_are_keras_s_cudnn_style_layers(trained, name):
    """A model trained in Keras: LSTM (sigmoid, tanh), GRU with ``reset_after=True`` or a relu SimpleRNN, and a
    Dense head."""
    keras = import_keras()
    model = keras.saving.load_model(trained[name].path)
    recurrent, head = model.layers
    assert isinstance(recurrent, {"lstm_keras": keras.layers.LSTM, "gru_keras": keras.layers.GRU,
                                  "relu_keras": keras.layers.SimpleRNN}[name])
    assert isinstance(head, keras.layers.Dense) and recurrent.units == 8
    if name == "relu_keras":
        assert recurrent.activation.__name__ == "relu"
    else:
        assert getattr(recurrent, "reset_after", True) and recurrent.recurrent_activation.__name__ == "sigmoid"


# What the project's reader makes of each file, where it is not ``convert.read("auto", path, {})``'s model of
# the entry's mode: the options it needs, or its refusal (a model report judges such a file by its framework).
READ_OPTIONS = {"relu_pt": {"rnn_mode": "relu"}}  # a state_dict does not say relu or tanh
READ_REFUSED = {"lstm_onnx_reversed": "node /LSTM: direction 'reverse' has no cuDNN equivalent",
                "lstm_keras_hard_sigmoid": "hard_sigmoid"}


@pytest.mark.parametrize("name", sorted(["lstm_pt", "lstm2_pt", "gru_pt", "relu_pt", "bilstm_pt", "lstm_onnx",
                                         "gru_onnx", "relu_onnx", "gru_onnx_textbook", "lstm_onnx_reversed",
                                         "lstm_onnx_nolengths", "lstm_keras_port", "lstm_keras_swapped",
                                         "lstm_keras_doubled", "lstm_keras_hard_sigmoid", "gru_keras_port",
                                         "lstm_keras", "gru_keras", "relu_keras"]))
def test_the_project_s_reader_reads_each_file_as_its_mode(trained, name):
    """``convert.read("auto", path, options)`` reads each file as a model of the entry's mode, but for the files
    of :data:`READ_REFUSED`, which it refuses saying why (cuDNN cannot compute them)."""
    from compat_tests.interop import convert

    entry = trained[name]
    if name in READ_REFUSED:
        with pytest.raises(ValueError, match=READ_REFUSED[name]):
            convert.read("auto", entry.path, READ_OPTIONS.get(name, {}))
        return
    read = convert.read("auto", entry.path, READ_OPTIONS.get(name, {}))
    assert read.model.rnn_mode == entry.mode
