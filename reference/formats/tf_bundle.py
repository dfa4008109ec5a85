"""TensorFlow checkpoints (the V2 "tensor bundle" that ``tf.train.Saver``, ``tf.train.Checkpoint`` and the
``SaveV2`` op write: ``PREFIX.index`` plus ``PREFIX.data-NNNNN-of-MMMMM``), read with NumPy and the standard
library alone, so weights trained with TensorFlow's ``CudnnGRU``/``CudnnLSTM`` load without TensorFlow.

``PREFIX.index`` is a LevelDB-style sorted table (TensorFlow's ``core/lib/io/table``): data blocks of
prefix-compressed ``key -> value`` entries, an index block pointing at them, and a 48-byte footer ending in
a magic number. The entry with the empty key is a ``BundleHeaderProto`` (shard count, endianness); every
other key is a tensor name whose value is a ``BundleEntryProto`` (dtype, shape, shard, offset, size,
masked CRC32C of the bytes). The protobufs are decoded here field by field. Numeric tensors only;
partitioned (sliced) variables, strings and bfloat16 are refused with the tensor's name.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

MAGIC = 0xDB4775248B80FB57  # kTableMagicNumber
FOOTER_LENGTH = 48
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


# ---- protobuf wire format and varints --------------------------------------------------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 64 bits")


def _fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """``(field number, value)`` of every field of a protobuf message (ints for varint and fixed fields,
    bytes for length-delimited ones)."""
    out, pos = [], 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = struct.unpack_from("<Q", buf, pos)[0], pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + length], pos + length
        elif wire == 5:
            value, pos = struct.unpack_from("<I", buf, pos)[0], pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        out.append((number, value))
    return out


def _shape(buf: bytes) -> tuple[int, ...]:
    dims = []
    for number, value in _fields(buf):
        if number == 2:  # TensorShapeProto.dim
            size = dict(_fields(value)).get(1, 0)
            dims.append(size - (1 << 64) if size >= 1 << 63 else size)  # int64: -1 is unknown
        elif number == 3 and value:
            raise ValueError("unknown rank")
    return tuple(dims)


def _entry(name: str, buf: bytes) -> Entry:
    fields = _fields(buf)
    get = dict(fields).get
    shape = _shape(get(2, b""))
    sliced = any(number == 7 for number, _ in fields)
    return Entry(name, get(1, 0), shape, get(3, 0), get(4, 0), get(5, 0), get(6), sliced)


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
        key = key[:shared] + block[pos : pos + unshared]
        pos += unshared
        yield key, block[pos : pos + length]
        pos += length


def _table(data: bytes) -> Iterable[tuple[bytes, bytes]]:
    if len(data) < FOOTER_LENGTH:
        raise ValueError("too short for a TensorFlow checkpoint index")
    footer = data[-FOOTER_LENGTH:]
    lo, hi = struct.unpack_from("<II", footer, FOOTER_LENGTH - 8)
    if (hi << 32) | lo != MAGIC:
        raise ValueError("not a TensorFlow checkpoint index (no table magic number at its end)")
    _, pos = _varint(footer, 0)  # the metaindex handle (empty in bundles)
    _, pos = _varint(footer, pos)
    for _, handle in _block_entries(_block(data, footer[pos:], "index")):
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


# ---- the bundle ------------------------------------------------------------------------------------------


def _prefix(path: str | Path) -> Path:
    path = Path(path)
    return path.with_suffix("") if path.suffix == ".index" else path


def is_bundle(path: str | Path) -> bool:
    """Whether ``path`` is a bundle's ``.index`` file or its prefix."""
    return Path(f"{_prefix(path)}.index").is_file()


def entries(path: str | Path) -> tuple[dict[str, Entry], int, str]:
    """``({name: Entry}, number of data shards, byte order "<" or ">")`` of the bundle at ``path`` (its prefix
    or its ``.index`` file)."""
    index = Path(f"{_prefix(path)}.index")
    if not index.is_file():
        raise ValueError(f"{index}: no such TensorFlow checkpoint index")
    found, header = {}, None
    for key, value in _table(index.read_bytes()):
        if key == b"":
            header = dict(_fields(value))
        else:
            name = key.decode("utf-8", errors="replace")
            found[name] = _entry(name, value)
    if header is None:
        raise ValueError(f"{index}: a sorted table, but without a BundleHeaderProto (not a tensor bundle)")
    return found, header.get(1, 1), ">" if header.get(2, 0) == 1 else "<"


def read(path: str | Path, names: Iterable[str] | None = None, verify: bool = True) -> dict[str, np.ndarray]:
    """The tensors ``names`` (default: every tensor of a numeric dtype) of the bundle at ``path``, checked
    against their stored CRC32C unless ``verify`` is false (a pure-Python CRC: about 1 s for 10 MB)."""
    prefix = _prefix(path)
    found, shards, order = entries(prefix)
    if names is None:
        names = [n for n, e in found.items() if e.numpy_dtype is not None and not e.sliced]
    out = {}
    files: dict[int, bytes] = {}
    for name in names:
        if name not in found:
            raise ValueError(f"{prefix}: the checkpoint has no tensor {name!r}")
        entry = found[name]
        if entry.sliced:
            raise ValueError(f"tensor {name!r} is saved in slices (a partitioned variable); not supported")
        dtype = entry.numpy_dtype
        if dtype is None:
            raise ValueError(f"tensor {name!r} is {entry.describe_dtype()}, which NumPy cannot hold")
        if entry.shard not in files:
            data = Path(f"{prefix}.data-{entry.shard:05d}-of-{shards:05d}")
            if not data.is_file():
                raise ValueError(f"tensor {name!r} lives in {data.name}, which is missing")
            files[entry.shard] = data.read_bytes()
        blob = files[entry.shard][entry.offset : entry.offset + entry.size]
        count = int(np.prod(entry.shape))
        if len(blob) != entry.size or entry.size != count * dtype.itemsize:
            raise ValueError(f"tensor {name!r}: {entry.size} bytes at offset {entry.offset} do not hold "
                             f"{list(entry.shape)} {dtype.name} (truncated or corrupt data file)")
        if verify and entry.crc32c is not None and _unmask(entry.crc32c) != crc32c(blob):
            raise ValueError(f"tensor {name!r}: checksum mismatch (corrupt data file)")
        out[name] = np.frombuffer(blob, dtype.newbyteorder(order)).astype(dtype).reshape(entry.shape)
    return out
