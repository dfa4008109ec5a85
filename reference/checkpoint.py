"""Checkpoints: the canonical tensors under TensorFlow's names (``reference.formats.tf``) plus the model's
configuration, in a safetensors or ``.npz`` file, so ``rnn-compat infer`` needs nothing else. Files without
our config (TF-named tensors saved elsewhere, TensorFlow's own checkpoints) load too: their names and
shapes tell the config (but relu from tanh).

Nothing is unpickled: ``.npz`` members are read as ``.npy`` arrays only (object arrays refused) and files that
are pickles (a PyTorch ``.pt``/``.bin``, a ``.pkl``) are refused with an error that says how to save them
instead. Nothing is inflated on a file's word: an ``.npz`` member's ``.npy`` header is read first, held against
the member's size and (:func:`check_needed`) against what the model needs under its name, and only then is the
member inflated, a chunk at a time, into the array its header declared.
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
from typing import Callable, Iterator, NamedTuple

import numpy as np

from .formats import safetensors, tf, tf_bundle, tf_graph
from .formats.canonical import check_fits, check_mapping
from .formats.files import load_json, quiet_escapes, replacing
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
# Fields a config carries only where they are not their defaults (so files of models without them are as before).
OPTIONAL_FIELDS = {"bias_mode": "double", "cell_clip": None}


def model_config(model) -> dict:
    """The config a checkpoint carries: ``CONFIG_FIELDS`` as the model's attributes (its dtype by name), and
    the ``OPTIONAL_FIELDS`` where the model's are not their defaults."""
    fields = {name: getattr(model, name) for name in CONFIG_FIELDS}
    optional = {name: getattr(model, name, default) for name, default in OPTIONAL_FIELDS.items()}
    return {"format": FORMAT, "version": VERSION, **fields, "dtype": model.dtype.name,
            **{name: list(value) if isinstance(value, tuple) else value for name, value in optional.items()
               if value != OPTIONAL_FIELDS[name]}}


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
    told_or_default = {**OPTIONAL_FIELDS, **told}  # a file that says nothing of bias_mode has the double bias
    clash = {k: (told_or_default.get(k), v) for k, v in options.items()
             if k not in untold and told_or_default.get(k) != v}
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
                      config["input_mode"], config["direction"], config["dtype"], num_proj=config["num_proj"],
                      **{name: config[name] for name, default in OPTIONAL_FIELDS.items()
                         if config.get(name, default) != default})


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
        declared, config = declared_tensors(path)
        return read_declared(path, declared), config
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


CONFIG_LIMIT = 2**20  # bytes of the config an .npz carries (a few hundred, as written here)


MAX_NAMES = 100_000  # entries of a name map (a bound: a map is a file's word too)


def name_map(names, what: str = "the name map") -> dict[str, str]:
    """A map of a file's own tensor names onto a naming scheme read here (``{"enc_w_ih": "weight_ih_l0"}``): a
    dict, or the path of a JSON file holding one; refused, naming ``what``, where it is not names to distinct
    names."""
    if isinstance(names, (str, Path)):
        where = f"{what} {names}"
        with open(names, "rb") as f:
            raw = f.read(CONFIG_LIMIT + 1)
        if len(raw) > CONFIG_LIMIT:
            raise ValueError(f"{where} is larger than {CONFIG_LIMIT} bytes; refused")
        names, what = load_json(raw, where), where
    if not isinstance(names, dict) or len(names) > MAX_NAMES or \
            not all(isinstance(k, str) and isinstance(v, str) and k and v for k, v in names.items()):
        raise ValueError(f"{what} must be a JSON object (a dict) of a file's tensor names to the names of a scheme "
                         f"read here, both non-empty strings, such as {{\"enc_w_ih\": \"weight_ih_l0\"}}")
    twice = sorted({v for v in names.values() if list(names.values()).count(v) > 1})
    if twice:
        raise ValueError(f"{what} maps several names onto {twice[0]!r}")
    return dict(names)


def renamed(tensors: dict, names: dict[str, str] | None) -> dict:
    """``tensors`` under the names ``names`` maps them to (:func:`name_map`; others keep theirs). A name the map
    gives that the file does not hold, or a new name that another tensor already has, is refused."""
    if not names:
        return tensors
    absent = [k for k in names if k not in tensors]
    if absent:
        raise ValueError(f"the name map renames {absent[:3]}, which the file does not hold; it holds "
                         f"{sorted(tensors)[:8]}{' ...' if len(tensors) > 8 else ''}")
    kept = set(tensors) - set(names)
    clash = sorted(v for v in names.values() if v in kept)
    if clash:
        raise ValueError(f"the name map renames a tensor to {clash[0]!r}, which another tensor of the file is named")
    return {names.get(k, k): v for k, v in tensors.items()}


def declared_tensors(path: str | Path, names: dict[str, str] | None = None) \
        -> tuple[dict[str, np.ndarray | Declared], dict | None]:
    """:func:`read_tensors`, but an ``.npz``'s tensors as their headers declare them (:class:`Declared`), none
    inflated but its config: read them with :func:`read_declared` once :func:`check_needed` has held them
    against what the model they describe needs. A safetensors file's are read whole (nothing inflates).
    ``names``: the tensors under the names this map gives them (:func:`renamed`)."""
    path = Path(path)
    if names:
        tensors, config = declared_tensors(path)
        return renamed(tensors, names), config
    if path.suffix != ".npz":
        return read_tensors(path)
    declared = declared_arrays(path)
    if declared is None:
        raise ValueError(f"{path}: holds a single array, not an .npz archive of named tensors")
    raw = declared.pop(NPZ_CONFIG, None)
    if raw is None:
        return declared, None
    if raw.dtype != np.uint8 or raw.ndim != 1 or raw.nbytes > CONFIG_LIMIT:
        raise ValueError(f"{path}: its {NPZ_CONFIG} member must be the config as at most {CONFIG_LIMIT} bytes of "
                         f"UTF-8 JSON, got {list(raw.shape)} {raw.dtype}")
    text = load_arrays(path, [raw.member])[raw.member].tobytes().decode(errors="replace")
    return declared, parse_config(text, path)


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


MAX_NPY_HEADER = 10_000  # bytes of a .npy header (NumPy's own default limit), checked before they are read
CHUNK = 2**20  # bytes an archive member is inflated by at a time, into the array its header declared


class Declared(NamedTuple):
    """An array of an ``.npz`` archive as its ``.npy`` header declares it, not yet inflated: ``np.shape`` and
    ``np.size`` read it as they read an array, so a format's checks of names and shapes run on it unread;
    :func:`read_declared` inflates it once the model has said what it needs (:func:`check_needed`)."""

    dtype: np.dtype
    shape: tuple[int, ...]
    member: str  # its name in the archive, as load_arrays names it

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


def _npy_header(fp, available: int, where: str) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """``(shape, fortran_order, dtype, header bytes)`` of the ``.npy`` header at ``fp`` (a file or an archive
    member of ``available`` bytes), its length checked before it is read; a claim of more bytes than follow
    the header is refused before anything is allocated (a damaged header can claim 10^12 elements)."""
    magic = fp.read(8)
    if len(magic) < 8 or magic[:6] != np.lib.format.MAGIC_PREFIX:
        raise ValueError(f"{where}: not a .npy array")
    version = (magic[6], magic[7])
    width = 2 if version == (1, 0) else 4
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise ValueError(f"{where}: .npy format version {version[0]}.{version[1]} is not one NumPy writes")
    length_bytes = fp.read(width)
    length = int.from_bytes(length_bytes, "little")
    if len(length_bytes) < width or length > min(MAX_NPY_HEADER, available):
        raise ValueError(f"{where}: its .npy header claims {length} bytes, more than a header takes "
                         f"({MAX_NPY_HEADER}) or the {available} bytes there are")
    header = fp.read(length)
    if len(header) < length:
        raise ValueError(f"{where}: its .npy header is cut short")
    if version == (3, 0):  # a 2.0 header in UTF-8 (for field names), read as 2.0 with the names escaped
        header = header.decode("utf-8").encode("ascii", "backslashreplace")
        version, width = (2, 0), 4
    shape, fortran, dtype = _NPY_HEADERS[version](io.BytesIO(len(header).to_bytes(width, "little") + header),
                                                   max_header_size=10 * MAX_NPY_HEADER)
    used = 8 + width + length
    claimed = math.prod(shape) * dtype.itemsize
    if not dtype.hasobject and claimed > available - used:
        raise ValueError(f"{where}: its header claims {list(shape)} {dtype} ({claimed} bytes), but "
                         f"{available - used} bytes follow it")
    return shape, fortran, dtype, used


def _members(z: zipfile.ZipFile, path) -> dict[str, tuple[zipfile.ZipInfo, Declared, bool, int]]:
    """Every member of an ``.npz`` archive by its array's name (``x`` for ``x.npy``, as NumPy names them):
    its zip entry, the array its header declares, its order and its header's length; only the headers are
    inflated. A pickle, a member that is not an array (or holds Python objects), a name given twice and a
    member whose size is not its header's claim (short, or longer than its array) are refused."""
    infos = z.infolist()
    if any(i.filename.endswith(".pkl") for i in infos):
        raise ValueError("holds a pickle (a PyTorch archive?); refused")
    found = {}
    for info in infos:
        where = f"{path} ({info.filename})"
        with z.open(info) as fp:
            if fp.read(6) != np.lib.format.MAGIC_PREFIX:
                raise ValueError(f"holds {info.filename!r}, which is not a .npy array")
        with z.open(info) as fp:
            shape, fortran, dtype, used = _npy_header(fp, info.file_size, where)
        if dtype.hasobject:
            raise ValueError(f"holds {info.filename!r}, an array of Python objects (object arrays would need "
                             f"pickle; refused)")
        key = info.filename[:-len(".npy")] if info.filename.endswith(".npy") else info.filename
        if key in found:
            raise ValueError(f"holds two members named {key!r}; which one is meant cannot be told")
        array = Declared(dtype, tuple(shape), key)
        if used + array.nbytes != info.file_size:
            raise ValueError(f"{info.filename}: {info.file_size - used} bytes follow its header, which declares "
                             f"{list(shape)} {dtype} ({array.nbytes} bytes)")
        found[key] = (info, array, fortran, used)
    return found


def _inflate(z: zipfile.ZipFile, info: zipfile.ZipInfo, array: Declared, fortran: bool, used: int) -> np.ndarray:
    """The array of one member, inflated a chunk at a time into the memory its (checked) header declared:
    never more than that is inflated or held, and a member that would inflate to more is refused."""
    if array.dtype.itemsize == 0:
        return np.empty(array.shape, array.dtype)
    data = np.empty(array.nbytes, np.uint8)
    view, done = memoryview(data), 0
    with z.open(info) as fp:
        fp.read(used)
        while done < array.nbytes:
            n = fp.readinto(view[done:done + CHUNK])
            if not n:
                raise ValueError(f"{info.filename} ends {array.nbytes - done} bytes short of its declared size")
            done += n
        if fp.read(1):
            raise ValueError(f"{info.filename} inflates beyond its declared size; refused")
    values = np.frombuffer(data, dtype=array.dtype, count=array.size)
    return values.reshape(array.shape[::-1]).T if fortran else values.reshape(array.shape)


def declared_arrays(path: str | Path) -> dict[str, Declared] | None:
    """The arrays of an ``.npz`` archive as their headers declare them, none inflated (``None``: a ``.npy``
    file, one array, read by :func:`load_arrays`); refused as :func:`load_arrays` refuses."""
    with _readable(path), quiet_escapes():
        if not _is_archive(path):
            return None
        with zipfile.ZipFile(path) as z:
            return {key: array for key, (_, array, _, _) in _members(z, path).items()}


def _is_archive(path) -> bool:
    """Whether the file at ``path`` is a zip archive (an ``.npz``) rather than a ``.npy``; neither is refused."""
    with open(path, "rb") as fp:
        head = fp.read(6)
    if head != np.lib.format.MAGIC_PREFIX and not head.startswith(b"PK"):  # else NumPy tries it as a pickle
        raise ValueError("a pickle; refused (unpickling can run arbitrary code)" if _pickle_head(head) else
                         f"neither a .npy array nor an .npz archive (it starts with {head!r})")
    return head.startswith(b"PK")


def load_arrays(path: str | Path, names: list[str] | None = None,
                check: Callable[[str, Declared], None] | None = None) -> np.ndarray | dict[str, np.ndarray]:
    """The array of a ``.npy`` file, or the named arrays of an ``.npz`` (those in ``names``, default all), never
    unpickled; a damaged file, a pickle (a PyTorch archive) or a member that is not an array is a
    ``ValueError`` naming it. Every header's claim is checked first, against the bytes that follow it (and in
    an archive, with ``check(name, declared)`` where given, against what the caller can use) before anything
    is allocated; then each member is inflated in bounded chunks to no more than its header declared."""
    with _readable(path), quiet_escapes():
        if not _is_archive(path):
            with open(path, "rb") as fp:
                _npy_header(fp, Path(path).stat().st_size, str(path))
            return np.load(path, allow_pickle=False)
        with zipfile.ZipFile(path) as z:
            members = _members(z, path)
            unknown = [n for n in names or () if n not in members]
            if unknown:
                raise ValueError(f"holds no array {unknown[0]!r}")
            chosen = list(members) if names is None else list(dict.fromkeys(names))
            if check is not None:
                for name in chosen:
                    check(name, members[name][1])
            return {name: _inflate(z, *members[name]) for name in chosen}


# Of an archive's arrays that a model does not use, none is inflated: a format refuses it by its name.
def check_needed(declared: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]], model) -> None:
    """Refuse, before it is read, a tensor (``declared``: name -> shape, as a file's header says) that claims
    more values than the model needs under its name (``expected``): a decompression bomb, or a damaged shape,
    costs nothing. A smaller one is left to the format's own check, which names the tensor and both shapes."""
    for name, shape in declared.items():
        want = expected.get(name)
        if want is not None and math.prod(shape) > math.prod(want):
            raise ValueError(f"tensor {name!r} declares {list(shape)} ({math.prod(shape)} values), more than the "
                             f"{list(want)} that {model!r} needs there: refused before it is read")


def read_declared(path: str | Path, tensors: dict, names=None) -> dict:
    """``tensors`` with its :class:`Declared` ones among ``names`` (default: all) inflated (one pass over the
    archive at ``path``); the others stay declared, for a format to refuse by name unread."""
    wanted = [k for k, t in tensors.items() if isinstance(t, Declared) and (names is None or k in names)]
    if not wanted:
        return dict(tensors)
    arrays = load_arrays(path, [tensors[k].member for k in wanted])
    return {k: arrays[t.member] if k in wanted else t for k, t in tensors.items()}


def tensor_names(path: str | Path, names: dict[str, str] | None = None) -> list[str]:
    """The names of the tensors of a safetensors or ``.npz`` file, read off its header or member list alone
    (``names``: as this map renames them, :func:`renamed`)."""
    path = Path(path)
    if names:
        return list(renamed(dict.fromkeys(tensor_names(path)), names))
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
    config = load_json(text, f"{path}: the embedded model config")
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
    safetensors or ``.npz`` file, a TensorFlow checkpoint ``PREFIX``, or a frozen graph ``.pb``, whose
    ``CudnnRNN`` op's opaque buffer is read too: ``reference.formats.tf_graph``, ``node`` picks one of several
    ops), whose config comes from its names and shapes with ``overrides`` on top (``rnn_mode`` tells relu
    from tanh, ``bias_mode`` a bias mode other than the double bias, which TF's names do not tell, ``scope`` picks one of several variable scopes,
    ``names`` maps a tensor file's own names onto TF's: :func:`name_map`, ``layer`` reads one layer of a stack
    as a one-layer model: ``reference.formats.tf.pick_layer``). ``overrides`` must agree with a config the
    file carries. Errors name the file."""
    if overrides is not None:
        check_mapping("overrides", overrides, "config fields")
    with about(path):
        return _load(path, overrides)


def _load(path: str | Path, overrides: dict | None) -> Checkpoint:
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    names = overrides.pop("names", None)  # a name map onto TF's names (name_map), for a tensor file
    if names is not None:
        names = name_map(names)
        if tf_bundle.is_bundle(path) or tf_graph.is_graph_file(path):
            raise ValueError("a name map applies to safetensors and .npz files, not to a TensorFlow checkpoint or "
                             "graph")
    if "dtype" in overrides:  # as a config says it: np.float32 is 'float32'
        overrides["dtype"] = storage_dtype(overrides["dtype"]).name
    if tf_graph.is_graph_file(path):
        return _from_graph(tf_graph.read_graph(path), overrides)
    if overrides.pop("node", None) is not None:
        raise ValueError("a node name picks a CudnnRNN op of a frozen TensorFlow graph (.pb), not of this file")
    if tf_bundle.is_bundle(path):
        bundle = tf_bundle.open_bundle(path)  # the index is parsed once, for the names and for the reads
        return from_tf_names({n: (e.describe_dtype(), e.shape) for n, e in bundle.entries.items()}, bundle.read,
                             overrides)
    tensors, config = declared_tensors(path, names)  # an .npz's are inflated only once the model says what it needs
    if config is None:
        return from_tf_names({n: (a.dtype.name, a.shape) for n, a in tensors.items()},
                             lambda names: read_declared(path, {n: tensors[n] for n in names}), overrides)
    if overrides.get("layer") is not None:
        raise ValueError("a layer is picked from a TF-named stack without our config; this file carries its config "
                         "(one cuDNN stack)")
    with_options({**OPTIONAL_FIELDS, **config}, overrides, f"{path} carries its config")
    model = model_from_config(config, holds=len(tensors))
    check_fits(model, sum(np.size(t) for t in tensors.values()), "the checkpoint's tensors")
    expected = tf.expected_shapes(model, config.get("scope"))
    check_needed({n: t.shape for n, t in tensors.items()}, expected, model)
    weights, biases = tf.from_tf(model, read_declared(path, tensors, expected), config.get("scope"))
    return Checkpoint(model, weights, biases, config)


def _from_graph(graph: tf_graph.Graph, overrides: dict) -> Checkpoint:
    """A frozen TensorFlow graph's recurrent weights: a ``CudnnRNN*`` op's opaque buffer (the one op, or the one
    ``node`` names), else ``Const`` nodes under TensorFlow's cell names (:func:`from_tf_names`)."""
    node = overrides.pop("node", None)
    ops = graph.recurrent_ops()
    if ops or node is not None:
        op = tf_graph.pick(ops, node)
        if overrides.get("layer") is not None:
            raise ValueError(f"a {op.op} op's opaque buffer is one cuDNN stack: a layer is picked from a TF-named one")
        config = with_options(complete_config(tf_graph.cudnn_config(graph, op, overrides)), overrides,
                              f"its {op.op} op {op.name!r} tells its config")
        model = model_from_config(config)
        return Checkpoint(model, *tf_graph.cudnn_weights(graph, op, model), config)
    try:
        return from_tf_names(graph.meta(), graph.read, overrides, stored=graph.stored())
    except tf.NoCells as exc:
        names = sorted(graph.consts)
        raise ValueError(f"holds no recurrent weights: no CudnnRNN op, and among its constants {exc}; its constants: "
                         f"{names[:8]}{' ...' if len(names) > 8 else ''}") from None


def from_tf_names(meta: dict[str, tuple[str, tuple[int, ...]]], read: Callable[[list[str]], dict[str, np.ndarray]],
                  overrides: dict, stored: int | None = None) -> Checkpoint:
    """A model from TF-named tensors that carry no config (``meta``: name -> (dtype name, shape)): the config
    from :func:`reference.formats.tf.config_from_tf` with ``overrides`` on top; ``read(names)`` returns only
    the model's tensors (a ``global_step`` or optimizer slots beside them stay unread). ``stored``: the values
    the file stores, where fewer than its shapes declare (a graph's constant may repeat its last value)."""
    overrides = dict(overrides)
    layer = overrides.pop("layer", None)  # one layer of a stack, read as a one-layer model
    if layer is not None:
        originals = tf.pick_layer({n: n for n in meta}, layer, overrides.get("scope"))  # its names -> the file's
        meta, read_all = {n: meta[o] for n, o in originals.items()}, read

        def read(names):  # noqa: F811 (the file's tensors under the one-layer names)
            got = read_all([originals[n] for n in names])
            return {n: got[originals[n]] for n in names}
    found = tf.config_from_tf(meta, overrides.get("rnn_mode"), overrides.get("scope"))
    if not tf.has_biases(meta, found.get("scope")):  # no cell has a bias: a bias-free model, as the names tell
        found = {**found, "bias_mode": "none"}  # (which single mode a cell's biases are, they cannot)
    config = with_options(complete_config(found), overrides, "its tensors' names and shapes tell its config",
                          untold=("input_mode", *OPTIONAL_FIELDS))
    model = model_from_config(config, holds=len(meta))
    check_fits(model, sum(math.prod(shape) for _, shape in meta.values()) if stored is None else stored,
               "the checkpoint's tensors")
    expected = tf.expected_shapes(model, config["scope"])
    names = [n for n in expected if n in meta]
    check_needed({n: meta[n][1] for n in names}, expected, model)  # before anything is read on the file's word
    weights, biases = tf.from_tf(model, read(names), config["scope"])
    return Checkpoint(model, weights, biases, config)
