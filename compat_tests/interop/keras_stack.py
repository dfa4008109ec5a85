"""Whether a Keras model config's recurrent layers are one cuDNN stack, and which cell each computes: the
checks that ``keras_file`` makes before it reads a model file's weights, as ``onnx_stack`` makes them for an
ONNX graph. Each recurrent layer (``SimpleRNN``, ``GRU``, ``LSTM``, ``CuDNNLSTM``, ``CuDNNGRU``, alone or in a
``Bidirectional``) must compute a cuDNN cell (activations, ``reset_after``, ``merge_mode="concat"``, no
``go_backwards`` of its own), all alike, and each after the first must read the one before's output, with
only layers that pass it on at inference between them (``INFERENCE_IDENTITY``) and no initial state of another
layer's making. Before the first and after the last, anything goes: the model is the stack. The stack may lie
in a model nested in the one saved (a ``Sequential`` used as a layer), at any depth, but in one model only.
Configs are read leniently (a part of the wrong type reads as absent) and whatever they say that is not a
cuDNN stack is a ValueError naming the layer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from reference.formats.keras import CUDNN_LAYERS
from reference.modes import MODES

# the recurrent layer classes and their gate counts; tf.keras 2's CuDNN layers keep their weights in cuDNN's layout
GATES = {"SimpleRNN": 1, "GRU": 3, "LSTM": 4, **{cls: len(MODES[m].gates) for cls, m in CUDNN_LAYERS.items()}}
WRAPPER = "Bidirectional"
# Layers that hand their input on unchanged at inference: what may sit between two recurrent layers.
INFERENCE_IDENTITY = ("Dropout", "SpatialDropout1D", "GaussianDropout", "GaussianNoise", "AlphaDropout")
MODELS = ("Sequential", "Functional", "Model")  # models of layers, which may be layers of another model
MAX_NESTING = 16  # models inside models looked into (a bound: a config is a file's word)


# Keras before 2.3 (standalone Keras 2.0-2.2, and tf.keras of TensorFlow 1.x, which records "2.x.y-tf") made
# LSTM and GRU default to recurrent_activation="hard_sigmoid"; Keras 2.3, tf.keras 2 and Keras 3 to "sigmoid".
SIGMOID_SINCE = (2, 3)
RECURRENT_ACTIVATIONS = ("sigmoid", "hard_sigmoid")  # what the option recurrent_activation may say


class Era(NamedTuple):
    """What the Keras that wrote a file takes for what a layer's config leaves out, and what the user says of
    the weights (``told``: the option ``recurrent_activation``, ``None`` for not given)."""

    version: str | None = None  # the file's keras_version attribute, as written
    recurrent_activation: str | None = "sigmoid"  # its LSTM's and GRU's default (None: it cannot be told)
    reset_after: bool = True  # its GRU's default
    told: str | None = None

    def writer(self) -> str:
        return f"Keras {self.version}" if self.version else "a Keras that recorded no keras_version"


def keras_era(version: str | None, told: str | None = None, legacy: bool = True) -> Era:
    """The :class:`Era` of a file whose ``keras_version`` attribute is ``version`` (``legacy``: an HDF5 file of
    the legacy format, where a missing version means a Keras that recorded none, Keras 1 or another tool; a
    Keras 3 archive or weights file is Keras 3's). ``told``: the option, checked here."""
    if told is not None and told not in RECURRENT_ACTIVATIONS:
        raise ValueError(f"recurrent_activation must be one of {', '.join(RECURRENT_ACTIVATIONS)}, got {told!r}")
    if not legacy:
        return Era(version, "sigmoid", True, told)
    m = re.match(r"\s*(\d+)\.(\d+)", version or "")
    if m is None:
        return Era(version, None, True, told)
    old = (int(m[1]), int(m[2])) < SIGMOID_SINCE
    return Era(version, "hard_sigmoid" if old else "sigmoid", not old, told)


def old_default_note(era: Era) -> str:
    """Why a file's LSTM or GRU may compute hard_sigmoid, for messages."""
    if era.recurrent_activation is None:
        return (f"the file was written by {era.writer()}, so the recurrent_activation its LSTM and GRU layers "
                f"defaulted to (hard_sigmoid before Keras 2.3, sigmoid since) cannot be told")
    tf1 = " (and tf.keras of TensorFlow 1.x; TensorFlow 2.0 and 2.1, which record 2.2.4-tf too, default to sigmoid)" \
        if era.version and era.version.endswith("-tf") else ""
    return (f"the file was written by {era.writer()}, whose LSTM and GRU default to recurrent_activation="
            f"'hard_sigmoid' (Keras before 2.3{tf1})")


ADVICE = ("read the model file, whose config states the activation, or, if the weights were trained with sigmoid, say "
          "so: --recurrent-activation sigmoid (options key recurrent_activation='sigmoid'); a hard_sigmoid layer has "
          "no cuDNN equivalent, and reading it as sigmoid would be wrong by tens of percent")


@dataclass
class Layer:
    """One recurrent layer of a file: its name, class (``Bidirectional`` or a cell's), its config (``None``
    in a weights file) and its weights per direction, ``[kernel, recurrent_kernel(, bias)]``."""

    name: str
    cls: str
    config: dict | None
    weights: list[list[np.ndarray]]

    @property
    def cudnn_layout(self) -> list[bool]:
        """Per direction, whether the weights are a ``CuDNNLSTM``'s or ``CuDNNGRU``'s (cuDNN's layout): by the
        class in a model file, by the bias in a weights file (both bias sets, ``[2*G*H]``)."""
        if self.config is not None:
            cls = _dict(self.config.get("layer")).get("class_name") if self.cls == WRAPPER else self.cls
            return [cls in CUDNN_LAYERS] * len(self.weights)
        return [_cudnn_bias(w) for w in self.weights]


def _cudnn_bias(weights: list[np.ndarray]) -> bool:
    """Whether a weights file's ``[kernel, recurrent_kernel, bias]`` has a CuDNN layer's bias, ``[2 * G*H]`` for
    a GRU or an LSTM (a ``GRU``'s is ``[2, 3H]`` or ``[3H]``, an ``LSTM``'s ``[4H]``)."""
    if len(weights) < 3 or weights[1].ndim != 2 or not weights[1].shape[0]:
        return False
    gates = weights[1].shape[1] // weights[1].shape[0]
    return gates in (3, 4) and weights[2].shape == (2 * weights[1].shape[1],)


def _dict(value) -> dict:
    """``value`` where it is a dict, else an empty one: a config's optional parts, read leniently."""
    return value if isinstance(value, dict) else {}


def layer_name(entry: dict) -> str:
    return str(_dict(entry.get("config")).get("name", entry.get("name", "?")))


def is_recurrent(cls) -> bool:
    return cls in GATES or cls == WRAPPER


def _entries(config: dict) -> list[dict]:
    entries = _dict(config.get("config")).get("layers")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"the model config ({config.get('class_name')!r}) has no list of layers")
    return entries


def _nested(entry: dict) -> bool:
    """Whether a layer entry is a model of layers (a model used as a layer of another)."""
    return entry.get("class_name") in MODELS and isinstance(_dict(entry.get("config")).get("layers"), list)


def stack_model(config: dict) -> tuple[dict, list[tuple[list[dict], int]]]:
    """The model config that holds the recurrent layers, the top one's or that of a model nested in it (at
    any depth), and the way down to it: for each enclosing model, its layer entries and the index of the
    entry the way goes through. Recurrent layers in more than one model are not one stack."""
    found: list[tuple[dict, list[tuple[list[dict], int]]]] = []

    def visit(model: dict, way: list[tuple[list[dict], int]]) -> None:
        entries = _entries(model)
        if any(is_recurrent(e.get("class_name")) for e in entries):
            found.append((model, way))
        for j, entry in enumerate(entries):
            if _nested(entry) and len(way) < MAX_NESTING:
                visit(entry, [*way, (entries, j)])

    visit(config, [])
    if len(found) > 1:
        where = ["the top model" if not way else f"model {layer_name(way[-1][0][way[-1][1]])!r}" for _, way in found]
        raise ValueError(f"recurrent layers lie in {where[0]} and in {where[1]}: they are not one stack; save the "
                         f"model that holds the stack on its own")
    return found[0] if found else (config, [])


def stack_indices(config: dict) -> tuple[list[dict], list[str], list[int]]:
    """A model config's layer entries, their names and the indices of its recurrent layers, once they are
    found to be one stack (a ValueError naming the layer where not)."""
    entries = _entries(config)
    names = [layer_name(e) for e in entries]
    stack = [k for k, e in enumerate(entries) if is_recurrent(e.get("class_name"))]
    if not stack:
        classes = sorted({str(e.get("class_name")) for e in entries})
        raise ValueError(f"the model has no recurrent layer ({', '.join(GATES)} or {WRAPPER} of one), nor a model "
                         f"inside it that has; it has {classes[:8]}")
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
    return entries, names, stack


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


def _cell_mode(name: str, cls: str, config: dict, backward: bool = False, era: Era = Era()) -> str:
    """The cuDNN mode one recurrent (cell) layer's config computes; anything else is refused naming it. What
    the config leaves out is the default of the Keras that wrote it (``era``)."""
    def value(key: str, default):
        v = config.get(key, default)
        return v.get("class_name", v) if isinstance(v, dict) else v

    activation, stated = value("activation", "tanh"), value("recurrent_activation", None)
    if cls in CUDNN_LAYERS:  # cuDNN's cell itself: no activations to choose
        mode = CUDNN_LAYERS[cls]
    elif cls == "SimpleRNN":
        if activation not in ("tanh", "relu"):
            raise ValueError(f"layer {name!r}: activation {activation!r} has no cuDNN equivalent (tanh or relu)")
        mode = activation
    else:
        if stated is not None and era.told is not None and stated != era.told:
            raise ValueError(f"layer {name!r}: its config states recurrent_activation {stated!r}, which disagrees "
                             f"with the option given ({era.told!r}); the option may only say what the file cannot")
        recurrent = stated if stated is not None else era.told or era.recurrent_activation
        if activation != "tanh":
            raise ValueError(f"layer {name!r}: activation {activation!r} has no cuDNN equivalent (tanh)")
        if recurrent is None:
            raise ValueError(f"layer {name!r}: its config does not state its recurrent_activation and "
                             f"{old_default_note(era)}; {ADVICE}")
        if recurrent != "sigmoid":
            why = "" if stated is not None or era.told else f" ({old_default_note(era)}; the config does not state it)"
            raise ValueError(f"layer {name!r}: recurrent_activation {recurrent!r}{why} has no cuDNN equivalent "
                             f"(sigmoid)")
        mode = "lstm" if cls == "LSTM" else "gru" if config.get("reset_after", era.reset_after) else "classic_gru"
    if bool(config.get("go_backwards", False)) != backward:
        raise ValueError(f"layer {name!r}: go_backwards={not backward} outside a Bidirectional's backward layer has "
                         f"no cuDNN equivalent" if not backward else
                         f"layer {name!r}: a Bidirectional's backward layer must run backwards (go_backwards=True)")
    return mode


def _kind(layer: Layer, era: Era = Era()) -> tuple[str | None, str]:
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
        reset_after = bias is None or bias.ndim == 2 or _cudnn_bias(layer.weights[0])  # [2, 3H] or CuDNNGRU's [6H]
        mode = {1: None, 4: "lstm", 3: "gru" if reset_after else "classic_gru"}[gates]
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
                            part.get("class_name"), _dict(part.get("config")), back, era) for part, back in parts]
        if modes[0] != modes[1] or backward.get("class_name") != forward.get("class_name") or \
                _dict(backward.get("config")).get("units") != cell.get("units"):
            raise ValueError(f"layer {layer.name!r}: its backward layer differs from its forward layer")
        return modes[0], direction
    return _cell_mode(layer.name, layer.cls, config, era=era), direction


def stack_kind(layers: list[Layer], era: Era = Era()) -> tuple[str | None, str]:
    """``(rnn_mode, direction)`` that every layer of the stack computes (``rnn_mode`` None: relu or tanh,
    which a weights file cannot tell); layers that differ are not one cuDNN stack. ``era``: the Keras that
    wrote the file, whose defaults stand for what a config leaves out, and what the user says of the weights.
    A weights file does not say which recurrent_activation its LSTM or GRU layers computed: where the Keras
    that wrote it defaulted to hard_sigmoid, or cannot be told, it is refused unless the user says sigmoid."""
    kinds = [_kind(layer, era) for layer in layers]
    for layer, got in zip(layers, kinds):
        if got != kinds[0]:
            raise ValueError(f"layer {layer.name!r} computes a {got[1]} {got[0]!r} layer, but the first recurrent "
                             f"layer {layers[0].name!r} a {kinds[0][1]} {kinds[0][0]!r} one: not one cuDNN stack")
    gated = kinds[0][0] in ("lstm", "gru", "classic_gru")
    if era.told is not None and not gated:
        raise ValueError(f"recurrent_activation {era.told!r} was given, but layer {layers[0].name!r} is a SimpleRNN, "
                         f"which has none")
    if era.told == "hard_sigmoid":
        raise ValueError("the weights were trained with recurrent_activation 'hard_sigmoid' (the option given), "
                         "which has no cuDNN equivalent (sigmoid)")
    plain = [layer for layer in layers if layer.config is None and not all(layer.cudnn_layout)]
    if gated and plain and era.told is None and era.recurrent_activation != "sigmoid":
        raise ValueError(f"layer {plain[0].name!r} is a {'LSTM' if kinds[0][0] == 'lstm' else 'GRU'}, and "
                         f"{old_default_note(era)}; a weights file does not record which one its layers used: {ADVICE}")
    def time_major(layer: Layer) -> bool:
        return bool(_cell_config(layer).get("time_major", False))

    configured = [layer for layer in layers if layer.config is not None]
    other = [layer for layer in configured if time_major(layer) != time_major(configured[0])] if configured else []
    if other:
        raise ValueError(f"layer {other[0].name!r} reads its input {'time' if time_major(other[0]) else 'batch'}-major "
                         f"(time_major), but layer {configured[0].name!r} the other way: each layer reads the one "
                         f"before's output with its axes swapped, which is not one cuDNN stack")
    return kinds[0]


def _cell_config(layer: Layer) -> dict:
    """The config of a layer's cell layer (a Bidirectional's forward layer's)."""
    config = _dict(layer.config)
    return _dict(_dict(config.get("layer")).get("config")) if layer.cls == WRAPPER else config
