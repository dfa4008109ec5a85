"""PyTorch's single cells, ``nn.RNNCell``, ``nn.LSTMCell`` and ``nn.GRUCell``: their ``weight_ih``, ``weight_hh``,
``bias_ih``, ``bias_hh`` (no ``_l0``) are a one-layer model's weights. Streaming models ship them inside a larger
model (``decoder.rnn``), in state_dicts, whole pickled models and safetensors files, which torch writes here;
read, the reference computes what torch's own cell computes stepped over the sequence. Written with cell names
(``convert --cell``), ``cell.load_state_dict`` takes them and the cell computes what the reference does."""

from __future__ import annotations

import numpy as np
import pytest

from compat_tests import cli
from compat_tests.config import RNNConfig, make_case
from compat_tests.interop import convert
from reference.formats import torch as torch_format

torch = pytest.importorskip("torch", reason="the files under test are written by torch")


CELLS = {"lstm": lambda i, h, **kw: torch.nn.LSTMCell(i, h, **kw),
         "gru": lambda i, h, **kw: torch.nn.GRUCell(i, h, **kw),
         "tanh": lambda i, h, **kw: torch.nn.RNNCell(i, h, nonlinearity="tanh", **kw),
         "relu": lambda i, h, **kw: torch.nn.RNNCell(i, h, nonlinearity="relu", **kw)}


T, B, I, H = 5, 3, 4, 6


class Decoder(torch.nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.embed = torch.nn.Embedding(7, I)
        self.rnn = cell
        self.out = torch.nn.Linear(H, 7)


class Net(torch.nn.Module):
    """A streaming model as users save it: the cell at ``decoder.rnn``, other modules around it."""

    def __init__(self, cell):
        super().__init__()
        self.encoder = torch.nn.GRU(I, H)  # another recurrent module: the file holds two, --module picks
        self.decoder = Decoder(cell)


def stepped(cell, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """torch's own cell run step by step over time-major ``x`` from zero states: (outputs, h, c)."""
    h, c, ys = torch.zeros(x.shape[1], cell.hidden_size, dtype=torch.float64), None, []
    if isinstance(cell, torch.nn.LSTMCell):
        c = torch.zeros_like(h)
    with torch.no_grad():
        for step in torch.from_numpy(x):
            if c is not None:
                h, c = cell(step, (h, c))
            else:
                h = cell(step, h)
            ys.append(h.numpy().copy())
    return np.stack(ys), h.numpy(), None if c is None else c.numpy()


def _cell(mode: str, bias: bool = True, seed: int = 0):
    torch.manual_seed(seed)
    return CELLS[mode](I, H, bias=bias).double()


def _save(kind: str, net, path):
    if kind == "state_dict":
        torch.save(net.state_dict(), path)
    elif kind == "model":
        torch.save(net, path)
    elif kind == "checkpoint":
        torch.save({"epoch": 2, "model": net.state_dict()}, path)
    else:
        from safetensors.torch import save_file

        save_file(net.state_dict(), str(path))


FILES = {"state_dict": ("sd.pt", "decoder.rnn"), "model": ("net.pt", "decoder.rnn"),
         "checkpoint": ("ck.pth", "model.decoder.rnn"), "safetensors": ("sd.safetensors", "decoder.rnn")}


CASES = [(mode, kind, bias) for mode in CELLS for kind in FILES for bias in (True, False)
         if bias or kind in ("state_dict", "model")]


@pytest.mark.parametrize(("mode", "kind", "bias"), CASES,
                         ids=[f"{m}-{k}{'' if b else '-nobias'}" for m, k, b in CASES])
def test_a_cell_inside_a_saved_model_reads_as_the_one_layer_model_torch_steps(mode, kind, bias, tmp_path):
    cell = _cell(mode, bias)
    name, module = FILES[kind]
    _save(kind, Net(cell), tmp_path / name)
    told = {"module": module}
    if mode in ("relu", "tanh") and kind != "model":  # a state_dict's names do not say relu or tanh
        with pytest.raises(ValueError, match="relu and tanh RNNs have the same weights"):
            convert.read("auto", tmp_path / name, told)
        told["rnn_mode"] = mode
    read = convert.read("auto", tmp_path / name, told)
    model = read.model
    assert (model.rnn_mode, model.num_layers, model.num_units, model.input_size, model.direction) == \
        (mode, 1, H, I, "unidirectional")
    x = np.random.default_rng(3).uniform(-1, 1, (T, B, I))
    got = model.forward(x, None, model.canonical_to_params(read.weights, read.biases), is_training=False)
    y, h, c = stepped(cell, x)
    np.testing.assert_allclose(got.output, y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got.output_h[0], h, rtol=1e-12, atol=1e-12)
    if c is not None:
        np.testing.assert_allclose(got.output_c[0], c, rtol=1e-12, atol=1e-12)


def test_a_bare_cell_and_its_pickled_nonlinearity_are_read(tmp_path):
    """A bare cell's state_dict (names at the top) and a pickled ``nn.RNNCell`` (its ``nonlinearity`` said by the
    object: relu is not read as tanh, and ``--mode`` may not contradict it)."""
    cell = _cell("relu")
    torch.save(cell, tmp_path / "cell.pt")
    torch.save(cell.state_dict(), tmp_path / "sd.pt")
    assert convert.read("auto", tmp_path / "cell.pt").model.rnn_mode == "relu"
    with pytest.raises(ValueError, match="rnn_mode is 'relu', not 'tanh'"):
        convert.read("auto", tmp_path / "cell.pt", {"rnn_mode": "tanh"})
    assert convert.read("auto", tmp_path / "sd.pt", {"rnn_mode": "relu"}).model.num_layers == 1


def test_the_module_option_lists_cells_among_the_modules(tmp_path):
    torch.save(Net(_cell("lstm")).state_dict(), tmp_path / "sd.pt")
    with pytest.raises(ValueError, match=r"holds 2 recurrent modules, \['decoder.rnn', 'encoder'\]"):
        convert.read("auto", tmp_path / "sd.pt")
    assert convert.read("auto", tmp_path / "sd.pt", {"module": "encoder"}).model.rnn_mode == "gru"


@pytest.mark.parametrize("mode", list(CELLS))
@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_written_with_cell_names_torch_loads_them_into_its_cell(mode, suffix, tmp_path):
    cfg = RNNConfig(mode, num_layers=1, num_units=H, input_size=I, dtype="float64", seq_len=T, batch=B,
                    initial_state=False)
    case, model = make_case(cfg), cfg.model()
    path = tmp_path / f"cell{suffix}"
    convert.write("torch", path, model, case.weights, case.biases, cell=True)
    if suffix == ".pt":
        state = torch.load(path, weights_only=True)
    else:
        from safetensors.torch import load_file

        state = load_file(str(path))
    assert sorted(state) == sorted(torch_format.CELL_NAMES)
    cell = CELLS[mode](I, H).double()
    cell.load_state_dict(state)  # strict: every name and shape as the cell's own
    y, h, c = stepped(cell, case.x)
    want = model.forward(case.x, None, model.canonical_to_params(case.weights, case.biases), is_training=False)
    np.testing.assert_allclose(y, want.output, rtol=1e-12, atol=1e-12)
    back = convert.read("auto", path)  # and read back (our file carries its config) as the same model
    assert repr(back.model) == repr(model)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(back.weights, case.weights))


def test_cell_names_hold_one_layer_of_one_direction_only(tmp_path):
    for cfg in (RNNConfig("gru", num_layers=2, num_units=3, input_size=2),
                RNNConfig("gru", num_units=3, input_size=2, direction="bidirectional")):
        case = make_case(cfg)
        with pytest.raises(ValueError, match="a single cell's names .* hold one layer of one direction"):
            convert.write("torch", tmp_path / "c.pt", cfg.model(), case.weights, case.biases, cell=True)
    assert not (tmp_path / "c.pt").exists()
    cfg = RNNConfig("lstm", num_units=3, input_size=2)
    case = make_case(cfg)
    convert.write("checkpoint", tmp_path / "ck.npz", cfg.model(), case.weights, case.biases)
    assert cli.main(["convert", "--to", "onnx", "--cell", str(tmp_path / "ck.npz"), str(tmp_path / "m.onnx")]) == 2
    assert not (tmp_path / "m.onnx").exists()
    assert cli.main(["convert", "--to", "torch", "--cell", str(tmp_path / "ck.npz"), str(tmp_path / "c.pt")]) == 0
    assert sorted(torch.load(tmp_path / "c.pt", weights_only=True)) == sorted(torch_format.CELL_NAMES)
