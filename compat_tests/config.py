"""A test configuration (one network + one set of inputs) and the arrays it stands for: data only (running a
config is ``compat_tests.run``'s).

``RNNConfig`` is plain data: it round-trips through JSON and through a command line, so every failure
(Hypothesis example, report row) can be re-run from what it prints. ``make_case`` turns it into arrays,
drawn from ``seed`` in float64 and rounded once to the config's dtype; the float64 ground truth runs on
those same rounded values, so a peer is judged only on its arithmetic, never on its input rounding.
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import asdict, dataclass, fields, replace
from typing import NamedTuple

import numpy as np

import reference
from reference.formats.files import load_json
from reference.layout import BIAS_MODES
from reference.model import DIRECTIONS
from reference.modes import MODES

MODE_NAMES = tuple(MODES)  # relu, tanh, lstm, gru, classic_gru
DTYPE_NAMES = ("float16", "float32", "float64")
INPUT_MODES = ("linear_input", "skip_input")  # resolved: a config never says "auto_select"
BIAS_MODE_NAMES = tuple(BIAS_MODES)  # double (the default), single_inp, single_rec, none
# Fields added after configs were first written down (reports, captures, commands): a config at their default
# is written without them (``to_dict``), so its JSON, and the ids made from it, stay as they were.
LATER_FIELDS = {"bias_mode": "double", "padding_fill": 0.0, "cell_clip": None, "packed": False}
# JSON has no NaN or infinities: a padding_fill or cell_clip bound that is one is written as its name
NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _from_json_number(value: object) -> object:
    """A number as JSON carries it: a name of :data:`NONFINITE` as its value, anything else as it is."""
    return NONFINITE.get(value, value) if isinstance(value, str) else value


def _json_number(value: float) -> float | str:
    """``value`` for JSON: itself where finite, else its name in :data:`NONFINITE`."""
    return value if math.isfinite(value) else "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"


def _integer(name: str, value: object, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int >= {minimum}, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value}")
    return int(value)


def json_loads(text: str | bytes, what: str = "the JSON text") -> object:
    """``reference.formats.files.load_json``: JSON refusing an object that names a key twice (``json`` keeps the
    last silently, so ``{"mode": "gru", "mode": "lstm"}`` would run an LSTM) and nesting beyond
    ``MAX_JSON_DEPTH``: a ``ValueError`` naming ``what``, as malformed JSON is."""
    return load_json(text, what)


@dataclass(frozen=True)
class RNNConfig:
    """A network and its inputs. ``lengths=None``: every sequence is ``seq_len`` long; ``bias_mode`` is the
    model's (``reference.layout.BIAS_MODES``); ``padding_fill`` the output past each length (cuDNN's
    ``paddingFill``: with ``lengths`` only; NaN and the infinities also as ``"nan"``, ``"inf"``, ``"-inf"``);
    ``cell_clip`` the LSTM's ``(lclip, rclip)`` (``reference.checks.cell_clip``; an infinity also by name);
    ``packed``: the sequences go in and come out packed (``reference.PackedSequence``, cuDNN's
    ``SEQ_MAJOR_PACKED``): time-major, lengths non-increasing, no fill. The case's arrays stay padded; running
    a packed config packs them at the call and unpacks the results (zeros past each length)."""

    mode: str
    num_layers: int = 1
    num_units: int = 4
    input_size: int = 3
    direction: str = "unidirectional"
    input_mode: str = "linear_input"
    num_proj: int | None = None
    seq_len: int = 4
    batch: int = 2
    lengths: tuple[int, ...] | None = None
    time_major: bool = True
    dtype: str = "float64"
    weight_scale: float = 1.0
    initial_state: bool = True
    seed: int = 0
    bias_mode: str = "double"
    padding_fill: float = 0.0
    cell_clip: tuple[float, float] | None = None
    packed: bool = False

    def __post_init__(self) -> None:
        """Every field checked (and normalised to plain Python values, so the JSON round trip is exact):
        a config also comes from a command line, a grid file or a report, and a bad one must fail here,
        naming the field, rather than deep inside NumPy."""
        for name, allowed in (("mode", MODE_NAMES), ("dtype", DTYPE_NAMES), ("direction", DIRECTIONS),
                              ("input_mode", INPUT_MODES), ("bias_mode", BIAS_MODE_NAMES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        for name in ("num_layers", "num_units", "input_size", "seq_len", "batch"):
            self._set(name, _integer(name, getattr(self, name), minimum=1))
        self._set("seed", _integer("seed", self.seed, minimum=0))
        for name in ("time_major", "initial_state", "packed"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
            self._set(name, bool(getattr(self, name)))
        scale = self.weight_scale
        if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real):
            raise TypeError(f"weight_scale must be a number, got {scale!r}")
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"weight_scale must be finite and > 0, got {scale!r}")
        self._set("weight_scale", float(scale))
        if self.num_proj is not None:
            self._set("num_proj", _integer("num_proj", self.num_proj, minimum=1))
            if self.mode != "lstm" or self.num_proj >= self.num_units:
                raise ValueError(f"num_proj needs mode 'lstm' and 1 <= num_proj < num_units = {self.num_units}, "
                                 f"got {self.num_proj} for mode {self.mode!r}")
        if self.input_mode == "skip_input" and self.input_size != self.num_units:
            raise ValueError(f"input_mode 'skip_input' needs input_size == num_units = {self.num_units}, "
                             f"got {self.input_size}")
        if self.lengths is not None:
            if isinstance(self.lengths, (str, bytes)) or not isinstance(self.lengths, (list, tuple, np.ndarray)):
                raise TypeError(f"lengths must be None or a list of batch={self.batch} ints, got {self.lengths!r}")
            self._set("lengths", tuple(_integer("each of lengths", n, minimum=1) for n in self.lengths))
            if len(self.lengths) != self.batch or max(self.lengths) > self.seq_len:
                raise ValueError(f"lengths must have batch={self.batch} entries, each in 1..seq_len = "
                                 f"1..{self.seq_len}, got {self.lengths}")
        fill = _from_json_number(self.padding_fill)
        if isinstance(fill, str):
            raise ValueError(f"padding_fill must be a number or one of {tuple(NONFINITE)}, got {fill!r}")
        self._set("padding_fill", float(reference.checks.padding_fill(fill, np.dtype(self.dtype))))
        if self.cell_clip is not None:
            if self.mode != "lstm":
                raise ValueError(f"cell_clip is an LSTM's (its cell state clipped), got one for mode {self.mode!r}")
            clip = self.cell_clip
            if isinstance(clip, (list, tuple)):
                clip = tuple(_from_json_number(v) for v in clip)
            self._set("cell_clip", reference.checks.cell_clip(clip))
        if self.lengths is None and self.fills_padding:
            raise ValueError(f"padding_fill is written past each sequence's length: give lengths too, or leave "
                             f"it 0.0 (got {self.padding_fill!r} without lengths)")
        if self.packed:
            if not self.time_major or self.fills_padding:
                raise ValueError("packed needs time_major and no padding_fill (cuDNN's packed layout is "
                                 "sequence-major and has no padding)")
            if self.lengths is not None and list(self.lengths) != sorted(self.lengths, reverse=True):
                raise ValueError(f"packed needs lengths sorted by decreasing length (as cuDNN's packed layout "
                                 f"holds them), got {self.lengths}")

    @property
    def fills_padding(self) -> bool:
        """Whether ``padding_fill`` is other than the default +0.0 (-0.0 is another fill: its bits differ)."""
        return reference.checks.fills(self.padding_fill)

    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)

    @property
    def num_dirs(self) -> int:
        return 2 if self.direction == "bidirectional" else 1

    @property
    def state_width(self) -> int:
        return self.num_proj or self.num_units

    @property
    def has_cell_state(self) -> bool:
        return MODES[self.mode].has_cell_state

    def with_(self, **changes: object) -> "RNNConfig":
        return replace(self, **changes)

    def model(self, dtype: str | None = None, dropout: float = 0.0, seed: int = 0, *, models: dict | None = None,
              **options) -> reference.model._CudnnRNN:
        """The reference model of this config (in ``dtype``, default the config's), or with ``models`` (e.g.
        ``cudnn_backend.MODELS``) and that backend's ``options`` another backend's."""
        if self.cell_clip is not None:
            options = {**options, "cell_clip": self.cell_clip}
        return reference.make_model(self.mode, self.num_layers, self.num_units, self.input_size, self.input_mode,
                                    self.direction, np.dtype(dtype or self.dtype), dropout, seed, self.num_proj,
                                    models=models, bias_mode=self.bias_mode, **options)

    # ---- reproduction -----------------------------------------------------------------------------

    def to_dict(self) -> dict:
        """The config's fields as JSON values, without the :data:`LATER_FIELDS` at their defaults (so a
        config that uses none of them is written as before they were added)."""
        out = {k: v for k, v in asdict(self).items()
               if k != "padding_fill" and (k not in LATER_FIELDS or LATER_FIELDS[k] != v)}
        if self.cell_clip is not None:
            out["cell_clip"] = [_json_number(v) for v in self.cell_clip]
        if self.fills_padding:
            out["padding_fill"] = _json_number(self.padding_fill)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, what: str = "an RNNConfig") -> "RNNConfig":
        return cls.from_dict(json_loads(text, what))

    @classmethod
    def from_dict(cls, data: dict) -> "RNNConfig":
        """A config from its JSON object (as ``to_json`` writes it, already parsed)."""
        if not isinstance(data, dict):
            raise TypeError(f"an RNNConfig must be a JSON object of its fields, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if "math_type" in unknown:  # the math is the backend's: one config, judged under each math by its peer
            raise ValueError("math_type is not an RNNConfig field: the math type is the backend's, so name the peer "
                             "that computes under it (TF32: reference-tf32, cudnn-tf32, torch-cuda-tf32; "
                             "rnn-compat peers lists them)")
        if unknown:
            raise ValueError(f"unknown RNNConfig fields: {sorted(unknown)}")
        if "mode" not in data:
            raise ValueError(f"an RNNConfig needs at least 'mode' (one of {MODE_NAMES})")
        return cls(**data)

    def short(self, with_dtype: bool = True) -> str:
        """A compact human-readable label."""
        parts = [self.mode, f"L{self.num_layers}", f"H{self.num_units}", f"I{self.input_size}",
                 "bi" if self.num_dirs == 2 else "uni", f"T{self.seq_len}", f"B{self.batch}"]
        if with_dtype:
            parts.append(self.dtype)
        if self.weight_scale != 1.0:
            parts.append(f"scale{self.weight_scale:g}")
        if self.input_mode != "linear_input":
            parts.append(self.input_mode)
        if self.num_proj:
            parts.append(f"P{self.num_proj}")
        if self.bias_mode != "double":
            parts.append(f"bias={self.bias_mode}")
        if self.lengths is not None:
            parts.append("len=" + "/".join(map(str, self.lengths)))
        if self.fills_padding:
            parts.append(f"fill={self.padding_fill:g}")
        if self.cell_clip is not None:
            parts.append(f"clip={self.cell_clip[0]:g}/{self.cell_clip[1]:g}")
        if not self.time_major:
            parts.append("batch-major")
        if self.packed:
            parts.append("packed")
        return " ".join(parts)


class Case(NamedTuple):
    """The arrays of a config, in the config's dtype and layout (``h0``/``c0`` may be ``None``).

    ``dy``, ``dh``, ``dc``: the gradients of the outputs a backward pass starts from (``dc`` LSTM only).
    """

    weights: list[np.ndarray]
    biases: list[np.ndarray]
    x: np.ndarray
    h0: np.ndarray | None
    c0: np.ndarray | None
    lengths: np.ndarray | None
    dy: np.ndarray | None = None
    dh: np.ndarray | None = None
    dc: np.ndarray | None = None

    def astype(self, dtype: object) -> "Case":
        """The same values in another float dtype (exact when widening)."""
        return self.map(lambda a: a.astype(dtype))

    def map(self, f) -> "Case":
        """Apply ``f`` to every float array (weights, biases, inputs, states, upstream gradients)."""
        g = (lambda a: None if a is None else f(a))
        return Case([g(w) for w in self.weights], [g(b) for b in self.biases], g(self.x), g(self.h0), g(self.c0),
                    self.lengths, g(self.dy), g(self.dh), g(self.dc))


def make_case(cfg: RNNConfig) -> Case:
    """Weights ~ U(-s, s) with s = weight_scale / sqrt(num_units) (PyTorch's init at scale 1), inputs,
    initial states and output gradients ~ U(-1, 1); all drawn from ``cfg.seed``, rounded to ``cfg.dtype``."""
    rng = np.random.default_rng(cfg.seed)
    dtype = np.dtype(cfg.dtype)
    model = cfg.model("float64")
    w_shapes, b_shapes = model.canonical_shapes()
    s = cfg.weight_scale / np.sqrt(cfg.num_units)
    weights = [rng.uniform(-s, s, shape).astype(dtype) for shape in w_shapes]
    biases = [rng.uniform(-s, s, shape).astype(dtype) for shape in b_shapes]
    T, B, LD = cfg.seq_len, cfg.batch, cfg.num_layers * cfg.num_dirs
    lead = (T, B) if cfg.time_major else (B, T)
    state_lead = (LD, B) if cfg.time_major else (B, LD)
    x = rng.uniform(-1, 1, (*lead, cfg.input_size)).astype(dtype)
    h0 = c0 = None
    if cfg.initial_state:
        h0 = rng.uniform(-1, 1, (*state_lead, cfg.state_width)).astype(dtype)
        if cfg.has_cell_state:
            c0 = rng.uniform(-1, 1, (*state_lead, cfg.num_units)).astype(dtype)
    lengths = None if cfg.lengths is None else np.array(cfg.lengths, dtype=np.int64)
    upstream = np.random.default_rng([cfg.seed, 1])  # its own stream: the forward arrays stay as they are
    dy = upstream.uniform(-1, 1, (*lead, cfg.num_dirs * cfg.state_width)).astype(dtype)
    dh = upstream.uniform(-1, 1, (*state_lead, cfg.state_width)).astype(dtype)
    dc = upstream.uniform(-1, 1, (*state_lead, cfg.num_units)).astype(dtype) if cfg.has_cell_state else None
    return Case(weights, biases, x, h0, c0, lengths, dy, dh, dc)


class Outputs(NamedTuple):
    """What a forward pass returns, as NumPy arrays in the config's layout (``output_c`` None unless LSTM)."""

    output: np.ndarray
    output_h: np.ndarray
    output_c: np.ndarray | None


class GradOutputs(NamedTuple):
    """What a backward pass returns, as NumPy arrays in the config's layout and dtype: the gradients of
    the input, the initial states (``d_input_c`` None unless LSTM) and the parameters, packed in the
    reference's opaque layout (``d_params``; canonical tensors are the common currency, so peers pack theirs
    with ``RNNConfig.model().canonical_to_params``)."""

    d_input: np.ndarray
    d_input_h: np.ndarray
    d_input_c: np.ndarray | None
    d_params: np.ndarray
