"""PyTorch's own file format written with NumPy alone: what ``torch.save(rnn.state_dict(), path)`` writes.

The archive is a zip of uncompressed members under a root folder (the file's stem, as ``torch.save`` names
it), each member's data starting on a 64-byte boundary (an ``FB`` extra field pads the local header, as
PyTorch's writer does, so ``torch.load(..., mmap=True)`` can map it):

- ``data.pkl``: a protocol-2 pickle of the ``OrderedDict`` of tensors, with the ``_metadata`` a module's
  ``state_dict()`` carries (``{"": {"version": 1}}``), byte for byte what Python's pickler writes for
  torch's own state_dict of the same tensors (``test_torch_files.py`` holds the two against each other).
  Each tensor is ``torch._utils._rebuild_tensor_v2`` of a storage (a persistent id
  ``("storage", torch.FloatStorage, key, "cpu", numel)``), offset 0, its size, its C-order strides;
- ``data/KEY``: each tensor's elements, C order, little endian, one storage per tensor;
- ``.format_version``, ``.storage_alignment``, ``byteorder``, ``version``, ``.data/serialization_id``, as
  ``torch.save`` writes them (the id here is derived from the contents, so the same tensors give the same
  file);
- ``cudnn_rnn_compat/config.json`` (optional): our model config, which ``torch.load`` leaves alone and
  :mod:`reference.formats.torch_archive` reads back.

Only writing: nothing here reads a pickle.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import zipfile
from pathlib import Path

import numpy as np

from .files import replacing

ALIGNMENT = 64
SUFFIXES = (".pt", ".pth")
CONFIG_MEMBER = "cudnn_rnn_compat/config.json"
STORAGES = {"float16": "HalfStorage", "float32": "FloatStorage", "float64": "DoubleStorage"}
_DATE = (1980, 1, 1, 0, 0, 0)


class _Pickler:
    """The few opcodes of protocol 2 a state_dict needs, memoized as Python's pickler memoizes them (every
    string, global, tuple and reduced object once; a repeated string or global read back with BINGET)."""

    def __init__(self) -> None:
        self.out = bytearray(b"\x80\x02")  # PROTO 2
        self.memo: dict = {}

    def _put(self, key=None) -> None:
        index = len(self.memo)
        self.memo[key if key is not None else ("#", index)] = index
        self.out += b"q" + bytes([index]) if index < 256 else b"r" + struct.pack("<I", index)

    def _get(self, key) -> bool:
        if key not in self.memo:
            return False
        index = self.memo[key]
        self.out += b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index)
        return True

    def string(self, text: str) -> None:
        if not self._get(("str", text)):
            raw = text.encode("utf-8", "surrogatepass")
            self.out += b"X" + struct.pack("<I", len(raw)) + raw
            self._put(("str", text))

    def int(self, value: int) -> None:
        if 0 <= value <= 0xFF:
            self.out += b"K" + bytes([value])
        elif 0 <= value <= 0xFFFF:
            self.out += b"M" + struct.pack("<H", value)
        elif -2**31 <= value < 2**31:
            self.out += b"J" + struct.pack("<i", value)
        else:  # LONG1: little-endian two's complement, as short as it goes
            raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
            self.out += b"\x8a" + bytes([len(raw)]) + raw

    def global_(self, module: str, name: str) -> None:
        if not self._get(("global", module, name)):
            self.out += b"c" + f"{module}\n{name}\n".encode("ascii")
            self._put(("global", module, name))

    def ints(self, values: tuple) -> None:
        """A tuple of ints: TUPLE1-3 (or MARK ... TUPLE beyond three, EMPTY_TUPLE for none), memoized."""
        if not values:
            self.out += b")"
            return
        if len(values) > 3:
            self.out += b"("
        for v in values:
            self.int(v)
        self.out += {1: b"\x85", 2: b"\x86", 3: b"\x87"}.get(len(values), b"t")
        self._put()

    def ordered_dict(self) -> None:
        """``OrderedDict()``: its items follow through :meth:`items`."""
        self.global_("collections", "OrderedDict")
        self.out += b")R"  # EMPTY_TUPLE, REDUCE
        self._put()

    def empty_dict(self) -> None:
        self.out += b"}"
        self._put()

    def items(self, entries: list, value) -> None:
        """SETITEM(S) of ``entries`` (``[(key, item)]``) into the dict on the stack, in batches of 1000 as
        Python's pickler writes them; ``value(item)`` writes one item."""
        for start in range(0, len(entries), 1000):
            batch = entries[start:start + 1000]
            if len(batch) > 1:
                self.out += b"("
            for key, item in batch:
                self.string(key)
                value(item)
            self.out += b"u" if len(batch) > 1 else b"s"

    def tensor(self, kind: str, key: str, shape: tuple, numel: int) -> None:
        """``_rebuild_tensor_v2(storage, 0, shape, strides, False, OrderedDict())`` of a fresh C-ordered
        storage ``key`` of ``numel`` elements."""
        self.global_("torch._utils", "_rebuild_tensor_v2")
        self.out += b"(("  # MARK (the arguments), MARK (the persistent id)
        self.string("storage")
        self.global_("torch", kind)
        self.string(key)
        self.string("cpu")
        self.int(numel)
        self.out += b"t"
        self._put()
        self.out += b"Q"  # BINPERSID
        self.int(0)
        self.ints(tuple(shape))
        self.ints(tuple(math.prod(max(n, 1) for n in shape[i + 1:]) for i in range(len(shape))))  # torch's
        self.out += b"\x89"  # NEWFALSE: requires_grad
        self.ordered_dict()  # backward hooks
        self.out += b"t"
        self._put()
        self.out += b"R"
        self._put()


def state_dict_pickle(tensors: dict[str, np.ndarray]) -> bytes:
    """``data.pkl`` of a state_dict of ``tensors`` (in their order; storage keys ``"0"``, ``"1"``, ...)."""
    p = _Pickler()
    keys = iter(range(len(tensors)))

    def tensor(a: np.ndarray) -> None:
        p.tensor(STORAGES[a.dtype.name], str(next(keys)), a.shape, a.size)

    def metadata(_) -> None:  # OrderedDict({"": {"version": 1}}): the module's own entry
        p.ordered_dict()
        p.items([("", None)], version)

    def version(_) -> None:
        p.empty_dict()
        p.items([("version", 1)], p.int)

    p.ordered_dict()
    p.items(list(tensors.items()), tensor)
    p.empty_dict()  # the OrderedDict's __dict__ (BUILD): {"_metadata": ...}
    p.items([("_metadata", None)], metadata)
    p.out += b"b."  # BUILD, STOP
    return bytes(p.out)


def _check(tensors: dict) -> dict[str, np.ndarray]:
    if not isinstance(tensors, dict) or not all(isinstance(k, str) for k in tensors):
        raise TypeError("tensors must be a dict of str names to arrays")
    out = {}
    for name, a in tensors.items():
        if not isinstance(a, np.ndarray):
            raise TypeError(f"tensor {name!r}: expected a NumPy array, got {type(a).__name__}")
        if a.dtype.kind != "f" or a.dtype.name not in STORAGES:
            raise TypeError(f"tensor {name!r}: dtype {a.dtype}, expected float16, float32 or float64")
        out[name] = np.asarray(a, dtype=a.dtype.newbyteorder("<"), order="C")  # (ascontiguousarray: 0-d to 1-d)
    return out


def _raw(a: np.ndarray) -> np.ndarray:
    """A C-ordered array's bytes, as a flat uint8 view."""
    return a.reshape(-1).view(np.uint8)


def _member(zf: zipfile.ZipFile, name: str, data) -> None:
    """One stored member whose data starts on an ALIGNMENT boundary: an ``FB`` extra field pads its local
    header (zipfile appends a 20-byte zip64 field of its own where the member is that large)."""
    data = memoryview(data).cast("B")
    info = zipfile.ZipInfo(name, _DATE)
    info.compress_type, info.file_size = zipfile.ZIP_STORED, data.nbytes
    zip64 = data.nbytes * 1.05 > zipfile.ZIP64_LIMIT  # zipfile's own rule
    start = zf.fp.tell() + 30 + len(name.encode("utf-8")) + 4 + (20 if zip64 else 0)
    pad = -start % ALIGNMENT
    info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
    with zf.open(info, "w", force_zip64=zip64) as f:
        f.write(data)


def write_state_dict(path: str | Path, tensors: dict[str, np.ndarray], config: dict | None = None) -> None:
    """Write ``tensors`` (float16/32/64 arrays, by state_dict name) as ``torch.save(state_dict, path)`` would,
    for ``torch.load(path)`` (``weights_only=True``, its default) and ``module.load_state_dict``; ``config``
    (JSON-able) goes beside them in a member of its own. The file is written whole (beside ``path``, then moved
    over it)."""
    tensors = _check(tensors)
    pkl = state_dict_pickle(tensors)
    digest = hashlib.sha256(pkl)  # the serialization id: torch.save draws one at random, ours is the contents'
    for a in tensors.values():
        digest.update(_raw(a))
    serialization_id = str(int.from_bytes(digest.digest()[:16], "big")).zfill(40).encode()
    root = Path(path).stem or "archive"
    with replacing(path) as partial, zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED) as zf:
        _member(zf, f"{root}/data.pkl", pkl)
        _member(zf, f"{root}/.format_version", b"1")
        _member(zf, f"{root}/.storage_alignment", str(ALIGNMENT).encode())
        _member(zf, f"{root}/byteorder", b"little")
        for key, a in enumerate(tensors.values()):
            _member(zf, f"{root}/data/{key}", _raw(a))
        _member(zf, f"{root}/version", b"3\n")
        _member(zf, f"{root}/.data/serialization_id", serialization_id)
        if config is not None:
            _member(zf, f"{root}/{CONFIG_MEMBER}", json.dumps(config).encode())


__all__ = ["write_state_dict", "state_dict_pickle", "CONFIG_MEMBER", "SUFFIXES"]
