"""``rnn-compat convert``: weights between formats, through the canonical tensors.

Formats (files): ``checkpoint`` (TF names + config, ``.safetensors``/``.npz``), ``torch`` (a ``state_dict``
saved with safetensors or ``numpy.savez``: PyTorch's ``.pt`` pickles are refused), ``keras`` (per
pseudo-layer ``layer{k}/kernel``, ``layer{k}/recurrent_kernel``, ``layer{k}/bias`` in a safetensors or
``.npz`` file), ``onnx`` (an ``.onnx`` graph) and ``tf`` (a TensorFlow checkpoint: the tensor bundle
``PREFIX.index`` + ``PREFIX.data-*`` that ``tf.train.Saver`` writes and restores, with the canonical names
of ``CudnnOpaqueParamsSaveable``). Files this tool writes carry the model config, but for a ``tf``
checkpoint, which has no place for it; a foreign ``torch`` file, a TF-named ``checkpoint`` without our config
and a ``tf`` checkpoint get it from their names and shapes (plus ``--mode`` for relu/tanh, ``--scope`` where
TF-named tensors sit under several scopes), a foreign ``keras`` file needs the config options.
"""

from __future__ import annotations

from pathlib import Path

from reference import checkpoint
from reference.formats import keras, tf, tf_bundle, torch

FORMATS = ("checkpoint", "torch", "keras", "onnx", "tf")


def _config(found: dict | None, overrides: dict, what: str) -> dict:
    config = checkpoint.complete_config({**(found or {}), **{k: v for k, v in overrides.items() if v is not None}})
    missing = [k for k in ("rnn_mode", "num_layers", "num_units", "input_size", "dtype") if k not in config]
    if missing:
        raise ValueError(f"{what} carries no model config; give {', '.join('--' + m.replace('_', '-') for m in missing)}")
    return config


def read(fmt: str, path: str | Path, overrides: dict | None = None):
    """``(model, weights, biases)`` from a file of format ``fmt``; errors name the file."""
    with checkpoint.about(path):
        return _read(fmt, path, overrides or {})


def _read(fmt: str, path: str | Path, overrides: dict):
    if fmt in ("checkpoint", "tf"):  # TF names, with our config or (a foreign file) read off names and shapes
        ck = checkpoint.load(path, overrides)
        return ck.model, ck.weights, ck.biases
    if fmt == "onnx":
        from .onnx_model import import_model

        return import_model(path)
    tensors, found = checkpoint.read_tensors(path)
    if fmt == "torch":
        if found is None:
            found = torch.config_from_state_dict(tensors, overrides.get("rnn_mode"))
        model = checkpoint.model_from_config(_config(found, overrides, str(path)), holds=len(tensors))
        return (model, *torch.from_state_dict(model, tensors))
    if fmt == "keras":
        model = checkpoint.model_from_config(_config(found, overrides, str(path)), holds=len(tensors))
        count = model.num_layers * model.num_dirs
        try:
            layers = [[tensors[f"layer{k}/{n}"] for n in ("kernel", "recurrent_kernel", "bias")] for k in range(count)]
        except KeyError as exc:
            raise ValueError(f"{path}: missing Keras weight {exc}") from None
        return (model, *keras.from_keras(model, layers))
    raise ValueError(f"unknown format {fmt!r}, expecting one of {', '.join(FORMATS)}")


def write(fmt: str, path: str | Path, model, weights, biases) -> None:
    config = checkpoint.model_config(model)
    if fmt == "checkpoint":
        checkpoint.save(path, model, weights, biases)
    elif fmt == "torch":
        checkpoint.write_tensors(path, torch.to_state_dict(model, weights, biases), config)
    elif fmt == "keras":
        tensors = {f"layer{k}/{n}": a for k, layer in enumerate(keras.to_keras(model, weights, biases))
                   for n, a in zip(("kernel", "recurrent_kernel", "bias"), layer)}
        checkpoint.write_tensors(path, tensors, config)
    elif fmt == "onnx":
        from .onnx_model import save

        if Path(path).suffix != ".onnx":
            raise ValueError(f"an ONNX file must end in .onnx, got {Path(path).name!r}")
        save(path, model, weights, biases)
    elif fmt == "tf":
        tf_bundle.write(path, tf.to_tf(model, weights, biases))
    else:
        raise ValueError(f"unknown format {fmt!r}, expecting one of {', '.join(FORMATS)}")
