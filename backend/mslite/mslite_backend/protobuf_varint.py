"""Protobuf's variable-length integer, read from raw bytes.

The client reads ONNX files with it (without the onnx package) and the gateway reads gRPC messages with it
(without decoding them whole). Standard library only.
"""

from __future__ import annotations


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
