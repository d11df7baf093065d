"""HTTP/2 framing for the gRPC relay: one direction's bytes split into frames, and the frames the gateway writes itself.

The splitter (`Frames`) never copies what it forwards: the pieces it hands on are views of the bytes read.
"""

from __future__ import annotations

import struct
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

from mslite_triton._error_table import scrub
from mslite_triton.server.gateway.grpc_trailers import scrub_grpc_message

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_HEADER_TABLE_SIZE = 0x1
CANCEL, NO_ERROR = 0x8, 0x0
# gRPC status codes
INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNIMPLEMENTED, UNAVAILABLE, INTERNAL = 3, 8, 12, 14, 13
U32 = struct.Struct(">I")
MIN_MAX_FRAME_SIZE = 16384  # every HTTP/2 peer accepts frames this large
# What the splitter does with a frame: forward it as it arrives (PASS), forward it and keep its pieces too
# (TAP), hold it until whole (COLLECT), or drop it (DROP).
PASS, COLLECT, DROP, TAP = 0, 1, 2, 3
Parts = Sequence[Any]  # bytes or memoryviews, in order


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame."""
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + U32.pack(stream) + payload


def joined(parts: Parts) -> Any:
    """The pieces as one bytes-like object (no copy when there is one piece)."""
    if len(parts) == 1:
        return parts[0]
    return b"".join(parts)


def _literal(name: bytes, value: bytes) -> bytes:
    """An HPACK 'literal header field without indexing, new name' (it leaves the client's table as it is)."""
    return b"\x00" + _hpack_string(name) + _hpack_string(value)


def _hpack_string(s: bytes) -> bytes:
    n = len(s)
    if n < 127:
        return bytes((n,)) + s
    out, n = bytearray((127,)), n - 127
    while n >= 128:
        out.append((n & 127) | 128)
        n >>= 7
    out.append(n)
    return bytes(out) + s


def trailers_only(stream: int, code: int, message: str) -> bytes:
    """A gRPC answer with no message: status and message in one HEADERS frame that ends the stream."""
    block = _literal(b":status", b"200") + _literal(b"content-type", b"application/grpc")
    block += _literal(b"grpc-status", str(code).encode())
    block += _literal(b"grpc-message", urllib.parse.quote(message, safe=" !#$&'()*+,/:;=?@[]~").encode())
    return frame(HEADERS, END_STREAM | END_HEADERS, stream, block)


def unpadded(payload: Any, flags: int) -> Any:
    """A frame's payload without its padding."""
    if flags & PADDED and payload:
        return payload[1 : len(payload) - payload[0]]
    return payload


def scrubbed_trailers(flags: int, sid: int, raw: bytes, parts: Parts) -> list[Any]:
    """Triton's trailers frame, its grpc-message without server paths, tracebacks or internal region names.

    Only that field changes (`grpc_trailers`), so the client's HPACK table stays in step with Triton's.
    """
    body = bytes(unpadded(joined(parts), flags)) if parts else b""
    head, block = (body[:5], body[5:]) if flags & PRIORITY_FLAG else (b"", body)
    cleaned = scrub_grpc_message(block, scrub)
    if cleaned is block or len(head) + len(cleaned) > MIN_MAX_FRAME_SIZE:
        return [raw, *parts]
    return [frame(HEADERS, flags & ~PADDED, sid, head + cleaned)]


class Frames:
    """Splits one direction's bytes into frames without copying them.

    Each frame header is handed to `on_header`, which says what to do with the frame (PASS, TAP, COLLECT,
    DROP; for TAP it sets `tap`, the list the frame's pieces are appended to). A collected frame is handed to
    `on_frame` when whole, as the list of pieces it arrived in. Pieces to forward are appended to `out`, in
    order; `at_boundary` is True between frames, the only place where frames of our own may be written into
    this direction.
    """

    __slots__ = ("head", "left", "mode", "parts", "header", "raw", "out", "tap")

    def __init__(self) -> None:
        self.head = bytearray()
        self.left = 0
        self.mode = PASS
        self.parts: list[Any] = []
        self.header: tuple[int, int, int, int] = (0, 0, 0, 0)
        self.raw = b""
        self.out: list[Any] = []
        self.tap: list[Any] = []

    @property
    def at_boundary(self) -> bool:
        """Between two frames."""
        return self.left == 0

    def feed(
        self,
        data: bytes,
        on_header: Callable[[int, int, int, int, bytes], int],
        on_frame: Callable[[int, int, int, bytes, list[Any]], None],
    ) -> None:
        """Split the next bytes read (see the class)."""
        view = memoryview(data)
        i, n = 0, len(data)
        out = self.out
        while i < n:
            if self.left == 0:
                take = min(9 - len(self.head), n - i)
                self.head += view[i : i + take]
                i += take
                if len(self.head) < 9:
                    return
                raw = bytes(self.head)
                self.head.clear()
                length, kind, flags = int.from_bytes(raw[:3], "big"), raw[3], raw[4]
                sid = int.from_bytes(raw[5:9], "big") & 0x7FFFFFFF
                self.header, self.raw = (length, kind, flags, sid), raw
                self.mode = on_header(length, kind, flags, sid, raw)
                if self.mode == PASS or self.mode == TAP:
                    out.append(raw)
                self.left = length
                if length == 0:
                    if self.mode == COLLECT:
                        on_frame(kind, flags, sid, raw, [])
                    continue
            take = min(self.left, n - i)
            piece = view[i : i + take] if take < n else data
            i += take
            self.left -= take
            mode = self.mode
            if mode == PASS:
                out.append(piece)
            elif mode == TAP:
                out.append(piece)
                self.tap.append(piece)
            elif mode == COLLECT:
                self.parts.append(piece)
                if self.left == 0:
                    parts, self.parts = self.parts, []
                    _, kind, flags, sid = self.header
                    on_frame(kind, flags, sid, self.raw, parts)
