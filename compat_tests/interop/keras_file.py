"""Keras's own files, read and written without Keras (with h5py, a dependency of Keras):

- ``.keras``: a whole Keras 3 model (``model.save``), a zip of ``config.json`` and ``model.weights.h5``;
  written here as a ``Sequential`` that ``keras.saving.load_model`` loads;
- ``.h5``/``.hdf5``: the legacy HDF5 format of tf.keras / Keras 2 (and of Keras 3's ``save_model(m,
  "m.h5")``): a whole model (its config in the ``model_config`` attribute) or weights alone
  (``save_weights``);
- ``.weights.h5``: weights alone, as Keras 3's ``save_weights`` writes them; written here for
  ``model.load_weights`` into the model a ``.keras`` file written here holds (a ``Sequential`` of the recurrent
  layers, or any model whose layers are those).

A model file is read as the stack of its recurrent layers (``SimpleRNN``, ``GRU``, ``LSTM``, tf.keras 2's
``CuDNNLSTM`` and ``CuDNNGRU``, each alone or in a ``Bidirectional``), once ``keras_stack`` finds its config to
be one cuDNN stack, which may lie in a model nested in the one saved. A weights file does not say what lies
between its layers, so it may hold recurrent layers only (and layers without weights), none inside a nested
model, unless the user picks the stack's layers (options key ``layers``). Nor does it say which
``recurrent_activation`` its LSTM and GRU layers computed: a file of a Keras that defaulted to hard_sigmoid
(before 2.3, by its ``keras_version``) is refused unless the user says sigmoid (``recurrent_activation``).
Weights of Keras 3 files sit under paths that Keras derives from each layer's class
(``layers/gru_1/cell/vars/0``); legacy files list them by layer name.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from reference import checkpoint
from reference.formats import keras as keras_weights, tf as tf_format
from reference.formats.canonical import matrix_shape
from reference.formats.files import load_json, replacing

from compat_tests.interop import hdf5_tree
from compat_tests.interop.keras_stack import (WRAPPER, Era, Layer, is_recurrent, keras_era, layer_name, stack_indices,
                                              stack_kind, stack_model)
from compat_tests.optional import require

SUFFIXES = (".keras", ".h5", ".hdf5")  # ``.weights.h5`` ends in ``.h5``
CONFIG_LIMIT = 2**24  # bytes of a .keras archive's config.json


def is_keras_file(path: str | Path) -> bool:
    """Whether ``path`` names a file of Keras's own formats (by its suffix)."""
    return Path(path).suffix in SUFFIXES


def read(path: str | Path, options: dict | None = None) -> tuple[object, list[np.ndarray], list[np.ndarray]]:
    """``(model, weights, biases)`` of a Keras file. ``options`` (config fields, ``None`` for not given) may
    say only what the file cannot (relu from tanh in a weights file) and must agree with the rest. Layers
    that differ in size are not one model: refused (``reference.formats.tf.UnevenLayers``; :func:`read_chain`)."""
    (read_model,) = _read(path, options, chain=False)
    return read_model


def read_chain(path: str | Path, options: dict | None = None) -> list[tuple[object, list, list]]:
    """The recurrent layers of a Keras file as :func:`read` reads a stack, one ``(model, weights, biases)``
    per layer where they differ in size (a stack of 64 and then 32 units), else the one model."""
    return _read(path, options, chain=True)


def _read(path: str | Path, options: dict | None, chain: bool) -> list[tuple[object, list, list]]:
    require("h5py", "reading a Keras .keras or .h5 file")
    path = Path(path)
    with open(path, "rb"):  # a missing or unreadable file: the OSError that names it, as for every format
        pass
    options = dict(options or {})
    told = options.pop("recurrent_activation", None)
    chosen = layer_choice(options.pop("layers", None))
    with checkpoint.about(path):
        if path.suffix == ".keras":
            config, h5 = _archive(path)
        else:
            config, h5 = None, hdf5_tree.read(path)
            if "model_config" in h5.attrs:  # a legacy model file
                config = _json(h5.attrs["model_config"], "the model_config attribute")
        era = keras_era(written_by(h5), told, legacy=is_legacy(h5))
        if chosen is not None and config is not None:
            raise ValueError("a choice of layers applies to weights files: a model file's config says which layers "
                             "are its stack")
        layers = _layers(config, h5, chosen)
        try:
            return [_model(layers, options, config is not None, era)]
        except tf_format.UnevenLayers:  # raised once every layer was found to compute one mode and direction
            if not chain:
                raise
        return [_model([layer], options, config is not None, era) for layer in layers]


PICK = "--layers NAME,NAME (options key layers)"


def layer_choice(value) -> list[str | int] | None:
    """The layers a user picks from a weights file (``--layers lstm_1,lstm_2``, options key ``layers``): a
    comma-separated string or a list, of layer names or of indices into the file's list of layers, in the
    stack's order; ``None``: not given."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items or \
            not all(isinstance(i, (str, int)) and not isinstance(i, bool) for i in items):
        raise ValueError(f"layers must name the recurrent layers to read, by name or index (such as 'lstm_1,lstm_2' "
                         f"or [1, 2]), got {value!r}")
    chosen = [int(i) if isinstance(i, str) and i.strip().isdigit() else i.strip() if isinstance(i, str) else i
              for i in items]
    if any(i == "" for i in chosen):
        raise ValueError(f"layers names an empty layer: {value!r}")
    if len(set(chosen)) < len(chosen):
        raise ValueError(f"layers names a layer twice: {value!r}")
    return chosen


def _picked(chosen: list[str | int], names: list[str], recorded: dict[str, str] | None = None) -> list[str]:
    """The file's layers (``names``, in its order; ``recorded``: other names they go by) that ``chosen`` picks,
    in the order chosen; an unknown name or an index out of range is refused, listing the file's layers."""
    aliases = {alias: name for name, alias in (recorded or {}).items()}
    found = []
    for item in chosen:
        if isinstance(item, int):
            if recorded is not None:
                raise ValueError(f"layers: a Keras 3 weights file does not record its layers' order: name them "
                                 f"(it holds {names})")
            if not 0 <= item < len(names):
                raise ValueError(f"layers: index {item} is not one of the file's {len(names)} layers {names}")
            found.append(names[item])
        elif item in names or item in aliases:
            found.append(item if item in names else aliases[item])
        else:
            raise ValueError(f"layers: the file holds no layer {item!r}; it holds {names}")
    return found


def is_legacy(h5) -> bool:
    """Whether an open Keras HDF5 file is of the legacy format (tf.keras 2's, Keras 2's, Keras 3's
    ``save_model(m, "m.h5")``), where weights are listed by layer name."""
    return "model_weights" in h5 or _names(h5.attrs, "layer_names") is not None


def written_by(h5) -> str | None:
    """The ``keras_version`` attribute of a legacy file (at its root, or on ``model_weights``), else None."""
    for attrs in (h5.attrs, h5["model_weights"].attrs if "model_weights" in h5 else {}):
        version = attrs.get("keras_version")
        if isinstance(version, str):
            return version
    return None


def _archive(path: Path) -> tuple[dict, hdf5_tree.Group]:
    """The config and the open weights of a ``.keras`` archive."""
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise ValueError("not a .keras archive (not a zip file)") from None
    with zf:
        names = zf.namelist()
        if "config.json" not in names:
            raise ValueError(f"not a .keras archive: no config.json among {names[:5]}")
        if "model.weights.h5" not in names:
            raise ValueError(f"holds no model.weights.h5 (only {names[:5]}): Keras's other weight stores "
                             f"(model.weights.npz, which needs pickle, or sharded weights) are not read")
        config = _json(_member(zf, "config.json", CONFIG_LIMIT), "config.json")
        _check_claim(zf, "model.weights.h5")
        try:  # streamed to the HDF5 reader's file, never whole in memory
            with zf.open("model.weights.h5") as weights:
                return config, hdf5_tree.read(weights)
        except (*checkpoint.DAMAGE, NotImplementedError) as exc:
            raise _unreadable("model.weights.h5", exc) from None


# How far a compressed model.weights.h5 may inflate (Keras stores it uncompressed; an archive packed again with
# deflate shrinks float weights by about 1.1x, a small model's HDF5 headers by about 11x): beyond this, a
# decompression bomb, refused before it is inflated.
WEIGHTS_RATIO, WEIGHTS_FREE = 16, 2**24


def _check_claim(zf: zipfile.ZipFile, name: str, limit: int | None = None) -> None:
    """Refuse, before inflating, a member that claims more than ``limit`` bytes (where given) or more than
    deflate can make of its compressed size (a damaged or hostile header); a compressed weights file, more
    than weights inflate to (:data:`WEIGHTS_RATIO`)."""
    info = zf.getinfo(name)
    if (limit is not None and info.file_size > limit) or info.file_size > 1032 * max(info.compress_size, 1):
        raise ValueError(f"{name} claims {info.file_size} bytes, more than the archive can hold")
    if limit is None and info.compress_type != zipfile.ZIP_STORED and \
            info.file_size > max(WEIGHTS_FREE, WEIGHTS_RATIO * info.compress_size):
        raise ValueError(f"{name} claims {info.file_size} bytes from {info.compress_size} compressed, more than "
                         f"weights inflate to ({WEIGHTS_RATIO}x; Keras stores them uncompressed): refused before it "
                         f"is inflated")


def _unreadable(name: str, exc: BaseException) -> ValueError:
    return ValueError(f"{name} cannot be read ({type(exc).__name__}: {exc})")


def _member(zf: zipfile.ZipFile, name: str, limit: int) -> bytes:
    """A small zip member's bytes (at most ``limit``), checked by :func:`_check_claim` first."""
    _check_claim(zf, name, limit)
    try:
        return zf.read(name)
    except (*checkpoint.DAMAGE, NotImplementedError) as exc:
        raise _unreadable(name, exc) from None


def _json(raw, what: str) -> dict:
    if not isinstance(raw, (str, bytes)):
        raise ValueError(f"{what} is not JSON text but {type(raw).__name__}")
    config = load_json(raw, what)
    if not isinstance(config, dict) or not isinstance(config.get("config"), dict):
        raise ValueError(f"{what} is not a Keras model config (no 'config' object)")
    return config


# --- the stack's layers and their weights ---------------------------------------------------------------


def _layers(config: dict | None, h5, chosen: list[str | int] | None = None) -> list[Layer]:
    if config is None:
        return _weights_file_layers(h5, chosen)
    model, way = stack_model(config)
    entries, names, stack = stack_indices(model)
    if "model_weights" in h5 or _names(h5.attrs, "layer_names"):
        models = [layer_name(outer[j]) for outer, j in way]  # the nested models around the stack, outermost first
        owner, scopes = (models[0], {layer_name(config), *models}) if models else (None, set())
        return [Layer(names[k], entries[k]["class_name"], entries[k]["config"],
                      _legacy_weights(h5, entries, k, names[k], owner, scopes)) for k in stack]
    prefix, paths = "".join(f"{_keras3_paths_of(outer)[j]}/" for outer, j in way), _keras3_paths_of(entries)
    return [Layer(names[k], entries[k]["class_name"], entries[k]["config"],
                  _keras3_weights(h5, prefix + paths[k], entries[k], names[k])) for k in stack]


def _keras3_paths_of(entries: list[dict]) -> list[str]:
    return keras3_paths([str(e.get("class_name")) for e in entries])


def snake_case(cls: str) -> str:
    """Keras 3's name for a layer's weights group, from its class (``keras.src.utils.naming.to_snake_case``)."""
    name = re.sub(r"\W+", "", cls)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def keras3_paths(classes: list[str]) -> list[str]:
    """The group of each layer (classes in the model's order) in a Keras 3 weights file: its class in snake
    case, numbered ``_1``, ``_2``, ... from the second layer of that class on (Keras's ``_get_unique_name``)."""
    used: dict[str, int] = {}
    paths = []
    for cls in classes:
        name = snake_case(cls)
        used[name] = used.get(name, -1) + 1
        paths.append(f"layers/{name}" + (f"_{used[name]}" if used[name] else ""))
    return paths


def _vars(group, where: str) -> list[np.ndarray]:
    """The arrays of a Keras 3 ``vars`` group, in index order (``0``, ``1``, ``2``)."""
    if "vars" not in group:
        raise ValueError(f"{where} holds no weights (no vars group)")
    vars_ = group["vars"]
    keys = sorted(vars_, key=lambda k: int(k) if k.isdigit() else -1)
    if [str(i) for i in range(len(keys))] != keys:
        raise ValueError(f"{where}/vars holds {keys[:5]}, not weights numbered 0, 1, 2")
    return [_array(vars_[k], f"{where}/vars/{k}") for k in keys]


def _array(dataset, where: str) -> np.ndarray:
    if not isinstance(dataset, np.ndarray):  # a group, or a dataset of something else
        raise ValueError(f"{where} is not an array of floats")
    return dataset


def _directions(group, where: str, cls: str) -> list[list[np.ndarray]]:
    """A Keras 3 recurrent layer's weights per direction: ``cell/vars`` or, in a Bidirectional,
    ``forward_layer/cell/vars`` and ``backward_layer/cell/vars``."""
    cells = [f"{d}/cell" for d in ("forward_layer", "backward_layer")] if cls == WRAPPER else ["cell"]
    found = [_vars(_sub(group, cell, where), f"{where}/{cell}") for cell in cells]
    for cell, arrays in zip(cells, found):
        if len(arrays) not in (2, 3):
            raise ValueError(f"{where}/{cell} holds {len(arrays)} weights, not kernel, recurrent_kernel (and bias)")
    return found


def _sub(group, name: str, where: str):
    if name not in group:
        raise ValueError(f"{where} has no {name} group")
    return group[name]


def _keras3_weights(h5, path: str, entry: dict, name: str) -> list[list[np.ndarray]]:
    """A layer's weights in a Keras 3 file, under the path its class and position give (checked against the
    layer name the file records there, where it does)."""
    if path not in h5:
        raise ValueError(f"the weights of layer {name!r} are not in the file (no {path})")
    group = h5[path]
    recorded = group["vars"].attrs.get("name") if "vars" in group else None
    if recorded is not None and recorded != name:
        raise ValueError(f"{path} holds the weights of layer {recorded!r}, not of {name!r}: the weights do "
                         f"not follow the config")
    return _directions(group, path, str(entry.get("class_name")))


def _names(attrs: dict, name: str) -> list[str] | None:
    """A legacy file's list of names ``name`` (``layer_names``, ``weight_names``), which Keras splits into
    ``name0``, ``name1``, ... where it would pass HDF5's 64 KiB object header limit; ``None`` where absent."""
    if name in attrs:
        value = attrs[name]
        return [value] if isinstance(value, str) else list(value)
    chunks = []
    while f"{name}{len(chunks)}" in attrs:
        chunks.append(attrs[f"{name}{len(chunks)}"])
    return [n for chunk in chunks for n in ([chunk] if isinstance(chunk, str) else chunk)] if chunks else None


def _legacy_weights(h5, entries: list[dict], k: int, name: str, owner: str | None = None,
                    scopes: set[str] = frozenset()) -> list[list[np.ndarray]]:
    """Layer ``k``'s weights in a legacy file: the group named after the layer, weights in the order of its
    ``weight_names`` (a Bidirectional's forward layer's, then its backward layer's). A layer of a nested model
    has its weights in the group of the top model's layer that holds it (``owner``), among all that layer's
    weights, named ``<layer>/...`` after the names of models (``scopes``)."""
    root = h5["model_weights"] if "model_weights" in h5 else h5
    owner = owner or name
    if owner not in root:
        raise ValueError(f"the weights of layer {name!r} are not in the file")
    group = root[owner]
    weight_names = _names(group.attrs, "weight_names") or []
    if owner != name:
        weight_names = [w for w in weight_names if _layer_of(w, scopes) == name]
    arrays = [_array(_sub(group, w, owner), f"{owner}/{w}") for w in weight_names]
    directions = 2 if entries[k].get("class_name") == WRAPPER else 1
    if len(arrays) not in (2 * directions, 3 * directions):
        raise ValueError(f"layer {name!r} holds {len(arrays)} weights, not kernel, recurrent_kernel (and bias) "
                         f"for each of its {directions} direction(s)")
    per = len(arrays) // directions
    return [arrays[d * per:(d + 1) * per] for d in range(directions)]


def _layer_of(weight_name: str, scopes: set[str]) -> str | None:
    """The layer a nested model's weight belongs to: the first part of its name that is not the name of a
    model (``scopes``: the models whose scope it may have been built in lead it; Keras 3 writes those,
    tf.keras 2 none)."""
    parts = weight_name.split("/")
    while len(parts) > 1 and parts[0] in scopes:
        parts = parts[1:]
    return parts[0] if len(parts) > 1 else None


def _weight_kind(weight_name: str) -> str:
    """What a legacy weight is, ``kernel`` for ``lstm/lstm_cell/kernel:0``: its name's last part, no suffix."""
    return weight_name.split("/")[-1].split(":")[0]


def _numbered(key: str) -> tuple[str, int]:
    """A Keras 3 group name as Keras made it: ``("lstm", 0)`` for ``lstm``, ``("lstm", 11)`` for ``lstm_11``."""
    m = re.fullmatch(r"(.*)_(\d+)", key)
    return (m.group(1), int(m.group(2))) if m else (key, 0)


def _weights_file_layers(h5, chosen: list[str | int] | None = None) -> list[Layer]:
    """The recurrent layers of a weights file (no config): in a legacy file in the order of its
    ``layer_names``, in a Keras 3 file in the order of their groups' numbers (one class only). Any other
    layer that holds weights is refused: the file cannot say where it sits. ``chosen`` (:func:`layer_choice`)
    picks the layers of the stack, in its order, from a file that holds others."""
    names = _names(h5.attrs, "layer_names")
    if names is not None:  # a legacy file
        picked = names if chosen is None else _picked(chosen, names)
        missing = [n for n in picked if n not in h5]
        if missing and chosen is not None:
            raise ValueError(f"layers: layer {missing[0]!r} is named in the file's layer_names but has no group of "
                             f"weights in it")
        groups = [(n, h5[n], _names(h5[n].attrs, "weight_names") or []) for n in picked if n in h5]
        found = []
        for name, group, weight_names in groups:
            if not weight_names and chosen is None:
                continue
            kinds = [_weight_kind(w) for w in weight_names]
            if "recurrent_kernel" not in kinds:
                if chosen is not None:
                    held = weight_names[:2] or "no weights"
                    raise ValueError(f"layers: layer {name!r} holds {held}, not a recurrent layer's weights")
                raise ValueError(f"layer {name!r} holds {weight_names[:2]}, not a recurrent layer's weights; a weights "
                                 f"file does not say where such a layer sits: read the model file (.keras or .h5), or "
                                 f"pick the recurrent layers of the stack, in its order: {PICK}")
            bidirectional = any("backward" in w for w in weight_names)
            cls = WRAPPER if bidirectional else ""  # a cell layer whose class the weights tell
            kernels = kinds.count("kernel")
            if kernels > 1 + bidirectional:
                raise ValueError(f"layer {name!r} holds {kernels} kernels, the weights of several layers (a model of "
                                 f"layers); a weights file does not say how they connect: read the model file")
            found.append(Layer(name, cls, None, _legacy_weights(h5, [{"class_name": cls}], 0, name)))
        return found
    if "layers" not in h5:
        raise ValueError("not a Keras weights file (no layers group, no layer_names)")
    layers = h5["layers"]
    if chosen is not None:
        keys = list(layers)
        recorded = {key: layers[key]["vars"].attrs.get("name") for key in keys if "vars" in layers[key]}
        found = []
        for key in _picked(chosen, keys, {k: v for k, v in recorded.items() if isinstance(v, str)}):
            group = layers[key]
            if "cell" not in group and "forward_layer" not in group:
                raise ValueError(f"layers: layer group {key!r} is not a recurrent layer's (no cell)")
            cls = WRAPPER if "forward_layer" in group else ""
            found.append(Layer(key, cls, None, _directions(group, f"layers/{key}", cls)))
        return found
    recurrent, other = [], []
    for key in layers:
        group = layers[key]
        if "cell" in group or "forward_layer" in group:
            recurrent.append(key)
        elif ("vars" in group and len(group["vars"])) or ("layers" in group and len(group["layers"])):
            other.append(key)  # a layer with weights, or a model of layers
    if other:
        raise ValueError(f"layer group {other[0]!r} holds weights but is not a recurrent layer (or is a model of "
                         f"layers); a weights file does not say where such a layer sits: read the .keras model file, "
                         f"or pick the recurrent layers of the stack, in its order: {PICK}")
    numbered = {key: _numbered(key) for key in recurrent}
    prefixes = {prefix for prefix, _ in numbered.values()}
    if len(prefixes) > 1:
        raise ValueError(f"the weights file holds recurrent layers of several classes ({sorted(prefixes)}), whose "
                         f"order it does not record: read the .keras model file, or name them in order: {PICK}")
    found = []
    for key in sorted(recurrent, key=lambda key: numbered[key][1]):
        group = layers[key]
        cls = WRAPPER if "forward_layer" in group else ""
        found.append(Layer(key, cls, None, _directions(group, f"layers/{key}", cls)))
    return found


def _model(layers: list[Layer], options: dict, has_config: bool, era: Era = Era()):
    if not layers:
        raise ValueError("the file holds no recurrent layer's weights")
    mode, direction = stack_kind(layers, era)
    sizes = [(matrix_shape(f"layer {layer.name!r} kernel", layer.weights[0][0].shape)[0],
              matrix_shape(f"layer {layer.name!r} recurrent kernel", layer.weights[0][1].shape)[0]) for layer in layers]
    dirs = len(layers[0].weights)
    if any(units != sizes[0][1] or (k and width != dirs * sizes[k - 1][1]) for k, (width, units) in enumerate(sizes)):
        shown = ", ".join(f"{layer.name!r} {width} -> {units}" for layer, (width, units) in zip(layers, sizes))
        raise tf_format.UnevenLayers(f"its recurrent layers differ in size ({shown}: inputs -> units), which one "
                                     f"cuDNN stack cannot hold: `rnn-compat infer` runs them as a chain of one-layer "
                                     f"models (reference.chain; convert.read_chain)", sizes)
    kernel = layers[0].weights[0][0]
    input_size, _ = matrix_shape(f"layer {layers[0].name!r} kernel", kernel.shape)
    units, _ = matrix_shape(f"layer {layers[0].name!r} recurrent kernel", layers[0].weights[0][1].shape)
    told = {"num_layers": len(layers), "num_units": units, "input_size": input_size, "direction": direction,
            "dtype": kernel.dtype.name}
    if mode is not None:
        told["rnn_mode"] = mode
    if all(len(w) == 2 for layer in layers for w in layer.weights):  # every layer use_bias=False
        told["bias_mode"] = "none"
    teller = "the model config tells its config" if has_config else "its weights' shapes tell its config"
    config = checkpoint.complete_config(checkpoint.with_options(told, options, teller,
                                                                untold=() if mode else ("rnn_mode",)))
    if "rnn_mode" not in config:
        raise ValueError("relu and tanh SimpleRNN weights look alike: say which (rnn_mode / --mode)")
    model = checkpoint.model_from_config(config, holds=sum(len(layer.weights) for layer in layers))
    return (model, *keras_weights.from_keras(model, [w for layer in layers for w in layer.weights],
                                             cudnn_layout=[flag for layer in layers for flag in layer.cudnn_layout]))


# --- writing a .keras archive ------------------------------------------------------------------------


def _cell_config(model, name: str, in_width: int, backward: bool = False) -> dict:
    cls, options = keras_weights.KERAS_LAYERS[model.rnn_mode]
    config = {"name": name, "units": model.num_units, "return_sequences": True, "go_backwards": backward,
              "activation": "tanh", **({} if cls == "SimpleRNN" else {"recurrent_activation": "sigmoid"}),
              **options, "use_bias": model.bias_mode != "none", "dtype": model.dtype.name}
    return {"module": "keras.layers", "class_name": cls, "config": config, "registered_name": None,
            "build_config": {"input_shape": [None, None, in_width]}}


def keras_config(model) -> dict:
    """The ``config.json`` of ``model`` as a Keras 3 ``Sequential``: an input ``[None, None, input_size]``
    (batch-major, any length), then one layer per layer (a ``Bidirectional`` of two for two directions),
    each returning its whole sequence."""
    layers = [{"module": "keras.layers", "class_name": "InputLayer", "registered_name": None,
               "config": {"name": "input_layer", "batch_shape": [None, None, model.input_size],
                          "dtype": model.dtype.name}}]
    for layer in range(model.num_layers):
        width = model.input_size if layer == 0 else model.num_dirs * model.num_units
        base, suffix = snake_case(keras_weights.KERAS_LAYERS[model.rnn_mode][0]), f"_{layer}" if layer else ""
        if model.num_dirs == 1:
            layers.append(_cell_config(model, base + suffix, width))
        else:
            layers.append({"module": "keras.layers", "class_name": WRAPPER, "registered_name": None,
                           "config": {"name": f"bidirectional{suffix}", "merge_mode": "concat",
                                      "dtype": model.dtype.name,
                                      "layer": _cell_config(model, f"forward_{base}{suffix}", width),
                                      "backward_layer": _cell_config(model, f"backward_{base}{suffix}", width, True)},
                           "build_config": {"input_shape": [None, None, width]}})
    return {"module": "keras", "class_name": "Sequential", "registered_name": None,
            "config": {"name": "sequential", "trainable": True, "dtype": model.dtype.name, "layers": layers},
            "build_config": {"input_shape": [None, None, model.input_size]}}


# The Keras version a legacy ``.h5`` model written here gives: the tf.keras 2 whose layout it follows. Its loaders
# read a file without one as Keras 1's, whose recurrent weights they convert.
LEGACY_KERAS_VERSION = "2.21.0"


def write(path: str | Path, model, weights: list[np.ndarray], biases: list[np.ndarray]) -> None:
    """``model`` with its canonical weights as a ``.keras`` archive that ``keras.saving.load_model`` loads, or
    its weights alone as a ``.weights.h5`` file that ``model.load_weights`` loads (Keras 3's formats), or as a
    legacy ``.h5`` / ``.hdf5`` model laid out as tf.keras 2 saves one (:func:`_write_legacy`)."""
    path = Path(path)
    weights_only = path.name.endswith(".weights.h5")
    if path.suffix not in SUFFIXES:
        raise ValueError(f"a Keras file is written as .keras (a model), .weights.h5 (its weights) or .h5 / .hdf5 "
                         f"(a legacy tf.keras 2 model), got {path.name!r}")
    h5py = require("h5py", f"writing a Keras {path.suffix if not weights_only else '.weights.h5'} file")
    per_direction = keras_weights.to_keras(model, weights, biases)
    if path.suffix != ".keras" and not weights_only:
        return _write_legacy(h5py, path, model, per_direction)
    config = keras_config(model)
    recurrent = [e for e in config["config"]["layers"] if is_recurrent(e["class_name"])]
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as h5:
        h5.create_group("vars").attrs["name"] = "sequential"
        for k, (entry, group_path) in enumerate(zip(recurrent, keras3_paths([e["class_name"] for e in recurrent]))):
            group = h5.create_group(group_path)
            group.create_group("vars").attrs["name"] = entry["config"]["name"]
            wrapped = entry["class_name"] == WRAPPER
            parts = [("forward_layer", entry["config"]["layer"]),
                     ("backward_layer", entry["config"]["backward_layer"])] if wrapped else [("", entry)]
            for d, (sub, cell) in enumerate(parts):
                target = group.require_group(sub) if sub else group
                if sub:
                    target.create_group("vars").attrs["name"] = cell["config"]["name"]
                vars_ = target.create_group("cell").create_group("vars")
                vars_.attrs["name"] = snake_case(cell["class_name"]) + "_cell"
                for i, array in enumerate(per_direction[k * model.num_dirs + d]):
                    vars_.create_dataset(str(i), data=array)
    if weights_only:
        with replacing(path) as partial:
            partial.write_bytes(buffer.getvalue())
        return
    # Keras writes its version here and does not read it back; this archive was not written by Keras.
    metadata = {"written_by": "cudnn-rnn-compat",
                "date_saved": datetime.now(timezone.utc).strftime("%Y-%m-%d@%H:%M:%S")}
    with replacing(path) as partial, zipfile.ZipFile(partial, "w") as zf:
        zf.writestr("metadata.json", json.dumps(metadata))
        zf.writestr("config.json", json.dumps(config))
        zf.writestr("model.weights.h5", buffer.getvalue())


def _write_legacy(h5py, path: Path, model, per_direction: list[list[np.ndarray]]) -> None:
    """A legacy ``.h5`` model as tf.keras 2 (``tf_keras``) saves a ``Sequential`` of the stack, which its
    ``load_model`` loads and any Keras's ``load_weights`` reads by layer order: the config in the root's
    ``model_config`` (Keras 2's layer configs: ``batch_input_shape``, ``time_major``, a ``Bidirectional`` whose
    backward layer it derives), the weights under ``model_weights/LAYER/`` named ``LAYER/CELL/kernel:0``, ...
    Keras 3 does not load such a config (``time_major`` is gone); its ``load_weights`` takes the file."""
    cls, options = keras_weights.KERAS_LAYERS[model.rnn_mode]
    dtype, snake = model.dtype.name, snake_case(cls)
    layers = [{"class_name": "InputLayer", "config": {"batch_input_shape": [None, None, model.input_size],
                                                      "dtype": dtype, "sparse": False, "ragged": False,
                                                      "name": "input_1"}}]
    named = {}  # layer name: [(weight name, array)], in the stack's order
    for layer in range(model.num_layers):
        suffix = f"_{layer}" if layer else ""
        cell = {"name": snake + suffix, "trainable": True, "dtype": dtype, "return_sequences": True,
                "return_state": False, "go_backwards": False, "stateful": False, "unroll": False,
                "time_major": False, "units": model.num_units, "activation": "tanh",
                **({} if cls == "SimpleRNN" else {"recurrent_activation": "sigmoid", "implementation": 2}),
                "use_bias": model.bias_mode != "none", "dropout": 0.0, "recurrent_dropout": 0.0, **options}
        if model.num_dirs == 1:
            name, scopes = cell["name"], [cell["name"]]
            layers.append({"class_name": cls, "config": cell})
        else:
            name = f"bidirectional{suffix}"
            scopes = [f"{name}/{side}_{cell['name']}" for side in ("forward", "backward")]
            layers.append({"class_name": "Bidirectional", "config": {
                "name": name, "trainable": True, "dtype": dtype, "merge_mode": "concat",
                "layer": {"module": "keras.layers", "class_name": cls, "config": cell, "registered_name": None}}})
        arrays = [w for direction in per_direction[layer * model.num_dirs:(layer + 1) * model.num_dirs]
                  for w in direction]
        named[name] = list(zip([f"{scope}/{snake}_cell/{w}:0" for scope in scopes
                                for w in ("kernel", "recurrent_kernel", "bias")[:len(per_direction[0])]],
                                arrays, strict=True))
    config = {"class_name": "Sequential", "config": {"name": "sequential", "layers": layers}}
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as h5:
        h5.attrs["backend"], h5.attrs["keras_version"] = "tensorflow", LEGACY_KERAS_VERSION
        h5.attrs["model_config"] = json.dumps(config)
        root = h5.create_group("model_weights")
        root.attrs["layer_names"] = [name.encode() for name in named]
        root.attrs["backend"], root.attrs["keras_version"] = b"tensorflow", LEGACY_KERAS_VERSION.encode()
        for name, weights in sorted(named.items()):  # groups in name order, as tf.keras 2 creates them
            group = root.create_group(name)
            group.attrs["weight_names"] = [n.encode() for n, _ in weights]
            for n, array in weights:
                group.create_dataset(n, data=array)
        root.create_group("top_level_model_weights").attrs["weight_names"] = np.array([], np.float64)
    with replacing(path) as partial:
        partial.write_bytes(buffer.getvalue())
