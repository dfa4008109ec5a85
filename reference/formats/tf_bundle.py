"""TensorFlow checkpoints (the V2 "tensor bundle" that ``tf.train.Saver``, ``tf.train.Checkpoint`` and the
``SaveV2`` op write: ``PREFIX.index`` plus ``PREFIX.data-NNNNN-of-MMMMM``), read and written with NumPy and
the standard library alone, so weights trained with TensorFlow's ``CudnnGRU``/``CudnnLSTM`` load without
TensorFlow, and weights from elsewhere go into a checkpoint that TensorFlow's ``Saver`` restores.

``PREFIX.index`` is a LevelDB-style sorted table (TensorFlow's ``core/lib/io/table``): data blocks of
prefix-compressed ``key -> value`` entries, an index block pointing at them, and a 48-byte footer ending in
a magic number. The entry with the empty key is a ``BundleHeaderProto`` (shard count, endianness); every
other key is a tensor name whose value is a ``BundleEntryProto`` (dtype, shape, shard, offset, size,
masked CRC32C of the bytes). The protobufs are decoded and encoded here field by field. Numeric tensors
only; partitioned (sliced) variables, strings and bfloat16 are refused with the tensor's name. :func:`write`
lays a single-shard bundle out as TensorFlow 2.21's ``SaveV2`` does, byte for byte (tested on its files).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from .. import checks
from .files import replacing
from .protobuf import (field as _field, fields as _fields, put_varint as _put_varint, shape as _shape,
                       typed as _typed, varint as _varint)

MAGIC = 0xDB4775248B80FB57  # kTableMagicNumber
FOOTER_LENGTH = 48
BLOCK_SIZE = 262144  # table::Options defaults, as BundleWriter keeps them
RESTART_INTERVAL = 16
BUNDLE_VERSION = 1  # VersionDef.producer of the bundles TensorFlow writes (kTensorBundleVersion)
# tensorflow/core/framework/types.proto DataType -> NumPy (the numeric types a NumPy array can hold)
DTYPES = {1: np.float32, 2: np.float64, 3: np.int32, 4: np.uint8, 5: np.int16, 6: np.int8, 9: np.int64,
          10: np.bool_, 17: np.uint16, 19: np.float16, 22: np.uint32, 23: np.uint64, 8: np.complex64,
          18: np.complex128}
DTYPE_NAMES = {7: "string", 14: "bfloat16", 20: "resource", 21: "variant"}


@dataclass(frozen=True)
class Entry:
    """One tensor's ``BundleEntryProto``: ``dtype`` is TensorFlow's enum value."""

    name: str
    dtype: int
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    crc32c: int | None
    sliced: bool

    @property
    def numpy_dtype(self) -> np.dtype | None:
        return None if self.dtype not in DTYPES else np.dtype(DTYPES[self.dtype])

    def describe_dtype(self) -> str:
        dtype = self.numpy_dtype
        return dtype.name if dtype is not None else DTYPE_NAMES.get(self.dtype, f"TF dtype {self.dtype}")


def _entry(name: str, buf: bytes) -> Entry:
    fields = _fields(buf)
    what = f"index entry {name!r}"
    shape = _shape(_typed(fields, 2, bytes, b"", what))
    sliced = any(number == 7 for number, _ in fields)
    dtype, shard, offset, size = (_typed(fields, k, int, 0, what) for k in (1, 3, 4, 5))
    return Entry(name, dtype, shape, shard, offset, size, _typed(fields, 6, int, None, what), sliced)


# ---- the sorted table ------------------------------------------------------------------------------------


def _block(data: bytes, handle: bytes, what: str) -> bytes:
    offset, pos = _varint(handle, 0)
    size, _ = _varint(handle, pos)
    if offset + size + 5 > len(data):
        raise ValueError(f"{what} block at {offset} (+{size}) lies past the end of the index file")
    if data[offset + size] != 0:
        raise ValueError(f"{what} block is compressed (type {data[offset + size]}); TensorFlow writes bundles "
                         "uncompressed")
    contents = data[offset : offset + size]
    stored = struct.unpack_from("<I", data, offset + size + 1)[0]
    if _unmask(stored) != crc32c(contents + b"\x00"):
        raise ValueError(f"{what} block at {offset}: checksum mismatch (corrupt index file)")
    return contents


def _block_entries(block: bytes) -> Iterable[tuple[bytes, bytes]]:
    if len(block) < 4:
        raise ValueError("index block too short")
    restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
    end = len(block) - 4 - 4 * restarts
    pos, key = 0, b""
    while pos < end:
        shared, pos = _varint(block, pos)
        unshared, pos = _varint(block, pos)
        length, pos = _varint(block, pos)
        if shared > len(key) or pos + unshared + length > end:
            raise ValueError("index entry runs past its block (corrupt index file)")
        key = key[:shared] + block[pos : pos + unshared]
        pos += unshared
        yield key, block[pos : pos + length]
        pos += length


def data_block_handles(data: bytes) -> list[bytes]:
    """The handles of a sorted table's data blocks, from its footer and index block."""
    if len(data) < FOOTER_LENGTH:
        raise ValueError("too short for a TensorFlow checkpoint index")
    footer = data[-FOOTER_LENGTH:]
    lo, hi = struct.unpack_from("<II", footer, FOOTER_LENGTH - 8)
    if (hi << 32) | lo != MAGIC:
        raise ValueError("not a TensorFlow checkpoint index (no table magic number at its end)")
    _, pos = _varint(footer, 0)  # the metaindex handle (an empty block in bundles)
    _, pos = _varint(footer, pos)
    return [handle for _, handle in _block_entries(_block(data, footer[pos:], "index"))]


def _table(data: bytes) -> Iterable[tuple[bytes, bytes]]:
    for handle in data_block_handles(data):
        yield from _block_entries(_block(data, handle, "data"))


# ---- CRC32C (Castagnoli), masked as LevelDB and TensorFlow store it ---------------------------------------


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    return table


_CRC_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _unmask(masked: int) -> int:
    rot = (masked - 0xA282EAD8) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


def _mask(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


# ---- writing: protobuf fields, blocks, the table -----------------------------------------------------------


def _encode_entry(dtype: int, shape: tuple[int, ...], offset: int, size: int, crc: int) -> bytes:
    dims = b"".join(_field(2, _field(1, d)) for d in shape)
    return (_field(1, dtype) + _field(2, dims) + _field(4, offset) + _field(5, size)
            + _field(6, _mask(crc), fixed32=True))


class _BlockBuilder:
    def __init__(self, restart_interval: int) -> None:
        self.interval, self.buffer, self.restarts, self.count, self.last = restart_interval, bytearray(), [0], 0, b""

    def add(self, key: bytes, value: bytes) -> None:
        shared = 0
        if self.count < self.interval:
            while shared < min(len(key), len(self.last)) and key[shared] == self.last[shared]:
                shared += 1
        else:
            self.restarts.append(len(self.buffer))
            self.count = 0
        self.buffer += _put_varint(shared) + _put_varint(len(key) - shared) + _put_varint(len(value))
        self.buffer += key[shared:] + value
        self.last, self.count = key, self.count + 1

    def size_estimate(self) -> int:
        return len(self.buffer) + 4 * len(self.restarts) + 4

    def finish(self) -> bytes:
        return bytes(self.buffer) + b"".join(struct.pack("<I", r) for r in self.restarts) + \
            struct.pack("<I", len(self.restarts))


def _shortest_separator(start: bytes, limit: bytes) -> bytes:
    """LevelDB's bytewise ``FindShortestSeparator``: a short key in ``[start, limit)``."""
    n = 0
    while n < min(len(start), len(limit)) and start[n] == limit[n]:
        n += 1
    if n < min(len(start), len(limit)) and start[n] < 0xFF and start[n] + 1 < limit[n]:
        return start[:n] + bytes([start[n] + 1])
    return start


def _short_successor(key: bytes) -> bytes:
    """LevelDB's bytewise ``FindShortSuccessor``: a short key ``>= key``."""
    for n, byte in enumerate(key):
        if byte != 0xFF:
            return key[:n] + bytes([byte + 1])
    return key


def _table_bytes(items: list[tuple[bytes, bytes]]) -> bytes:
    """A sorted table of ``items`` (keys in increasing order), as TensorFlow's ``TableBuilder`` lays it out."""
    out = bytearray()

    def put_block(contents: bytes) -> bytes:
        handle = _put_varint(len(out)) + _put_varint(len(contents))
        out.extend(contents + b"\x00" + struct.pack("<I", _mask(crc32c(contents + b"\x00"))))
        return handle

    index, data, pending = _BlockBuilder(1), _BlockBuilder(RESTART_INTERVAL), None
    for key, value in items:
        if pending is not None:
            index.add(_shortest_separator(pending[0], key), pending[1])
            pending = None
        data.add(key, value)
        if data.size_estimate() >= BLOCK_SIZE:
            pending = (key, put_block(data.finish()))
            data = _BlockBuilder(RESTART_INTERVAL)
    if data.count or len(data.restarts) > 1:
        pending = (data.last, put_block(data.finish()))
    if pending is not None:
        index.add(_short_successor(pending[0]), pending[1])
    meta = put_block(_BlockBuilder(RESTART_INTERVAL).finish())
    handles = meta + put_block(index.finish())
    out.extend(handles + bytes(FOOTER_LENGTH - 8 - len(handles)) + struct.pack("<II", MAGIC & 0xFFFFFFFF, MAGIC >> 32))
    return bytes(out)


# ---- the bundle ------------------------------------------------------------------------------------------


def _prefix(path: str | Path) -> Path:
    path = Path(path)
    return path.with_suffix("") if path.suffix == ".index" else path


def is_bundle(path: str | Path) -> bool:
    """Whether ``path`` is a bundle's ``.index`` file or its prefix."""
    return Path(f"{_prefix(path)}.index").is_file()


@dataclass(frozen=True)
class Bundle:
    """A bundle's parsed index: its prefix, ``{name: Entry}``, the number of data shards and the byte order
    (``"<"`` or ``">"``)."""

    prefix: Path
    entries: dict[str, Entry]
    shards: int
    order: str

    def read(self, names: Iterable[str] | None = None, verify: bool = True) -> dict[str, np.ndarray]:
        """The tensors ``names`` (default: every tensor of a numeric dtype), checked against their stored
        CRC32C unless ``verify`` is false (a pure-Python CRC: about 1 s for 10 MB)."""
        if names is None:
            names = [n for n, e in self.entries.items() if e.numpy_dtype is not None and not e.sliced]
        out = {}
        for name in names:
            if name not in self.entries:
                raise ValueError(f"{self.prefix}: the checkpoint has no tensor {name!r}")
            entry = self.entries[name]
            if entry.sliced:
                raise ValueError(f"tensor {name!r} is saved in slices (a partitioned variable); not supported")
            dtype = entry.numpy_dtype
            if dtype is None:
                raise ValueError(f"tensor {name!r} is {entry.describe_dtype()}, which NumPy cannot hold")
            data = Path(f"{self.prefix}.data-{entry.shard:05d}-of-{self.shards:05d}")
            if not data.is_file():
                raise ValueError(f"tensor {name!r} lives in {data.name}, which is missing")
            count = math.prod(entry.shape)
            if entry.size != count * dtype.itemsize or entry.offset + entry.size > data.stat().st_size:
                raise ValueError(f"tensor {name!r}: {entry.size} bytes at offset {entry.offset} do not hold "
                                 f"{list(entry.shape)} {dtype.name} (truncated or corrupt data file)")
            with open(data, "rb") as f:  # only this tensor's bytes: the RNN may be a small part of a big checkpoint
                f.seek(entry.offset)
                blob = f.read(entry.size)
            if verify and entry.crc32c is not None and _unmask(entry.crc32c) != crc32c(blob):
                raise ValueError(f"tensor {name!r}: checksum mismatch (corrupt data file)")
            out[name] = np.frombuffer(blob, dtype.newbyteorder(self.order)).astype(dtype).reshape(entry.shape)
        return out


def open_bundle(path: str | Path) -> Bundle:
    """The index of the bundle at ``path`` (its prefix or its ``.index`` file), parsed once."""
    prefix = _prefix(path)
    index = Path(f"{prefix}.index")
    if not index.is_file():
        raise ValueError(f"{index}: no such TensorFlow checkpoint index")
    found, header = {}, None
    for key, value in _table(index.read_bytes()):
        if key == b"":
            header = _fields(value)
        else:
            name = key.decode("utf-8", errors="replace")
            found[name] = _entry(name, value)
    if header is None:
        raise ValueError(f"{index}: a sorted table, but without a BundleHeaderProto (not a tensor bundle)")
    shards, endianness = (_typed(header, k, int, default, "bundle header") for k, default in ((1, 1), (2, 0)))
    return Bundle(prefix, found, shards, ">" if endianness == 1 else "<")


def write(path: str | Path, tensors: dict[str, np.ndarray], byte_order: str = "<") -> None:
    """A single-shard bundle at prefix ``path`` (``PREFIX.index``, ``PREFIX.data-00000-of-00001``) holding
    ``tensors`` (numeric NumPy arrays, in name order), as TensorFlow's ``SaveV2`` writes it: little-endian,
    or with ``byte_order=">"`` big-endian, as on a big-endian host (the header says which)."""
    checks.one_of("byte_order", byte_order, ("<", ">"))
    prefix = _prefix(path)
    codes = {np.dtype(v): k for k, v in DTYPES.items()}
    header = _field(1, 1) + (_field(2, 1) if byte_order == ">" else b"") + _field(3, _field(1, BUNDLE_VERSION))
    items, data, offset = [(b"", header)], bytearray(), 0
    for name in sorted(tensors, key=lambda n: n.encode()):
        array = np.asarray(tensors[name])
        dtype = array.dtype.newbyteorder("=")
        if dtype not in codes:
            raise ValueError(f"tensor {name!r} is {array.dtype}; a checkpoint holds {sorted(d.name for d in codes)}")
        blob = np.ascontiguousarray(array, dtype=dtype.newbyteorder(byte_order)).tobytes()
        items.append((name.encode(), _encode_entry(codes[dtype], array.shape, offset, len(blob), crc32c(blob))))
        data += blob
        offset += len(blob)
    index = _table_bytes(items)
    # Both written before either replaces its old file, the data first: a kill between the two leaves the old
    # index over the new data, which the index's checksums refuse rather than read as wrong tensors.
    with replacing(f"{prefix}.index") as index_file, replacing(f"{prefix}.data-00000-of-00001") as data_file:
        data_file.write_bytes(bytes(data))
        index_file.write_bytes(index)


def read(path: str | Path, names: Iterable[str] | None = None, verify: bool = True) -> dict[str, np.ndarray]:
    """``open_bundle(path).read(names, verify)``."""
    return open_bundle(path).read(names, verify)
