"""Scrubs the `grpc-message` of a gRPC trailers block (HPACK) without decoding the rest of it.

A relay that passes Triton's HTTP/2 frames on as they are cannot re-encode a header block: the client's
HPACK decoder must see the same dynamic-table changes Triton's encoder made. Triton's gRPC core sends
`grpc-message` as a literal *without indexing* with a literal name (`0x00`, measured on Triton 2.51), which
changes no table; so that one field can be replaced by another of the same kind while every other byte of
the block stays as it was. A `grpc-message` sent any other way is left alone.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable

from hpack.huffman_table import decode_huffman

_NAME = b"grpc-message"
# what gRPC leaves unencoded in grpc-message: printable ASCII but '%'
_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if c != 0x25)


def _integer(block: bytes, pos: int, prefix: int) -> tuple[int, int]:
    """HPACK integer with a `prefix`-bit prefix at `pos`: (value, position after it).

    Raises:
        IndexError: the block ends inside it.
    """
    mask = (1 << prefix) - 1
    value = block[pos] & mask
    pos += 1
    if value < mask:
        return value, pos
    shift = 0
    while True:
        byte = block[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _string(block: bytes, pos: int) -> tuple[bytes, int]:
    """HPACK string literal at `pos`: (its bytes, Huffman-decoded, position after it)."""
    huffman = bool(block[pos] & 0x80)
    length, pos = _integer(block, pos, 7)
    raw = block[pos : pos + length]
    if len(raw) != length:
        raise IndexError("string past the end of the block")
    return (decode_huffman(raw) if huffman else raw), pos + length


def _encode_integer(value: int, prefix: int, flags: int) -> bytes:
    """HPACK integer with a `prefix`-bit prefix, the bits above it set to `flags`."""
    mask = (1 << prefix) - 1
    if value < mask:
        return bytes([flags | value])
    out = bytearray([flags | mask])
    value -= mask
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal_not_indexed(name: bytes, value: bytes) -> bytes:
    """A literal field without indexing, literal name, no Huffman coding: it changes no dynamic table.

    The only HPACK the gateway writes: its own trailers (`grpc.frames.trailers_only`) and a scrubbed
    `grpc-message` in Triton's; either leaves the client's table in step with Triton's encoder.
    """
    return b"\x00" + _encode_integer(len(name), 7, 0) + name + _encode_integer(len(value), 7, 0) + value


def grpc_message_value(text: str) -> bytes:
    """`text` as a `grpc-message` value, percent-encoded as gRPC does it (printable ASCII but '%' as it is)."""
    return urllib.parse.quote(text, safe=_SAFE).encode("ascii")


def scrub_grpc_message(block: bytes, scrub: Callable[[str], str]) -> bytes:
    """The header block with its `grpc-message` (a literal-name, non-indexed literal) passed through `scrub`.

    Returns `block` itself when there is nothing to change or it cannot be read safely.
    """
    if _NAME not in block:  # the usual case: an answer without a message (and a Huffman-coded name: left alone)
        return block
    pos, out, changed = 0, bytearray(), False
    try:
        while pos < len(block):
            start, first = pos, block[pos]
            if first & 0x80:  # indexed field
                _, pos = _integer(block, pos, 7)
            elif first & 0xC0 == 0x40:  # literal with incremental indexing
                index, pos = _integer(block, pos, 6)
                if index == 0:
                    _, pos = _string(block, pos)
                _, pos = _string(block, pos)
            elif first & 0xE0 == 0x20:  # dynamic table size update
                _, pos = _integer(block, pos, 5)
            else:  # literal without indexing (0000) or never indexed (0001)
                index, pos = _integer(block, pos, 4)
                name = None
                if index == 0:
                    name, pos = _string(block, pos)
                value, pos = _string(block, pos)
                if name == _NAME and first == 0x00 and value:
                    text = urllib.parse.unquote(value.decode("ascii", "replace"))
                    cleaned = grpc_message_value(scrub(text))
                    if cleaned != value:
                        out += literal_not_indexed(_NAME, cleaned)
                        changed = True
                        continue
            out += block[start:pos]
    except (IndexError, ValueError):  # not a block we can read: pass it on untouched
        return block
    return bytes(out) if changed else block
