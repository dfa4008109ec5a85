"""The protobuf wire format, field by field, with the standard library alone: enough to read TensorFlow's
checkpoint index entries (``tf_bundle``) and ``GraphDef`` files (``tf_graph``) and to write the entries.

A message is ``bytes`` or a ``memoryview`` (a view is sliced without copying, so a large tensor inside a graph
is not copied once per level of nesting). Nothing here recurses on a file's word: a reader asks for each
nested message itself, to a depth its schema fixes.
"""

from __future__ import annotations

import struct

MESSAGE = (bytes, memoryview)  # what a length-delimited field's value is


def varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
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


def fields(buf: bytes | memoryview) -> list[tuple[int, int | bytes | memoryview]]:
    """``(field number, value)`` of every field of a protobuf message, in file order (ints for varint and
    fixed fields, slices of ``buf`` for length-delimited ones)."""
    out, pos = [], 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire in (1, 5):
            fixed = "<Q" if wire == 1 else "<I"
            if pos + struct.calcsize(fixed) > len(buf):
                raise ValueError(f"protobuf field {number}: truncated fixed-width value")
            value, pos = struct.unpack_from(fixed, buf, pos)[0], pos + struct.calcsize(fixed)
        elif wire == 2:
            length, pos = varint(buf, pos)
            if pos + length > len(buf):
                raise ValueError(f"protobuf field {number}: {length} bytes run past the end of the message")
            value, pos = buf[pos : pos + length], pos + length
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        out.append((number, value))
    return out


def typed(parsed: list[tuple[int, int | bytes]], number: int, kind: type, default, what: str):
    """Field ``number`` of a parsed message (the last, as protobuf reads a repeated scalar), which must be an
    int (varint or fixed) or ``bytes`` (a message or string: bytes or a view) as its schema says: a damaged
    message can carry any field number with any wire type."""
    value = dict(parsed).get(number, default)
    if value is not None and not isinstance(value, MESSAGE if kind is bytes else kind):
        raise ValueError(f"{what}: field {number} is not {'a number' if kind is int else 'a message'}")
    return value


def shape(buf: bytes | memoryview) -> tuple[int, ...]:
    """A ``TensorShapeProto``'s dimensions (-1 where unknown); an unknown rank is refused."""
    dims = []
    for number, value in fields(buf):
        if number == 2:  # TensorShapeProto.dim
            if not isinstance(value, MESSAGE):
                raise ValueError("tensor shape: a dimension is not a message")
            size = typed(fields(value), 1, int, 0, "tensor shape dimension")
            dims.append(size - (1 << 64) if size >= 1 << 63 else size)  # int64: -1 is unknown
        elif number == 3 and value:
            raise ValueError("unknown rank")
    return tuple(dims)


def put_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, value: int | bytes, fixed32: bool = False) -> bytes:
    """One protobuf field; zero scalars are left out, as proto3 serialises them."""
    if isinstance(value, bytes):
        return put_varint(number << 3 | 2) + put_varint(len(value)) + value
    if not value:
        return b""
    if fixed32:
        return put_varint(number << 3 | 5) + struct.pack("<I", value)
    return put_varint(number << 3) + put_varint(value)
