"""Keras's own files (``compat_tests.interop.keras_file``): models and weights that Keras 3 saved, in its
``.keras`` archive, the legacy ``.h5`` model format and both weights formats, read as the cuDNN stack they
hold; ``.keras`` archives written here, loaded and run by Keras; and what is refused because it computes
something else or cannot be told from the file."""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compat_tests import cli
from compat_tests.config import RNNConfig, make_case
from compat_tests.interop import convert, hdf5_tree, keras_file
from compat_tests.judge.compare import assert_agree_within_policy
from compat_tests.judge.conditioning import sensitivity
from compat_tests.judge.metrics import error_stats
from compat_tests.judge.tolerances import judge
from compat_tests.peers.base import Capabilities
from compat_tests.peers.keras_peer import import_keras
from compat_tests.run import run_reference
from compat_tests.strategies import damaged, examples, rnn_configs, swept
from reference import checkpoint
from reference.formats import keras as keras_format

pytest.importorskip("h5py")


MODEL_FORMATS = ("m.keras", "m.h5")  # a whole model: Keras 3's archive, the legacy HDF5 model


WEIGHT_FORMATS = ("m.weights.h5", "legacy.h5")  # weights alone: Keras 3's save_weights, the legacy one


@pytest.fixture
def keras(available_peer):
    """Keras (on the torch backend, as the Keras peer runs it), or the test skipped with the peer's reason."""
    available_peer("keras")
    keras = import_keras()
    keras.backend.clear_session()  # layer names start again from "gru", "gru_1", ... in every test
    return keras


def _recurrent(keras, cfg: RNNConfig, per_layer: list, layer: int, use_bias: bool, **options):
    """Layer ``layer`` of ``cfg`` as a built Keras layer (a Bidirectional for two directions) holding the
    weights ``per_layer`` (``to_keras``), without the biases when not ``use_bias``."""
    cls, extra = keras_format.KERAS_LAYERS[cfg.mode]
    width = cfg.input_size if layer == 0 else cfg.num_dirs * cfg.num_units

    def make(**kw):
        return getattr(keras.layers, cls)(cfg.num_units, return_sequences=True, use_bias=use_bias, dtype=cfg.dtype,
                                          **extra, **options, **kw)

    net = make() if cfg.num_dirs == 1 else keras.layers.Bidirectional(make(), dtype=cfg.dtype)
    net.build((None, None, width))
    net.set_weights([w for pl in per_layer[layer * cfg.num_dirs:(layer + 1) * cfg.num_dirs]
                     for w in (pl if use_bias else pl[:2])])
    return net


def keras_net(keras, cfg: RNNConfig, weights, biases, *, functional: bool, extras: bool, use_bias: bool = True):
    """A Keras model of ``cfg``'s stack; ``extras``: a Dropout between its recurrent layers and a Dense head
    after them (outside the stack)."""
    per_layer = keras_format.to_keras(cfg.model(), weights, biases)
    layers = []
    for layer in range(cfg.num_layers):
        if extras and layer:
            layers.append(keras.layers.Dropout(0.25))
        layers.append(_recurrent(keras, cfg, per_layer, layer, use_bias))
    if extras:
        layers.append(keras.layers.Dense(2, dtype=cfg.dtype))
    if not functional:
        return keras.Sequential([keras.Input((None, cfg.input_size), dtype=cfg.dtype), *layers])
    x = start = keras.Input((None, cfg.input_size), dtype=cfg.dtype)
    for layer in layers:
        x = layer(x)
    return keras.Model(start, x)


def save(keras, net, folder, name: str):
    """``net`` saved by Keras as ``name`` says: ``m.keras``, a legacy ``m.h5`` model, Keras 3's
    ``m.weights.h5`` or the legacy weights ``legacy.h5``; the path."""
    import h5py

    path = folder / name
    if name == "m.keras":
        net.save(path)
    elif name == "m.h5":
        keras.saving.save_model(net, path)
    elif name == "m.weights.h5":
        net.save_weights(path)
    else:
        from keras.src.legacy.saving import legacy_h5_format

        with h5py.File(path, "w") as f:
            legacy_h5_format.save_weights_to_hdf5_group(f, net)
    return path


MODES = ("relu", "tanh", "lstm", "gru", "classic_gru")


SHAPES = ((1, "unidirectional", "float64"), (2, "bidirectional", "float32"), (3, "unidirectional", "float32"))


CONFIGS = [RNNConfig(mode, num_layers=layers, num_units=4, input_size=3, direction=direction, seq_len=6, batch=3,
                     time_major=False, dtype=dtype, initial_state=False, seed=11)
           for mode in MODES for layers, direction, dtype in SHAPES]


def _held(net) -> list[list[np.ndarray]]:
    """The weights of ``net``'s recurrent layers, per direction, at any depth of nested models, in order."""
    held = []
    for layer in net.layers:
        if layer.__class__.__name__ in ("Sequential", "Functional"):
            held += _held(layer)
        elif layer.__class__.__name__ in ("SimpleRNN", "GRU", "LSTM", "Bidirectional"):
            w = [np.asarray(v) for v in layer.get_weights()]
            held += [w[:len(w) // 2], w[len(w) // 2:]] if layer.__class__.__name__ == "Bidirectional" else [w]
    return held


def _cases():
    """``(cfg, file name, functional, use_bias)``: the modes, shapes and formats swept (every mode in every
    format and shape, every shape in every format; all under the thorough profile), with Sequential and
    functional models and bias-free layers spread over them; a bias-free GRU cannot tell ``reset_after`` in a
    weights file (refused, below), so there it keeps its biases."""
    names = MODEL_FORMATS + WEIGHT_FORMATS
    for m, shape, j in swept(itertools.product(range(len(MODES)), range(len(SHAPES)), range(len(names)))):
        k = m * len(SHAPES) + shape
        cfg, name = CONFIGS[k], names[j]
        bias_free = (k + j) % 3 == 0 and not (name in WEIGHT_FORMATS and "gru" in cfg.mode)
        yield cfg, name, (k + j) % 2 == 1, not bias_free


CASES = list(_cases())


@pytest.mark.parametrize(("cfg", "name", "functional", "use_bias"), CASES,
                         ids=[f"{c.short()}-{n}-{'functional' if f else 'sequential'}{'' if b else '-nobias'}"
                              for c, n, f, b in CASES])
def test_a_file_keras_saved_reads_as_the_stack_keras_runs(keras, cfg, name, functional, use_bias, tmp_path):
    """The model read holds the weights Keras held, bit for bit, and is the config the file tells (a model
    file's config; a weights file's shapes, and for relu/tanh the option); model files have a Dropout between
    layers and a Dense head after them, outside the stack. Without them it runs to Keras's own outputs
    (float32: Keras's float64 RNNs compute in float32)."""
    case = make_case(cfg)
    biases = case.biases if use_bias else [np.zeros_like(b) for b in case.biases]
    case = case._replace(biases=biases)
    extras = name in MODEL_FORMATS and cfg.num_layers > 1
    net = keras_net(keras, cfg, case.weights, case.biases, functional=functional, extras=extras, use_bias=use_bias)
    path = save(keras, net, tmp_path, name)
    options = {"rnn_mode": cfg.mode} if name in WEIGHT_FORMATS and cfg.mode in ("relu", "tanh") else {}
    model, weights, biases = keras_file.read(path, options)
    assert repr(model) == repr(cfg.with_(bias_mode="double" if use_bias else "none").model())  # use_bias=False
    want = keras_format.from_keras(model, _held(net))
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, want[0] + want[1]))
    if not extras and cfg.dtype != "float64":  # Keras computes float64 RNNs in float32 (known_divergences.py)
        got = model.forward(case.x, None, model.canonical_to_params(weights, biases), time_major=False).output
        stats = error_stats(got, keras.ops.convert_to_numpy(net.predict(case.x, verbose=0)).astype(np.float64))
        verdict = judge("keras", cfg.dtype, "output", stats, sensitivity(cfg, case)["output"])
        assert verdict.passed, verdict.explain("output")


NESTED_CONFIGS = [RNNConfig("gru", num_layers=2, num_units=4, input_size=3, direction="bidirectional", seq_len=5,
                            batch=2, time_major=False, dtype="float32", initial_state=False, seed=3),
                  RNNConfig("lstm", num_layers=3, num_units=4, input_size=3, seq_len=5, batch=2, time_major=False,
                            dtype="float32", initial_state=False, seed=4)]


@pytest.mark.parametrize("name", MODEL_FORMATS)
@pytest.mark.parametrize("depth", [1, 2])
@pytest.mark.parametrize("cfg", NESTED_CONFIGS, ids=lambda c: c.short())
def test_a_stack_inside_a_nested_model_is_read(keras, cfg, depth, name, tmp_path):
    """A model used as a layer of another (at ``depth``, after another nested model of a Dense, so that Keras
    numbers the stack's model ``sequential_1``) holds the stack: it reads as the stack, with the weights
    Keras held, bit for bit, and runs to the nested stack's own outputs in Keras."""
    case = make_case(cfg)
    stack = keras_net(keras, cfg, case.weights, case.biases, functional=False, extras=True)
    inner = stack
    for _ in range(depth - 1):
        inner = keras.Sequential([keras.Input((None, cfg.input_size)), inner])
    start = keras.Input((None, cfg.input_size))
    before = keras.Sequential([keras.Input((None, cfg.input_size)), keras.layers.Dense(cfg.input_size)])
    net = keras.Model(start, inner(before(start)))
    model, weights, biases = keras_file.read(save(keras, net, tmp_path, name))
    assert repr(model) == repr(cfg.model())
    want = keras_format.from_keras(model, _held(net))
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, want[0] + want[1]))
    assert len(weights) == len(want[0]) and len(biases) == len(want[1])
    recurrent = [layer for layer in stack.layers if layer.__class__.__name__ not in ("Dropout", "Dense")]
    rnn_only = keras.Sequential([keras.Input((None, cfg.input_size)), *recurrent])
    got = model.forward(case.x, None, model.canonical_to_params(weights, biases), time_major=False).output
    stats = error_stats(got, keras.ops.convert_to_numpy(rnn_only.predict(case.x, verbose=0)).astype(np.float64))
    verdict = judge("keras", cfg.dtype, "output", stats, sensitivity(cfg, case)["output"])
    assert verdict.passed, verdict.explain("output")


WRITE_CONFIGS = [RNNConfig(mode, num_layers=layers, num_units=5, input_size=3, direction=direction, seq_len=7,
                           batch=2, time_major=False, dtype=dtype, initial_state=False, seed=5)
                 for mode in ("relu", "tanh", "lstm", "gru", "classic_gru")
                 for layers, direction, dtype in ((2, "bidirectional", "float32"), (3, "unidirectional", "float64"))]


@pytest.mark.parametrize("cfg", WRITE_CONFIGS, ids=lambda c: c.short())
def test_a_written_keras_file_loads_in_keras_and_runs_to_the_reference(keras, cfg, tmp_path):
    """``keras.saving.load_model`` loads the archive, holds the weights ``to_keras`` gives, bit for bit, and runs
    to the reference's outputs within the Keras peer's budget (float32); reading it back restores the model."""
    case, model = make_case(cfg), cfg.model()
    keras_file.write(tmp_path / "m.keras", model, case.weights, case.biases)
    net = keras.saving.load_model(tmp_path / "m.keras")
    flat = [w for layer in keras_format.to_keras(model, case.weights, case.biases) for w in layer]
    assert [np.asarray(w).tobytes() for w in net.get_weights()] == [w.tobytes() for w in flat]
    if cfg.dtype != "float64":  # Keras computes float64 RNNs in float32 (known_divergences.py)
        got = keras.ops.convert_to_numpy(net.predict(case.x, verbose=0))
        verdict = judge("keras", cfg.dtype, "output", error_stats(got, run_reference(cfg, case).output.astype(np.float64)),
                        sensitivity(cfg, case)["output"])
        assert verdict.passed, verdict.explain("output")
    back, weights, biases = keras_file.read(tmp_path / "m.keras")
    assert repr(back) == repr(model)
    restored = run_reference(cfg, case._replace(weights=weights, biases=biases))
    assert_agree_within_policy(cfg, case, restored, run_reference(cfg, case))  # summed biases: split in halves
    if cfg.mode == "gru":  # both bias sets kept: bit for bit
        assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, case.weights + case.biases))


@pytest.mark.parametrize("name", ["other.weights.h5", "other.h5"])
@pytest.mark.parametrize("cfg", WRITE_CONFIGS, ids=lambda c: c.short())
def test_keras_loads_a_weights_file_written_here_into_its_model(keras, cfg, name, tmp_path):
    """Other weights than the model's go into the model a ``.keras`` file holds through ``model.load_weights``,
    from ``other.weights.h5`` (Keras 3's weights file) and from ``other.h5`` (a legacy tf.keras 2 model, whose
    weights Keras 3 reads by layer order): Keras then holds them, bit for bit, and runs to the reference's outputs
    on them."""
    case, model = make_case(cfg), cfg.model()
    other = make_case(dataclasses.replace(cfg, seed=cfg.seed + 1))
    keras_file.write(tmp_path / "m.keras", model, case.weights, case.biases)
    keras_file.write(tmp_path / name, model, other.weights, other.biases)
    net = keras.saving.load_model(tmp_path / "m.keras")
    net.load_weights(tmp_path / name)
    flat = [w for layer in keras_format.to_keras(model, other.weights, other.biases) for w in layer]
    assert [np.asarray(w).tobytes() for w in net.get_weights()] == [w.tobytes() for w in flat]
    if cfg.dtype != "float64":  # Keras computes float64 RNNs in float32 (known_divergences.py)
        got = keras.ops.convert_to_numpy(net.predict(other.x, verbose=0))
        want = run_reference(cfg, other).output.astype(np.float64)
        verdict = judge("keras", cfg.dtype, "output", error_stats(got, want), sensitivity(cfg, other)["output"])
        assert verdict.passed, verdict.explain("output")


def test_convert_and_infer_take_keras_files(keras, tmp_path):
    """``rnn-compat convert --to keras`` writes a ``.keras`` archive and ``--from keras`` reads one; ``infer``
    runs it (batch-major, as Keras feeds it) to the outputs of the model read in process, bit for bit."""
    from compat_tests.interop import convert

    cfg = RNNConfig("lstm", num_layers=2, num_units=4, input_size=3, direction="bidirectional", dtype="float32",
                    time_major=False, seq_len=5, batch=2)
    case, model = make_case(cfg), cfg.model()
    checkpoint.save(tmp_path / "ck.npz", model, case.weights, case.biases)
    assert cli.main(["convert", "--from", "checkpoint", "--to", "keras", str(tmp_path / "ck.npz"),
                     str(tmp_path / "m.keras")]) == 0
    np.save(tmp_path / "x.npy", case.x)
    assert cli.main(["infer", "--from", "keras", str(tmp_path / "m.keras"), str(tmp_path / "x.npy"), "--batch-major",
                     "--out", str(tmp_path / "y.npz")]) == 0
    read = convert.read("keras", tmp_path / "m.keras")
    expected = read.model.forward(case.x, None, read.model.canonical_to_params(read.weights, read.biases),
                                  time_major=False)
    with np.load(tmp_path / "y.npz", allow_pickle=False) as y:
        assert y["output"].tobytes() == expected.output.tobytes()
        assert y["output_c"].tobytes() == expected.output_c.tobytes()
    assert cli.main(["convert", "--from", "keras", "--to", "torch", str(tmp_path / "m.keras"),
                     str(tmp_path / "sd.safetensors")]) == 0
    assert cli.main(["convert", "--from", "keras", "--to", "keras", "--num-units", "5", str(tmp_path / "m.keras"),
                     str(tmp_path / "again.keras")]) == 2  # an option that disagrees with the file


def test_a_keras_tensor_file_without_biases_reads_as_zero_biases(tmp_path):
    """``use_bias=False`` layers in the per-layer tensor file whose config says it has biases: no
    ``layer{k}/bias`` at all is zero biases; missing only some is a damaged file. (Without a config of ours,
    no bias at all is ``bias_mode="none"``: test_bias_modes.py.)"""
    from compat_tests.interop import convert

    cfg = RNNConfig("classic_gru", num_layers=2, num_units=3, input_size=2, dtype="float32")
    case, model = make_case(cfg), cfg.model()
    tensors = {f"layer{k}/{n}": a for k, layer in enumerate(keras_format.to_keras(model, case.weights, case.biases))
               for n, a in zip(("kernel", "recurrent_kernel"), layer)}
    checkpoint.write_tensors(tmp_path / "k.npz", tensors, checkpoint.model_config(model))
    read = convert.read("keras", tmp_path / "k.npz")
    assert all(not b.any() for b in read.biases)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(read.weights, case.weights))
    checkpoint.write_tensors(tmp_path / "some.npz", {**tensors, "layer0/bias": np.zeros(9, np.float32)},
                             checkpoint.model_config(model))
    with pytest.raises(ValueError, match="missing Keras weight 'layer1/bias'"):
        convert.read("keras", tmp_path / "some.npz")


_GRU = RNNConfig("gru", num_layers=2, num_units=4, input_size=3, dtype="float32")


def _sequential(keras, *layers):
    return keras.Sequential([keras.Input((None, 3)), *layers])


def _encoder_decoder(keras):
    start = keras.Input((None, 3))
    _, state = keras.layers.GRU(4, return_state=True, return_sequences=True)(start)
    return keras.Model(start, keras.layers.GRU(4, return_sequences=True)(start, initial_state=state))


def _side_by_side(keras):
    start = keras.Input((None, 3))
    a = keras.layers.GRU(4, return_sequences=True)(start)
    b = keras.layers.GRU(4, return_sequences=True)(start)
    return keras.Model(start, keras.layers.Concatenate()([a, b]))


REFUSED = {  # a model (from keras), the file it is saved as, what the refusal says
    "merge-mode-sum": (lambda k: _sequential(k, k.layers.Bidirectional(k.layers.GRU(4), merge_mode="sum")), "m.keras",
                       "layer 'bidirectional': merge_mode='sum' has no cuDNN equivalent (concat)"),
    "go-backwards": (lambda k: _sequential(k, k.layers.LSTM(4, go_backwards=True)), "m.keras",
                     "layer 'lstm': go_backwards=True outside a Bidirectional's backward layer has no cuDNN equivalent"),
    "hard-sigmoid": (lambda k: _sequential(k, k.layers.LSTM(4, recurrent_activation="hard_sigmoid")), "m.h5",
                     "layer 'lstm': recurrent_activation 'hard_sigmoid' has no cuDNN equivalent (sigmoid)"),
    "relu-lstm": (lambda k: _sequential(k, k.layers.LSTM(4, activation="relu")), "m.keras",
                  "layer 'lstm': activation 'relu' has no cuDNN equivalent (tanh)"),
    "elu-rnn": (lambda k: _sequential(k, k.layers.SimpleRNN(4, activation="elu")), "m.keras",
                "layer 'simple_rnn': activation 'elu' has no cuDNN equivalent (tanh or relu)"),
    "dense-between": (lambda k: _sequential(k, k.layers.GRU(4, return_sequences=True), k.layers.Dense(4),
                                            k.layers.GRU(4)), "m.keras",
                      "layer 'dense' (Dense) lies between the recurrent layers 'gru' and 'gru_1'"),
    "two-cells": (lambda k: _sequential(k, k.layers.GRU(4, return_sequences=True), k.layers.LSTM(4)), "m.h5",
                  "layer 'lstm' computes a unidirectional 'lstm' layer, but the first recurrent layer 'gru' a "
                  "unidirectional 'gru' one"),
    "two-widths": (lambda k: _sequential(k, k.layers.GRU(4, return_sequences=True), k.layers.GRU(5)), "m.keras",
                   "its recurrent layers differ in size ('gru' 3 -> 4, 'gru_1' 4 -> 5: inputs -> units)"),
    "initial-state": (_encoder_decoder, "m.keras",
                      "the recurrent layer 'gru_1' is called with initial_state from another layer"),
    "side-by-side": (_side_by_side, "m.keras",
                     "the recurrent layer 'gru_1' reads ['input_layer'], not the output of the recurrent layer before "
                     "it, 'gru': the layers are not one stack"),
    "no-recurrent-layer": (lambda k: _sequential(k, k.layers.Dense(4)), "m.keras", "the model has no recurrent layer"),
    "split-over-models": (lambda k: _sequential(k, k.layers.GRU(4, return_sequences=True),
                                                k.Sequential([k.Input((None, 4)), k.layers.GRU(4)])), "m.keras",
                          "recurrent layers lie in the top model and in model 'sequential': they are not one stack"),
    "nested-in-weights": (lambda k: _sequential(k, k.layers.GRU(4, return_sequences=True),  # not read as one layer
                                                k.Sequential([k.Input((None, 4)), k.layers.GRU(4)])), "m.weights.h5",
                          "layer group 'sequential' holds weights but is not a recurrent layer (or is a model of "
                          "layers)"),
    "nested-in-legacy-weights": (lambda k: _sequential(k, _sequential(k, k.layers.GRU(4, return_sequences=True),
                                                                      k.layers.GRU(4))), "legacy.h5",
                                 "layer 'sequential' holds 2 kernels, the weights of several layers (a model of "
                                 "layers)"),
    "weights-with-a-dense": (lambda k: _sequential(k, k.layers.LSTM(4), k.layers.Dense(2)), "m.weights.h5",
                             "layer group 'dense' holds weights but is not a recurrent layer"),
    "legacy-weights-with-a-dense": (lambda k: _sequential(k, k.layers.LSTM(4), k.layers.Dense(2)), "legacy.h5",
                                    "layer 'dense' holds ['sequential/dense/kernel', 'sequential/dense/bias'], not "
                                    "a recurrent layer's weights"),
    "weights-of-two-classes": (lambda k: _sequential(k, k.layers.GRU(4, return_sequences=True), k.layers.LSTM(4)),
                               "m.weights.h5", "holds recurrent layers of several classes (['gru', 'lstm'])"),
    "gru-weights-without-bias": (lambda k: _sequential(k, k.layers.GRU(4, use_bias=False)), "m.weights.h5",
                                 "a GRU without bias does not say whether it resets after"),
    "rnn-weights-without-mode": (lambda k: _sequential(k, k.layers.SimpleRNN(4)), "m.weights.h5",
                                 "relu and tanh SimpleRNN weights look alike: say which"),
}


@pytest.mark.parametrize("case_name", REFUSED)
def test_a_keras_file_that_is_not_a_cudnn_stack_is_refused_naming_why(keras, case_name, tmp_path):
    """Reading the weights alone would give a model that silently disagrees with the file (or one the file
    cannot tell), so it is refused naming the layer and what it computes."""
    build, name, message = REFUSED[case_name]
    path = save(keras, build(keras), tmp_path, name)
    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        keras_file.read(path)
    assert str(path) in str(caught.value)


def _archive(folder, members: dict[str, bytes]):
    """A ``.keras`` zip of ``members`` (stored, as Keras writes them), under a new name in ``folder``."""
    path = folder / f"m{len(list(folder.iterdir()))}.keras"
    with zipfile.ZipFile(path, "w") as zf:
        for name, blob in members.items():
            zf.writestr(name, blob)
    return path


def test_a_damaged_or_foreign_keras_file_is_refused_naming_it(tmp_path):
    """Not a zip, not an HDF5 file, an archive without config or weights (or with Keras's pickled npz
    weights), a config that is not JSON, a member that claims more than the archive holds: a ValueError
    naming the file, never h5py's or zipfile's own exception."""
    cfg = RNNConfig("gru", num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    keras_file.write(tmp_path / "good.keras", cfg.model(), case.weights, case.biases)
    with zipfile.ZipFile(tmp_path / "good.keras") as zf:
        good = {n: zf.read(n) for n in zf.namelist()}
    (tmp_path / "text.keras").write_text("not a zip")
    (tmp_path / "text.h5").write_text("not hdf5")
    cases = [
        (tmp_path / "text.keras", "not a .keras archive (not a zip file)"),
        (tmp_path / "text.h5", "not an HDF5 file"),
        (_archive(tmp_path, {k: v for k, v in good.items() if k != "config.json"}), "no config.json"),
        (_archive(tmp_path, {**{k: v for k, v in good.items() if k != "model.weights.h5"},
                             "model.weights.npz": b""}), "holds no model.weights.h5"),
        (_archive(tmp_path, {**good, "config.json": b"{"}), "config.json is not JSON"),
        (_archive(tmp_path, {**good, "config.json": b"[]"}), "config.json is not a Keras model config"),
        (_archive(tmp_path, {**good, "model.weights.h5": good["model.weights.h5"][:600]}), "not an HDF5 file"),
    ]
    for path, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)) as caught:
            keras_file.read(path)
        assert str(path) in str(caught.value), caught.value
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "absent.h5"))):
        keras_file.read(tmp_path / "absent.h5")
    claim = _archive(tmp_path, good)  # a header that claims more bytes than deflate could make of its data
    blob = bytearray(claim.read_bytes())
    at = blob.index(b"model.weights.h5") - 30 + 22  # the local header's uncompressed size
    central = blob.rindex(b"model.weights.h5") - 46 + 24  # and the central directory's
    for offset in (at, central):
        blob[offset:offset + 4] = (2**31).to_bytes(4, "little")
    claim.write_bytes(bytes(blob))
    with pytest.raises(ValueError, match="model.weights.h5 claims 2147483648 bytes"):
        keras_file.read(claim)


def test_the_weight_groups_are_named_as_keras_names_them(keras, tmp_path):
    """Keras 3 files keep a layer's weights under a path made from its class and its position among the
    layers of that class, not from its name: the paths computed here are the ones Keras writes."""
    import h5py

    net = _sequential(keras, keras.layers.SimpleRNN(2, return_sequences=True, name="first"),
                      keras.layers.Bidirectional(keras.layers.GRU(2, return_sequences=True)),
                      keras.layers.SimpleRNN(2, return_sequences=True), keras.layers.Dense(1),
                      keras.layers.SimpleRNN(2, return_sequences=True), keras.layers.Dense(1))
    net.save_weights(tmp_path / "w.weights.h5")
    with h5py.File(tmp_path / "w.weights.h5") as h5:
        groups = sorted(h5["layers"])
    paths = keras_file.keras3_paths([layer.__class__.__name__ for layer in net.layers])
    assert sorted(p.split("/")[1] for p in paths) == groups
    assert paths[:3] == ["layers/simple_rnn", "layers/bidirectional", "layers/simple_rnn_1"]


def test_a_weights_file_of_many_layers_reads_them_in_the_order_keras_numbers_them(keras, tmp_path):
    """``lstm``, ``lstm_1``, ..., ``lstm_10``, ``lstm_11``: numbered, not sorted as text."""
    cfg = RNNConfig("lstm", num_layers=12, num_units=2, input_size=3, dtype="float32", time_major=False)
    case = make_case(cfg)
    net = keras_net(keras, cfg, case.weights, case.biases, functional=False, extras=False)
    model, weights, biases = keras_file.read(save(keras, net, tmp_path, "m.weights.h5"))
    want = keras_format.from_keras(model, _held(net))
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, want[0] + want[1]))


def test_a_crash_or_a_hang_of_the_hdf5_library_is_a_value_error(tmp_path, monkeypatch):
    """h5py reads in a child process (``hdf5_tree``): a damaged file that crashes the HDF5 library (seen
    with a few overwritten bytes) or never finishes leaves the caller running, with a ValueError."""
    crash = tmp_path / "crash.py"
    crash.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    monkeypatch.setattr(hdf5_tree, "__file__", str(crash))  # the child runs this script instead
    with pytest.raises(ValueError, match=r"the HDF5 library crashed reading it \(SIGSEGV\): a damaged file"):
        hdf5_tree.read(io.BytesIO(b"any bytes"))
    hang = tmp_path / "hang.py"
    hang.write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setattr(hdf5_tree, "__file__", str(hang))
    monkeypatch.setattr(hdf5_tree, "TIMEOUT_S", 1)
    with pytest.raises(ValueError, match="reading it as HDF5 took over 1 s"):
        hdf5_tree.read(io.BytesIO(b"any bytes"))


def test_legacy_names_split_into_chunks_are_joined(keras, tmp_path):
    """Keras splits a legacy file's ``layer_names`` into ``layer_names0``, ``layer_names1``, ... where the list
    would pass HDF5's 64 KiB header limit (long layer names here); they are read as one list, in order."""
    import h5py

    cfg = RNNConfig("gru", num_layers=4, num_units=2, input_size=3, dtype="float32", time_major=False)
    case = make_case(cfg)
    net = keras_net(keras, cfg, case.weights, case.biases, functional=False, extras=False)
    for k, layer in enumerate(net.layers):
        layer.name = f"gru{k}_" + "x" * 20000
    path = save(keras, net, tmp_path, "legacy.h5")
    with h5py.File(path) as h5:
        assert "layer_names" not in h5.attrs and "layer_names1" in h5.attrs  # the premise: chunks
    model, weights, biases = keras_file.read(path)
    want = keras_format.from_keras(model, _held(net))
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, want[0] + want[1]))


def _tf_keras2_file(path, cfg: RNNConfig, per_layer: list) -> None:
    """A legacy ``.h5`` model laid out as tf.keras 2 (``hdf5_format.save_model_to_hdf5``) writes it, which
    Keras 3 no longer does: variable names ending in ``:0`` under the layer's scope, a functional config with
    list-form ``inbound_nodes``, ``time_major`` in the cell configs and a Bidirectional without its
    ``backward_layer`` (derived from ``layer``)."""
    import h5py

    cls, extra = keras_format.KERAS_LAYERS[cfg.mode]
    snake = keras_file.snake_case(cls)
    layers = [{"class_name": "InputLayer", "name": "input_1", "inbound_nodes": [],
               "config": {"batch_input_shape": [None, None, cfg.input_size], "dtype": cfg.dtype, "name": "input_1"}}]
    weight_names = {}
    for layer in range(cfg.num_layers):
        suffix = f"_{layer}" if layer else ""
        cell = {"name": snake + suffix, "units": cfg.num_units, "return_sequences": True, "go_backwards": False,
                "time_major": False, "implementation": 2, "dtype": cfg.dtype, "activation": "tanh",
                **({"recurrent_activation": "sigmoid"} if cls != "SimpleRNN" else {}), **extra}
        name = snake + suffix if cfg.num_dirs == 1 else f"bidirectional{suffix}"
        entry = {"class_name": cls, "config": cell} if cfg.num_dirs == 1 else \
            {"class_name": "Bidirectional", "config": {"name": name, "merge_mode": "concat",
                                                       "layer": {"class_name": cls, "config": cell}}}
        entry.update(name=name, inbound_nodes=[[[layers[-1]["name"], 0, 0, {}]]])
        layers.append(entry)
        scopes = [name] if cfg.num_dirs == 1 else [f"{name}/forward_{cell['name']}", f"{name}/backward_{cell['name']}"]
        weight_names[name] = [f"{scope}/{snake}_cell/{w}:0" for scope in scopes
                              for w in ("kernel", "recurrent_kernel", "bias")]
    config = {"class_name": "Functional", "config": {"name": "model", "layers": layers,
                                                     "input_layers": [["input_1", 0, 0]],
                                                     "output_layers": [[layers[-1]["name"], 0, 0]]}}
    arrays = iter(w for pl in per_layer for w in pl)
    with h5py.File(path, "w") as h5:
        h5.attrs["model_config"] = json.dumps(config).encode()
        h5.attrs["keras_version"], h5.attrs["backend"] = b"2.11.0", b"tensorflow"
        root = h5.create_group("model_weights")
        root.attrs["layer_names"] = [e["name"].encode() for e in layers]
        root.create_group("input_1").attrs["weight_names"] = np.array([], np.float64)
        for name, names in weight_names.items():
            group = root.create_group(name)
            group.attrs["weight_names"] = [n.encode() for n in names]
            for n in names:
                group.create_dataset(n, data=next(arrays))


def keras_file_snake(cls: str) -> str:
    return keras_file.snake_case(cls)


@pytest.mark.parametrize("cfg", [RNNConfig(mode, num_layers=2, num_units=3, input_size=2, direction=direction,
                                           dtype="float32")
                                 for mode, direction in (("lstm", "bidirectional"), ("gru", "unidirectional"),
                                                         ("relu", "bidirectional"))], ids=lambda c: c.short())
def test_a_tf_keras_2_model_file_reads_as_its_stack(cfg, tmp_path):
    case, model = make_case(cfg), cfg.model()
    per_layer = keras_format.to_keras(model, case.weights, case.biases)
    _tf_keras2_file(tmp_path / "m.h5", cfg, per_layer)
    back, weights, biases = keras_file.read(tmp_path / "m.h5")
    assert repr(back) == repr(model)
    want = keras_format.from_keras(model, per_layer)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights + biases, want[0] + want[1]))


@pytest.fixture(scope="module")
def saved_by_keras(tmp_path_factory):
    """A 2-layer bidirectional functional GRU as Keras saved it: a legacy ``.h5`` model, Keras 3 ``.weights.h5``
    and the members of a ``.keras`` archive, ``{name: bytes}``."""
    from compat_tests.peers import PEERS

    ok, reason = PEERS["keras"].available()
    if not ok:
        pytest.skip(f"keras: {reason}")
    keras = import_keras()
    keras.backend.clear_session()  # its layers named "bidirectional", "bidirectional_1" whatever ran before
    cfg = RNNConfig("gru", num_layers=2, num_units=3, input_size=2, direction="bidirectional", dtype="float32")
    case = make_case(cfg)
    net = keras_net(keras, cfg, case.weights, case.biases, functional=True, extras=False)
    folder = tmp_path_factory.mktemp("keras")
    files = {name: save(keras, net, folder, name).read_bytes() for name in ("m.h5", "m.weights.h5")}
    with zipfile.ZipFile(save(keras, net, folder, "m.keras")) as zf:  # the archive's members
        return {**files, **{name: zf.read(name) for name in ("config.json", "model.weights.h5")}}


@pytest.mark.parametrize("name", ["m.h5", "m.weights.h5"])
@settings(max_examples=examples(40))  # each read is a child process
@given(data=st.data())
def test_a_damaged_hdf5_file_loads_or_is_refused_naming_it(saved_by_keras, name, data, tmp_path_factory):
    """HDF5 files have no checksum of their own (a .keras archive's zip CRC catches damage before h5py
    reads): whatever the damage, reading gives weights the model runs on or a ValueError naming the file,
    even where the HDF5 library crashes."""
    path = tmp_path_factory.mktemp("damaged") / name
    path.write_bytes(damaged(data, saved_by_keras[name]))
    try:
        model, weights, biases = keras_file.read(path)
    except (ValueError, TypeError) as exc:
        assert str(path) in str(exc), exc
        return
    x = np.zeros((2, 1, model.input_size), model.dtype)
    with np.errstate(all="ignore"):  # damaged weights may be inf or NaN: only their reading is under test
        model.forward(x, None, model.canonical_to_params(weights, biases))


def test_a_file_that_crashes_the_hdf5_library_is_refused_naming_it():
    """``data/hdf5_crash.h5``: a legacy ``.h5`` model Keras 3.15 saved with one byte changed (offset 929, 1 to
    88), found by damaging files; h5py 3.16's HDF5 library dies with SIGSEGV reading its root attribute
    ``backend``, which in process killed the reader. Read in a child process, it is a ValueError naming the
    file."""
    path = Path(__file__).resolve().parents[2] / "data" / "hdf5_crash.h5"
    with pytest.raises(ValueError) as caught:
        keras_file.read(path)
    assert str(path) in str(caught.value)


def _paths(node, at=()):
    """Every place in a JSON tree, as the keys and indexes that lead there."""
    yield at
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield from _paths(value, (*at, key))


CONFIG_KEYS = st.sampled_from(["class_name", "config", "name", "layer", "layers", "units", "inbound_nodes",
                               "keras_history", "args", "kwargs"])


def _containers(inner):
    return st.lists(inner, max_size=4) | st.dictionaries(CONFIG_KEYS, inner, max_size=4)


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False)
                           | st.sampled_from(["", "LSTM", "GRU", "Bidirectional", "Dropout", "Sequential", "tanh",
                                              "relu", "concat", "input_layer", "bidirectional", "__keras_tensor__"]),
                           _containers, max_leaves=8)


@settings(max_examples=examples(60))  # each read is a child process
@given(data=st.data())
def test_a_mangled_keras_config_loads_or_is_refused_naming_it(saved_by_keras, data, tmp_path_factory):
    """Any part of a ``.keras`` archive's config.json replaced by other JSON (the archive otherwise sound):
    reading gives a model that runs or a ValueError/TypeError naming the file, never a KeyError,
    AttributeError or IndexError from the reader."""
    config = json.loads(saved_by_keras["config.json"])
    at = data.draw(st.sampled_from(list(_paths(config))), label="replaced at")
    value = data.draw(JSON_VALUES, label="by")
    if not at:
        config = value
    else:
        parent = config
        for key in at[:-1]:
            parent = parent[key]
        parent[at[-1]] = value
    path = _archive(tmp_path_factory.mktemp("mangled"), {"config.json": json.dumps(config).encode(),
                                                         "model.weights.h5": saved_by_keras["model.weights.h5"]})
    try:
        model, weights, biases = keras_file.read(path)
    except (ValueError, TypeError) as exc:
        assert str(path) in str(exc), exc
        return
    model.forward(np.zeros((2, 1, model.input_size), model.dtype), None, model.canonical_to_params(weights, biases))


def test_weights_under_another_layers_name_are_refused(saved_by_keras, tmp_path):
    """A Keras 3 file records each layer's name beside its weights. Where the path this reader derives from the
    classes holds another layer's name, the file is not laid out as it computes (a Keras that numbers its
    groups otherwise, or a config edited by hand, as here) and is refused: within a stack, layers of the
    same shapes could otherwise swap weights unnoticed."""
    text = saved_by_keras["config.json"].decode()  # the two layers' names swapped, references and all
    for old, new in (('"bidirectional"', '"@"'), ('"bidirectional_1"', '"bidirectional"'), ('"@"', '"bidirectional_1"')):
        text = text.replace(old, new)
    path = _archive(tmp_path, {"config.json": text.encode(), "model.weights.h5": saved_by_keras["model.weights.h5"]})
    with pytest.raises(ValueError, match=r"layers/bidirectional holds the weights of layer 'bidirectional', not of "
                                         r"'bidirectional_1': the weights do not follow the config"):
        keras_file.read(path)


def test_a_weights_file_without_recurrent_weights_is_refused(tmp_path):
    import h5py

    with h5py.File(tmp_path / "w.weights.h5", "w") as h5:
        h5.create_group("layers/dropout/vars")
    with pytest.raises(ValueError, match="w.weights.h5: the file holds no recurrent layer's weights"):
        keras_file.read(tmp_path / "w.weights.h5")


@settings(max_examples=examples(30))  # each read is a child process
@given(cfg=rnn_configs(Capabilities(skip_input=False, projection=False), max_layers=3, max_units=5, max_input=4,
                       max_time=3, max_batch=2),  # what a Keras file can hold: no skip_input, no projection
       name=st.sampled_from(["m.keras", "m.weights.h5", "m.h5"]))
def test_a_written_keras_file_reads_back_as_the_same_model(cfg, name, tmp_path_factory):
    """Without Keras: every config Keras can hold, every float dtype, written (a model, as a ``.keras`` archive or
    a legacy ``.h5``, or its weights) and read back is the same model with the same weights (summed biases split
    in halves, bit for bit their sum; the cuDNN GRU's both kept); a weights file says the rest but relu from tanh."""
    case, model = make_case(cfg), cfg.model()
    path = tmp_path_factory.mktemp("written") / name
    keras_file.write(path, model, case.weights, case.biases)
    told = {"rnn_mode": cfg.mode} if name.endswith(".weights.h5") and cfg.mode in ("relu", "tanh") else {}
    back, weights, biases = keras_file.read(path, told)
    assert repr(back) == repr(model)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights, case.weights))
    per_layer = keras_format.to_keras(model, case.weights, case.biases)
    assert all(a.tobytes() == b.tobytes() for a, b in zip([w for layer in keras_format.to_keras(back, weights, biases)
                                                           for w in layer], [w for layer in per_layer for w in layer]))


def test_the_keras_writer_refuses_a_name_keras_does_not_read(tmp_path):
    """(``convert --to keras`` sends other names to the tensor-file writer, which refuses its own.)"""
    cfg = RNNConfig("gru", num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    with pytest.raises(ValueError, match=r"a Keras file is written as \.keras \(a model\), \.weights\.h5 \(its "
                                         r"weights\) or \.h5 / \.hdf5 \(a legacy tf\.keras 2 model\), got 'm\.zip'"):
        keras_file.write(tmp_path / "m.zip", cfg.model(), case.weights, case.biases)
    assert not list(tmp_path.iterdir())


def test_a_damaged_deflated_member_is_refused_naming_the_file(tmp_path):
    """Keras stores its members, but an archive zipped again may deflate them: it reads whole, and damaged
    deflate data raises zlib.error, which is named as the other readers name it (``checkpoint.DAMAGE``)."""
    import zlib

    cfg = RNNConfig("gru", num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    keras_file.write(tmp_path / "good.keras", cfg.model(), case.weights, case.biases)
    buffer = io.BytesIO()
    with zipfile.ZipFile(tmp_path / "good.keras") as good, \
            zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in good.namelist():
            zf.writestr(name, good.read(name))
    blob = buffer.getvalue()
    (tmp_path / "deflated.keras").write_bytes(blob)  # whole, it reads: its weights inflate past the file's size
    assert repr(keras_file.read(tmp_path / "deflated.keras")[0]) == repr(cfg.model())
    start = blob.index(b"model.weights.h5") + len("model.weights.h5")  # the member's deflate data follows
    for at in range(start, start + 200):  # the first flipped byte that breaks the deflate stream itself
        damaged = bytearray(blob)
        damaged[at] ^= 0xFF
        try:
            zipfile.ZipFile(io.BytesIO(bytes(damaged))).read("model.weights.h5")
        except zlib.error:
            break
        except zipfile.BadZipFile:
            continue
    else:
        pytest.fail("no flipped byte gave zlib.error")
    path = tmp_path / "m.keras"
    path.write_bytes(bytes(damaged))
    with pytest.raises(ValueError, match=re.escape(f"{path}: model.weights.h5 cannot be read (error:")):
        keras_file.read(path)


def test_the_weights_member_is_read_in_chunks_not_whole(tmp_path, monkeypatch):
    """A ``.keras`` archive's weights may be gigabytes: they are copied to the HDF5 reader's file in bounded
    chunks, never held whole in memory beside the copy."""
    cfg = RNNConfig("lstm", num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    keras_file.write(tmp_path / "m.keras", cfg.model(), case.weights, case.biases)
    asked, read = [], zipfile.ZipExtFile.read

    def recorded(self, n=-1):
        if self.name == "model.weights.h5":
            asked.append(n)
        return read(self, n)

    monkeypatch.setattr(zipfile.ZipExtFile, "read", recorded)
    _, weights, _ = keras_file.read(tmp_path / "m.keras")
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights, case.weights))
    assert asked and all(n is not None and 0 < n <= 1 << 20 for n in asked), asked


UNEVEN = [RNNConfig("lstm", num_units=6, input_size=3, direction="bidirectional", seq_len=5, batch=2, time_major=False,
                    dtype="float32", initial_state=False, seed=21),
          RNNConfig("lstm", num_units=3, input_size=12, direction="bidirectional", seq_len=5, batch=2,
                    time_major=False, dtype="float32", initial_state=False, seed=22)]


@pytest.mark.parametrize("name", ["m.keras", "legacy.h5"])  # Keras 3's model archive, tf.keras 2's weights
def test_a_keras_stack_whose_layers_differ_in_size_runs_as_a_chain_as_keras_runs_it(keras, name, tmp_path, capsys):
    """Bidirectional LSTMs of 6 and then 3 units are not one cuDNN stack: refused as one model naming each
    layer's sizes, read as a chain of one-layer models holding the weights Keras held, which runs to Keras's
    own outputs (and ``rnn-compat infer`` writes each layer's final states)."""
    cases = [make_case(cfg) for cfg in UNEVEN]
    layers = [_recurrent(keras, cfg, keras_format.to_keras(cfg.model(), case.weights, case.biases), 0, True)
              for cfg, case in zip(UNEVEN, cases)]
    net = keras.Sequential([keras.Input((None, UNEVEN[0].input_size), dtype="float32"), *layers])
    path = save(keras, net, tmp_path, name)
    with pytest.raises(ValueError, match=r"differ in size \(.* 3 -> 6, .* 12 -> 3: inputs -> units\)"):
        keras_file.read(path)
    chain = convert.read_chain("auto", path)
    assert [repr(m) for m in chain.models] == [repr(cfg.model()) for cfg in UNEVEN]
    held = _held(net)
    for k, layer in enumerate(chain.layers):
        want = keras_format.from_keras(layer.model, held[2 * k:2 * k + 2])
        assert all(a.tobytes() == b.tobytes() for a, b in zip(layer.weights + layer.biases, want[0] + want[1]))
    x = cases[0].x
    got = chain.forward(x, time_major=False).output
    want = keras.ops.convert_to_numpy(net.predict(x, verbose=0)).astype(np.float64)
    between = keras.ops.convert_to_numpy(layers[0](x))  # the last layer's input, as Keras computed it
    verdict = judge("keras", "float32", "output", error_stats(got, want),
                    sensitivity(UNEVEN[1], cases[1]._replace(x=between))["output"])
    assert verdict.passed, verdict.explain("output")
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["infer", str(path), str(tmp_path / "x.npy"), "--batch-major", "--out", str(tmp_path / "y.npz")]) == 0
    with np.load(tmp_path / "y.npz", allow_pickle=False) as y:
        assert y["output"].tobytes() == got.tobytes() and y["output_h_1"].shape == (2, 2, 3)
