"""PyTorch's own files (``torch.save``), read with NumPy alone and never unpickled.

A ``torch.save`` archive (PyTorch >= 1.6) is a zip of ``ROOT/data.pkl`` (a pickle of the saved object),
``ROOT/data/KEY`` (each storage's raw bytes, stored uncompressed) and ``ROOT/byteorder``. The legacy format
(before 1.6, and ``_use_new_zipfile_serialization=False`` since) is one stream instead: pickles of a magic
number, a protocol version and the writer's sizes, then the object's pickle, then a pickle of its storages'
keys, then each storage in that order (its element count as a little-endian int64, then its bytes,
little-endian). Both pickle the object alike; the pickle names Python callables
(``torch._utils._rebuild_tensor_v2``, ``collections.OrderedDict``, ...) that unpickling would import and
call; loading an untrusted one can run any code. Here the pickle is only *parsed*
(:func:`pickletools.genops` decodes opcodes and their arguments, nothing more) and a small interpreter builds
plain containers from it (dicts, lists, tuples, strings, numbers), a :class:`TensorRecord` for each
tensor (storage, offset, size, stride: nothing read yet) and an :class:`Opaque` placeholder for any other
object (a whole ``nn.Module``, an ``argparse.Namespace`` beside the weights), whose class is named and never
imported. A state_dict inside the object (at the top, or under a key such as ``"model"`` of a training
checkpoint) is then found by its ``weight_ih_l0`` tensors (a single cell's by its ``weight_ih``), and only its
tensors are read, each checked
against its storage's bytes before anything is allocated.

A TorchScript archive (``torch.jit.save``) is the same zip with ``ROOT/code/`` (the modules' TorchScript source)
and ``ROOT/constants.pkl`` beside it; its ``data.pkl`` pickles each module as an object of a class
``__torch__.<its Python path>`` whose state holds its parameters, submodules and attributes by name (an
``nn.RNN``'s ``nonlinearity`` among them). That pickle is parsed as any other; the code and the constants are
never read, let alone run.
"""

from __future__ import annotations

import io
import math
import mmap
import pickletools
import zipfile
import zlib
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, NamedTuple

import numpy as np

from .files import quiet_escapes
from .torch import KNOWN_BY, module_tensors, pick_module
from .torch_save import CONFIG_MEMBER

# Storage classes of ``torch.save`` and their NumPy dtypes; bfloat16 (no NumPy dtype) is widened to float32,
# exactly (a bfloat16 is the upper half of a float32).
STORAGE_DTYPES = {
    "HalfStorage": np.float16, "FloatStorage": np.float32, "DoubleStorage": np.float64,
    "BFloat16Storage": np.uint16, "ComplexFloatStorage": np.complex64, "ComplexDoubleStorage": np.complex128,
    "ByteStorage": np.uint8, "CharStorage": np.int8, "ShortStorage": np.int16, "IntStorage": np.int32,
    "LongStorage": np.int64, "BoolStorage": np.bool_,
}
# The legacy format's element sizes of storages NumPy has no dtype for (to step over them; never read).
OTHER_ITEMSIZES = {"QInt8Storage": 1, "QUInt8Storage": 1, "QInt32Storage": 4, "QUInt4x2Storage": 1,
                   "QUInt2x4Storage": 1, "ComplexHalfStorage": 4}
MAX_DIMS = 64
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C  # the legacy format's first pickle
LEGACY_PROTOCOL = 1001  # its second


class Global(NamedTuple):
    """A ``module.name`` the pickle refers to (never imported)."""

    module: str
    name: str

    def __str__(self) -> str:
        return f"{self.module}.{self.name}"


class Opaque:
    """An object that only unpickling could build (its class's code would run): its class, by name, and the
    state the pickle gives it (``BUILD``; an ``nn.Module``'s ``__dict__``: ``_parameters``, ``_modules``, ...)."""

    def __init__(self, cls: str):
        self.cls = cls
        self.state = None

    def __repr__(self) -> str:
        return f"Opaque({self.cls!r})"


class Storage(NamedTuple):
    key: str  # the member ROOT/data/KEY
    kind: str  # the storage class, e.g. "FloatStorage"
    numel: int


class TensorRecord(NamedTuple):
    """A tensor as the pickle describes it: ``size`` elements of ``storage`` from ``offset``, ``stride`` apart."""

    storage: Storage
    offset: int
    size: tuple
    stride: tuple


def _rebuild_tensor(storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None):
    if not isinstance(storage, Storage):
        raise ValueError(f"a tensor's storage is {type(storage).__name__}, not a storage reference")
    return TensorRecord(storage, offset, size, stride)


def _rebuild_parameter(data, requires_grad=False, hooks=None, state=None):
    return data


def _rebuild_from_type(func, new_type, args, state):
    """A tensor of a subclass of ``torch.Tensor``, or one with attributes of its own (``new_type`` and
    ``state``, left out here): the tensor ``func(*args)`` rebuilds; any other object is left opaque."""
    if not (isinstance(func, Global) and _REBUILDERS.get(str(func)) is _rebuild_tensor and isinstance(args, tuple)):
        return Opaque(f"{new_type}" if isinstance(new_type, Global) else "torch._tensor._rebuild_from_type_v2")
    return _rebuild_tensor(*args)


def _ordered_dict():
    return {}  # torch.save writes OrderedDict() and then its items (SETITEMS), each key checked there


def _encode(text, encoding="latin1"):
    if not isinstance(text, str) or encoding != "latin1":
        raise ValueError("_codecs.encode other than of a str in latin1")
    return text.encode("latin1")


# The callables a state_dict's pickle reduces, each replaced by a plain constructor here.
_REBUILDERS = {
    "collections.OrderedDict": _ordered_dict,
    "torch._utils._rebuild_tensor_v2": _rebuild_tensor,
    "torch._utils._rebuild_parameter": _rebuild_parameter,
    "torch._utils._rebuild_parameter_with_state": _rebuild_parameter,
    "torch._tensor._rebuild_from_type_v2": _rebuild_from_type,
    "_codecs.encode": _encode,
    "builtins.bytes": lambda: b"",  # protocol 2's empty bytes
    "builtins.set": lambda items=(): tuple(items),
    "builtins.frozenset": lambda items=(): tuple(items),
}
# Protocol 2 writes Python 3's builtins under their Python 2 module name.
_REBUILDERS.update({"__builtin__." + k.split(".")[1]: v for k, v in _REBUILDERS.items() if k.startswith("builtins.")})


def _persistent(pid) -> Storage:
    """``('storage', torch.<Kind>Storage, key, location, numel)``, as ``torch.save`` writes a storage."""
    if not (isinstance(pid, tuple) and len(pid) == 5 and _is_storage(pid)):
        raise ValueError(f"a persistent id that is not a torch.save storage: {_short(pid)}")
    return Storage(pid[2], pid[1].name, pid[4])


def _is_storage(pid: tuple) -> bool:
    return pid[0] == "storage" and isinstance(pid[1], Global) and isinstance(pid[2], str) and \
        isinstance(pid[4], int) and not isinstance(pid[4], bool)


def _legacy_persistent(pid) -> Storage | Global:
    """What the legacy format's persistent ids stand for: ``('storage', torch.<Kind>Storage, key, location,
    numel, None)`` a storage (a storage view, the last item not ``None``, is of files before PyTorch 1.0 and
    refused); ``('module', cls, source_file, source)`` the class of a pickled ``nn.Module`` (its source is
    kept there to warn on load when the code has changed since)."""
    if isinstance(pid, tuple) and len(pid) == 6 and _is_storage(pid):
        if pid[5] is not None:
            raise ValueError("a storage view (PyTorch before 1.0's format), which is not read")
        return Storage(pid[2], pid[1].name, pid[4])
    if isinstance(pid, tuple) and len(pid) == 4 and pid[0] == "module" and isinstance(pid[1], Global):
        return pid[1]
    raise ValueError(f"a persistent id that is not a legacy torch.save storage or module class: {_short(pid)}")


def _no_persistent(pid):
    raise ValueError("a persistent id where the legacy format has none")


_INTS = {"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4"}
_CONSTANTS = _INTS | {"FLOAT", "BINFLOAT", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE",
                      "BINBYTES", "SHORT_BINBYTES", "BINBYTES8"}
_EMPTY = {"EMPTY_DICT": dict, "EMPTY_LIST": list, "EMPTY_TUPLE": tuple, "EMPTY_SET": list}
_FIXED = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}
_TUPLES = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}
_IGNORED = {"PROTO", "FRAME"}


def parse_pickle(data: bytes, persistent: Callable[[Any], Any] = _persistent) -> Any:
    """The object a pickle describes, built from plain containers, :class:`TensorRecord` (for
    ``torch.save``'s tensors) and :class:`Opaque` (anything else that names a class); nothing is imported or
    called. A malformed pickle, or one that uses an opcode ``torch.save`` does not write, is a ``ValueError``.
    ``persistent`` maps a persistent id to what it stands for (the zip format's storages by default)."""
    return _parse(io.BytesIO(data), persistent)


@quiet_escapes()  # genops decodes a STRING's escapes as Python would
def _parse(stream: BinaryIO, persistent: Callable[[Any], Any]) -> Any:
    """:func:`parse_pickle` of the pickle at ``stream``'s position, which is left just past its STOP."""
    stack: list = []
    marks: list[int] = []
    memo: dict = {}

    def pop_mark() -> list:
        start = marks.pop()
        items = stack[start:]
        del stack[start:]
        return items

    try:
        for op, arg, pos in pickletools.genops(stream):
            name = op.name
            if name in _IGNORED:
                continue
            if name in _CONSTANTS:
                stack.append(arg)
            elif name in _FIXED:
                stack.append(_FIXED[name])
            elif name in _EMPTY:
                stack.append(_EMPTY[name]())
            elif name == "MARK":
                marks.append(len(stack))
            elif name in ("TUPLE", "LIST"):
                items = pop_mark()
                stack.append(tuple(items) if name == "TUPLE" else items)
            elif name in _TUPLES:
                n = _TUPLES[name]
                items = tuple(stack[-n:]) if len(stack) >= n else None
                if items is None:
                    raise IndexError("stack underflow")
                del stack[-n:]
                stack.append(items)
            elif name == "DICT":
                items = pop_mark()
                stack.append(_set_items({}, items))
            elif name == "APPEND":
                _target(stack, -2, list).append(stack.pop())
            elif name in ("APPENDS", "ADDITEMS"):
                items = pop_mark()
                _target(stack, -1, list).extend(items)
            elif name == "FROZENSET":
                stack.append(tuple(pop_mark()))
            elif name == "SETITEM":
                value, key = stack.pop(), stack.pop()
                _set_items(_target(stack, -1, dict), [key, value])
            elif name == "SETITEMS":
                items = pop_mark()
                _set_items(_target(stack, -1, dict), items)
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[arg] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                if arg not in memo:
                    raise ValueError(f"memo entry {arg} read before it is written (at byte {pos})")
                stack.append(memo[arg])
            elif name == "GLOBAL":
                module, _, attr = arg.partition(" ")
                stack.append(Global(module, attr))
            elif name == "STACK_GLOBAL":
                attr, module = stack.pop(), stack.pop()
                if not (isinstance(module, str) and isinstance(attr, str)):
                    raise ValueError(f"STACK_GLOBAL of non-strings (at byte {pos})")
                stack.append(Global(module, attr))
            elif name == "BINPERSID":
                stack.append(persistent(stack.pop()))
            elif name == "REDUCE":
                args, func = stack.pop(), stack.pop()
                stack.append(_reduce(func, args, pos))
            elif name in ("NEWOBJ", "NEWOBJ_EX"):
                if name == "NEWOBJ_EX":
                    stack.pop()
                stack.pop()
                cls = stack.pop()
                stack.append(Opaque(str(cls) if isinstance(cls, Global) else type(cls).__name__))
            elif name == "BUILD":
                state, target = stack.pop(), stack[-1]
                if isinstance(target, Opaque) and target.state is None:
                    target.state = state  # an object's attributes (an nn.Module's parameters and submodules)
                elif not isinstance(target, (dict, Opaque, TensorRecord)):  # dict: a state_dict's _metadata
                    raise ValueError(f"BUILD on a {type(target).__name__} (at byte {pos})")
            elif name == "POP":
                stack.pop()
            elif name == "POP_MARK":
                pop_mark()
            elif name == "DUP":
                stack.append(stack[-1])
            elif name == "STOP":
                if len(stack) != 1 or marks:
                    raise ValueError("the pickle ends with a malformed stack")
                return stack[0]
            else:
                raise ValueError(f"opcode {name} (at byte {pos}), which torch.save does not write")
    except (IndexError, KeyError) as exc:
        raise ValueError(f"a malformed pickle ({type(exc).__name__}: stack or memo underflow)") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"a malformed pickle (a string that is not UTF-8: {exc.reason})") from None
    raise ValueError("the pickle ends before its STOP opcode")


def _target(stack: list, index: int, kind: type):
    target = stack[index]
    if not isinstance(target, kind):
        raise ValueError(f"a pickle adds items to a {type(target).__name__}, not a {kind.__name__}")
    return target


def _set_items(target: dict, items: list) -> dict:
    if len(items) % 2:
        raise ValueError("a pickle sets a dict item without a value")
    for key, value in zip(items[::2], items[1::2]):
        if not (isinstance(key, _KEYS) or isinstance(key, tuple) and all(isinstance(k, _KEYS) for k in key)):
            # (hashing a tuple nested a million deep would overflow the C stack)
            raise ValueError(f"a dict key of type {type(key).__name__}, not a string, number or flat tuple")
        target[key] = value
    return target


_KEYS = (str, int, float, bytes, type(None))


def _short(value) -> str:
    """``value`` for a message: a flat tuple of numbers or a number as itself, anything else by its type."""
    if isinstance(value, (int, float)) or isinstance(value, tuple) and len(value) <= 8 and \
            all(isinstance(v, (int, float, str)) for v in value):
        return repr(value)[:120]
    return f"a {type(value).__name__}" + (f" of {len(value)}" if isinstance(value, tuple) else "")


def _reduce(func, args, pos: int):
    if not isinstance(func, Global) or not isinstance(args, tuple):
        raise ValueError(f"REDUCE of {type(func).__name__} with {type(args).__name__} arguments (at byte {pos})")
    rebuild = _REBUILDERS.get(str(func))
    if rebuild is None:
        return Opaque(str(func))
    try:
        return rebuild(*args)
    except TypeError:
        raise ValueError(f"{func} with {len(args)} arguments (at byte {pos})") from None


# ---------------------------------------------------------------------------------------------------------
# The archive


def is_torch_file(path: str | Path) -> bool:
    """Whether ``path`` is a file ``torch.save`` may have written: a zip or a pickle by its first bytes, or
    named as PyTorch names them (``.pt``, ``.pth``, ``.bin``)."""
    path = Path(path)
    if not path.is_file():
        return False
    return _head(path) in (b"PK", b"\x80") or path.suffix in (".pt", ".pth", ".bin")


def _head(path: Path) -> bytes:
    """The first byte of a pickle, the first two of a zip."""
    with open(path, "rb") as f:
        head = f.read(2)
    return head[:1] if head[:1] == b"\x80" else head


def _is_pickle(name: str) -> bool:
    return name.count("/") == 1 and name.endswith("/data.pkl")


def open_file(path: str | Path) -> "Archive | LegacyFile":
    """The ``torch.save`` file at ``path`` opened as its first bytes say: a zip (:class:`Archive`) or a pickle
    (:class:`LegacyFile`)."""
    head = _head(Path(path))
    if head not in (b"PK", b"\x80"):
        raise ValueError("not a torch.save file: neither a zip (its format since PyTorch 1.6) nor a pickle "
                         "(the legacy format)")
    return Archive(path) if head == b"PK" else LegacyFile(path)


class _Storages:
    """What both formats share: ``obj`` (what the pickle describes, :func:`parse_pickle`), ``config`` and
    :meth:`array`, which reads a :class:`TensorRecord` from the storage bytes that :meth:`_raw` reads."""

    byteorder = "<"
    config: str | None = None
    obj: Any

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._storages: dict[str, np.ndarray] = {}

    def _raw(self, storage: Storage, nbytes: int) -> bytes:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _storage(self, storage: Storage) -> np.ndarray:
        if storage.kind not in STORAGE_DTYPES:
            raise ValueError(f"a {storage.kind} (NumPy has no such dtype)")
        if storage.key not in self._storages:
            dtype = np.dtype(STORAGE_DTYPES[storage.kind]).newbyteorder(self.byteorder)
            if storage.numel < 0:
                raise ValueError(f"storage {storage.key!r} of {storage.numel} elements")
            self._storages[storage.key] = np.frombuffer(self._raw(storage, storage.numel * dtype.itemsize), dtype)
        return self._storages[storage.key]

    def array(self, record: TensorRecord) -> np.ndarray:
        """The tensor's elements as a fresh C-ordered array (native byte order; bfloat16 as float32)."""
        offset, size, stride = record.offset, record.size, record.stride
        if not (isinstance(size, tuple) and isinstance(stride, tuple) and len(size) == len(stride) <= MAX_DIMS
                and all(_natural(v) for v in (offset, *size, *stride))):
            raise ValueError(f"a tensor of size {_short(size)}, stride {_short(stride)}, offset {_short(offset)}")
        storage = self._storage(record.storage)
        count = math.prod(size)
        if count > storage.size or (count and offset + sum((n - 1) * s for n, s in zip(size, stride))
                                    >= storage.size):
            raise ValueError(f"a tensor of size {list(size)}, stride {list(stride)} from offset {offset} "
                             f"reaches past its storage of {storage.size} elements")
        items = storage.itemsize
        view = np.lib.stride_tricks.as_strided(storage[offset:] if count else storage[:0], size,
                                               [s * items for s in stride], writeable=False)
        out = np.array(view, dtype=view.dtype.newbyteorder("="), order="C")
        if record.storage.kind == "BFloat16Storage":
            out = (out.astype(np.uint32) << 16).view(np.float32)
        return out


class Archive(_Storages):
    """An open ``torch.save`` archive (the zip format): ``obj`` and ``config`` (the model config a file
    written here carries) are read when first asked for."""

    def __init__(self, path: str | Path):
        super().__init__(path)
        if _head(self.path) != b"PK":
            raise ValueError("not a torch.save archive (a zip)")
        with _readable():
            self._zip = zipfile.ZipFile(self.path)
        names = self._zip.namelist()
        pickles = [n for n in names if _is_pickle(n)]
        if len(pickles) != 1:
            raise ValueError(f"a zip with {len(pickles)} ROOT/data.pkl members, not a torch.save archive")
        self.root = pickles[0].split("/")[0]
        # torch.jit.save's: its code and constants are never read (data.pkl holds the modules' state)
        self.torchscript = f"{self.root}/constants.pkl" in names or any(n.startswith(f"{self.root}/code/")
                                                                        for n in names)
        order = self._member("byteorder", optional=True)
        if order not in (None, b"little", b"big"):
            raise ValueError(f"byteorder {order[:16]!r}, not 'little' or 'big'")
        self.byteorder = "<" if order in (None, b"little") else ">"

    @cached_property
    def obj(self) -> Any:
        return parse_pickle(self._member("data.pkl"))

    @cached_property
    def config(self) -> str | None:
        """The model config (JSON text) that :mod:`reference.formats.torch_save` writes beside the pickle."""
        config = self._member(CONFIG_MEMBER, optional=True)
        return None if config is None else config.decode(errors="replace")

    def close(self) -> None:
        self._zip.close()

    def _member(self, name: str, optional: bool = False, size: int | None = None) -> bytes | None:
        full = f"{self.root}/{name}"
        try:
            info = self._zip.getinfo(full)
        except KeyError:
            if optional:
                return None
            raise ValueError(f"the archive lacks {full}") from None
        if info.compress_type != zipfile.ZIP_STORED:  # a compressed member could expand to any size
            raise ValueError(f"{full} is compressed; torch.save stores its members uncompressed")
        if size is not None and info.file_size != size:
            raise ValueError(f"{full} holds {info.file_size} bytes, not the {size} its storage claims")
        with _readable():
            return self._zip.read(full)

    def _raw(self, storage: Storage, nbytes: int) -> bytes:
        if "/" in storage.key:
            raise ValueError(f"storage {storage.key!r}, not a member name")
        return self._member(f"data/{storage.key}", size=nbytes)


class LegacyFile(_Storages):
    """An open file in ``torch.save``'s legacy format (memory-mapped; pickle lengths and storage sizes that a
    damaged file claims are never allocated beyond its end). Its pickles are parsed when ``obj`` is first asked
    for, and each storage's place in the file found then: every storage the pickle names is in the list of
    keys after it and the other way round, each one's element count is what the pickle says, and the last
    one ends where the file does."""

    def __init__(self, path: str | Path):
        super().__init__(path)
        with open(self.path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._offsets: dict[str, int] = {}

    def close(self) -> None:
        self._map.close()

    @cached_property
    def obj(self) -> Any:
        stream = self._map
        stream.seek(0)
        if _parse(stream, _no_persistent) != LEGACY_MAGIC:
            raise ValueError("a pickle that is not a torch.save file (it does not start with torch's magic number)")
        version = _parse(stream, _no_persistent)
        if version != LEGACY_PROTOCOL:
            raise ValueError(f"legacy torch.save protocol {_short(version)}, not {LEGACY_PROTOCOL}")
        _parse(stream, _no_persistent)  # the writer's byte order and C type sizes (storages are little-endian)
        storages: dict[str, Storage] = {}

        def persistent(pid):
            found = _legacy_persistent(pid)
            if isinstance(found, Storage) and storages.setdefault(found.key, found) != found:
                raise ValueError(f"storage {found.key!r} named as {found.numel} {found.kind} elements and as "
                                 f"{storages[found.key].numel} {storages[found.key].kind} elements")
            return found

        obj = _parse(stream, persistent)
        keys = _parse(stream, _no_persistent)
        if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys) and len(set(keys)) == len(keys)):
            raise ValueError("the storages' keys after the pickle are not a list of distinct strings")
        if set(keys) != set(storages):
            raise ValueError(f"{len(set(storages) - set(keys))} storages the pickle names are not in the file and "
                             f"{len(set(keys) - set(storages))} in it are not named")
        self._offsets = self._places([storages[k] for k in keys], stream.tell())
        return obj

    def _places(self, storages: list[Storage], offset: int) -> dict[str, int]:
        """Where each storage's bytes start, the storages following each other from ``offset``."""
        places = {}
        for storage in storages:
            itemsize = np.dtype(STORAGE_DTYPES[storage.kind]).itemsize if storage.kind in STORAGE_DTYPES else \
                OTHER_ITEMSIZES.get(storage.kind)
            if itemsize is None:
                raise ValueError(f"a {storage.kind}, whose element size is not known here")
            head = self._map[offset:offset + 8]
            if len(head) < 8:
                raise ValueError(f"the file ends before storage {storage.key!r}")
            numel = int.from_bytes(head, "little", signed=True)
            if numel != storage.numel:
                raise ValueError(f"storage {storage.key!r} holds {numel} elements, not the {storage.numel} "
                                 "its pickle claims")
            if numel < 0:
                raise ValueError(f"storage {storage.key!r} of {numel} elements")
            places[storage.key] = offset + 8
            offset += 8 + numel * itemsize
            if offset > len(self._map):
                raise ValueError(f"the file ends inside storage {storage.key!r}")
        if offset != len(self._map):
            raise ValueError(f"{len(self._map) - offset} bytes after the last storage")
        return places

    def _raw(self, storage: Storage, nbytes: int) -> bytes:
        self.obj  # parsed first: it finds the storages' places
        start = self._offsets[storage.key]
        return self._map[start:start + nbytes]


# What zipfile raises on a damaged archive besides ValueError: a bad CRC or header, a flag bit it does not
# support (RuntimeError for encryption, NotImplementedError for others), a truncated member.
_DAMAGE = (zipfile.BadZipFile, zipfile.LargeZipFile, RuntimeError, NotImplementedError, EOFError, zlib.error)


@contextmanager
def _readable() -> Iterator[None]:
    try:
        yield
    except _DAMAGE as exc:
        raise ValueError(f"a damaged zip archive ({type(exc).__name__}: {exc})") from None


def _natural(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**62


# ---------------------------------------------------------------------------------------------------------
# State dicts inside


MAX_DEPTH = 16
PARAMETERS = ("weight_", "bias_")  # how a TorchScript recurrent module's parameters begin (weight_ih_l0, bias_ih)


class Module(NamedTuple):
    """A recurrent module found in a file: its entries (``weight_ih_l0``, ...: :class:`TensorRecord` s or
    whatever else the file holds there) and, for a pickled ``nn.RNN`` object, its ``nonlinearity``."""

    tensors: dict
    nonlinearity: str | None = None


def _module_state(node) -> dict | None:
    """The ``__dict__`` of a pickled ``nn.Module`` (its ``_parameters`` and ``_modules``), else ``None``."""
    state = node.state if isinstance(node, Opaque) else None
    if isinstance(state, dict) and isinstance(state.get("_parameters"), dict) and \
            isinstance(state.get("_modules"), dict):
        return state
    return None


def _script_module_state(node) -> dict | None:
    """The state of a TorchScript module (``torch.jit.save``'s ``data.pkl``: an object of a class
    ``__torch__.…`` holding its parameters, submodules and attributes by name), else ``None``."""
    if isinstance(node, Opaque) and node.cls.startswith("__torch__.") and isinstance(node.state, dict):
        return node.state
    return None


def _state_dicts(obj) -> Iterator[tuple[tuple, dict, dict | None]]:
    """``(path, entries, module_state)`` for every dict reachable from ``obj`` through string keys (a
    state_dict at any depth of a checkpoint) and every pickled ``nn.Module`` in it (entries: its
    ``_parameters``; module_state: its ``__dict__``; its submodules' paths continue by their names) or
    TorchScript module (entries: its attributes named as parameters; module_state: its state), at most
    MAX_DEPTH deep."""
    todo, seen = [((), obj)], set()
    while todo:
        path, node = todo.pop()
        if id(node) in seen or len(path) > MAX_DEPTH:
            continue
        seen.add(id(node))
        module = _module_state(node)
        script = None if module is not None else _script_module_state(node)
        children = module["_modules"] if module is not None else node if isinstance(node, dict) else \
            node.state if isinstance(node, Opaque) and isinstance(node.state, dict) else None
        if module is not None:
            yield path, module["_parameters"], module
        elif script is not None:  # its parameters among its attributes (training, _flat_weights, ...)
            yield path, {k: v for k, v in script.items() if isinstance(k, str) and k.startswith(PARAMETERS)}, script
        elif isinstance(node, dict):
            yield path, node, None
        if children is not None:
            todo.extend((path + (k,), v) for k, v in reversed(children.items()) if isinstance(k, str))


def rnn_modules(obj, rename: dict[str, str] | None = None) -> dict[str, Module]:
    """The recurrent modules in ``obj`` (a state_dict, a training checkpoint holding one, a whole model), by
    module path: the keys of the dicts and the names of the submodules that lead to it, then its prefix
    within a state_dict, joined by dots (``"model.encoder.rnn"``; ``""`` for a bare ``nn.RNN``/``nn.LSTM``/
    ``nn.GRU`` state_dict or object). ``rename``: a name map applied to the keys of every state_dict first
    (a package's own names onto PyTorch's); a name it gives that no state_dict holds, or a new name that
    another key of the same state_dict has, is refused."""
    found: dict[str, Module] = {}
    used: set[str] = set()
    for path, entries, module in _state_dicts(obj):
        names = {k: entries[k] for k in entries if isinstance(k, str)}
        if rename:
            hit = {k: v for k, v in rename.items() if k in names}
            clash = sorted(v for v in hit.values() if v in set(names) - set(hit))
            if clash:
                raise ValueError(f"the name map renames a tensor to {clash[0]!r}, which another tensor of the file "
                                 f"is named")
            used |= set(hit)
            names = {hit.get(k, k): v for k, v in names.items()}
        for prefix, tensors in module_tensors(names).items():
            name = ".".join([*path, prefix] if prefix else path)
            if name in found:
                raise ValueError(f"two recurrent modules at {name!r} (nested dicts and a state_dict prefix)")
            nonlinearity = module.get("nonlinearity") if module is not None and not prefix else None
            found[name] = Module(tensors, nonlinearity if isinstance(nonlinearity, str) else None)
    absent = sorted(set(rename or ()) - used)
    if absent:
        raise ValueError(f"the name map renames {absent[:3]}, which no state_dict of the file holds")
    return found


def describe(obj) -> str:
    """What a file holds when it holds no recurrent module: its objects' classes, or its top level."""
    classes = sorted({o.cls for o in _opaque_objects(obj)})
    if classes:
        return "objects of " + ", ".join(classes[:5]) + (" ..." if len(classes) > 5 else "")
    if isinstance(obj, dict):
        keys = [k for k in obj if isinstance(k, str)]
        return f"a dict of {len(obj)} entries ({', '.join(map(repr, keys[:5]))}{' ...' if len(keys) > 5 else ''})"
    return f"a {type(obj).__name__}"


def _opaque_objects(obj) -> Iterator[Opaque]:
    todo, seen = [obj], set()
    while todo and len(seen) < 100_000:
        node = todo.pop()
        if not isinstance(node, (Opaque, dict, list, tuple)) or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Opaque):
            yield node
            todo.append(node.state)
        else:
            todo.extend(node.values() if isinstance(node, dict) else node)


def load_state_dict(path: str | Path, module: str | None = None, rename: dict[str, str] | None = None) \
        -> tuple[dict[str, np.ndarray], str | None]:
    """The tensors of the recurrent module (``nn.RNN``, ``nn.LSTM``, ``nn.GRU``) in the ``torch.save`` file at
    ``path``, under ``nn.RNN``'s names (``weight_ih_l0``, ...; a single cell's ``weight_ih`` is layer 0's), and the
    module's ``nonlinearity`` where the file
    holds the module object itself (``"relu"``/``"tanh"`` of an ``nn.RNN``; else ``None``). ``module`` picks one
    by path (see :func:`rnn_modules`) where the file holds several; ``rename`` maps the file's own names onto
    PyTorch's first (:func:`rnn_modules`). Errors are ``ValueError`` s naming what is wrong."""
    with open_file(path) as archive:
        modules = rnn_modules(archive.obj, rename)
        if not modules:
            raise ValueError(f"holds no recurrent module (no {KNOWN_BY}); it holds {describe(archive.obj)}")
        name = pick_module(modules, module)
        out = {}
        for key, value in modules[name].tensors.items():
            if value is None:  # a parameter registered as None: a pickled cell's bias_ih with bias=False
                continue
            if not isinstance(value, TensorRecord):
                what = value.cls if isinstance(value, Opaque) else type(value).__name__
                raise ValueError(f"{_qualified(name, key)} is not a tensor but a {what}")
            try:
                out[key] = archive.array(value)
            except ValueError as exc:
                raise ValueError(f"{_qualified(name, key)}: {exc}") from None
        return out, modules[name].nonlinearity


def carried_config(path: str | Path) -> str | None:
    """The model config (JSON text) that a file :mod:`reference.formats.torch_save` wrote carries beside its
    state_dict; ``None`` for any other ``torch.save`` file. The pickle is not read."""
    with open_file(path) as archive:
        return archive.config


def _qualified(module: str, key: str) -> str:
    return repr(f"{module}.{key}" if module else key)


__all__ = ["Archive", "LegacyFile", "open_file", "TensorRecord", "Opaque", "is_torch_file", "parse_pickle",
           "rnn_modules", "load_state_dict", "carried_config"]
