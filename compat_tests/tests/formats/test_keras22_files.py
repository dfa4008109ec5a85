"""Keras files whose LSTM and GRU may compute ``hard_sigmoid``: never read as sigmoid without a word.

Keras before 2.3 made ``LSTM`` and ``GRU`` default to ``recurrent_activation="hard_sigmoid"``, which cuDNN has no
equivalent of, and a weights-only ``.h5`` does not record the activation, only the ``keras_version`` that wrote
it. ``compat_tests/data/keras22/`` (``scripts/make_keras22_fixtures.py``, which reproduces Keras 2.2.4's
``save_weights`` layout with h5py) holds two such files and what Keras computed on their weights with sigmoid,
with Keras 3's hard_sigmoid and with Keras 2.2.4's. Such a file is refused naming the version, the likely
activation and the remedy; told that the weights were trained with sigmoid, the reference computes what Keras's
sigmoid layers computed; and hard_sigmoid layers differ from that by tens of percent, the reason for the refusal.
The same audit's other attributes of Keras configs (``reset_after`` left out, ``time_major``) and ONNX's
``activation_alpha`` are tested here too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from compat_tests import cli
from compat_tests.config import Case, Outputs, RNNConfig, make_case
from compat_tests.interop import convert, keras_file
from compat_tests.interop.keras_stack import keras_era
from compat_tests.judge.compare import Recorded, compare_peer

pytest.importorskip("h5py", reason="reading Keras files needs h5py (the test extra)")


DATA = Path(__file__).resolve().parents[2] / "data" / "keras22"


PROVENANCE = json.loads((DATA / "provenance.json").read_text())


NAMES = sorted(PROVENANCE["fixtures"])


SIGMOID = {"recurrent_activation": "sigmoid"}


def expected(name: str, label: str) -> dict[str, np.ndarray]:
    with np.load(DATA / "expected.npz", allow_pickle=False) as data:
        return {k.rsplit(":", 1)[1]: data[k] for k in data.files if k.startswith(f"{name}:{label}:")}


def x_of(name: str) -> np.ndarray:
    with np.load(DATA / "expected.npz", allow_pickle=False) as data:
        return data[f"{name}:x"]


def _run(model, weights, biases, x):
    return model.forward(x, None, model.canonical_to_params(weights, biases), is_training=False)


@pytest.mark.parametrize("name", NAMES)
def test_a_keras_2_2_weights_file_is_refused_naming_the_version_the_activation_and_the_remedy(name):
    path = DATA / PROVENANCE["fixtures"][name]["file"]
    with pytest.raises(ValueError) as refused:
        keras_file.read(path)
    message = str(refused.value)
    for part in (str(path), "Keras 2.2.4", "recurrent_activation='hard_sigmoid'", "--recurrent-activation sigmoid",
                 "read the model file"):
        assert part in message, message
    with pytest.raises(ValueError, match="Keras 2.2.4"):  # through the converter and its format detection too
        convert.read("auto", path)


@pytest.mark.parametrize("name", NAMES)
def test_told_sigmoid_it_computes_what_keras_sigmoid_layers_compute(name):
    fixture = PROVENANCE["fixtures"][name]
    model, weights, biases = keras_file.read(DATA / fixture["file"], SIGMOID)
    assert (model.rnn_mode, model.num_layers, model.num_units, model.input_size) == \
        (fixture["mode"], fixture["num_layers"], fixture["num_units"], fixture["input_size"])
    x, want = x_of(name), expected(name, "sigmoid")
    cfg = RNNConfig(model.rnn_mode, num_layers=model.num_layers, num_units=model.num_units,
                    input_size=model.input_size, seq_len=x.shape[0], batch=x.shape[1], dtype="float32",
                    initial_state=False)
    keras_run = Recorded(f"{PROVENANCE['outputs_by']} {fixture['layer']}(recurrent_activation='sigmoid')",
                         outputs=Outputs(want["output"], want["output_h"], want.get("output_c")))
    verdict = compare_peer(keras_run, cfg, Case(weights, biases, x, None, None, None))
    assert verdict.passed, verdict.explain()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("label", ["hard_sigmoid_keras2", "hard_sigmoid_keras3"])
def test_hard_sigmoid_layers_differ_from_the_reference_by_tens_of_percent(name, label):
    """The premise of the refusal: the same weights in hard_sigmoid layers (Keras 2.2.4's ``clip(0.2x + 0.5)``,
    or Keras 3's ``relu6(x + 3) / 6``) compute outputs tens of percent away from the sigmoid reference."""
    model, weights, biases = keras_file.read(DATA / PROVENANCE["fixtures"][name]["file"], SIGMOID)
    got, hard = _run(model, weights, biases, x_of(name)).output, expected(name, label)["output"]
    visible = np.abs(hard) > 0.05
    assert np.max(np.abs(got - hard)[visible] / np.abs(hard)[visible]) > 0.3
    assert np.linalg.norm(got - hard) / np.linalg.norm(hard) > 0.03


def test_infer_refuses_the_file_and_runs_it_when_told_sigmoid(tmp_path, capsys):
    name = "lstm"
    np.save(tmp_path / "x.npy", x_of(name))
    path, out = str(DATA / "lstm.h5"), str(tmp_path / "y.npz")
    assert cli.main(["infer", path, str(tmp_path / "x.npy"), "--out", out]) == 2
    assert "Keras 2.2.4" in capsys.readouterr().err
    assert not Path(out).exists()
    assert cli.main(["infer", path, str(tmp_path / "x.npy"), "--out", out, "--recurrent-activation", "sigmoid"]) == 0
    want = expected(name, "sigmoid")
    with np.load(out, allow_pickle=False) as y:
        np.testing.assert_allclose(y["output"], want["output"], atol=2e-6)
        np.testing.assert_allclose(y["output_c"], want["output_c"], atol=2e-6)
    assert cli.main(["infer", path, str(tmp_path / "x.npy"), "--out", out, "--force",
                     "--recurrent-activation", "hard_sigmoid"]) == 2
    assert "no cuDNN equivalent" in capsys.readouterr().err


def _with_version(tmp_path, version: str | None, source: str = "lstm.h5") -> Path:
    import h5py

    path = tmp_path / f"v{version}.h5"
    shutil.copy(DATA / source, path)
    with h5py.File(path, "r+") as h5:
        if version is None:
            del h5.attrs["keras_version"]
        else:
            h5.attrs["keras_version"] = version.encode()
    return path


@pytest.mark.parametrize(("version", "refused"), [
    ("2.2.4", "Keras 2.2.4, whose LSTM and GRU default to recurrent_activation='hard_sigmoid'"),
    ("2.0.8", "Keras 2.0.8, whose"),
    ("2.1.6-tf", "tf.keras of TensorFlow 1.x"),  # TensorFlow 1.x's tf.keras records its Keras so
    ("2.2.4-tf", "TensorFlow 2.0 and 2.1, which record 2.2.4-tf too, default to sigmoid"),
    (None, "a Keras that recorded no keras_version"),
    ("unknown", "Keras unknown, so the recurrent_activation"),
    ("2.3.0", None), ("2.3.0-tf", None), ("2.21.0", None), ("3.5.0", None),
])
def test_the_writers_version_decides_whether_a_weights_file_is_read_as_sigmoid(tmp_path, version, refused):
    """From Keras 2.3 on (standalone, tf.keras 2, tf_keras, Keras 3) LSTM and GRU default to sigmoid
    (keras-team/keras 2.3.0's release notes); a file of an older Keras, or of one that cannot be told, is refused
    unless the user says sigmoid, and then reads as the same weights."""
    path = _with_version(tmp_path, version)
    told = keras_file.read(path, SIGMOID)
    if refused is None:
        plain = keras_file.read(path)
        assert all(a.tobytes() == b.tobytes() for a, b in zip(plain[1] + plain[2], told[1] + told[2]))
    else:
        with pytest.raises(ValueError, match=refused.replace("(", r"\(").replace(")", r"\)")):
            keras_file.read(path)


def test_the_option_is_checked_and_applies_to_keras_files_only(tmp_path):
    with pytest.raises(ValueError, match="recurrent_activation must be one of sigmoid, hard_sigmoid, got 'relu'"):
        keras_file.read(DATA / "lstm.h5", {"recurrent_activation": "relu"})
    with pytest.raises(ValueError, match="trained with recurrent_activation 'hard_sigmoid'.*no cuDNN equivalent"):
        keras_file.read(_with_version(tmp_path, "3.5.0"), {"recurrent_activation": "hard_sigmoid"})
    cfg = RNNConfig("tanh", num_layers=1, num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    keras_file.write(tmp_path / "rnn.weights.h5", cfg.model(), case.weights, case.biases)
    with pytest.raises(ValueError, match="is a SimpleRNN, which has none"):
        keras_file.read(tmp_path / "rnn.weights.h5", {"recurrent_activation": "sigmoid", "rnn_mode": "tanh"})
    convert.write("torch", tmp_path / "sd.safetensors", cfg.model(), case.weights, case.biases)
    with pytest.raises(ValueError, match="recurrent_activation applies to Keras's own files"):
        convert.read("torch", tmp_path / "sd.safetensors", SIGMOID)


def _legacy_model(tmp_path, mode: str, edit, version: str = "2.2.4") -> Path:
    """A legacy ``.h5`` model (config and weights) as tf.keras 2 lays it out, its layer configs edited by
    ``edit(cell_config)`` and its ``keras_version`` set to ``version``."""
    import h5py

    cfg = RNNConfig(mode, num_layers=2, num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    path = tmp_path / f"{mode}.h5"
    keras_file.write(path, cfg.model(), case.weights, case.biases)
    with h5py.File(path, "r+") as h5:
        config = json.loads(h5.attrs["model_config"])
        for entry in config["config"]["layers"][1:]:
            edit(entry["config"])
        h5.attrs["model_config"] = json.dumps(config)
        h5.attrs["keras_version"] = version
        h5["model_weights"].attrs["keras_version"] = version.encode()
    return path


def test_a_model_file_says_its_activation_and_an_option_may_not_contradict_it(tmp_path):
    hard = _legacy_model(tmp_path, "lstm", lambda c: c.update(recurrent_activation="hard_sigmoid"))
    with pytest.raises(ValueError, match=r"layer 'lstm': recurrent_activation 'hard_sigmoid' has no cuDNN"):
        keras_file.read(hard)
    with pytest.raises(ValueError, match="states recurrent_activation 'hard_sigmoid', which disagrees with the option"):
        keras_file.read(hard, SIGMOID)
    (tmp_path / "stated").mkdir()
    stated = _legacy_model(tmp_path / "stated", "lstm", lambda c: None)
    assert keras_file.read(stated)[0].rnn_mode == "lstm"  # Keras 2.2.4, but the config states sigmoid


def test_what_a_model_files_config_leaves_out_is_its_keras_versions_default(tmp_path):
    """A config without ``recurrent_activation`` (or ``reset_after``) computes the default of the Keras that
    wrote it: hard_sigmoid before 2.3, refused naming that; sigmoid from 2.3 on."""
    def drop(*keys):
        return lambda c: [c.pop(k, None) for k in keys]

    old = _legacy_model(tmp_path, "lstm", drop("recurrent_activation"))
    with pytest.raises(ValueError, match=r"recurrent_activation 'hard_sigmoid' \(the file was written by Keras 2.2.4"):
        keras_file.read(old)
    assert keras_file.read(old, SIGMOID)[0].rnn_mode == "lstm"
    (tmp_path / "new").mkdir()
    new = _legacy_model(tmp_path / "new", "lstm", drop("recurrent_activation"), version="2.3.1")
    assert keras_file.read(new)[0].rnn_mode == "lstm"
    (tmp_path / "gru").mkdir()  # Keras 2.2's GRU resets before the product: with its one bias, a textbook GRU
    classic = _legacy_model(tmp_path / "gru", "classic_gru", drop("reset_after"))
    assert keras_file.read(classic, SIGMOID)[0].rnn_mode == "classic_gru"
    (tmp_path / "gru3").mkdir()
    classic3 = _legacy_model(tmp_path / "gru3", "classic_gru", drop("reset_after"), version="3.5.0")
    with pytest.raises(ValueError, match="bias"):  # Keras 3's default resets after: the file's one bias disagrees
        keras_file.read(classic3)


def test_layers_that_read_their_input_with_other_axes_are_not_one_stack(tmp_path):
    """``time_major`` (tf.keras 2): a layer whose input axes differ from the one before's reads that output
    transposed; a stack all time-major or all batch-major computes the same as cuDNN's."""
    flags = iter([True, False])
    mixed = _legacy_model(tmp_path, "gru", lambda c: c.update(time_major=next(flags)), version="2.21.0")
    with pytest.raises(ValueError, match=r"layer 'gru_1' reads its input batch-major \(time_major\), but layer 'gru'"):
        keras_file.read(mixed)
    (tmp_path / "all").mkdir()
    same = _legacy_model(tmp_path / "all", "gru", lambda c: c.update(time_major=True), version="2.21.0")
    assert keras_file.read(same)[0].rnn_mode == "gru"


def test_the_keras_era_table():
    assert keras_era("2.2.4").recurrent_activation == "hard_sigmoid" and not keras_era("2.2.4").reset_after
    assert keras_era("2.3.0").recurrent_activation == "sigmoid" and keras_era("2.3.0").reset_after
    assert keras_era(None).recurrent_activation is None
    assert keras_era(None, legacy=False).recurrent_activation == "sigmoid"  # a Keras 3 archive or weights file


@pytest.fixture(scope="module")
def embedding_lstm_dense(tmp_path_factory):
    """Keras's own weights files (the legacy ``.h5`` and Keras 3's ``.weights.h5``) of Embedding -> LSTM -> LSTM ->
    Dense, and what Keras's two LSTMs compute on an input of the embedding's width."""
    from compat_tests.peers import PEERS

    ok, reason = PEERS["keras"].available()
    if not ok:
        pytest.skip(f"keras: {reason}")
    import h5py
    from keras.src.legacy.saving import legacy_h5_format

    from compat_tests.peers.keras_peer import import_keras

    keras = import_keras()
    keras.backend.clear_session()
    keras.utils.set_random_seed(7)
    net = keras.Sequential([keras.Input((None,), dtype="int32"), keras.layers.Embedding(10, 3),
                            keras.layers.LSTM(4, return_sequences=True), keras.layers.LSTM(4, return_sequences=True),
                            keras.layers.Dense(2)])
    folder = tmp_path_factory.mktemp("keras_more")
    with h5py.File(folder / "legacy.h5", "w") as f:
        legacy_h5_format.save_weights_to_hdf5_group(f, net)
    net.save_weights(folder / "m.weights.h5")
    x = np.random.default_rng(2).uniform(-1, 1, (2, 5, 3)).astype(np.float32)
    y = keras.ops.convert_to_numpy(net.layers[2](net.layers[1](x)))
    names = [layer.name for layer in net.layers]
    return folder, names, x.transpose(1, 0, 2), y.transpose(1, 0, 2)


@pytest.mark.parametrize("file", ["legacy.h5", "m.weights.h5"])
def test_the_recurrent_layers_of_a_weights_file_that_holds_others_are_picked_by_name(embedding_lstm_dense, file):
    folder, names, x, y = embedding_lstm_dense
    with pytest.raises(ValueError, match=r"does not say where such a layer sits: .*--layers NAME,NAME"):
        keras_file.read(folder / file)
    lstms = [n for n in names if n.startswith("lstm")]
    picked = ",".join(lstms) if file == "legacy.h5" else "lstm,lstm_1"  # Keras 3's groups: lstm, lstm_1
    model, weights, biases = keras_file.read(folder / file, {"layers": picked})
    assert (model.rnn_mode, model.num_layers, model.input_size) == ("lstm", 2, 3)
    np.testing.assert_allclose(_run(model, weights, biases, x).output, y, atol=2e-6)
    with pytest.raises(ValueError, match="holds no layer 'lstm_9'; it holds"):
        keras_file.read(folder / file, {"layers": "lstm,lstm_9"})
    with pytest.raises(ValueError, match="layers names a layer twice"):
        keras_file.read(folder / file, {"layers": [lstms[0], lstms[0]]})


def test_layers_are_picked_by_index_in_a_legacy_file_and_must_be_recurrent(embedding_lstm_dense, tmp_path):
    folder, names, x, y = embedding_lstm_dense
    model, weights, biases = keras_file.read(folder / "legacy.h5", {"layers": "1,2"})
    np.testing.assert_allclose(_run(model, weights, biases, x).output, y, atol=2e-6)
    with pytest.raises(ValueError, match=rf"layer '{names[3]}' holds .*kernel.*, not a recurrent layer's weights"):
        keras_file.read(folder / "legacy.h5", {"layers": "1,3"})
    with pytest.raises(ValueError, match="does not record its layers' order: name them"):
        keras_file.read(folder / "m.weights.h5", {"layers": "1,2"})
    with pytest.raises(ValueError, match="index 7 is not one of the file's 4 layers"):
        keras_file.read(folder / "legacy.h5", {"layers": [1, 7]})
    import shutil

    import h5py

    shutil.copy(folder / "legacy.h5", tmp_path / "gap.h5")
    with h5py.File(tmp_path / "gap.h5", "a") as f:  # a picked layer listed but its weights group gone
        del f[names[2]]
    with pytest.raises(ValueError, match=rf"layer '{names[2]}' is named in the file's layer_names but has no group"):
        keras_file.read(tmp_path / "gap.h5", {"layers": "1,2"})
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["infer", str(folder / "legacy.h5"), str(tmp_path / "x.npy"), "--layers", "1,2",
                     "--out", str(tmp_path / "y.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), y, atol=2e-6)
    cfg = RNNConfig("lstm", num_units=3, input_size=2)
    case = make_case(cfg)
    keras_file.write(tmp_path / "m.keras", cfg.model(), case.weights, case.biases)
    with pytest.raises(ValueError, match="a model file's config says which layers are its stack"):
        keras_file.read(tmp_path / "m.keras", {"layers": "lstm"})
