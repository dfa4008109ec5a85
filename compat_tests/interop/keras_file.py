"""Keras's own files, read and written without Keras (with h5py, a dependency of Keras):

- ``.keras``: a whole Keras 3 model (``model.save``), a zip of ``config.json`` and ``model.weights.h5``;
  written here as a ``Sequential`` that ``keras.saving.load_model`` loads;
- ``.h5``/``.hdf5``: the legacy HDF5 format of tf.keras / Keras 2 (and of Keras 3's ``save_model(m,
  "m.h5")``): a whole model (its config in the ``model_config`` attribute) or weights alone
  (``save_weights``);
- ``.weights.h5``: weights alone, as Keras 3's ``save_weights`` writes them.

A model file is read as the stack of its recurrent layers (``SimpleRNN``, ``GRU``, ``LSTM``, each alone or
in a ``Bidirectional``), checked against its config as ``onnx_stack`` checks an ONNX graph: each recurrent
layer must compute a cuDNN cell (activations, ``reset_after``, ``merge_mode="concat"``, no
``go_backwards`` of its own), all alike, and each after the first must read the one before's output, with
only layers that pass it on at inference between them (``INFERENCE_IDENTITY``) and no initial state of
another layer's making. Before the first and after the last, anything goes: the model is the stack.
A weights file does not say what lies between its layers, so it may hold recurrent layers only (and
layers without weights). Weights of Keras 3 files sit under paths that Keras derives from each layer's
class (``layers/gru_1/cell/vars/0``); legacy files list them by layer name.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from reference import checkpoint
from reference.formats import keras as keras_weights
from reference.formats.files import replacing

from compat_tests.interop import hdf5_tree
from compat_tests.optional import require

SUFFIXES = (".keras", ".h5", ".hdf5")  # ``.weights.h5`` ends in ``.h5``
GATES = {"SimpleRNN": 1, "GRU": 3, "LSTM": 4}  # the recurrent layer classes and their gate counts
WRAPPER = "Bidirectional"
# Layers that hand their input on unchanged at inference: what may sit between two recurrent layers.
INFERENCE_IDENTITY = ("Dropout", "SpatialDropout1D", "GaussianDropout", "GaussianNoise", "AlphaDropout")
CONFIG_LIMIT = 2**24  # bytes of a .keras archive's config.json


def is_keras_file(path: str | Path) -> bool:
    """Whether ``path`` names a file of Keras's own formats (by its suffix)."""
    return Path(path).suffix in SUFFIXES


@dataclass
class _Layer:
    """One recurrent layer of a file: its name, class (``Bidirectional`` or a cell's), its config (``None``
    in a weights file) and its weights per direction, ``[kernel, recurrent_kernel(, bias)]``."""

    name: str
    cls: str
    config: dict | None
    weights: list[list[np.ndarray]]


def read(path: str | Path, options: dict | None = None) -> tuple[object, list[np.ndarray], list[np.ndarray]]:
    """``(model, weights, biases)`` of a Keras file. ``options`` (config fields, ``None`` for not given) may
    say only what the file cannot (relu from tanh in a weights file) and must agree with the rest."""
    require("h5py", "reading a Keras .keras or .h5 file")
    path = Path(path)
    with checkpoint.about(path):
        if path.suffix == ".keras":
            config, h5 = _archive(path)
        else:
            config, h5 = None, hdf5_tree.read(path)
            if "model_config" in h5.attrs:  # a legacy model file
                config = _json(h5.attrs["model_config"], "the model_config attribute")
        return _model(_layers(config, h5), options or {}, config is not None)


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
        weights = _member(zf, "model.weights.h5", path.stat().st_size)
    return config, hdf5_tree.read(weights)


def _member(zf: zipfile.ZipFile, name: str, limit: int) -> bytes:
    """A zip member's bytes, refused before inflating if it claims more than ``limit`` bytes or more than
    deflate can make of its compressed size (a damaged or hostile header)."""
    info = zf.getinfo(name)
    if info.file_size > limit or info.file_size > 1032 * max(info.compress_size, 1):
        raise ValueError(f"{name} claims {info.file_size} bytes, more than the archive can hold")
    try:
        return zf.read(name)
    except (zipfile.BadZipFile, EOFError, NotImplementedError, RuntimeError) as exc:
        raise ValueError(f"{name} cannot be read ({type(exc).__name__}: {exc})") from None


def _json(raw, what: str) -> dict:
    try:
        config = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
    except (UnicodeDecodeError, json.JSONDecodeError, TypeError) as exc:
        raise ValueError(f"{what} is not JSON ({exc})") from None
    if not isinstance(config, dict) or not isinstance(config.get("config"), dict):
        raise ValueError(f"{what} is not a Keras model config (no 'config' object)")
    return config


# --- which layers make the stack, and their weights ----------------------------------------------------


def _layers(config: dict | None, h5) -> list[_Layer]:
    if config is None:
        return _weights_file_layers(h5)
    entries = config["config"].get("layers")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"the model config ({config.get('class_name')!r}) has no list of layers")
    names = [_layer_name(e) for e in entries]
    stack = [k for k, e in enumerate(entries) if _is_recurrent(e.get("class_name"))]
    if not stack:
        classes = sorted({str(e.get("class_name")) for e in entries})
        nested = [c for c in classes if c in ("Sequential", "Functional", "Model")]
        raise ValueError(f"the model has no recurrent layer ({', '.join(GATES)} or {WRAPPER} of one) at its top "
                         f"level; it has {classes[:8]}" + (f" (a {nested[0]} model inside it is not read: save that "
                                                            f"model on its own)" if nested else ""))
    for k in stack:
        if not isinstance(entries[k].get("config"), dict):
            raise ValueError(f"the recurrent layer {names[k]!r} has no config")
    if config.get("class_name") == "Sequential":  # each layer reads the one before it
        for previous, k in zip(stack, stack[1:]):
            between = [j for j in range(previous + 1, k) if entries[j].get("class_name") not in INFERENCE_IDENTITY]
            if between:
                raise ValueError(f"layer {names[between[0]]!r} ({entries[between[0]].get('class_name')}) lies between "
                                 f"the recurrent layers {names[previous]!r} and {names[k]!r}: only layers that pass "
                                 f"their input on at inference ({', '.join(INFERENCE_IDENTITY)}) may")
    else:  # a functional model: what each layer reads is in its inbound_nodes
        for previous, k in zip([None, *stack], stack):
            _check_link(entries, names, previous, k)
    read_weights = _legacy_weights if "model_weights" in h5 or _names(h5.attrs, "layer_names") else _keras3_weights
    return [_Layer(names[k], entries[k]["class_name"], entries[k]["config"], read_weights(h5, entries, k, names[k]))
            for k in stack]


def _dict(value) -> dict:
    """``value`` where it is a dict, else an empty one: a config's optional parts, read leniently."""
    return value if isinstance(value, dict) else {}


def _layer_name(entry: dict) -> str:
    return str(_dict(entry.get("config")).get("name", entry.get("name", "?")))


def _is_recurrent(cls) -> bool:
    return cls in GATES or cls == WRAPPER


def _inputs(entry: dict) -> list[tuple[str, str]]:
    """``(layer name, what)`` of every tensor a functional model's layer is called on: its inputs (``what``
    "input") and tensors given by keyword (``what`` the keyword, such as initial_state), in Keras 3's
    and in the legacy (list) form of ``inbound_nodes``."""
    found: list[tuple[str, str]] = []

    def walk(value, what: str) -> None:
        if isinstance(value, dict):
            history = _dict(value.get("config")).get("keras_history") if value.get("class_name") == "__keras_tensor__" \
                else None
            if isinstance(history, list) and history:
                found.append((str(history[0]), what))
                return
            for key, v in value.items():
                walk(v, key if what == "kwargs" else what)
        elif isinstance(value, list):
            if len(value) >= 3 and isinstance(value[0], str) and isinstance(value[1], int):  # legacy [name, i, j, kw]
                found.append((value[0], what))
                if len(value) > 3:
                    walk(value[3], "kwargs")
                return
            for v in value:
                walk(v, what)

    for node in entry.get("inbound_nodes") or []:
        if isinstance(node, dict):
            walk(node.get("args", []), "input")
            walk(node.get("kwargs", {}), "kwargs")
        else:
            walk(node, "input")
    return found


def _check_link(entries: list[dict], names: list[str], previous: int | None, k: int) -> None:
    """Layer ``k`` of a functional model is called once, on the output of layer ``previous`` (through layers
    that pass it on) or, for the first recurrent layer (``previous`` None), on anything; a tensor given by
    keyword (an initial state, constants) other than a mask is refused: the stack starts from zeros."""
    calls = entries[k].get("inbound_nodes") or []
    if len(calls) > 1:
        raise ValueError(f"the recurrent layer {names[k]!r} is called {len(calls)} times: the layers are not one stack")
    inputs = _inputs(entries[k])
    given = [what for _, what in inputs if what not in ("input", "mask")]
    if given:
        raise ValueError(f"the recurrent layer {names[k]!r} is called with {given[0]} from another layer: the stack "
                         f"starts from the states the caller gives")
    if previous is None:
        return
    sources = [name for name, what in inputs if what == "input"]
    index = {n: i for i, n in enumerate(names)}
    for _ in entries:  # back through the layers that pass it on (a bound: a damaged config may loop)
        if len(sources) != 1 or sources[0] not in index or index[sources[0]] == previous or \
                entries[index[sources[0]]].get("class_name") not in INFERENCE_IDENTITY:
            break
        sources = [name for name, what in _inputs(entries[index[sources[0]]]) if what == "input"]
    if sources != [names[previous]]:
        raise ValueError(f"the recurrent layer {names[k]!r} reads {sources or 'nothing'}, not the output of the "
                         f"recurrent layer before it, {names[previous]!r}: the layers are not one stack")


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


def _keras3_weights(h5, entries: list[dict], k: int, name: str) -> list[list[np.ndarray]]:
    """Layer ``k``'s weights in a Keras 3 file, under the path its class and position give (checked against
    the layer name the file records there, where it does)."""
    path = keras3_paths([str(e.get("class_name")) for e in entries])[k]
    if path not in h5:
        raise ValueError(f"the weights of layer {name!r} are not in the file (no {path})")
    group = h5[path]
    recorded = group["vars"].attrs.get("name") if "vars" in group else None
    if recorded is not None and recorded != name:
        raise ValueError(f"{path} holds the weights of layer {recorded!r}, not of {name!r}: the weights do "
                         f"not follow the config")
    return _directions(group, path, str(entries[k].get("class_name")))


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


def _legacy_weights(h5, entries: list[dict], k: int, name: str) -> list[list[np.ndarray]]:
    """Layer ``k``'s weights in a legacy file: the group named after the layer, weights in the order of its
    ``weight_names`` (a Bidirectional's forward layer's, then its backward layer's)."""
    root = h5["model_weights"] if "model_weights" in h5 else h5
    if name not in root:
        raise ValueError(f"the weights of layer {name!r} are not in the file")
    group = root[name]
    arrays = [_array(_sub(group, w, name), f"{name}/{w}") for w in _names(group.attrs, "weight_names") or []]
    directions = 2 if entries[k].get("class_name") == WRAPPER else 1
    if len(arrays) not in (2 * directions, 3 * directions):
        raise ValueError(f"layer {name!r} holds {len(arrays)} weights, not kernel, recurrent_kernel (and bias) "
                         f"for each of its {directions} direction(s)")
    per = len(arrays) // directions
    return [arrays[d * per:(d + 1) * per] for d in range(directions)]


def _weights_file_layers(h5) -> list[_Layer]:
    """The recurrent layers of a weights file (no config): in a legacy file in the order of its
    ``layer_names``, in a Keras 3 file in the order of their groups' numbers (one class only). Any other
    layer that holds weights is refused: the file cannot say where it sits."""
    names = _names(h5.attrs, "layer_names")
    if names is not None:  # a legacy file
        groups = [(n, h5[n], _names(h5[n].attrs, "weight_names") or []) for n in names if n in h5]
        found = []
        for name, group, weight_names in groups:
            if not weight_names:
                continue
            if not any(w.split("/")[-1].split(":")[0] == "recurrent_kernel" for w in weight_names):
                raise ValueError(f"layer {name!r} holds {weight_names[:2]}, not a recurrent layer's weights; a weights "
                                 f"file does not say where such a layer sits: read the model file (.keras or .h5)")
            bidirectional = any("backward" in w for w in weight_names)
            cls = WRAPPER if bidirectional else ""  # a cell layer whose class the weights tell
            found.append(_Layer(name, cls, None, _legacy_weights(h5, [{"class_name": cls}], 0, name)))
        return found
    if "layers" not in h5:
        raise ValueError("not a Keras weights file (no layers group, no layer_names)")
    layers = h5["layers"]
    recurrent, other = [], []
    for key in layers:
        group = layers[key]
        if "cell" in group or "forward_layer" in group:
            recurrent.append(key)
        elif "vars" in group and len(group["vars"]):
            other.append(key)
    if other:
        raise ValueError(f"layer group {other[0]!r} holds weights but is not a recurrent layer; a weights file does "
                         f"not say where such a layer sits: read the .keras model file")
    prefixes = {re.sub(r"_\d+$", "", key) for key in recurrent}
    if len(prefixes) > 1:
        raise ValueError(f"the weights file holds recurrent layers of several classes ({sorted(prefixes)}), whose "
                         f"order it does not record: read the .keras model file")
    found = []
    for key in sorted(recurrent, key=lambda key: int(m.group(1)) if (m := re.search(r"_(\d+)$", key)) else 0):
        group = layers[key]
        cls = WRAPPER if "forward_layer" in group else ""
        found.append(_Layer(key, cls, None, _directions(group, f"layers/{key}", cls)))
    return found


# --- what the layers compute --------------------------------------------------------------------------


def _cell_mode(name: str, cls: str, config: dict, backward: bool = False) -> str:
    """The cuDNN mode one recurrent (cell) layer's config computes; anything else is refused naming it."""
    def value(key: str, default):
        v = config.get(key, default)
        return v.get("class_name", v) if isinstance(v, dict) else v

    activation, recurrent = value("activation", "tanh"), value("recurrent_activation", "sigmoid")
    if cls == "SimpleRNN":
        if activation not in ("tanh", "relu"):
            raise ValueError(f"layer {name!r}: activation {activation!r} has no cuDNN equivalent (tanh or relu)")
        mode = activation
    else:
        for key, got, want in (("activation", activation, "tanh"), ("recurrent_activation", recurrent, "sigmoid")):
            if got != want:
                raise ValueError(f"layer {name!r}: {key} {got!r} has no cuDNN equivalent ({want})")
        mode = "lstm" if cls == "LSTM" else "gru" if config.get("reset_after", True) else "classic_gru"
    if bool(config.get("go_backwards", False)) != backward:
        raise ValueError(f"layer {name!r}: go_backwards={not backward} outside a Bidirectional's backward layer has "
                         f"no cuDNN equivalent" if not backward else
                         f"layer {name!r}: a Bidirectional's backward layer must run backwards (go_backwards=True)")
    return mode


def _kind(layer: _Layer) -> tuple[str | None, str]:
    """``(rnn_mode, direction)`` of a layer: from its config, or (a weights file) from its weights' shapes,
    where relu and tanh look alike (``None``)."""
    direction = "bidirectional" if layer.cls == WRAPPER else "unidirectional"
    if layer.config is None:
        recurrent = layer.weights[0][1]
        if recurrent.ndim != 2 or 0 in recurrent.shape or recurrent.shape[1] % recurrent.shape[0]:
            raise ValueError(f"layer {layer.name!r}: recurrent kernel of shape {list(recurrent.shape)} is not "
                             f"[units, gates * units]")
        gates = recurrent.shape[1] // recurrent.shape[0]
        if gates not in (1, 3, 4):
            raise ValueError(f"layer {layer.name!r} has {gates} gates: not a SimpleRNN, GRU or LSTM")
        bias = layer.weights[0][2] if len(layer.weights[0]) > 2 else None
        mode = {1: None, 4: "lstm", 3: "gru" if bias is None or bias.ndim == 2 else "classic_gru"}[gates]
        if gates == 3 and bias is None:
            raise ValueError(f"layer {layer.name!r}: a GRU without bias does not say whether it resets after the "
                             f"recurrent product (reset_after); read the model file")
        return mode, direction
    config = layer.config
    if layer.cls == WRAPPER:
        if config.get("merge_mode", "concat") != "concat":
            raise ValueError(f"layer {layer.name!r}: merge_mode={config.get('merge_mode')!r} has no cuDNN equivalent "
                             f"(concat)")
        forward = _dict(config.get("layer"))
        if forward.get("class_name") not in GATES:
            raise ValueError(f"layer {layer.name!r} wraps {forward.get('class_name')!r}, not a {', '.join(GATES)} "
                             f"layer")
        cell = _dict(forward.get("config"))
        backward = _dict(config.get("backward_layer")) or {  # tf.keras 2 leaves it out: the forward layer, reversed
            **forward, "config": {**cell, "go_backwards": not cell.get("go_backwards", False)}}
        parts = [(forward, False), (backward, True)]
        modes = [_cell_mode(f"{layer.name}/{_dict(part.get('config')).get('name', 'backward' if back else 'forward')}",
                            part.get("class_name"), _dict(part.get("config")), back) for part, back in parts]
        if modes[0] != modes[1] or backward.get("class_name") != forward.get("class_name") or \
                _dict(backward.get("config")).get("units") != cell.get("units"):
            raise ValueError(f"layer {layer.name!r}: its backward layer differs from its forward layer")
        return modes[0], direction
    return _cell_mode(layer.name, layer.cls, config), direction


def _model(layers: list[_Layer], options: dict, has_config: bool):
    if not layers:
        raise ValueError("the file holds no recurrent layer's weights")
    kinds = [_kind(layer) for layer in layers]
    for layer, kind in zip(layers, kinds):
        if kind != kinds[0]:
            raise ValueError(f"layer {layer.name!r} computes a {kind[1]} {kind[0]!r} layer, but the first recurrent "
                             f"layer {layers[0].name!r} a {kinds[0][1]} {kinds[0][0]!r} one: not one cuDNN stack")
    mode, direction = kinds[0]
    kernel, recurrent = layers[0].weights[0][0], layers[0].weights[0][1]
    if kernel.ndim != 2 or recurrent.ndim != 2 or 0 in kernel.shape + recurrent.shape:
        raise ValueError(f"layer {layers[0].name!r}: kernel {list(kernel.shape)} and recurrent kernel "
                         f"{list(recurrent.shape)} must be non-empty matrices")
    told = {"num_layers": len(layers), "num_units": int(recurrent.shape[0]), "input_size": int(kernel.shape[0]),
            "direction": direction, "dtype": kernel.dtype.name}
    if mode is not None:
        told["rnn_mode"] = mode
    teller = "the model config tells its config" if has_config else "its weights' shapes tell its config"
    config = checkpoint.complete_config(checkpoint.with_options(told, options, teller,
                                                                untold=() if mode else ("rnn_mode",)))
    if "rnn_mode" not in config:
        raise ValueError("relu and tanh SimpleRNN weights look alike: say which (rnn_mode / --mode)")
    model = checkpoint.model_from_config(config, holds=sum(len(layer.weights) for layer in layers))
    return (model, *keras_weights.from_keras(model, [w for layer in layers for w in layer.weights]))


# --- writing a .keras archive ------------------------------------------------------------------------


def _cell_config(model, name: str, in_width: int, backward: bool = False) -> dict:
    cls = keras_weights.CLASSES[model.rnn_mode]
    config = {"name": name, "units": model.num_units, "return_sequences": True, "go_backwards": backward,
              "activation": "relu" if model.rnn_mode == "relu" else "tanh", "dtype": model.dtype.name}
    if cls != "SimpleRNN":
        config["recurrent_activation"] = "sigmoid"
    if cls == "GRU":
        config["reset_after"] = model.rnn_mode == "gru"
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
        cell = _cell_config(model, "", width)
        suffix = f"_{layer}" if layer else ""
        if model.num_dirs == 1:
            cell["config"]["name"] = snake_case(cell["class_name"]) + suffix
            layers.append(cell)
        else:
            base = snake_case(cell["class_name"])
            layers.append({"module": "keras.layers", "class_name": WRAPPER, "registered_name": None,
                           "config": {"name": f"bidirectional{suffix}", "merge_mode": "concat",
                                      "dtype": model.dtype.name,
                                      "layer": _cell_config(model, f"forward_{base}{suffix}", width),
                                      "backward_layer": _cell_config(model, f"backward_{base}{suffix}", width, True)},
                           "build_config": {"input_shape": [None, None, width]}})
    return {"module": "keras", "class_name": "Sequential", "registered_name": None,
            "config": {"name": "sequential", "trainable": True, "dtype": model.dtype.name, "layers": layers},
            "build_config": {"input_shape": [None, None, model.input_size]}}


def write(path: str | Path, model, weights: list[np.ndarray], biases: list[np.ndarray]) -> None:
    """``model`` with its canonical weights as a ``.keras`` archive that ``keras.saving.load_model`` loads."""
    h5py = require("h5py", "writing a Keras .keras file")
    path = Path(path)
    if path.suffix != ".keras":
        raise ValueError(f"a Keras model file is written as .keras, got {path.name!r} (read-only: .h5, .weights.h5)")
    per_direction = keras_weights.to_keras(model, weights, biases)
    config = keras_config(model)
    recurrent = [e for e in config["config"]["layers"] if _is_recurrent(e["class_name"])]
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
    # Keras writes its version here and does not read it back; this archive was not written by Keras.
    metadata = {"written_by": "cudnn-rnn-compat",
                "date_saved": datetime.now(timezone.utc).strftime("%Y-%m-%d@%H:%M:%S")}
    with replacing(path) as partial, zipfile.ZipFile(partial, "w") as zf:
        zf.writestr("metadata.json", json.dumps(metadata))
        zf.writestr("config.json", json.dumps(config))
        zf.writestr("model.weights.h5", buffer.getvalue())
