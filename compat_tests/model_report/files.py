"""The model files of a model report (``rnn-compat report --model FILE [--model FILE ...]``): each read to
canonical weights by the readers of ``rnn-compat infer`` (:mod:`compat_tests.interop.convert`), the
architecture they share checked, and each later file's weights compared with the first's.

A file's architecture is an :class:`~compat_tests.config.RNNConfig` without inputs (:func:`architecture`).
Two files are one function's only where their shapes agree (layers, units, input size, direction, projection,
input mode) and their cells are of one family (an LSTM; a GRU, cuDNN's or the textbook one; a relu or tanh
RNN): within a family the report runs them and says which cell each file computes (an export that wrote the
textbook GRU where cuDNN's was trained is a finding, not bad input); across families, or with other shapes,
they are refused before any work, naming both files and what differs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import RNNConfig

# The reader options of the command line, and the formats each applies to (convert.read refuses the others; a name
# map, the tensor files and torch.save's files of those formats alone).
READER_OPTIONS = {"names": ("checkpoint", "torch", "keras"), "module": ("torch",), "node": ("onnx", "tf"), "layer": ("checkpoint", "tf"),
                  "scope": ("checkpoint", "tf"), "layers": ("keras",), "recurrent_activation": ("keras",),
                  "dequantize": ("onnx",)}
# The cells that may stand for one another in two files of one model (the report says which each computes).
FAMILIES = {"lstm": "an LSTM", "gru": "a GRU", "classic_gru": "a GRU", "relu": "a plain RNN", "tanh": "a plain RNN"}
SHAPE_FIELDS = ("num_layers", "num_units", "input_size", "direction", "num_proj", "input_mode")


@dataclass(frozen=True)
class ModelFile:
    """One ``--model`` as read: its ``path`` (as given), ``fmt`` (the format it was read as), the reference
    ``model`` and its canonical ``weights`` and ``biases`` (the file's dtype), a reader's ``note`` where what
    was read approximates the file's model, and ``sha256``, the file's digest (a resumed run checks it)."""

    path: str
    fmt: str
    model: object
    weights: list
    biases: list
    note: str | None
    sha256: str
    unread: str | None = None  # why the readers refused a later file that runs in its own framework all the same
    chain: list | None = None  # a stack whose layers differ in size: (model, weights, biases) per layer

    def layers(self) -> list[tuple]:
        """``(model, weights, biases)`` of each layer of a chain, or of the one model (a list of one)."""
        return self.chain or [(self.model, self.weights, self.biases)]

    def architecture(self) -> RNNConfig:
        """The architecture of the model (of a chain: of its first layer)."""
        return architecture(self.model)

    def architectures(self) -> list[RNNConfig]:
        """The architecture of each layer of a chain, or of the one model (a list of one)."""
        return [architecture(model) for model, _, _ in self.layers()]

    def describe(self) -> dict:
        """What the report says of the file: path, format, model (or why it was not read), note and digest; a
        chain's ``layers`` (each layer's architecture)."""
        if self.unread:
            return {"path": self.path, "format": self.fmt, "sha256": self.sha256, "note": self.note,
                    "model": f"not read: {self.unread}", "architecture": None, "layers": []}
        said = repr(self.model) if self.chain is None else "a chain of " + ", ".join(repr(m) for m, _, _ in self.chain)
        return {"path": self.path, "format": self.fmt, "sha256": self.sha256, "note": self.note, "model": said,
                "architecture": self.architecture().to_dict(),
                "layers": [a.to_dict() for a in self.architectures()] if self.chain else []}


def architecture(model, dtype: str | None = None) -> RNNConfig:
    """The :class:`RNNConfig` of a reference model's architecture (in ``dtype``, default the model's; the input
    fields at their defaults: a unit sets them)."""
    return RNNConfig(model.rnn_mode, model.num_layers, model.num_units, model.input_size, model.direction,
                     model.input_mode, model.num_proj, dtype=dtype or model.dtype.name,
                     bias_mode=getattr(model, "bias_mode", "double"), cell_clip=getattr(model, "cell_clip", None))


def digest(path: str | Path) -> str:
    """The SHA-256 of the file at ``path`` (with a TF checkpoint's, of its index file), read in blocks."""
    from ..interop.convert import read_files

    h = hashlib.sha256()
    for part in read_files(path):
        with open(part, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def read_model(path: str, source: str, options: dict) -> ModelFile:
    """The file at ``path`` read as format ``source`` (``auto``: told by the file) with the reader ``options``
    (:data:`READER_OPTIONS` by name, ``None`` for not given) that apply to its format, and the model options
    (``rnn_mode``, ``num_units``, ...: the readers check them against the file); errors name the file."""
    from reference.formats.tf import UnevenLayers

    from ..interop import convert, keras_file

    fmt = convert.detect(path, options.get("names")) if source == convert.AUTO else source
    applied = {k: v for k, v in options.items()
               if k not in READER_OPTIONS or READER_OPTIONS[k] is None or fmt in READER_OPTIONS[k]}
    if keras_file.is_keras_file(path):  # a name map is for tensor files: not Keras's own .keras and .h5 files
        applied.pop("names", None)
    try:
        read = convert.read(fmt, path, applied)
    except ValueError as exc:  # a stack of layers of several sizes: a chain of one-layer models
        if applied.get("layer") is not None or not isinstance(exc.__cause__ or exc, UnevenLayers):
            raise
        layers = [(c.model, list(c.weights), list(c.biases)) for c in convert.read_chain(fmt, path, applied).layers]
        model, weights, biases = layers[0]
        return ModelFile(str(path), fmt, model, weights, biases, None, digest(path), chain=layers)
    return ModelFile(str(path), fmt, read.model, list(read.weights), list(read.biases), read.note, digest(path))


def read_later_model(path: str, source: str, options: dict) -> ModelFile:
    """A ``--model`` after the first: :func:`read_model`, or where the readers refuse it but its own framework
    runs it (an ONNX export whose node reads the sequence backwards, which cuDNN has no way to compute), a
    :class:`ModelFile` without weights saying why (``unread``): it is judged by its framework's results alone."""
    from ..interop import convert
    from .frameworks import unavailable

    try:
        return read_model(path, source, options)
    except ValueError as exc:
        try:
            fmt = convert.detect(path, options.get("names")) if source == convert.AUTO else source
        except (ValueError, OSError):
            raise exc from None
        if unavailable(path, fmt) is not None:
            raise
        return ModelFile(str(path), fmt, None, [], [], None, digest(path), unread=str(exc))


def unused_options(options: dict, formats: list[str]) -> list[str]:
    """The reader options given (not ``None``) that apply to none of ``formats``: named as ``--option``."""
    return ["--" + k.replace("_", "-") for k, applies in READER_OPTIONS.items()
            if options.get(k) not in (None, False) and applies is not None and not set(applies) & set(formats)]


def check_one_model(files: list[ModelFile]) -> None:
    """Every file is of the first's shapes and cell family, else a ``ValueError`` naming both files and what
    differs (they cannot compute one function)."""
    first = files[0]
    for other in files[1:]:
        if other.unread:
            continue
        ours, theirs = first.architectures(), other.architectures()
        differ = [] if len(ours) == len(theirs) else [f"a chain of {len(ours)} layers and {len(theirs)}"]
        for k, (a, b) in enumerate(zip(ours, theirs) if not differ else ()):
            where = f"layer {k}'s " if len(ours) > 1 else ""
            differ += [f"{where}{f} {getattr(a, f)!r} and {getattr(b, f)!r}" for f in SHAPE_FIELDS
                       if getattr(a, f) != getattr(b, f)]
            if FAMILIES[a.mode] != FAMILIES[b.mode]:
                differ.insert(0, f"{where}{FAMILIES[a.mode]} ({a.mode}) and {FAMILIES[b.mode]} ({b.mode})")
        if differ:
            raise ValueError(f"--model {first.path} and --model {other.path} are not one model: they hold "
                             f"{'; '.join(differ)}")


def compare_weights(first: ModelFile, other: ModelFile) -> dict:
    """``other``'s canonical tensors against ``first``'s: ``verdict`` ``"identical"`` (bit for bit, after widening
    both to float64), ``"within rounding"`` (each within half an ulp of the coarser dtype, as a cast leaves them),
    or ``"different"``; ``tensors``: the differing ones (named by pseudo-layer, kind and gate, with the largest
    difference). Biases compare as the total each gate adds (``b_W + b_R``: single-bias formats split it their
    own way), but for cuDNN's GRU candidate, whose ``b_Rh`` the reset gate scales."""
    if other.unread:
        return {"file": other.path, "against": first.path, "verdict": "not read", "tensors": [], "why": other.unread}
    regions_a, regions_b = _named(first), _named(other)
    coarse = max(np.finfo(first.model.dtype).eps, np.finfo(other.model.dtype).eps)
    differing, exact = [], True
    for key in regions_a.keys() | regions_b.keys():
        a, b = regions_a.get(key), regions_b.get(key)
        if a is None or b is None:
            differing.append({"tensor": _label(key), "max_abs": None,
                              "why": f"only in {first.path if b is None else other.path}"})
            exact = False
            continue
        if a.shape != b.shape:
            differing.append({"tensor": _label(key), "max_abs": None, "why": f"shapes {a.shape} and {b.shape}"})
            exact = False
            continue
        delta = np.abs(a - b)
        if delta.any():
            exact = False
        if (delta > coarse / 2 * np.maximum(np.abs(a), np.abs(b)) * (1 + 1e-12)).any():
            differing.append({"tensor": _label(key), "max_abs": float(delta.max())})
    differing.sort(key=lambda d: d["tensor"])
    verdict = "identical" if exact else "within rounding" if not differing else "different"
    return {"file": other.path, "against": first.path, "verdict": verdict, "tensors": differing}


def _named(f: ModelFile) -> dict[tuple, np.ndarray]:
    """A file's canonical tensors in float64 by ``(chain layer, kind, pseudo_layer, gate)`` (the chain layer
    ``None`` but in a chain); biases as :func:`compare_weights` compares them."""
    out = {}
    for layer, (model, layer_weights, layer_biases) in enumerate(f.layers()):
        where = layer if f.chain else None
        gates = model.gates
        weights, biases = model.canonical_regions()
        G = len(gates)
        for region, tensor in zip(weights, layer_weights):
            lin = region.lin_layer_id
            kind = "projection" if lin >= 2 * G else "input weight" if lin < G else "recurrent weight"
            out[(where, kind, region.pseudo_layer, gates[lin % G] if lin < 2 * G else "")] = np.asarray(tensor,
                                                                                                     np.float64)
        for region, tensor in zip(biases, layer_biases):
            gate = gates[region.lin_layer_id % G]
            inside = model.rnn_mode == "gru" and gate == "h"  # cuDNN's b_Rh is scaled by r: not one total with b_Wh
            kind = ("input bias" if region.lin_layer_id < G else "recurrent bias") if inside else "bias"
            key = (where, kind, region.pseudo_layer, gate)
            out[key] = out.get(key, 0.0) + np.asarray(tensor, np.float64)
    return out


def _label(key: tuple) -> str:
    layer, kind, pseudo_layer, gate = key
    return (f"layer {layer}'s " if layer is not None else "") + f"pseudo-layer {pseudo_layer} {kind}" + (
        f" (gate {gate})" if gate else "")
