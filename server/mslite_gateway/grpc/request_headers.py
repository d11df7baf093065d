"""The client's request header blocks: collected from their frames, decoded (HPACK) for what the relay needs.

The relay passes every header block on as it came (the client's HPACK context is Triton's), and decodes it
only to know which call it opens, how its message is compressed and whether it carries the admin key.
"""

from __future__ import annotations

from typing import Any

import hpack

from mslite_contract.protocol import ADMIN_KEY_GRPC_HEADER
from mslite_gateway.grpc.frames import END_HEADERS, HEADERS, PADDED, PRIORITY_FLAG

_KNOWN_BLOCKS = 64
_KEY_HEADER = ADMIN_KEY_GRPC_HEADER.encode()


class RequestHeaders:
    """The client's header blocks, decoded (HPACK) for each call's `:path`, `grpc-encoding` and admin key.

    The decoder must see every block, in order, to keep its dynamic table in step with the client's. A block
    of only indexed fields leaves the table as it is, so until a block of another kind comes, the same bytes
    mean the same headers: gRPC clients send a method's calls as the same few indexed bytes, decoded here once
    (a third of the gateway's CPU for a small request went to decoding them again).
    """

    def __init__(self) -> None:
        self.decoder = hpack.Decoder()
        self.known: dict[bytes, tuple[bytes, bytes, bytes]] = {}

    def allow_table_size(self, size: int) -> None:
        """The largest dynamic table the client may use (Triton's setting, which the client obeys)."""
        self.decoder.max_allowed_table_size = size
        self.known.clear()  # the next block must be read by the decoder (it starts with a size update)

    def read_call(self, block: bytes) -> tuple[bytes, bytes, bytes]:
        """(:path, grpc-encoding, admin key) of one request header block (b"" where absent).

        Raises:
            hpack.HPACKError: the block does not decode; the connection's compression state is lost.
        """
        known = self.known.get(block)
        if known is not None:
            return known
        path = encoding = key = b""
        for name, value in self.decoder.decode(block, raw=True):
            if name == b":path":
                path = value
            elif name == b"grpc-encoding":
                encoding = value
            elif name == _KEY_HEADER:
                key = value
        if not only_indexed(block):
            self.known.clear()  # the block may have changed the table the known ones point into
        elif len(self.known) < _KNOWN_BLOCKS:
            self.known[block] = (path, encoding, key)
        return path, encoding, key


def only_indexed(block: bytes) -> bool:
    """Whether an HPACK block holds only indexed header fields (which read the tables and leave them alone)."""
    i, n = 0, len(block)
    while i < n:
        first = block[i]
        if first <= 0x80:  # a literal, a table size update, or index 0 (an error the decoder reports)
            return False
        i += 1
        if first == 0xFF:  # an index of 127 or more: continuation bytes, the last one below 0x80
            while i < n and block[i] >= 0x80:
                i += 1
            i += 1
    return i == n


class HeaderBlock:
    """Collects one header block of the client's from its HEADERS frame and CONTINUATIONs (payloads whole)."""

    __slots__ = ("data", "sid")

    def __init__(self) -> None:
        self.data = bytearray()
        self.sid = 0

    def add(self, kind: int, sid: int, flags: int, payload: Any) -> tuple[int, bytes] | None:
        """A HEADERS or CONTINUATION frame's payload; (stream, block) once the block is whole (END_HEADERS)."""
        if kind == HEADERS:
            a, b = 0, len(payload)
            if flags & PADDED and payload:
                a, b = 1, b - payload[0]
            if flags & PRIORITY_FLAG:
                a += 5
            self.data = bytearray(payload[a:b])
            self.sid = sid
        else:
            self.data += payload
        if not flags & END_HEADERS:
            return None
        block, self.data = bytes(self.data), bytearray()
        return self.sid, block
