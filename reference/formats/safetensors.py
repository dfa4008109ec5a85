"""The safetensors file format, read and written with NumPy alone (no pickle, no dependency).

Layout: an 8-byte little-endian header length ``N``, ``N`` bytes of JSON (``{name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {str: str}}``), then the tensors' bytes, C order, little
endian, offsets relative to the end of the header. The reader checks every offset and size before it
touches the data, so a malformed or hostile file raises ``ValueError`` naming what is wrong.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from .files import load_json, replacing

DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8, "I16": np.int16,
          "I32": np.int32, "I64": np.int64, "U8": np.uint8, "U16": np.uint16, "U32": np.uint32, "U64": np.uint64,
          "BOOL": np.bool_}
CODES = {np.dtype(v): k for k, v in DTYPES.items()}
MAX_HEADER = 100 * 2**20


def save(path: str | Path, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    header: dict = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("safetensors metadata must map str to str")
        header["__metadata__"] = metadata
    offset, blobs = 0, []
    for name in sorted(tensors):
        a = np.asarray(tensors[name], order="C")  # (ascontiguousarray would make a scalar 1-D)
        if a.dtype not in CODES:
            raise TypeError(f"tensor {name!r}: dtype {a.dtype} cannot be stored in safetensors")
        data = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": CODES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # align the data to 8 bytes, as the reference writer does
    with replacing(path) as partial, open(partial, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def _header(raw: bytes, size: int, path) -> tuple[int, dict, dict]:
    """``(n, entries, metadata)`` of the header of a file of ``size`` bytes that starts with ``raw`` (its first
    8 + n bytes at least, n being the header's length)."""
    if size < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > min(MAX_HEADER, size - 8):
        raise ValueError(f"{path}: not a safetensors file (header length {n} exceeds the file)")
    try:
        header = load_json(raw[8:8 + n], "its header")
    except ValueError as exc:
        raise ValueError(f"{path}: not a safetensors file ({exc})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: safetensors header must be a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in metadata.items()):
        raise ValueError(f"{path}: safetensors __metadata__ must map strings to strings")
    return n, header, metadata


def names(path: str | Path) -> list[str]:
    """The tensors' names, from the header alone (the data is not read)."""
    with open(path, "rb") as f:
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        raw = head + f.read(min(n, MAX_HEADER))
    return list(_header(raw, Path(path).stat().st_size, path)[1])


def load(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """``(tensors, metadata)``; ``ValueError`` naming the problem for anything malformed."""
    raw = Path(path).read_bytes()
    n, header, metadata = _header(raw, len(raw), path)
    data = memoryview(raw)[8 + n:]
    tensors, spans = {}, []
    for name, info in header.items():
        try:
            dtype = np.dtype(DTYPES[info["dtype"]]).newbyteorder("<")
            shape, offsets = info["shape"], info["data_offsets"]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{path}: tensor {name!r} has a malformed entry ({exc!r})") from None
        if not (_ints(shape) and _ints(offsets) and len(offsets) == 2):
            raise ValueError(f"{path}: tensor {name!r} has a malformed shape or data_offsets")
        begin, end = offsets
        if not 0 <= begin <= end <= len(data):
            raise ValueError(f"{path}: tensor {name!r} lies outside the file (offsets {begin}..{end})")
        needed = dtype.itemsize
        for d in shape:  # Python ints: no overflow
            needed *= d
        if end - begin != needed:
            raise ValueError(f"{path}: tensor {name!r} has {end - begin} bytes, its shape {list(shape)} "
                             f"of {info['dtype']} needs {needed}")
        shape = tuple(shape)
        spans.append((begin, end, name))
        tensors[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))
    spans.sort()
    for (_, end_a, a), (begin_b, _, b) in zip(spans, spans[1:]):
        if begin_b < end_a:
            raise ValueError(f"{path}: tensors {a!r} and {b!r} overlap")
    return tensors, dict(metadata)


def _ints(values) -> bool:
    """A JSON list of non-negative integers (not booleans)."""
    return isinstance(values, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                            for v in values)
