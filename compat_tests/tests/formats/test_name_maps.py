"""Tensor files under a package's own names (``enc_w_ih``, ...): a name map (``--names FILE.json``, options key
``names``) puts them onto one of the naming schemes read here; a file whose names fit none is refused listing
the schemes tried, not only TensorFlow's. The files are torch's own weights, saved as packages save them, and
read they compute what torch's module computes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from compat_tests import cli
from compat_tests.interop import convert
from reference import checkpoint

torch = pytest.importorskip("torch", reason="the weights under test are torch's")


T, B, I, H = 4, 2, 3, 5


OWN = {"weight_ih_l0": "enc_w_ih", "weight_hh_l0": "enc_w_hh", "bias_ih_l0": "enc_b_ih", "bias_hh_l0": "enc_b_hh"}


def _gru_file(tmp_path, suffix: str):
    """An ``nn.GRU``'s weights under a package's own names (plus a tensor of another part), and the GRU."""
    torch.manual_seed(1)
    gru = torch.nn.GRU(I, H).double()
    tensors = {OWN[k]: v.detach().numpy() for k, v in gru.state_dict().items()}
    tensors["dec_proj"] = np.ones((2, H))
    path = tmp_path / f"own{suffix}"
    checkpoint.write_tensors(path, tensors, None)
    return path, gru


def _computes_as(read, gru, x: np.ndarray):
    """The model read runs ``x`` (float64) to what ``gru`` computes, to float64 rounding; its result."""
    got = read.model.forward(x, None, read.model.canonical_to_params(read.weights, read.biases), is_training=False)
    with torch.no_grad():
        y, h = gru(torch.from_numpy(x))
    np.testing.assert_allclose(got.output, y.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got.output_h, h.numpy(), rtol=1e-12, atol=1e-12)
    return got


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_a_name_map_reads_a_file_of_its_own_names_as_torch_computes_it(suffix, tmp_path, capsys):
    path, gru = _gru_file(tmp_path, suffix)
    with pytest.raises(ValueError) as refused:
        convert.read("auto", path)
    message = str(refused.value)
    for scheme in ("TensorFlow's", "PyTorch's", "Keras's", "ONNX", "enc_w_ih", "--names FILE.json"):
        assert scheme in message, message
    with pytest.raises(ValueError, match=r"state_dict has tensors .* does not: \['dec_proj'\]"):
        convert.read("auto", path, {"names": {own: ours for ours, own in OWN.items()}})
    # under a module path, the GRU's tensors are told from the rest (dec_proj, kept as it is, is another part's)
    mapping = {own: f"encoder.{ours}" for ours, own in OWN.items()}
    x = np.random.default_rng(0).uniform(-1, 1, (T, B, I))
    got = _computes_as(convert.read("auto", path, {"names": mapping}), gru, x)
    (tmp_path / "names.json").write_text(json.dumps(mapping))  # the command line's --names FILE.json
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["infer", str(path), str(tmp_path / "x.npy"), "--names", str(tmp_path / "names.json"),
                     "--out", str(tmp_path / "y.npz")]) == 0
    with np.load(tmp_path / "y.npz") as out:
        assert out["output"].tobytes() == got.output.tobytes()


def test_a_bad_name_map_is_refused_naming_what_is_wrong(tmp_path):
    path, _ = _gru_file(tmp_path, ".npz")
    mapping = {own: f"encoder.{ours}" for ours, own in OWN.items()}
    for names, match in [
        ({"enc_w_xx": "weight_ih_l0"}, r"renames \['enc_w_xx'\], which the file does not hold; it holds"),
        ({**mapping, "dec_proj": "encoder.weight_ih_l0"}, "maps several names onto 'encoder.weight_ih_l0'"),
        ({"enc_w_ih": "dec_proj"}, "renames a tensor to 'dec_proj', which another tensor of the file is named"),
        (["enc_w_ih"], "must be a JSON object"),
        ({"enc_w_ih": 3}, "must be a JSON object"),
    ]:
        with pytest.raises(ValueError, match=match):
            convert.read("auto", path, {"names": names})
    (tmp_path / "bad.json").write_text('{"a": "b", "a": "c"}')
    with pytest.raises(ValueError, match=r"the name map .*bad.json: a JSON object names .a. more than once"):
        convert.read("auto", path, {"names": str(tmp_path / "bad.json")})
    torch.save({OWN[k]: v for k, v in torch.nn.GRU(I, H).state_dict().items()}, tmp_path / "sd.pt")
    with pytest.raises(ValueError, match=r"renames \['enc_w_xx'\], which no state_dict of the file holds"):
        convert.read("auto", tmp_path / "sd.pt", {"names": {"enc_w_xx": "weight_ih_l0"}})
    with pytest.raises(ValueError, match="renames a tensor to 'enc_w_hh', which another tensor of the file is named"):
        convert.read("auto", tmp_path / "sd.pt", {"names": {"enc_w_ih": "enc_w_hh"}})
    (tmp_path / "m.onnx").write_bytes(b"")
    with pytest.raises(ValueError, match="a name map applies to tensor files .* and files torch.save wrote"):
        convert.read("auto", tmp_path / "m.onnx", {"names": mapping})


@pytest.mark.parametrize("held", ["state_dict", "training checkpoint"])
def test_a_name_map_reads_a_torch_save_file_of_its_own_names_as_torch_computes_it(held, tmp_path):
    """``torch.save`` of a package's own names (a dict of them, or a training checkpoint holding one), parsed
    without unpickling: the map renames the keys of the file's state_dicts onto PyTorch's, and the model read
    computes what the GRU computes."""
    torch.manual_seed(2)
    gru = torch.nn.GRU(I, H).double()
    own = {OWN[k]: v for k, v in gru.state_dict().items()} | {"dec_proj": torch.ones(2, H, dtype=torch.float64)}
    torch.save(own if held == "state_dict" else {"model": own, "epoch": 3}, tmp_path / "own.pt")
    with pytest.raises(ValueError, match="holds no recurrent module"):
        convert.read("auto", tmp_path / "own.pt")
    read = convert.read("auto", tmp_path / "own.pt", {"names": {own: f"encoder.{ours}" for ours, own in OWN.items()}})
    _computes_as(read, gru, np.random.default_rng(1).uniform(-1, 1, (T, B, I)))


def test_tf_lstm_cell_tensors_are_named_and_why_they_are_not_read(tmp_path):
    """TensorFlow 1's ``LSTMCell`` adds ``forget_bias`` at run time, which its checkpoint does not hold: its
    tensors are not taken for the CudnnCompatibleLSTMCell's, and the refusal says so."""
    names = {"rnn/multi_rnn_cell/cell_0/lstm_cell/kernel": np.zeros((8, 16), np.float32),
             "rnn/multi_rnn_cell/cell_0/lstm_cell/bias": np.zeros(16, np.float32)}
    checkpoint.write_tensors(tmp_path / "tf1.npz", names, None)
    with pytest.raises(ValueError, match="holds lstm_cell tensors .*adds forget_bias"):
        convert.read("auto", tmp_path / "tf1.npz")
