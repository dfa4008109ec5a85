"""A model report's own files in its run folder, written before the first unit runs: ``run.json`` (``kind``
``"model"``: the model files as read, with their reader options and digests; the architecture; the inputs'
labels; the weights comparison of each later file with the first; the backends considered; the planned unit
ids; the environment and the policy) and ``weights.npz`` (every file's canonical weights and biases, which the
units read: a unit never reads a user's file again but to run it in its own framework)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from reference.formats.files import load_json, replacing

from ..report.run_plan import PLAN

KIND = "model"
WEIGHTS = "weights.npz"
FILES = (WEIGHTS, "inputs.npz")  # the folder's files of a model run, beside a report run's


def write(out: Path, plan: dict) -> None:
    """``run.json`` of a model run (whole or not at all)."""
    out.mkdir(parents=True, exist_ok=True)
    with replacing(out / PLAN) as partial:
        partial.write_text(json.dumps({"kind": KIND, **plan}, indent=1, sort_keys=True) + "\n")


def is_model_run(out: Path) -> bool:
    """Whether ``out`` holds a model report's plan."""
    try:
        plan = load_json((out / PLAN).read_bytes(), str(out / PLAN))
    except (OSError, ValueError):
        return False
    return isinstance(plan, dict) and plan.get("kind") == KIND


PLAN_TYPES = {"files": list, "architecture": dict, "inputs": list, "weights": list, "backends": list, "units": list,
              "environment": dict, "policy": dict, "skipped": list}


def read(out: Path) -> dict:
    """The checked plan of the model run in ``out`` (a ``ValueError`` naming the first field not as written)."""
    path = out / PLAN
    plan = load_json(path.read_bytes(), str(path))
    if not isinstance(plan, dict) or plan.get("kind") != KIND:
        raise ValueError(f"{path}: not a model report's plan (kind {KIND!r})")
    for key, kind in PLAN_TYPES.items():
        if not isinstance(plan.get(key), kind):
            raise ValueError(f"{path}: {key} must be a {kind.__name__} (written by another version of rnn-compat, or "
                             f"edited?)")
    for n, f in enumerate(plan["files"]):
        if not (isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("format"), str)
                and isinstance(f.get("options"), dict)):
            raise ValueError(f"{path}: files[{n}] must hold path, format and options")
    return plan


def save_weights(out: Path, files: list) -> None:
    """Every model file's canonical weights and biases (a chain's, layer by layer) into ``out/weights.npz``."""
    arrays = {}
    for k, f in enumerate(files):
        if f.unread:
            continue
        for layer, (_, weights, biases) in enumerate(f.layers()):
            arrays.update({f"file{k}_l{layer}_w{i}": np.asarray(w) for i, w in enumerate(weights)})
            arrays.update({f"file{k}_l{layer}_b{i}": np.asarray(b) for i, b in enumerate(biases)})
    with replacing(out / WEIGHTS) as partial, open(partial, "wb") as stream:
        np.savez(stream, **arrays)


def load_weights(out: Path, k: int, layer: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Model file ``k``'s canonical ``(weights, biases)`` (of a chain: of its layer ``layer``) from
    ``out/weights.npz`` (never unpickled)."""
    with np.load(out / WEIGHTS, allow_pickle=False) as held:
        def listed(letter: str) -> list[np.ndarray]:
            found, i = [], 0
            while f"file{k}_l{layer}_{letter}{i}" in held.files:
                found.append(held[f"file{k}_l{layer}_{letter}{i}"])
                i += 1
            return found

        weights = listed("w")
        if not weights:
            raise ValueError(f"{out / WEIGHTS} holds no weights of model file {k}, layer {layer}: the plan and the "
                             f"weights disagree")
        return weights, listed("b")
