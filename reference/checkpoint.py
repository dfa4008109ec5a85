"""Checkpoints: the canonical tensors under TensorFlow's names (``reference.formats.tf``) plus the model's
configuration, in a safetensors or ``.npz`` file, so ``rnn-compat infer`` needs nothing else. Files without
our config (TF-named tensors saved elsewhere, TensorFlow's own checkpoints) load too: their names and
shapes tell the config (but relu from tanh).

Nothing is unpickled: ``.npz`` files are opened with ``allow_pickle=False`` and files that are pickles (a
PyTorch ``.pt``/``.bin``, a ``.pkl``) are refused with an error that says how to save them instead.
"""

from __future__ import annotations

import io
import json
import math
import tokenize
import zipfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from .formats import safetensors, tf, tf_bundle
from .formats.canonical import check_fits, check_mapping
from .formats.files import quiet_escapes, replacing
from .precision import storage_dtype

FORMAT = "cudnn-rnn-compat/tf-canonical"
VERSION = 1
CONFIG_KEY = "cudnn_rnn_compat"  # safetensors metadata key; in .npz files: an array "__cudnn_rnn_compat__"
NPZ_CONFIG = "__cudnn_rnn_compat__"
SUFFIXES = (".safetensors", ".npz")


@dataclass
class Checkpoint:
    """A restored checkpoint: the model, its canonical weights and biases, and its config."""

    model: object
    weights: list[np.ndarray]
    biases: list[np.ndarray]
    config: dict

    def params(self) -> np.ndarray:
        return self.model.canonical_to_params(self.weights, self.biases)


CONFIG_FIELDS = ("rnn_mode", "num_layers", "num_units", "input_size", "input_mode", "direction", "num_proj", "dtype")


def model_config(model) -> dict:
    """The config a checkpoint carries: ``CONFIG_FIELDS`` as the model's attributes (its dtype by name)."""
    fields = {name: getattr(model, name) for name in CONFIG_FIELDS}
    return {"format": FORMAT, "version": VERSION, **fields, "dtype": model.dtype.name}


CONFIG_DEFAULTS = {"format": FORMAT, "version": VERSION, "input_mode": "linear_input", "direction": "unidirectional",
                   "num_proj": None}


def complete_config(fields: dict) -> dict:
    """A config from what a foreign file tells (``fields``), the options it cannot tell at their defaults."""
    return {**CONFIG_DEFAULTS, **fields}


def with_options(told: dict, options: dict, teller: str, untold: tuple[str, ...] = ()) -> dict:
    """The config a file tells (``told``: the one it carries, or one read off its tensors) with the
    ``options`` given on top (``None``: not given). An option may set only what the file cannot tell
    (``untold``, such as skip_input behind identity input matrices); one that disagrees with the file is
    refused, naming both, since it could only mislabel the file's tensors. ``teller`` says who told."""
    if not isinstance(told, dict):
        raise ValueError(f"{teller}, which is not a JSON object but {type(told).__name__}")
    options = {k: v for k, v in options.items() if v is not None}
    clash = {k: (told.get(k), v) for k, v in options.items() if k not in untold and told.get(k) != v}
    if clash:
        raise ValueError(f"{teller}, which disagrees with the options given: "
                         + ", ".join(f"{k} is {have!r}, not {want!r}" for k, (have, want) in clash.items()))
    return {**told, **options}


def model_from_config(config: dict, holds: int | None = None):
    """The model a checkpoint config describes. ``holds``: the most layers x directions the file can hold
    (one per tensor in the tensor formats, two per node in ONNX, whose nodes may share initializers); a
    config of more (a damaged ``num_layers`` of 10^6, whose model alone would take minutes to lay out) is
    refused before the model is made."""
    from .model import make_model

    if not isinstance(config, dict):
        raise ValueError(f"checkpoint config must be a JSON object, got {type(config).__name__}")
    if config.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} checkpoint (format {config.get('format')!r})")
    if config.get("version") != VERSION:
        raise ValueError(f"checkpoint version {config.get('version')!r} is not supported (expecting {VERSION})")
    missing = [k for k in CONFIG_FIELDS if k not in config]
    if missing:
        raise ValueError(f"checkpoint config lacks {', '.join(map(repr, missing))}")
    layers, dirs = config["num_layers"], 2 if config["direction"] == "bidirectional" else 1
    if holds is not None and isinstance(layers, int) and layers * dirs > holds:
        raise ValueError(f"the config's {layers} layer(s) x {dirs} direction(s) are more than the file can hold "
                         f"({holds})")
    return make_model(config["rnn_mode"], config["num_layers"], config["num_units"], config["input_size"],
                      config["input_mode"], config["direction"], config["dtype"], num_proj=config["num_proj"])


def save(path: str | Path, model, weights: list[np.ndarray], biases: list[np.ndarray],
         scope: str | None = None) -> None:
    """Write ``model``'s canonical tensors (validated by ``tf.to_tf``) under TF names, with its config."""
    tf.check_scope_to_write(scope)
    write_tensors(path, tf.to_tf(model, weights, biases, scope), {**model_config(model), "scope": scope})


def write_tensors(path: str | Path, tensors: dict[str, np.ndarray], config: dict | None) -> None:
    """Named tensors (and a config) into a safetensors or ``.npz`` file, by suffix."""
    path = Path(path)
    if path.suffix == ".safetensors":
        safetensors.save(path, tensors, {CONFIG_KEY: json.dumps(config)} if config else None)
    elif path.suffix == ".npz":
        extra = {NPZ_CONFIG: np.frombuffer(json.dumps(config).encode(), dtype=np.uint8)} if config else {}
        with replacing(path) as partial, open(partial, "wb") as f:
            np.savez(f, **tensors, **extra)
    else:
        raise ValueError(f"tensor file path must end in {' or '.join(SUFFIXES)}, got {path.name!r}")


def read_tensors(path: str | Path) -> tuple[dict[str, np.ndarray], dict | None]:
    """The tensors of a safetensors or ``.npz`` file and its embedded config (or ``None``); never unpickles."""
    path = Path(path)
    if path.suffix == ".safetensors":
        tensors, metadata = safetensors.load(path)
        return tensors, parse_config(metadata.get(CONFIG_KEY), path)
    if path.suffix == ".npz":
        tensors = load_arrays(path)
        if not isinstance(tensors, dict):
            raise ValueError(f"{path}: holds a single array, not an .npz archive of named tensors")
        raw = tensors.pop(NPZ_CONFIG, None)
        return tensors, None if raw is None else parse_config(raw.tobytes().decode(errors="replace"), path)
    if tf_bundle.is_bundle(path):
        raise ValueError(f"{path}: a TensorFlow checkpoint (tensor bundle); load it with reference.checkpoint.load "
                         "(`--from tf`)")
    with open(path, "rb") as f:
        head = f.read(2)
    if _pickle_head(head) or head == b"PK" or path.suffix in (".pt", ".pth", ".bin", ".pkl", ".pickle", ".ckpt"):
        raise ValueError(f"{path}: pickle-based files are refused (loading them can run arbitrary code); "
                         "save the tensors with safetensors or numpy.savez instead (a torch.save file is read, "
                         "without unpickling, as format torch: `--from torch`)")
    raise ValueError(f"{path}: unknown checkpoint type, expecting {' or '.join(SUFFIXES)}")


def _pickle_head(head: bytes) -> bool:
    """Whether a file's first bytes are a pickle's (the PROTO opcode 0x80, then a protocol 2-5)."""
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5


# What NumPy's and zipfile's readers raise on a damaged file besides ValueError: a bad CRC or header, a
# flag bit zipfile does not support (RuntimeError for encryption, NotImplementedError for others), a
# truncated member, an unparsable .npy header, a seek past the end of the file.
DAMAGE = (zipfile.BadZipFile, zipfile.LargeZipFile, RuntimeError, EOFError, zlib.error, tokenize.TokenError,
          SyntaxError, OSError, MemoryError)
_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


@contextmanager
def _readable(path) -> Iterator[None]:
    """A damaged file's errors become a ``ValueError`` (named by :func:`about`); a missing or unreadable one
    stays an OSError."""
    with about(path):
        try:
            yield
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            raise
        except ValueError as exc:  # NumPy's own message; a pickle refusal gets the why
            if "allow_pickle" not in str(exc):
                raise
            raise ValueError(f"{exc} (object arrays would need pickle; refused)") from None
        except DAMAGE as exc:
            raise ValueError(f"not a readable NumPy file ({type(exc).__name__}: {exc})") from None


def _check_claim(fp, available: int, where: str) -> None:
    """Refuse a ``.npy`` header (at ``fp``) that claims more bytes than the ``available`` ones of its file or
    archive member hold, before NumPy allocates them (a damaged header can claim 10^12 elements)."""
    version = np.lib.format.read_magic(fp)
    if version == (3, 0):  # a 2.0 header in UTF-8 (for field names), read as 2.0 with the names escaped
        length = fp.read(4)
        header = fp.read(min(int.from_bytes(length, "little"), available))
        ascii_header = header.decode("utf-8").encode("ascii", "backslashreplace")
        shape, _, dtype = np.lib.format.read_array_header_2_0(
            io.BytesIO(len(ascii_header).to_bytes(4, "little") + ascii_header))
        used = 12 + len(header)
    elif version in _NPY_HEADERS:
        start = fp.tell() - 8
        shape, _, dtype = _NPY_HEADERS[version](fp)
        used = fp.tell() - start
    else:  # a version NumPy refuses itself
        return
    claimed = math.prod(shape) * dtype.itemsize
    if not dtype.hasobject and claimed > available - used:
        raise ValueError(f"{where}: its header claims {list(shape)} {dtype} ({claimed} bytes), but "
                         f"{available - used} bytes follow it")


def load_arrays(path: str | Path) -> np.ndarray | dict[str, np.ndarray]:
    """The array of a ``.npy`` file, or the named arrays of an ``.npz``, read at once and never unpickled;
    a damaged file, a pickle (a PyTorch archive) or a member that is not an array is a ``ValueError`` naming
    it. Each header's claim is checked first (one pass over the file or the archive's members)."""
    with _readable(path), quiet_escapes():
        with open(path, "rb") as fp:
            head = fp.read(6)
            if head == np.lib.format.MAGIC_PREFIX:
                fp.seek(0)
                _check_claim(fp, Path(path).stat().st_size, str(path))
        if head != np.lib.format.MAGIC_PREFIX and not head.startswith(b"PK"):  # else NumPy tries it as a pickle
            raise ValueError("a pickle; refused (unpickling can run arbitrary code)" if _pickle_head(head) else
                             f"neither a .npy array nor an .npz archive (it starts with {head!r})")
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                if any(n.endswith(".pkl") for n in z.namelist()):
                    raise ValueError("holds a pickle (a PyTorch archive?); refused")
                for info in z.infolist():
                    with z.open(info) as fp:
                        if fp.read(6) != np.lib.format.MAGIC_PREFIX:
                            raise ValueError(f"holds {info.filename!r}, which is not a .npy array")
                        fp.seek(0)
                        _check_claim(fp, info.file_size, f"{path} ({info.filename})")
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                return {name: loaded[name] for name in loaded.files}
        return loaded


def tensor_names(path: str | Path) -> list[str]:
    """The names of the tensors of a safetensors or ``.npz`` file, read off its header or member list alone."""
    path = Path(path)
    if path.suffix == ".safetensors":
        return safetensors.names(path)
    if path.suffix == ".npz":
        with _readable(path), zipfile.ZipFile(path) as z:
            return [n[:-len(".npy")] for n in z.namelist() if n.endswith(".npy")]
    raise ValueError(f"{path}: unknown checkpoint type, expecting {' or '.join(SUFFIXES)}")


def parse_config(text: str | None, path) -> dict | None:
    """The model config a file carries as JSON text (``None``: none); errors name the file."""
    if text is None:
        return None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: the embedded model config is not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: the embedded model config must be a JSON object")
    return config


@contextmanager
def about(path: str | Path) -> Iterator[None]:
    """A ``ValueError``/``TypeError`` raised inside names the file it is about (once)."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        if str(path) in str(exc):
            raise
        raise (TypeError if isinstance(exc, TypeError) else ValueError)(f"{path}: {exc}") from exc


def load(path: str | Path, overrides: dict | None = None) -> Checkpoint:
    """Restore a checkpoint written by :func:`save`; or a file of TF-named tensors without our config (a
    safetensors or ``.npz`` file, or a TensorFlow checkpoint ``PREFIX``), whose config comes from its names
    and shapes with ``overrides`` on top (``rnn_mode`` tells relu from tanh, ``scope`` picks one of several
    variable scopes). ``overrides`` must agree with a config the file carries. Errors name the file."""
    if overrides is not None:
        check_mapping("overrides", overrides, "config fields")
    with about(path):
        return _load(path, overrides)


def _load(path: str | Path, overrides: dict | None) -> Checkpoint:
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    if "dtype" in overrides:  # as a config says it: np.float32 is 'float32'
        overrides["dtype"] = storage_dtype(overrides["dtype"]).name
    if tf_bundle.is_bundle(path):
        bundle = tf_bundle.open_bundle(path)  # the index is parsed once, for the names and for the reads
        return from_tf_names({n: (e.describe_dtype(), e.shape) for n, e in bundle.entries.items()}, bundle.read,
                             overrides)
    tensors, config = read_tensors(path)
    if config is None:
        return from_tf_names({n: (a.dtype.name, a.shape) for n, a in tensors.items()},
                             lambda names: {n: tensors[n] for n in names}, overrides)
    with_options(config, overrides, f"{path} carries its config")
    model = model_from_config(config, holds=len(tensors))
    weights, biases = tf.from_tf(model, tensors, config.get("scope"))
    return Checkpoint(model, weights, biases, config)


def from_tf_names(meta: dict[str, tuple[str, tuple[int, ...]]], read: Callable[[list[str]], dict[str, np.ndarray]],
                  overrides: dict) -> Checkpoint:
    """A model from TF-named tensors that carry no config (``meta``: name -> (dtype name, shape)): the config
    from :func:`reference.formats.tf.config_from_tf` with ``overrides`` on top; ``read(names)`` returns only
    the model's tensors (a ``global_step`` or optimizer slots beside them stay unread)."""
    found = tf.config_from_tf(meta, overrides.get("rnn_mode"), overrides.get("scope"))
    config = with_options(complete_config(found), overrides, "its tensors' names and shapes tell its config",
                          untold=("input_mode",))
    model = model_from_config(config, holds=len(meta))
    check_fits(model, sum(math.prod(shape) for _, shape in meta.values()), "the checkpoint's tensors")
    names = [n for n in tf.expected_shapes(model, config["scope"]) if n in meta]
    weights, biases = tf.from_tf(model, read(names), config["scope"])
    return Checkpoint(model, weights, biases, config)
