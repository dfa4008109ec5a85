"""``rnn-compat convert``: weights between formats, through the canonical tensors.

Formats (files): ``checkpoint`` (TF names + config, ``.safetensors``/``.npz``), ``torch`` (a ``state_dict``
saved with safetensors or ``numpy.savez``: PyTorch's ``.pt`` pickles are refused), ``keras`` (per
pseudo-layer ``layer{k}/kernel``, ``layer{k}/recurrent_kernel``, ``layer{k}/bias`` in a safetensors or
``.npz`` file), ``onnx`` (an ``.onnx`` graph) and ``tf`` (a TensorFlow checkpoint: the tensor bundle
``PREFIX.index`` + ``PREFIX.data-*`` that ``tf.train.Saver`` writes and restores, with the canonical names
of ``CudnnOpaqueParamsSaveable``). Files this tool writes carry the model config, but for a ``tf``
checkpoint, which has no place for it; a foreign ``torch`` file gets its config from its shapes (plus
``--mode`` for relu/tanh), a foreign ``keras`` file needs the config options, and a ``tf`` checkpoint needs
them but for its dtype and variable scope, which it tells.
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
    """``(model, weights, biases)`` from a file of format ``fmt``."""
    overrides = overrides or {}
    if fmt == "checkpoint":
        ck = checkpoint.load(path)
        return ck.model, ck.weights, ck.biases
    if fmt == "onnx":
        from .onnx_model import import_model

        return import_model(path)
    if fmt == "tf":
        return _read_tf_checkpoint(path, overrides)
    tensors, found = checkpoint.read_tensors(path)
    if fmt == "torch":
        if found is None:
            found = torch.config_from_state_dict(tensors, overrides.get("rnn_mode"))
        model = checkpoint.model_from_config(_config(found, overrides, str(path)))
        return (model, *torch.from_state_dict(model, tensors))
    if fmt == "keras":
        model = checkpoint.model_from_config(_config(found, overrides, str(path)))
        count = model.num_layers * model.num_dirs
        try:
            layers = [[tensors[f"layer{k}/{n}"] for n in ("kernel", "recurrent_kernel", "bias")] for k in range(count)]
        except KeyError as exc:
            raise ValueError(f"{path}: missing Keras weight {exc}") from None
        return (model, *keras.from_keras(model, layers))
    raise ValueError(f"unknown format {fmt!r}, expecting one of {', '.join(FORMATS)}")


def _read_tf_checkpoint(path: str | Path, overrides: dict):
    """A TensorFlow checkpoint: the model options from ``overrides``, the dtype and the variable scope (unless
    ``overrides`` give them) from the checkpoint; its other tensors (``global_step``, optimizer slots) are
    left alone, as TensorFlow's own restore of a subset does."""
    entries = tf_bundle.entries(path)[0]
    probe = checkpoint.model_from_config(_config({"dtype": "float64"}, overrides, str(path)))  # names only
    scope = overrides.get("scope") or _tf_scope(probe, entries, path)
    names = [n for n in tf.expected_shapes(probe, scope) if n in entries]
    dtypes = sorted({entries[n].describe_dtype() for n in names})
    if len(dtypes) > 1:
        raise ValueError(f"{path}: the model's tensors are of several dtypes, {dtypes}")
    model = checkpoint.model_from_config(_config({"dtype": dtypes[0] if dtypes else "float32"}, overrides, str(path)))
    return (model, *tf.from_tf(model, tf_bundle.read(path, names), scope))


def _tf_scope(model, entries: dict, path) -> str | None:
    """The variable scope under which ``entries`` hold ``model``'s first tensor (``None``: no scope)."""
    anchor = next(iter(tf.expected_shapes(model)))
    scopes = {name[: -len(anchor) - 1] for name in entries if name.endswith("/" + anchor)}
    scopes |= {None} if anchor in entries else set()
    if len(scopes) == 1:
        return scopes.pop()
    if not scopes:
        raise ValueError(f"{path} holds no {anchor!r} under any scope: are the mode, direction and layers right? "
                         f"It holds e.g. {sorted(entries)[:4]}")
    raise ValueError(f"{path} holds the model under several scopes {sorted(s or '' for s in scopes)}: "
                     f"pick one with --scope")


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
