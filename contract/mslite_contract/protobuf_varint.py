"""Protobuf's variable-length integer, and a message's top-level fields, read from raw bytes.

The ONNX reader (`onnx_wire`, without the onnx package) and the gateway (gRPC messages, not decoded whole)
read with it. Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A protobuf varint at `pos`: (value, position after it).

    Raises:
        ValueError: longer than 10 bytes.
        IndexError: the buffer ends inside it.
    """
    value = shift = 0
    while shift < 70:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise ValueError("varint longer than 10 bytes")


def field_spans(buf: Any, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, where its value begins, where it ends) of each field of the message buf[start:end].

    A field's tag begins where the one before it ended (or at `start`). `buf` is anything indexed like bytes.

    Raises:
        ValueError: a wire type other than varint, 64-bit, length-delimited or 32-bit (groups), or a field
            past `end`.
        IndexError: the buffer ends inside a varint.
    """
    pos = start
    while pos < end:
        key, pos = read_varint(buf, pos)
        wire = key & 7
        if wire == 0:
            stop = read_varint(buf, pos)[1]
        elif wire == 1:
            stop = pos + 8
        elif wire == 5:
            stop = pos + 4
        elif wire == 2:
            length, pos = read_varint(buf, pos)
            stop = pos + length
        else:
            raise ValueError(f"wire type {wire}")
        if stop > end:
            raise ValueError("field past the end")
        yield key >> 3, wire, pos, stop
        pos = stop
