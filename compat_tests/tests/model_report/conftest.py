"""Trained recurrent models and their exports and ports, as files, for the model report's tests: correct ones,
which a report must pass, and deliberately broken ones, which it must fail with the diagnosis each names.

Training is here, in the fixture: a few hundred Adam steps of a small model on a task that needs memory
(:func:`task_batch`: the soft sign of a running sum of ±1 pulses, among noise), so that the weights are a
trained model's, larger than an initialiser's and with some gates saturated, not random ones. The ports to
Keras are written here by hand (:func:`keras_lstm_weights`, :func:`keras_gru_weights`), independently of the
project's converter, and proved against PyTorch in ``test_trained_models.py``.

Fixtures (session scope): ``trained`` (name -> :class:`Trained`), ``trained_torch`` (the name of each PyTorch
file -> its module, loaded back from the file), ``training_losses`` (the name of each trained model -> its
task loss at the first step and at the end). All of them need torch, onnx and keras (on the torch backend);
where one is missing, the tests that use them skip.
"""

from __future__ import annotations

import os
import shutil
import time
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

TASK_T, TASK_B = 24, 32  # the training task's sequence length and batch
PULSE_P = 0.5  # the chance of a pulse (±1, even odds) at each step of the task's channel 0
# Adam's learning rate. At 3e-2 and 300 steps, 7 to 14 in a hundred of the 1-layer LSTM's input and forget gate
# activations saturate (seeds 0-7); at 1e-2, 2 to 3 in a hundred; untrained, none.
TORCH_LR = 3e-2
KERAS_LR = 3e-2
TORCH_MODES = ("lstm", "gru", "rnn_relu", "rnn_tanh")
KERAS_KINDS = ("lstm", "gru", "relu")  # relu: a SimpleRNN(activation="relu")
MODES = ("lstm", "gru", "classic_gru", "relu", "tanh")  # our modes (Trained.mode)
DIAGNOSES = ("gru_variant", "gate_order", "bias_scale", "activation", "direction", "lengths_ignored")  # expect


class Trained(NamedTuple):
    """One model file of the ``trained`` fixture.

    ``path``: the file; ``fmt``: its format, ``"torch"`` (a ``torch.save``d state_dict), ``"onnx"`` or
    ``"keras"`` (a ``.keras`` model); ``mode``: the recurrent mode the file's own framework runs, one of
    :data:`MODES` (``"gru"``: cuDNN's and PyTorch's GRU, the reset gate applied after the recurrent matrix;
    ``"classic_gru"``: the textbook one); ``expect``: ``None`` for a correct file, else the diagnosis a
    report must give it, one of :data:`DIAGNOSES`; ``companion``: the name of the correct file this one is
    an export or port of (``None``: none, a model trained in its own framework); ``lengths``: whether the
    report must be run with ``--lengths`` to see the fault; ``note``: what the file is, in words."""

    path: Path
    fmt: str
    mode: str
    expect: str | None
    companion: str | None
    lengths: bool
    note: str


def task_batch(T: int, B: int, input_size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One batch of the training task, time-major float32: ``x [T, B, input_size]``, channel 0 a ±1 pulse at
    each step with chance :data:`PULSE_P` (else 0), the other channels standard normal noise; ``y [T, B, 1]``
    the soft sign of the running sum of the pulses, ``tanh(2 * cumsum)``: a model must count to answer."""
    pulses = rng.choice(np.array([-1.0, 0.0, 1.0]), size=(T, B), p=[PULSE_P / 2, 1 - PULSE_P, PULSE_P / 2])
    x = rng.standard_normal((T, B, input_size))
    x[..., 0] = pulses
    y = np.tanh(2.0 * np.cumsum(pulses, axis=0))[..., None]
    return x.astype(np.float32), y.astype(np.float32)


def drawn_input(input_size: int, T: int, B: int, seed: int) -> np.ndarray:
    """A time-major ``[T, B, input_size]`` float32 standard normal draw, the same for the same arguments."""
    return np.random.default_rng(seed).standard_normal((T, B, input_size)).astype(np.float32)


def torch_module(mode: str, num_layers: int = 1, hidden: int = 8, input_size: int = 3, bidirectional: bool = False,
                 batch_first: bool = False):
    """A fresh (PyTorch-initialised) ``nn.LSTM``, ``nn.GRU`` or ``nn.RNN`` for ``mode`` of
    :data:`TORCH_MODES` (``"rnn_relu"``, ``"rnn_tanh"``: ``nn.RNN`` of that nonlinearity)."""
    import torch

    kwargs = dict(num_layers=num_layers, bidirectional=bidirectional, batch_first=batch_first)
    if mode == "lstm":
        return torch.nn.LSTM(input_size, hidden, **kwargs)
    if mode == "gru":
        return torch.nn.GRU(input_size, hidden, **kwargs)
    if mode in ("rnn_relu", "rnn_tanh"):
        return torch.nn.RNN(input_size, hidden, nonlinearity=mode[4:], **kwargs)
    raise ValueError(f"unknown mode {mode!r}, expecting one of {', '.join(TORCH_MODES)}")


def train_torch(mode: str, num_layers: int = 1, hidden: int = 8, input_size: int = 3, bidirectional: bool = False,
                batch_first: bool = False, steps: int = 300, seed: int = 0, lr: float = TORCH_LR):
    """A recurrent module of ``mode`` (:data:`TORCH_MODES`) trained with a Linear head on :func:`task_batch`
    (``steps`` Adam steps of batch :data:`TASK_B`, MSE), on one thread (the caller's count restored), seeded
    (``torch.manual_seed(seed)``; the task's draws by ``seed`` too): the same weights for the same arguments on
    one machine. Returns the recurrent module alone, in eval mode, with ``losses``: the task loss at the first
    step and the mean over the last ten."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        rnn = torch_module(mode, num_layers, hidden, input_size, bidirectional, batch_first)
        head = torch.nn.Linear(hidden * (2 if bidirectional else 1), 1)
        optimizer = torch.optim.Adam([*rnn.parameters(), *head.parameters()], lr=lr)
        rng, losses = np.random.default_rng(seed), []
        for _ in range(steps):
            x, y = (torch.from_numpy(a) for a in task_batch(TASK_T, TASK_B, input_size, rng))
            if batch_first:
                x, y = x.transpose(0, 1), y.transpose(0, 1)
            out, _ = rnn(x)
            loss = torch.mean((head(out) - y) ** 2)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    finally:
        torch.set_num_threads(threads)
    rnn.losses = (losses[0], float(np.mean(losses[-10:])))
    return rnn.eval()


def import_keras():
    """Keras on the torch backend (``KERAS_BACKEND`` set to ``torch`` unless already set), or a skip where it,
    or h5py, which its files need, is missing."""
    os.environ.setdefault("KERAS_BACKEND", "torch")
    pytest.importorskip("h5py")
    return pytest.importorskip("keras")


def train_keras(kind: str, hidden: int = 8, input_size: int = 3, steps: int = 200, seed: int = 0,
                lr: float = KERAS_LR):
    """A Keras ``Sequential(Input((None, input_size)), LSTM, GRU or SimpleRNN(hidden, return_sequences=True),
    Dense(1))`` (``kind``: :data:`KERAS_KINDS`; the GRU Keras's default ``reset_after=True``, cuDNN's; the
    SimpleRNN of ``activation="relu"``) trained on
    :func:`task_batch` (batch-major; ``steps`` Adam steps of batch :data:`TASK_B`, MSE), seeded
    (``keras.utils.set_random_seed(seed)``). Returns the model with ``task_losses``: the task loss at the first
    step and the mean over the last ten (not ``losses``, which Keras's models own)."""
    keras = import_keras()
    if kind not in KERAS_KINDS:
        raise ValueError(f"unknown kind {kind!r}, expecting one of {', '.join(KERAS_KINDS)}")
    keras.utils.set_random_seed(seed)
    layer = {"lstm": lambda: keras.layers.LSTM(hidden, return_sequences=True),
             "gru": lambda: keras.layers.GRU(hidden, return_sequences=True),
             "relu": lambda: keras.layers.SimpleRNN(hidden, activation="relu", return_sequences=True)}[kind]()
    model = keras.Sequential([keras.Input((None, input_size)), layer, keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=lr), loss="mse")
    rng, losses = np.random.default_rng(seed), []
    for _ in range(steps):
        x, y = task_batch(TASK_T, TASK_B, input_size, rng)
        losses.append(float(model.train_on_batch(x.transpose(1, 0, 2), y.transpose(1, 0, 2))))
    model.task_losses = (losses[0], float(np.mean(losses[-10:])))
    return model


def _blocks(a: np.ndarray, order: tuple[int, ...], axis: int) -> np.ndarray:
    """``a``'s equal gate blocks along ``axis`` in ``order`` (indices of the blocks as ``a`` holds them)."""
    parts = np.split(a, len(order), axis=axis)
    return np.concatenate([parts[k] for k in order], axis=axis)


def keras_lstm_weights(state: dict, swap: tuple[int, int] | None = None, bias_scale: float = 1.0) -> list:
    """The weights ``[kernel [I, 4H], recurrent_kernel [H, 4H], bias [4H]]`` of a Keras LSTM computing what a
    1-layer unidirectional ``nn.LSTM`` of state_dict ``state`` (NumPy arrays) computes: both hold the gates
    in the order i, f, g (Keras's c), o, and both use sigmoid and tanh, so kernel = W_ih.T, recurrent_kernel
    = W_hh.T, bias = b_ih + b_hh. Broken on request: ``swap`` exchanges two gate blocks (in all three),
    ``bias_scale`` multiplies the bias."""
    order = [0, 1, 2, 3]
    if swap is not None:
        order[swap[0]], order[swap[1]] = order[swap[1]], order[swap[0]]
    w_ih, w_hh = state["weight_ih_l0"], state["weight_hh_l0"]
    bias = bias_scale * (state["bias_ih_l0"] + state["bias_hh_l0"])
    return [_blocks(w_ih, order, 0).T, _blocks(w_hh, order, 0).T, _blocks(bias, order, 0)]


def keras_gru_weights(state: dict) -> list:
    """The weights ``[kernel [I, 3H], recurrent_kernel [H, 3H], bias [2, 3H]]`` of a Keras GRU with
    ``reset_after=True`` computing what a 1-layer unidirectional ``nn.GRU`` of state_dict ``state`` computes:
    PyTorch holds the gates r, z, n, Keras z, r, h, so each matrix's blocks are reordered (z, r, n) and
    transposed, and the bias rows are [b_ih, b_hh] reordered alike (the second the recurrent one, inside the
    reset gate's product, as PyTorch's b_hn is)."""
    order = (1, 0, 2)
    return [_blocks(state["weight_ih_l0"], order, 0).T, _blocks(state["weight_hh_l0"], order, 0).T,
            np.stack([_blocks(state["bias_ih_l0"], order, 0), _blocks(state["bias_hh_l0"], order, 0)])]


def _save_keras_port(keras, kind: str, weights: list, path: Path, recurrent_activation: str = "sigmoid") -> Path:
    """A Keras ``Sequential(Input((None, I)), LSTM or GRU(H, return_sequences=True))`` holding ``weights``
    (:func:`keras_lstm_weights` or :func:`keras_gru_weights`), its gates' activation ``recurrent_activation``,
    saved at ``path`` (``model.save``)."""
    input_size, units = weights[0].shape[0], weights[1].shape[0]
    layer = {"lstm": lambda: keras.layers.LSTM(units, return_sequences=True,
                                               recurrent_activation=recurrent_activation),
             "gru": lambda: keras.layers.GRU(units, return_sequences=True, reset_after=True,
                                             recurrent_activation=recurrent_activation)}[kind]()
    model = keras.Sequential([keras.Input((None, input_size)), layer])
    layer.set_weights([np.asarray(w, np.float32) for w in weights])
    model.save(path)
    return path


def export_onnx(module, path: Path) -> Path:
    """``module`` (a time-major ``nn.LSTM``, ``nn.GRU`` or ``nn.RNN``, 1 direction) exported at ``path`` by
    PyTorch's TorchScript exporter (``dynamo=False``; the dynamo one unrolls ``nn.RNN``): input ``X [T, B, I]``,
    outputs ``Y [T, B, H]``, ``Y_h`` and for an LSTM ``Y_c`` ``[L, B, H]``, T and B dynamic. The graph holds one
    LSTM, GRU or RNN node with no ``sequence_lens``, its initial state zeros the graph makes itself."""
    import torch

    outputs = ["Y", "Y_h"] + (["Y_c"] if isinstance(module, torch.nn.LSTM) else [])
    axes = {"X": {0: "T", 1: "B"}, "Y": {0: "T", 1: "B"}, **{name: {1: "B"} for name in outputs[1:]}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter announces its deprecation
        torch.onnx.export(module, (torch.zeros(TASK_T, 2, module.input_size),), str(path), dynamo=False,
                          input_names=["X"], output_names=outputs, dynamic_axes=axes)
    return path


def _edit_onnx(source: Path, path: Path, op_type: str, name: str, value) -> Path:
    """A copy of the graph at ``source`` at ``path`` with attribute ``name`` of its ``op_type`` node set to
    ``value`` (replacing the attribute where the node has it)."""
    import onnx

    proto = onnx.load(str(source))
    (node,) = [n for n in proto.graph.node if n.op_type == op_type]
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend([*kept, onnx.helper.make_attribute(name, value)])
    onnx.checker.check_model(proto)
    onnx.save(proto, str(path))
    return path


# The PyTorch files: name -> train_torch's arguments (the module a file's state_dict loads into).
TORCH_SPECS = {
    "lstm_pt": dict(mode="lstm"),
    "lstm2_pt": dict(mode="lstm", num_layers=2),
    "gru_pt": dict(mode="gru"),
    "relu_pt": dict(mode="rnn_relu"),
    "bilstm_pt": dict(mode="lstm", bidirectional=True),
}
OUR_MODE = {"lstm": "lstm", "gru": "gru", "rnn_relu": "relu", "rnn_tanh": "tanh"}


class _Build(NamedTuple):
    entries: dict
    losses: dict
    seconds: float


def build_trained(folder: Path) -> _Build:
    """Every file of the ``trained`` fixture, written in ``folder``: see the module's and :class:`Trained`'s
    docstrings, and each entry's ``note``."""
    import torch

    keras = import_keras()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # Keras's training (on the torch backend) on one core too
    try:
        return _build(torch, keras, folder)
    finally:
        torch.set_num_threads(threads)


def _build(torch, keras, folder: Path) -> _Build:
    start, entries, losses, modules = time.perf_counter(), {}, {}, {}

    def add(name, filename, fmt, mode, note, expect=None, companion=None, lengths=False):
        entries[name] = Trained(folder / filename, fmt, mode, expect, companion, lengths, note)

    for name, spec in TORCH_SPECS.items():
        module = modules[name] = train_torch(**spec)
        losses[name] = module.losses
        torch.save(module.state_dict(), folder / f"{name}.pt")
        layers, bi = spec.get("num_layers", 1), spec.get("bidirectional", False)
        add(name, f"{name}.pt", "torch", OUR_MODE[spec["mode"]],
            f"a trained {type(module).__name__}({module.input_size}, {module.hidden_size}, num_layers={layers}"
            f"{', bidirectional=True' if bi else ''}{', nonlinearity=relu' if spec['mode'] == 'rnn_relu' else ''})"
            f"'s state_dict (torch.save){'; a state_dict does not say relu: --mode relu' if 'relu' in name else ''}")
    for kind in ("lstm", "gru", "relu"):
        export_onnx(modules[f"{kind}_pt"], folder / f"{kind}.onnx")
        add(f"{kind}_onnx", f"{kind}.onnx", "onnx", entries[f"{kind}_pt"].mode,
            f"{kind}_pt exported by torch.onnx.export (TorchScript exporter): one {kind.upper()} node, time-major",
            companion=f"{kind}_pt")
    _edit_onnx(folder / "gru.onnx", folder / "gru_textbook.onnx", "GRU", "linear_before_reset", 0)
    add("gru_onnx_textbook", "gru_textbook.onnx", "onnx", "classic_gru",
        "gru_onnx with linear_before_reset=0: the textbook GRU on PyTorch's weights", "gru_variant", "gru_pt")
    _edit_onnx(folder / "lstm.onnx", folder / "lstm_reversed.onnx", "LSTM", "direction", "reverse")
    add("lstm_onnx_reversed", "lstm_reversed.onnx", "onnx", "lstm",
        "lstm_onnx with direction=\"reverse\": it runs each sequence from its end", "direction", "lstm_pt")
    shutil.copyfile(folder / "lstm.onnx", folder / "lstm_nolengths.onnx")
    add("lstm_onnx_nolengths", "lstm_nolengths.onnx", "onnx", "lstm",
        "lstm_onnx as the exporter writes it, with no sequence_lens input (it drops packing): it runs every "
        "sequence to the padded length", "lengths_ignored", "lstm_pt", lengths=True)

    state = {k: v.detach().numpy() for k, v in modules["lstm_pt"].state_dict().items()}
    for name, weights, expect, note in [
            ("lstm_keras_port", keras_lstm_weights(state), None, "lstm_pt ported to Keras by hand"),
            ("lstm_keras_swapped", keras_lstm_weights(state, swap=(0, 1)), "gate_order",
             "lstm_pt ported to Keras with the input and forget gates exchanged"),
            ("lstm_keras_doubled", keras_lstm_weights(state, bias_scale=2.0), "bias_scale",
             "lstm_pt ported to Keras with bias 2 * (b_ih + b_hh)")]:
        _save_keras_port(keras, "lstm", weights, folder / f"{name}.keras")
        add(name, f"{name}.keras", "keras", "lstm", note, expect, "lstm_pt")
    _save_keras_port(keras, "lstm", keras_lstm_weights(state), folder / "lstm_keras_hard_sigmoid.keras",
                     recurrent_activation="hard_sigmoid")
    add("lstm_keras_hard_sigmoid", "lstm_keras_hard_sigmoid.keras", "keras", "lstm",
        "lstm_pt ported to a Keras LSTM whose gates compute hard_sigmoid (Keras 2's default), not sigmoid",
        "activation", "lstm_pt")
    gru_state = {k: v.detach().numpy() for k, v in modules["gru_pt"].state_dict().items()}
    _save_keras_port(keras, "gru", keras_gru_weights(gru_state), folder / "gru_keras_port.keras")
    add("gru_keras_port", "gru_keras_port.keras", "keras", "gru",
        "gru_pt ported to Keras GRU(reset_after=True) by hand", companion="gru_pt")
    for kind in KERAS_KINDS:
        model = train_keras(kind)
        losses[f"{kind}_keras"] = model.task_losses
        model.save(folder / f"{kind}_keras.keras")
        add(f"{kind}_keras", f"{kind}_keras.keras", "keras", kind,
            f"a Keras Sequential(Input, {kind.upper() if kind != 'relu' else 'SimpleRNN(relu)'}(8, "
            f"return_sequences=True), Dense(1)) trained in Keras")
    return _Build(entries, losses, time.perf_counter() - start)


@pytest.fixture(scope="session")
def _trained_build(tmp_path_factory) -> _Build:
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    import_keras()
    return build_trained(tmp_path_factory.mktemp("trained"))


@pytest.fixture(scope="session")
def trained(_trained_build) -> dict[str, Trained]:
    """name -> :class:`Trained`: the files ``build_trained`` writes (in a session's temporary folder)."""
    return _trained_build.entries


@pytest.fixture(scope="session")
def training_losses(_trained_build) -> dict[str, tuple[float, float]]:
    """The name of each trained model (the PyTorch files and ``lstm_keras``, ``gru_keras``, ``relu_keras``) -> its
    task loss
    at the first step and the mean over its last ten."""
    return _trained_build.losses


@pytest.fixture(scope="session")
def trained_torch(trained) -> dict:
    """The name of each PyTorch file of ``trained`` -> a module of its :data:`TORCH_SPECS` holding the
    state_dict loaded back from the file, in eval mode."""
    import torch

    modules = {}
    for name, spec in TORCH_SPECS.items():
        module = torch_module(**spec)
        module.load_state_dict(torch.load(trained[name].path, weights_only=True))
        modules[name] = module.eval()
    return modules
