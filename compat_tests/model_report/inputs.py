"""The inputs a model report runs the model on: the user's (``--input x.npy [--lengths lengths.npy]
[--batch-major]``), or drawn for the model (:func:`drawn`: standard normal times ``--input-scale``, several
seeds, a batch of one and a larger one, a short and a long sequence). Each is kept time-major in the run's
folder (``inputs.npz``), so every unit, in any process, and a resumed run read the same values."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from reference.formats.files import replacing

FILE = "inputs.npz"
STEPS = (10, 1000)  # the drawn sequences' lengths: a short and a long one
BATCHES = (4, 1)  # the drawn batch sizes: a batch, whose samples the invariance check runs alone, and one sample


class Input(NamedTuple):
    """One input: ``label`` (what the report calls it), ``x`` time-major ``[T, B, input_size]`` (float64 where
    drawn, the file's dtype where given), ``lengths`` ``[B]`` int64 or ``None``, ``seed`` (drawn) or ``None``."""

    label: str
    x: np.ndarray
    lengths: np.ndarray | None
    seed: int | None


def drawn(input_size: int, scale: float, steps: tuple[int, ...] = STEPS, batches: tuple[int, ...] = BATCHES) \
        -> list[Input]:
    """Standard normal inputs times ``scale``, one per (T, B) of ``steps`` x ``batches``, each of its own seed."""
    inputs = []
    for T in steps:
        for B in batches:
            seed = len(inputs)
            x = np.random.default_rng(seed).standard_normal((T, B, input_size)) * scale
            inputs.append(Input(f"drawn: seed {seed}, T={T}, B={B}", x, None, seed))
    return inputs


def given(path: str, lengths_path: str | None, batch_major: bool, input_size: int, dtype: np.dtype) -> Input:
    """The user's input (``--input``, ``--lengths``, ``--batch-major``) checked against the model: three axes,
    ``input_size`` wide, a float dtype (``dtype``, the model's, or float64); lengths ``[B]`` integers in 1..T.
    A ``ValueError``/``TypeError`` naming the option and what was expected, before any work."""
    from ..interop.state_files import read_array

    x = read_array(path, "--input")
    layout = "[B, T, input_size] (--batch-major)" if batch_major else "[T, B, input_size]"
    if x.ndim != 3:
        raise ValueError(f"--input {path}: expected {layout}, got an array of shape {list(x.shape)}")
    if x.dtype.kind != "f":
        raise TypeError(f"--input {path}: expected floating-point values, got {x.dtype}")
    if x.dtype not in (dtype, np.dtype(np.float64)):
        raise TypeError(f"--input {path} holds {x.dtype}: the model is {dtype} (or give float64)")
    if x.shape[2] != input_size:
        raise ValueError(f"--input {path} is {x.shape[2]} wide: the model's input size is {input_size} ({layout})")
    if 0 in x.shape:
        raise ValueError(f"--input {path} is empty (shape {list(x.shape)})")
    if not np.isfinite(x).all():
        raise ValueError(f"--input {path} holds non-finite values: a model report judges finite inputs")
    x = np.swapaxes(x, 0, 1) if batch_major else x
    T, B = x.shape[:2]
    lengths = None
    if lengths_path is not None:
        lengths = read_array(lengths_path, "--lengths")
        if lengths.dtype.kind not in "iu" or lengths.shape != (B,):
            raise ValueError(f"--lengths {lengths_path}: expected {B} integers (one per sequence of --input), got "
                             f"{lengths.dtype} of shape {list(lengths.shape)}")
        if lengths.min() < 1 or lengths.max() > T:
            raise ValueError(f"--lengths {lengths_path}: each length must be in 1..{T} (the input's T), got "
                             f"{int(lengths.min())}..{int(lengths.max())}")
        lengths = lengths.astype(np.int64)
    label = f"{Path(path).name}" + (f" with {Path(lengths_path).name}" if lengths_path else "") + f", T={T}, B={B}"
    return Input(label, np.ascontiguousarray(x), lengths, None)


def save(folder: Path, inputs: list[Input], layer_inputs: dict | None = None) -> None:
    """The inputs into ``folder/inputs.npz`` (written whole or not at all); ``layer_inputs``: a chain's, ``{(k,
    layer): x}``, what its layer ``layer`` reads of input ``k`` (the float64 truth of the layers before)."""
    arrays = {f"x{k}": i.x for k, i in enumerate(inputs)}
    arrays.update({f"lengths{k}": i.lengths for k, i in enumerate(inputs) if i.lengths is not None})
    arrays.update({f"x{k}_l{layer}": x for (k, layer), x in (layer_inputs or {}).items()})
    with replacing(folder / FILE) as partial, open(partial, "wb") as f:
        np.savez(f, **arrays)


def load(folder: Path, k: int, layer: int = 0) -> tuple[np.ndarray, np.ndarray | None]:
    """Input ``k``'s ``(x, lengths)`` from ``folder/inputs.npz`` (never unpickled); of a chain's ``layer`` > 0,
    what that layer reads."""
    name = f"x{k}" if layer == 0 else f"x{k}_l{layer}"
    with np.load(folder / FILE, allow_pickle=False) as held:
        if name not in held.files:
            raise ValueError(f"{folder / FILE} holds no input {k}" + (f" of layer {layer}" if layer else "") +
                             ": the run's plan and its inputs disagree")
        return held[name], held[f"lengths{k}"] if f"lengths{k}" in held.files else None
