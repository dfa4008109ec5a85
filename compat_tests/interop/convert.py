"""``rnn-compat convert``: weights between formats, through the canonical tensors.

Formats (files): ``checkpoint`` (TF names + config, ``.safetensors``/``.npz``), ``torch`` (a file ``torch.save``
wrote, parsed without unpickling by ``reference.formats.torch_archive``: a state_dict, a training checkpoint
holding one, or a whole model; or a ``state_dict`` saved with safetensors or ``numpy.savez``; in a whole
model's, the recurrent module's tensors, picked by ``module`` where there are several; written as
``torch.save`` writes a state_dict for a ``.pt``/``.pth`` name, by ``reference.formats.torch_save``),
``keras`` (Keras's own files, ``.keras`` models and ``.h5``/``.weights.h5`` models or weights, see
``keras_file``; or per pseudo-layer ``layer{k}/kernel``, ``layer{k}/recurrent_kernel``, ``layer{k}/bias`` in a safetensors or
``.npz`` file), ``onnx`` (an ``.onnx`` graph) and ``tf`` (a TensorFlow checkpoint: the tensor bundle
``PREFIX.index`` + ``PREFIX.data-*`` that ``tf.train.Saver`` writes and restores, with the canonical names
of ``CudnnOpaqueParamsSaveable``; or, read only, a frozen graph ``.pb``: ``reference.formats.tf_graph``).
Files this tool writes carry the model config, but for a ``tf`` checkpoint, which has no place for it; a foreign ``torch`` file, a TF-named ``checkpoint`` without our config
and a ``tf`` checkpoint get it from their names and shapes (plus ``--mode`` for relu/tanh, ``--scope`` where
TF-named tensors sit under several scopes), a foreign ``keras`` tensor file needs the config options (a Keras
model file tells them), which may not contradict what a file carries or tells. A TF-named target keeps a
TF-named source's variable scope unless given another (``--out-scope``). Format ``auto`` (reading only) tells
the format from the file: :func:`detect`.
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from reference import checkpoint
from reference.formats import keras, tf, tf_bundle, tf_graph, torch, torch_archive, torch_save
from reference.formats.canonical import check_cell_clip, check_fits, zeros

from . import keras_file

FORMATS = ("checkpoint", "torch", "keras", "onnx", "tf")
TF_NAMED = ("checkpoint", "tf")
AUTO = "auto"  # read as the file's name and contents say (detect)


class Read(NamedTuple):
    """What :func:`read` restores: the model, its canonical weights and biases, the variable scope of a
    TF-named file's tensors (``None``: none, or not a TF-named file), and a note where what was read is an
    approximation of the file's model (``None``: it is the file's model; a ``dequantize``d one's says so)."""

    model: object
    weights: list
    biases: list
    scope: str | None = None
    note: str | None = None


def _config(found: dict | None, overrides: dict, what: str, carried: bool) -> dict:
    """The config of a tensor file: the one it carries (``carried``), the one its names and shapes tell, or
    (``found`` is ``None``: a foreign Keras file) the options alone; options must agree with the file."""
    teller = f"{what} carries its config" if carried else "its tensors' names and shapes tell its config"
    untold = tuple(overrides) if found is None else ()  # a foreign Keras file tells nothing: the options do
    config = checkpoint.complete_config(checkpoint.with_options(found or {}, overrides, teller, untold))
    missing = [k for k in ("rnn_mode", "num_layers", "num_units", "input_size", "dtype") if k not in config]
    if missing:  # the command line's options: --mode is rnn_mode
        options = ", ".join("--" + {"rnn_mode": "mode"}.get(m, m).replace("_", "-") for m in missing)
        raise ValueError(f"{what} carries no model config; give {options}")
    return config


# The naming schemes of tensor files read here, for messages about names none of them fits.
SCHEMES = ("TensorFlow's (rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel, ...; --from checkpoint), "
           "PyTorch's (weight_ih_l0, ..., or a single cell's weight_ih, ..., under any module path; --from torch), "
           "Keras's per-layer names (layer0/kernel, layer0/recurrent_kernel, layer0/bias; --from keras); ONNX "
           "graphs name W, R and B by node, in an .onnx file")


def unrecognised(names: list[str], extra: str = "") -> ValueError:
    """The refusal of a tensor file whose names fit none of the :data:`SCHEMES`."""
    shown = sorted(names)[:8]
    return ValueError(f"its tensor names fit none of the naming schemes read here, {SCHEMES}{extra}; it holds "
                      f"{shown}{' ...' if len(names) > 8 else ''}: map its names onto one of them (--names FILE.json, "
                      f"options key names: a JSON object such as {{\"enc_w_ih\": \"weight_ih_l0\"}})")


def detect(path: str | Path, names: dict | None = None) -> str:
    """The format of the file at ``path``, by its name and contents: ``.onnx`` is onnx; ``.keras``, ``.h5`` and
    ``.hdf5`` are keras; a safetensors or ``.npz`` file is torch where a name ends in ``weight_ih_l0`` or (a
    single cell's) ``weight_ih`` (a state_dict, of a whole model too), keras where one is ``layer0/kernel``
    (the per-layer tensor file), else checkpoint (TF names); a TensorFlow bundle (``PREFIX`` or
    ``PREFIX.index``) or frozen graph (``.pb``) is tf; a file ``torch.save`` may have written (a zip or a
    pickle, or named ``.pt``, ``.pth``, ``.bin``) is torch. Anything else is checkpoint,
    whose reader says what is wrong with it, as it does for a tensor file whose names cannot be read.
    ``names``: a tensor file's names as this map renames them (``checkpoint.name_map``)."""
    path = Path(path)
    if path.suffix == ".onnx":
        return "onnx"
    if keras_file.is_keras_file(path):
        return "keras"
    if path.suffix in checkpoint.SUFFIXES:
        try:
            names = checkpoint.tensor_names(path, None if names is None else checkpoint.name_map(names))
        except (ValueError, OSError):
            return "checkpoint"
        if any(n.endswith(torch.FIRST_WEIGHTS) for n in names):
            return "torch"
        return "keras" if any(re.fullmatch(r"layer\d+/kernel", n) for n in names) else "checkpoint"
    if tf_bundle.is_bundle(path) or tf_graph.is_graph_file(path):
        return "tf"
    return "torch" if torch_archive.is_torch_file(path) else "checkpoint"


def read(fmt: str, path: str | Path, overrides: dict | None = None) -> Read:
    """The model and weights of a file of format ``fmt`` (``"auto"``: :func:`detect`'s); errors name the file,
    and where the file is not of format ``fmt`` but of one :func:`detect` tells, that one."""
    overrides = dict(overrides or {})
    with checkpoint.about(path):
        names = overrides.pop("names", None)
        names = None if names is None else checkpoint.name_map(names)
        chosen = detect(path, names) if fmt == AUTO else fmt
        if names is not None:
            if Path(path).suffix not in checkpoint.SUFFIXES and not (
                    chosen == "torch" and torch_archive.is_torch_file(path) and not keras_file.is_keras_file(path)):
                raise ValueError(f"a name map applies to tensor files ({' or '.join(checkpoint.SUFFIXES)}) and files "
                                 f"torch.save wrote (--from torch), not to {Path(path).name!r}")
        try:
            return _read(chosen, path, overrides, names)
        except ValueError as exc:
            try:
                told = detect(path, names)
            except (ValueError, OSError):
                told = fmt
            if fmt in (AUTO, told) or {fmt, told} <= set(TF_NAMED) or f"--from {told}" in str(exc):
                raise  # (TF-named formats read alike)
            raise ValueError(f"{exc} (the file looks like format {told}: --from {told})") from None


def _read(fmt: str, path: str | Path, overrides: dict, names: dict | None = None):
    overrides = dict(overrides)
    dequantize = overrides.pop("dequantize", None)  # onnxruntime's quantized LSTMs, read as float ones
    if dequantize and fmt != "onnx":
        raise ValueError(f"dequantize applies to ONNX files (onnxruntime's DynamicQuantizeLSTM), not to {fmt}")
    module = overrides.pop("module", None)  # which recurrent module of a PyTorch file
    if module is not None and fmt != "torch":
        raise ValueError(f"a module path applies to PyTorch files (torch), not to {fmt}")
    keras_own = fmt == "keras" and keras_file.is_keras_file(path)
    if overrides.get("recurrent_activation") is not None and not keras_own:
        raise ValueError(f"recurrent_activation applies to Keras's own files (.h5, .keras), whose LSTM and GRU "
                         f"layers may say otherwise, not to {fmt}")
    if overrides.get("layer") is not None and fmt not in TF_NAMED:
        raise ValueError(f"a layer number applies to TF-named files (checkpoint, tf), not to {fmt}")
    if overrides.get("node") is not None and fmt not in ("onnx", "tf"):
        raise ValueError(f"a node name applies to ONNX files (onnx) and frozen TensorFlow graphs (tf, .pb), not to "
                         f"{fmt}")
    if fmt not in ("onnx", "tf"):
        overrides.pop("node", None)
    if overrides.get("layers") is not None and not keras_own:
        raise ValueError(f"a choice of layers applies to Keras weights files (.h5, .weights.h5), not to {fmt}")
    if not keras_own:
        overrides.pop("recurrent_activation", None)
        overrides.pop("layers", None)
    if fmt not in TF_NAMED:
        overrides.pop("layer", None)
    if fmt in ("checkpoint", "tf"):  # TF names, with our config or (a foreign file) read off names and shapes
        try:
            ck = checkpoint.load(path, {**overrides, "names": names})
        except ValueError as exc:  # (named by checkpoint.about, around the reader's own)
            if not isinstance(exc.__cause__ or exc, tf.NoCells) or Path(path).suffix not in checkpoint.SUFFIXES:
                raise
            raise unrecognised(checkpoint.tensor_names(path, names),
                               tf.tf1_cells_note(checkpoint.tensor_names(path))) from None
        return Read(ck.model, ck.weights, ck.biases, ck.config.get("scope"))
    if fmt == "onnx":
        from .onnx_dequantize import NOTE
        from .onnx_model import import_model

        return Read(*import_model(path, {**overrides, "dequantize": dequantize}), note=NOTE if dequantize else None)
    if fmt == "keras" and keras_file.is_keras_file(path):  # Keras's own .keras / .h5 files
        return Read(*keras_file.read(path, overrides))
    if fmt == "torch":
        return _read_torch(path, overrides, module, names)
    tensors, found = checkpoint.declared_tensors(path, names)  # an .npz's inflated once the model says what it needs
    carried = found is not None
    if fmt == "keras":
        if found is None and not any(n.endswith("/bias") for n in tensors):  # a foreign file of use_bias=False
            overrides = {**overrides, "bias_mode": overrides.get("bias_mode") or "none"}  # layers: no bias
        model = checkpoint.model_from_config(_config(found, overrides, str(path), carried), holds=len(tensors))
        check_fits(model, sum(np.size(t) for t in tensors.values()), "the file's tensors")
        names = [[f"layer{k}/{n}" for n in ("kernel", "recurrent_kernel", "bias")]
                 for k in range(model.num_layers * model.num_dirs)]
        if model.bias_mode == "none" or not any(n.endswith("/bias") for n in tensors):  # use_bias=False: no bias
            names = [layer[:2] for layer in names]  # (zero biases in a model whose config says it has them)
        missing = [n for layer in names for n in layer if n not in tensors]
        if missing:
            raise ValueError(f"missing Keras weight {missing[0]!r} of {model!r}")
        extra = sorted(set(tensors) - {n for layer in names for n in layer})
        if extra:
            raise ValueError(f"has tensors {model!r} does not: {extra[:3]}{' ...' if len(extra) > 3 else ''}")
        expected = {n: a.shape for layer, arrays in zip(names, keras.to_keras(model, *zeros(model)))
                    for n, a in zip(layer, arrays)}
        checkpoint.check_needed({n: np.shape(t) for n, t in tensors.items()}, expected, model)
        tensors = checkpoint.read_declared(path, tensors)
        return Read(model, *keras.from_keras(model, [[tensors[n] for n in layer] for layer in names]))
    raise ValueError(f"unknown format {fmt!r}, expecting one of {', '.join(FORMATS)}")


def _read_torch(path: str | Path, overrides: dict, module: str | None, names: dict | None = None) -> Read:
    """A file ``torch.save`` wrote (parsed, never unpickled), or a state_dict in a safetensors or ``.npz`` file
    (ours, with its config, or a foreign one: a whole model's, whose recurrent module ``module`` picks)."""
    nonlinearity = None  # what a pickled nn.RNN says of itself
    archive = Path(path).suffix not in checkpoint.SUFFIXES and torch_archive.is_torch_file(path)
    if archive:  # ours carry their config beside the state_dict
        found = checkpoint.parse_config(torch_archive.carried_config(path), path)
    else:  # an .npz's tensors inflated only once the model says what it needs
        tensors, found = checkpoint.declared_tensors(path, names)
    carried = found is not None
    if carried and module:
        raise ValueError(f"carries one model's weights (and its config), not a module {module!r}")
    if archive:
        tensors, nonlinearity = torch_archive.load_state_dict(path, module, names)
    elif not carried:  # a whole model's state_dict: its recurrent module's tensors
        modules = torch.module_tensors(tensors)
        tensors = modules[torch.pick_module(modules, module)] if modules or module is not None else tensors
    tensors = torch.layer_names(tensors)  # a single cell's weight_ih, ... as layer 0's
    if found is None:
        found = torch.config_from_state_dict(tensors, nonlinearity or overrides.get("rnn_mode"))
    model = checkpoint.model_from_config(_config(found, overrides, str(path), carried), holds=len(tensors))
    if not archive:
        check_fits(model, sum(np.size(t) for t in tensors.values()), "the state_dict's tensors")
        expected = {k: v.shape for k, v in torch.to_state_dict(model, *zeros(model)).items()}
        checkpoint.check_needed({n: np.shape(t) for n, t in tensors.items()}, expected, model)
        tensors = checkpoint.read_declared(path, tensors, expected)
    return Read(model, *torch.from_state_dict(model, tensors))


def read_chain(fmt: str, path: str | Path, overrides: dict | None = None):
    """A TF-named stack, or the recurrent layers of a Keras model or weights file, whose layers differ in size
    as a ``reference.chain.Chain`` of one-layer models (one model where they do not); other formats' stacks are
    one model, or refused by :func:`read`."""
    from reference.chain import Chain, load_chain

    fmt = detect(path, (overrides or {}).get("names")) if fmt == AUTO else fmt
    if (overrides or {}).get("dequantize"):
        raise ValueError(f"{path}: dequantize applies to ONNX files (onnxruntime's DynamicQuantizeLSTM), not to {fmt}")
    if fmt == "keras" and keras_file.is_keras_file(path):
        options = {k: v for k, v in (overrides or {}).items() if k not in ("module", "layer", "node", "names", "scope",
                                                                          "dequantize")}
        return Chain([checkpoint.Checkpoint(model, weights, biases, checkpoint.model_config(model))
                      for model, weights, biases in keras_file.read_chain(path, options)])
    if fmt not in TF_NAMED:
        raise ValueError(f"{path}: a chain of one-layer models is read from TF-named files (checkpoint, tf) and Keras "
                         f"files, not {fmt}")
    return load_chain(path, {k: v for k, v in (overrides or {}).items()
                             if k not in ("module", "recurrent_activation", "layers", "dequantize")})


def written_files(fmt: str, path: str | Path) -> list[Path]:
    """The files :func:`write` makes for format ``fmt`` at ``path``: ``path``, or a TF checkpoint's two."""
    if fmt == "tf":
        prefix = _bundle_prefix(path)
        return [Path(f"{prefix}.index"), Path(f"{prefix}.data-00000-of-00001")]
    return [Path(path)]


def read_files(path: str | Path) -> list[Path]:
    """The files a read of ``path`` opens: ``path``, or a TF checkpoint's index and data files."""
    if tf_bundle.is_bundle(path):
        prefix = Path(path).with_suffix("") if Path(path).suffix == ".index" else Path(path)
        return [Path(f"{prefix}.index"), *sorted(prefix.parent.glob(f"{glob.escape(prefix.name)}.data-*"))]
    return [Path(path)]


# Names of the files the other formats write (and ``detect`` reads as theirs): not a TF checkpoint's prefix.
OTHER_SUFFIXES = (".onnx", ".safetensors", ".npz", ".npy", ".pt", ".pth", ".bin", ".keras", ".h5", ".hdf5", ".json")


def _bundle_prefix(path: str | Path) -> Path:
    """The prefix of the TF checkpoint to write at ``path`` (a prefix such as ``model.ckpt``, or its
    ``.index`` file's name), refusing a folder or a name of another format's file, where the checkpoint's
    two files (``PREFIX.index``, ``PREFIX.data-00000-of-00001``) would lie under names nobody asked for."""
    if str(path).endswith(("/", os.sep)) or Path(path).is_dir():
        raise ValueError(f"a TensorFlow checkpoint is written as PREFIX.index and PREFIX.data-00000-of-00001: give "
                         f"its PREFIX (such as {Path(path) / 'model.ckpt'}), not the folder {str(path)!r}")
    if Path(path).suffix.lower() in OTHER_SUFFIXES:
        raise ValueError(f"a TensorFlow checkpoint is written as PREFIX.index and PREFIX.data-00000-of-00001: give "
                         f"its PREFIX (such as model.ckpt), not a name of another format's file, "
                         f"{Path(path).name!r}")
    return Path(path)


def write(fmt: str, path: str | Path, model, weights, biases, scope: str | None = None, cell: bool = False) -> None:
    """``model``'s canonical weights into a file of format ``fmt``; ``scope``: the variable scope of a
    TF-named file's tensors (``checkpoint``, ``tf``); ``cell``: a ``torch`` file's tensors named as a single
    ``nn.RNNCell``/``nn.LSTMCell``/``nn.GRUCell`` names them (``weight_ih``, ...; a one-layer, one-direction
    model), which ``cell.load_state_dict`` takes."""
    if scope is not None and fmt not in TF_NAMED:
        raise ValueError(f"a variable scope applies to TF-named files ({' or '.join(TF_NAMED)}), not to {fmt}")
    if cell and fmt != "torch":
        raise ValueError(f"single-cell names (weight_ih, ...) apply to PyTorch files (torch), not to {fmt}")
    tf.check_scope_to_write(scope)
    config = checkpoint.model_config(model)
    if fmt == "checkpoint":
        checkpoint.save(path, model, weights, biases, scope)
    elif fmt == "torch":
        suffix = Path(path).suffix
        if suffix not in torch_save.SUFFIXES + checkpoint.SUFFIXES:
            raise ValueError(f"a PyTorch file must end in {' or '.join(torch_save.SUFFIXES)} (torch.save's format) "
                             f"or {' or '.join(checkpoint.SUFFIXES)}, got {Path(path).name!r}")
        write_state_dict = torch_save.write_state_dict if suffix in torch_save.SUFFIXES else checkpoint.write_tensors
        write_state_dict(path, torch.to_state_dict(model, weights, biases, cell=cell), config)
    elif fmt == "keras" and keras_file.is_keras_file(path):
        keras_file.write(path, model, weights, biases)
    elif fmt == "keras":
        if Path(path).suffix not in checkpoint.SUFFIXES:
            raise ValueError(f"a Keras file must end in .keras (a Keras 3 model), .weights.h5 (its weights), .h5 or "
                             f".hdf5 (a legacy tf.keras 2 model), or {' or '.join(checkpoint.SUFFIXES)} (the layers' "
                             f"tensors), got {Path(path).name!r}")
        tensors = {f"layer{k}/{n}": a for k, layer in enumerate(keras.to_keras(model, weights, biases))
                   for n, a in zip(("kernel", "recurrent_kernel", "bias"), layer)}
        checkpoint.write_tensors(path, tensors, config)
    elif fmt == "onnx":
        from .onnx_model import save

        if Path(path).suffix != ".onnx":
            raise ValueError(f"an ONNX file must end in .onnx, got {Path(path).name!r}")
        save(path, model, weights, biases)
    elif fmt == "tf":
        check_cell_clip(model, "a TensorFlow bundle (its variables only)")
        tf_bundle.write(_bundle_prefix(path), tf.to_tf(model, weights, biases, scope))
    else:
        raise ValueError(f"unknown format {fmt!r}, expecting one of {', '.join(FORMATS)}")
