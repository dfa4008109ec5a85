"""cuDNN's own published numbers: the checksums NVIDIA's cuDNN RNN sample printed on GPUs, with the sample's
configuration and fills, as data (``compat_tests/data/cudnn_rnn_sample.json``, which names its sources).

The sample (``RNN/RNN_example.cu``) runs a 2-layer, 512-unit, unidirectional, linear-input, double-bias
network over T = 20 steps of a batch of 64 in float32, every matrix of every pseudo-layer filled with
1 / (its element count), every bias, input, initial state and output gradient with 1, ``dw`` zeroed before
the weights' backward pass (which adds into it), and prints plain double sums of ``y``, ``hy``, ``cy``,
``dx``, ``dhx``, ``dcx`` and the whole ``dw`` buffer. Its truth depends on no decision of this project:
uniform matrices read the same in any layout. What it does pin down, on real cuDNN: the cell equations (the
GRU's variant among them), the double bias, backpropagation through time.

Here: the sample as an ``RNNConfig`` (:func:`config`) and its arrays as a ``Case`` (:func:`case`), a run's
results (:func:`run`) and their checksums (:func:`checksums`), the published runs (:func:`runs`) and how far
apart they are (:func:`drift`). The bounds are the policy's (``compat_tests.judge.tolerances.published_rtol``).
The data file is read on first use, never at import.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from reference.formats.files import load_json

from ..config import Case, GradOutputs, Outputs, RNNConfig

DATA = Path(__file__).resolve().parent.parent / "data" / "cudnn_rnn_sample.json"
# The sample's checksums by the name it prints them under -> the policy's quantity (and the result's field).
CHECKSUMS: dict[str, str] = {"y": "output", "hy": "output_h", "cy": "output_c", "dx": "d_input",
                             "dhx": "d_input_h", "dcx": "d_input_c", "dw": "d_params"}
FORWARD_CHECKSUMS = ("y", "hy", "cy")
DTYPES = ("float32", "float64")  # the sample's own, and the float64 truth's


@dataclass(frozen=True)
class Run:
    """One published run of the sample: where it ran, where it was published, and its checksums
    (``checksums[mode][name]``, ``name`` one of :data:`CHECKSUMS`; a run may print some modes only)."""

    name: str
    device: str
    software: str
    source: str
    checksums: Mapping[str, Mapping[str, float]]


@functools.lru_cache(maxsize=None)
def _data(path: Path = DATA) -> dict:
    data = load_json(path.read_bytes(), str(path))
    problem = _problem(data)
    if problem:
        raise ValueError(f"{path}: {problem}")
    return data


def _problem(data) -> str | None:
    """What in the data file's structure the functions below could not read, or ``None``."""
    if not isinstance(data, dict) or not {"configuration", "runs"} <= set(data):
        return "must be an object with 'configuration' and 'runs'"
    modes = data["configuration"].get("modes")
    if not isinstance(modes, dict) or not modes:
        return "configuration.modes must name the sample's modes"
    runs = data["runs"]
    if not isinstance(runs, list) or not runs:
        return "runs must be a non-empty list"
    for k, run in enumerate(runs):
        if not isinstance(run, dict) or not {"name", "device", "software", "source", "checksums"} <= set(run):
            return f"runs[{k}] must have name, device, software, source and checksums"
        for mode, sums in run["checksums"].items():
            if mode not in modes or not isinstance(sums, dict) or not set(sums) <= set(CHECKSUMS) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v != 0
                    for v in sums.values()):
                return f"runs[{k}].checksums[{mode!r}] must map names among {list(CHECKSUMS)} to non-zero numbers"
    if set(runs[0]["checksums"]) != set(modes):
        return "runs[0] (the sample's own golden files) must hold every mode"
    return None


def modes() -> tuple[str, ...]:
    """The sample's cell modes (``relu``, ``tanh``, ``lstm``, ``gru``)."""
    return tuple(_data()["configuration"]["modes"])


def runs() -> tuple[Run, ...]:
    """The published runs, the sample's own golden files (the M40's) first."""
    return tuple(Run(r["name"], r["device"], r["software"], r["source"], r["checksums"]) for r in _data()["runs"])


def golden(mode: str) -> dict[str, float]:
    """The sample's own checksums of ``mode`` (its golden files, computed on an M40)."""
    return dict(runs()[0].checksums[mode])


def drift(mode: str) -> dict[str, float]:
    """Per checksum name, the largest relative difference ``(later - golden) / |golden|`` of a later published
    run of ``mode`` from the golden one: how far float32 cuDNN moves between GPUs and versions. Empty where
    no later run printed ``mode``."""
    out: dict[str, float] = {}
    for run in runs()[1:]:
        for name, delta in relative(run.checksums.get(mode, {}), golden(mode)).items():
            if abs(delta) >= abs(out.get(name, 0.0)):
                out[name] = delta
    return out


def config(mode: str, dtype: str = "float32") -> RNNConfig:
    """The sample's configuration for ``mode`` in ``dtype`` (its own float32, or float64 for the truth)."""
    if mode not in modes():
        raise ValueError(f"the published sample runs the modes {modes()}, got {mode!r}")
    if dtype not in DTYPES:
        raise ValueError(f"the published sample is compared in {DTYPES}, got {dtype!r}")
    c = _data()["configuration"]
    return RNNConfig(mode, num_layers=c["num_layers"], num_units=c["num_units"], input_size=c["input_size"],
                     direction=c["direction"], input_mode=c["input_mode"], seq_len=c["seq_len"], batch=c["batch"],
                     dtype=dtype)


def is_sample(cfg: RNNConfig) -> bool:
    """Whether ``cfg`` is the sample's configuration of its mode, in one of :data:`DTYPES`."""
    return cfg.mode in modes() and cfg.dtype in DTYPES and cfg == config(cfg.mode, cfg.dtype)


def case(cfg: RNNConfig) -> Case:
    """The sample's arrays for ``cfg`` (the sample's configuration, :func:`is_sample`), in ``cfg.dtype``,
    time-major: every canonical matrix filled with 1 / (its element count) (computed in double and rounded
    once, as the sample's ``initGPUData``), every bias with 1; ``x [T, B, I]``, ``h0``/``c0 [L*D, B, H]`` and
    the output gradients ``dy [T, B, D*H]``, ``dh``/``dc [L*D, B, H]`` all 1."""
    if not is_sample(cfg):
        raise ValueError(f"not the published sample's configuration: {cfg.short()}")
    dtype = np.dtype(cfg.dtype)
    w_shapes, b_shapes = cfg.model("float64").canonical_shapes()
    weights = [np.full(shape, 1.0 / math.prod(shape)).astype(dtype) for shape in w_shapes]
    biases = [np.ones(shape, dtype) for shape in b_shapes]
    T, B, LD, H = cfg.seq_len, cfg.batch, cfg.num_layers * cfg.num_dirs, cfg.state_width
    ones = functools.partial(np.ones, dtype=dtype)
    c = ones((LD, B, cfg.num_units)) if cfg.has_cell_state else None
    return Case(weights, biases, ones((T, B, cfg.input_size)), ones((LD, B, H)), c, None,
                ones((T, B, cfg.num_dirs * H)), ones((LD, B, H)), None if c is None else c.copy())


def run(cfg: RNNConfig, peer=None) -> tuple[Outputs, GradOutputs | None]:
    """The sample's results for ``cfg``: the float64 truth of ``reference.spec`` (``peer`` None; ``cfg`` in
    float64), or ``peer``'s forward pass and, where it has one, its gradients (``None`` without)."""
    from ..run import ground_truth, ground_truth_backward

    arrays = case(cfg)
    if peer is None:
        if cfg.dtype != "float64":
            raise ValueError(f"the truth runs in float64, got {cfg.dtype}")
        return ground_truth(cfg, arrays), ground_truth_backward(cfg, arrays)
    with np.errstate(all="ignore"):
        forward = peer.forward(cfg, arrays)
        gradients = peer.backward(cfg, arrays) if peer.capabilities.backward else None
    return forward, gradients


def checksums(forward: Outputs, gradients: GradOutputs | None = None) -> dict[str, float]:
    """The sample's checksums of a run's results: each array's elements summed in double, under the name the
    sample prints it by (``y`` ... ``dw``, :data:`CHECKSUMS`); the states the mode lacks, and the gradients of
    a run without them, are left out. ``dw`` sums the whole weight-gradient buffer."""
    arrays = {**forward._asdict(), **({} if gradients is None else gradients._asdict())}
    return {name: float(np.sum(np.asarray(arrays[field], dtype=np.float64)))
            for name, field in CHECKSUMS.items() if arrays.get(field) is not None}


def relative(got: Mapping[str, float], want: Mapping[str, float]) -> dict[str, float]:
    """``(got - want) / |want|`` for every checksum name both hold."""
    return {name: (got[name] - want[name]) / abs(want[name]) for name in want if name in got}
