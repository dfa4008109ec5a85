"""Files that tf.keras 2 saved, against what Keras 2 computed with their weights, kept as data.

``compat_tests/data/keras2/`` (``scripts/make_keras2_fixtures.py``; ``provenance.json`` names the versions)
holds legacy ``.h5`` files of plain ``LSTM``, ``GRU`` (both resets) and ``SimpleRNN`` stacks and of tf.keras 2's
GPU-only ``CuDNNLSTM`` and ``CuDNNGRU`` layers, whose weights are in cuDNN's layout; and each stack's outputs
and final states as Keras 2 computed them on the CPU (for the CuDNN layers, by the ``LSTM`` / ``GRU`` layers
into which Keras 2 itself converted their weights). Read by ``keras_file``, the reference must reproduce them
within the tolerance policy: a gate block transposed instead of reshaped, or the bias halves swapped in the
GRU, would not.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from compat_tests.config import Case, Outputs, RNNConfig
from compat_tests.judge.compare import Recorded, compare_peer

DATA = Path(__file__).resolve().parents[2] / "data" / "keras2"


PROVENANCE = json.loads((DATA / "provenance.json").read_text())


FILES = [(name, file) for name, fixture in sorted(PROVENANCE["fixtures"].items()) for file in fixture["files"]]


@pytest.fixture(scope="module")
def keras_file():
    pytest.importorskip("h5py", reason="reading Keras files needs h5py (the test extra)")
    from compat_tests.interop import keras_file

    return keras_file


def expected(name: str) -> dict[str, np.ndarray]:
    with np.load(DATA / "expected.npz", allow_pickle=False) as data:
        return {k.split(":", 1)[1]: data[k] for k in data.files if k.startswith(f"{name}:")}


@pytest.mark.parametrize("name, file", FILES, ids=[file for _, file in FILES])
def test_a_tf_keras_2_file_computes_what_keras_2_did(keras_file, name, file):
    fixture, arrays = PROVENANCE["fixtures"][name], expected(name)
    model, weights, biases = keras_file.read(DATA / file)
    told = {"rnn_mode": model.rnn_mode, "num_layers": model.num_layers, "num_units": model.num_units,
            "input_size": model.input_size, "direction": model.direction}
    assert told == {"rnn_mode": fixture["mode"], **{k: fixture[k] for k in told if k != "rnn_mode"}}, (file, told)
    x = arrays["x"]
    cfg = RNNConfig(model.rnn_mode, num_layers=model.num_layers, num_units=model.num_units,
                    input_size=model.input_size, direction=model.direction, seq_len=x.shape[0], batch=x.shape[1],
                    dtype="float32", initial_state=False)
    case = Case(weights, biases, x, None, None, None)
    keras2 = Recorded(f"tf_keras {PROVENANCE['tf_keras']} {fixture['layer']}",
                      outputs=Outputs(arrays["output"], arrays["output_h"], arrays.get("output_c")))
    verdict = compare_peer(keras2, cfg, case)
    assert verdict.passed, verdict.explain()


def test_a_cudnn_layers_weights_file_reads_as_its_model_file(keras_file):
    """A weights-only file has no config: its CuDNN layers are known by their bias, both sets, ``[2*G*H]``."""
    for name, fixture in PROVENANCE["fixtures"].items():
        if len(fixture["files"]) < 2:
            continue
        (model_a, *a), (model_b, *b) = (keras_file.read(DATA / file) for file in fixture["files"])
        assert repr(model_a) == repr(model_b)
        assert all(u.tobytes() == v.tobytes() for u, v in zip(a[0] + a[1], b[0] + b[1]))


def test_a_cudnn_lstm_keeps_its_input_and_recurrent_biases_apart(keras_file):
    """A CuDNNLSTM's ``bias [8H]`` is cuDNN's eight biases (tf_keras ``CuDNNLSTM._process_batch``): the input
    biases of gates i, f, c, o, then the recurrent ones. The outputs see only their sums, so they are checked
    here, against the file's own arrays."""
    import h5py

    model, _, biases = keras_file.read(DATA / "cudnn_lstm_bi.h5")
    with h5py.File(DATA / "cudnn_lstm_bi.h5", "r") as h5:
        layer = h5["model_weights/bidirectional/bidirectional/forward_cu_dnnlstm"]
        bias = layer["bias:0"][()]
    assert np.array_equal(np.concatenate(biases[:8]), bias)  # pseudo-layer 0's b_W (i, f, c, o), then b_R


@pytest.mark.parametrize("change, match", [
    (lambda layers: layers[1].pop(), r"layer 1: expecting \[kernel, recurrent_kernel, bias\] \(a CuDNNLSTM of "),
    (lambda layers: layers[0].__setitem__(2, layers[0][2][:16]), r"layer 0 bias has shape \[16\], CuDNNLSTM of"),
    (lambda layers: layers[0].__setitem__(0, layers[0][0].T), r"layer 0 kernel has shape \[16, 3\], CuDNNLSTM of"),
], ids=["no-bias", "summed-bias", "transposed-kernel"])
def test_bad_cudnn_layer_weights_fail_naming_the_weight(keras_file, change, match):
    from compat_tests.interop import hdf5_tree
    from reference.formats import keras as keras_format

    model, _, _ = keras_file.read(DATA / "cudnn_lstm_bi.h5")
    h5 = hdf5_tree.read(DATA / "cudnn_lstm_bi.weights_only.h5")
    layers = [layer.weights[d] for layer in keras_file._weights_file_layers(h5) for d in range(2)]
    keras_format.from_keras(model, [list(w) for w in layers], cudnn_layout=[True] * 4)  # as read: fine
    layers = [list(w) for w in layers]
    change(layers)
    with pytest.raises(ValueError, match=match):
        keras_format.from_keras(model, layers, cudnn_layout=[True] * 4)


def test_only_a_gru_or_an_lstm_comes_in_cudnn_layout():
    import reference
    from reference.formats import keras as keras_format

    model = reference.CudnnRNNTanh(num_layers=1, num_units=2, input_size=2)
    layers = keras_format.to_keras(model, *(
        [np.zeros(s, np.float32) for s in shapes] for shapes in model.canonical_shapes()))
    with pytest.raises(ValueError, match="only CuDNNLSTM and CuDNNGRU weights come in cuDNN's layout"):
        keras_format.from_keras(model, layers, cudnn_layout=[True])
    with pytest.raises(ValueError, match="one flag per Keras layer"):
        keras_format.from_keras(model, layers, cudnn_layout=[False, False])


def _within(ours, theirs) -> bool:
    """Whether every entry of the config ``ours`` is in ``theirs`` with the same value (dicts inside too)."""
    if isinstance(ours, dict):
        return isinstance(theirs, dict) and all(k in theirs and _within(v, theirs[k]) for k, v in ours.items())
    return ours == theirs


@pytest.mark.parametrize("fixture", ["lstm", "relu_bi"])  # the plain Sequential stacks tf.keras 2 saved
def test_a_legacy_model_written_here_is_laid_out_as_tf_keras_2_saved_it(fixture, keras_file, tmp_path):
    """The stack a tf.keras 2 file holds, written back as a legacy ``.h5`` model with the weights read from it:
    every group, attribute and weight (dtype, shape, bytes) as in the file tf.keras 2 saved, and each layer's
    config a part of tf.keras 2's (which adds its default initializers, regularizers and constraints).
    ``scripts/check_tf_keras2_loads.py`` loads such files in tf.keras 2 itself and runs them."""
    import h5py

    from compat_tests.interop import hdf5_tree

    saved = DATA / PROVENANCE["fixtures"][fixture]["files"][0]
    model, weights, biases = keras_file.read(saved)
    keras_file.write(tmp_path / "m.h5", model, weights, biases)
    ours, theirs = (hdf5_tree.layout(p, leave_out=("model_config",)) for p in (tmp_path / "m.h5", saved))
    assert ours == theirs, sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
    configs = []
    for path in (tmp_path / "m.h5", saved):
        with h5py.File(path, "r") as h5:
            configs.append(json.loads(h5.attrs["model_config"]))
    assert configs[0]["class_name"] == configs[1]["class_name"] == "Sequential"
    for mine, keras2 in zip(configs[0]["config"]["layers"], configs[1]["config"]["layers"], strict=True):
        assert _within(mine, keras2), (mine, keras2)
