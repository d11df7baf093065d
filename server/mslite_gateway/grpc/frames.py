"""HTTP/2 framing for the gRPC relay: one direction's bytes split into frames, and the frames the gateway writes itself.

The splitter (`Frames`) never copies what it forwards: the pieces it hands on are views of the bytes read.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from mslite_contract.scrub import scrub
from mslite_gateway.grpc.trailers import grpc_message_value, literal_not_indexed, scrub_grpc_message

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_HEADER_TABLE_SIZE, SETTINGS_MAX_CONCURRENT_STREAMS = 0x1, 0x3
CANCEL, NO_ERROR, REFUSED_STREAM, ENHANCE_YOUR_CALM = 0x8, 0x0, 0x7, 0xB
# gRPC status codes
INVALID_ARGUMENT, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, UNIMPLEMENTED, UNAVAILABLE, INTERNAL = 3, 4, 8, 12, 14, 13
NOT_FOUND, PERMISSION_DENIED = 5, 7
_CODE_OF_STATUS = {403: PERMISSION_DENIED, 404: NOT_FOUND, 413: RESOURCE_EXHAUSTED}


def grpc_code(http_status: int) -> int:
    """The gRPC status code of a refusal the HTTP front answers with `http_status` (as Triton maps them)."""
    return _CODE_OF_STATUS.get(http_status, INVALID_ARGUMENT)


U32 = struct.Struct(">I")
_HEADER = struct.Struct(">HBBBI")  # a frame header: length (16 + 8 bits), type, flags, stream id
MIN_MAX_FRAME_SIZE = 16384  # every HTTP/2 peer accepts frames this large
# What the splitter does with a frame: forward it as it arrives (PASS), forward it and keep its pieces too
# (TAP), hold it until whole (COLLECT), or drop it (DROP).
PASS, COLLECT, DROP, TAP = 0, 1, 2, 3
_MAX_MESSAGE_CHARS = 4000  # of a refusal's message (ASCII): its trailers stay within 16 KiB
_JOIN_BELOW_BYTES = 64 << 10  # `write` copies pieces below this into one
Parts = Sequence[Any]  # bytes or memoryviews, in order


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame."""
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + U32.pack(stream) + payload


def write(transport: Any, pieces: list[Any]) -> None:
    """Pieces to forward, in one write: joined when small, as they are when large (no copy of tensor bytes).

    uvloop writes one bytes object at once; several pieces cost it a memoryview each and a write context.
    """
    if len(pieces) == 1:
        transport.write(pieces[0])
    elif sum(map(len, pieces)) < _JOIN_BELOW_BYTES:
        transport.write(b"".join(pieces))
    else:
        transport.writelines(pieces)


def joined(parts: Parts) -> Any:
    """The pieces as one bytes-like object (no copy when there is one piece)."""
    if len(parts) == 1:
        return parts[0]
    return b"".join(parts)


def trailers_only(stream: int, code: int, message: str) -> bytes:
    """A gRPC answer with no message: status and message in one HEADERS frame that ends the stream."""
    head = literal_not_indexed(b":status", b"200") + literal_not_indexed(b"content-type", b"application/grpc")
    return trailers(stream, code, message, head)


def trailers(stream: int, code: int, message: str, head: bytes = b"") -> bytes:
    """Trailers ending a call whose response headers went already: status and message (after `head`)."""
    block = head + literal_not_indexed(b"grpc-status", str(code).encode())
    # clients drop metadata over 16 KiB; percent-encoding makes 3 bytes of each byte past ASCII (up to 4 a char)
    limit = _MAX_MESSAGE_CHARS if message.isascii() else _MAX_MESSAGE_CHARS // 4
    if len(message) > limit:
        message = message[:limit] + "..."
    block += literal_not_indexed(b"grpc-message", grpc_message_value(message))
    return frame(HEADERS, END_STREAM | END_HEADERS, stream, block)


def capped_settings(payload: Any, caps: dict[int, int]) -> bytes:
    """A SETTINGS frame's payload with each parameter of `caps` at most its cap (added where it is absent)."""
    params: dict[int, int] = {}
    for i in range(0, len(payload) - 5, 6):
        params[int.from_bytes(payload[i : i + 2], "big")] = int.from_bytes(payload[i + 2 : i + 6], "big")
    for key, cap in caps.items():
        params[key] = min(params.get(key, cap), cap)
    return b"".join(key.to_bytes(2, "big") + U32.pack(value) for key, value in params.items())


def unpadded(payload: Any, flags: int) -> Any:
    """A frame's payload without its padding."""
    if flags & PADDED and payload:
        return payload[1 : len(payload) - payload[0]]
    return payload


def scrubbed_trailers(
    flags: int, sid: int, raw: bytes, parts: Parts, explain: Callable[[str], str] | None = None
) -> list[Any]:
    """Triton's trailers frame, its grpc-message without server paths, tracebacks or internal region names.

    Only that field changes (`grpc.trailers`), so the client's HPACK table stays in step with Triton's.
    `explain` then adds what the gateway knows (`load_failures`: why the model failed to load).
    """
    body = bytes(unpadded(joined(parts), flags)) if parts else b""
    head, block = (body[:5], body[5:]) if flags & PRIORITY_FLAG else (b"", body)
    cleaned = scrub_grpc_message(block, scrub if explain is None else lambda text: explain(scrub(text)))
    if cleaned is block or len(head) + len(cleaned) > MIN_MAX_FRAME_SIZE:
        return [raw, *parts]
    return [frame(HEADERS, flags & ~PADDED, sid, head + cleaned)]


class Frames:
    """Splits one direction's bytes into frames without copying them.

    Each frame header is handed to `on_header`, which says what to do with the frame (PASS, TAP, COLLECT,
    DROP; for TAP it sets `tap`, the list the frame's pieces are appended to); while it runs, `avail` is how
    many bytes of the frame's payload came with this read. A collected frame is handed to `on_frame` when
    whole, as the list of pieces it arrived in. Pieces to forward are appended to `out`, in order: frames
    passed on one after another go as one view of the bytes read (one piece to write, not two per frame).
    `at_boundary` is True between frames, the only place where frames of our own may be written into this
    direction; `on_header` does that with `inject` (before the frame it is called for).
    """

    __slots__ = ("head", "left", "mode", "parts", "header", "raw", "out", "tap", "avail", "_view", "_run", "_at")

    def __init__(self) -> None:
        self.head = bytearray()
        self.left = 0
        self.mode = PASS
        self.parts: list[Any] = []
        self.header: tuple[int, int, int, int] = (0, 0, 0, 0)
        self.raw = b""
        self.out: list[Any] = []
        self.tap: list[Any] = []
        self.avail = 0
        self._view = memoryview(b"")
        self._run = -1  # where the bytes still to forward as one view begin in `_view` (-1: none)
        self._at = 0  # where the frame being handed to on_header begins in `_view`

    @property
    def at_boundary(self) -> bool:
        """Between two frames."""
        return self.left == 0

    def inject(self, items: list[Any]) -> None:
        """Frames of ours, written before the frame whose header is being handled (call from on_header only)."""
        self._flush(self._at)
        self.out += items

    def _flush(self, end: int) -> None:
        if self._run >= 0:
            if end > self._run:
                self.out.append(self._view[self._run : end])
            self._run = -1

    def feed(
        self,
        data: bytes,
        on_header: Callable[[int, int, int, int], int],
        on_frame: Callable[[int, int, int, bytes, list[Any]], None],
    ) -> None:
        """Split the next bytes read (see the class)."""
        view = self._view = memoryview(data)
        i, n = 0, len(data)
        self._run = 0 if self.left and (self.mode == PASS or self.mode == TAP) else -1
        while i < n:
            if self.left == 0:
                if self.head or n - i < 9:  # a header over two reads
                    self._flush(i)
                    take = min(9 - len(self.head), n - i)
                    self.head += view[i : i + take]
                    i += take
                    if len(self.head) < 9:
                        return
                    raw = bytes(self.head)
                    self.head.clear()
                    high, low, kind, flags, sid = _HEADER.unpack(raw)
                    start = -1
                else:
                    raw = b""  # taken below only where the frame is not forwarded in the run
                    high, low, kind, flags, sid = _HEADER.unpack_from(data, i)
                    start = i
                    i += 9
                length = high << 8 | low
                sid &= 0x7FFFFFFF
                self._at = start if start >= 0 else i
                self.avail = n - i
                mode = self.mode = on_header(length, kind, flags, sid)
                if mode == PASS or mode == TAP:
                    if start < 0:
                        self.out.append(raw)
                        self._run = i
                    elif self._run < 0:
                        self._run = start
                else:
                    self._flush(self._at)
                    self.header, self.raw = (length, kind, flags, sid), raw or data[start : start + 9]
                self.left = length
                if length == 0:
                    if mode == COLLECT:
                        on_frame(kind, flags, sid, self.raw, [])
                    continue
            take = min(self.left, n - i)
            self.left -= take
            mode = self.mode
            if mode == TAP:
                self.tap.append(view[i : i + take])
            elif mode == COLLECT:
                self.parts.append(view[i : i + take] if take < n else data)
                if self.left == 0:
                    parts, self.parts = self.parts, []
                    _, kind, flags, sid = self.header
                    on_frame(kind, flags, sid, self.raw, parts)
            i += take
        self._flush(n)
