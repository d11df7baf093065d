"""A request body's framing, without I/O: Content-Length (`SizedBody`) or chunked (`ChunkedBody`).

`http.connection` hands each body the bytes it holds (`take(src, pos)`: what lies in `src` from `pos` on) and
gets back how far the body read; `done` once its last byte came, `ended()` the error when the client stops
sending before then. Every byte of body data, and each chunk's `CHUNK_OVERHEAD_BYTES`, goes through `charge`
(admission control: it raises HttpError 503 when the in-flight bytes are full) before it is kept.

A chunked body's reading is a state machine like the connection's (`state_machine`): `Chunked` states moved by
`ChunkEvent`s through `CHUNK_MOVES`, SIZE -> DATA -> CRLF -> SIZE for each chunk, SIZE -> TRAILER -> DONE at
the end.
"""

from __future__ import annotations

from collections.abc import Callable

from mslite_gateway.admission import CHUNK_OVERHEAD_BYTES
from mslite_gateway.http.messages import MAX_HEAD_BYTES, HttpError
from mslite_gateway.state_machine import FastState, transition

Source = bytes | bytearray
# A chunk-size or trailer line may be as long as a whole head (what asyncio's line reader allowed, at the
# gateway's stream limit).
MAX_LINE_BYTES = MAX_HEAD_BYTES
_HEX = frozenset(b"0123456789abcdefABCDEF")


def cut(src: Source, start: int, end: int) -> bytes:
    """`src[start:end]` as bytes, copied once (a whole bytes object not at all)."""
    return src[start:end] if type(src) is bytes else bytes(memoryview(src)[start:end])


class Chunked(FastState):
    """Where a chunked body's reading is."""

    SIZE = "size"  # a chunk-size line is to come
    DATA = "data"  # a chunk's bytes are arriving
    CRLF = "crlf"  # the CRLF after a chunk's bytes is to come
    TRAILER = "trailer"  # after the last chunk: trailer lines, read and dropped, up to an empty one
    DONE = "done"  # the body's last byte came


class ChunkEvent(FastState):
    """What moves a chunked body's reading on."""

    SIZED = "sized"  # a chunk-size line of a chunk with data
    LAST = "last"  # the chunk-size line of the last chunk (size 0)
    READ = "read"  # a chunk's last byte
    LINE_END = "line end"  # the CRLF after a chunk
    TRAILERS_END = "trailers end"  # the empty line after the trailers


# module names: read per chunk (see `grpc.call_states`)
SIZE, DATA, CRLF, TRAILER, DONE = Chunked.SIZE, Chunked.DATA, Chunked.CRLF, Chunked.TRAILER, Chunked.DONE
SIZED, LAST, READ, LINE_END, TRAILERS_END = (
    ChunkEvent.SIZED,
    ChunkEvent.LAST,
    ChunkEvent.READ,
    ChunkEvent.LINE_END,
    ChunkEvent.TRAILERS_END,
)
CHUNK_MOVES: dict[tuple[Chunked, ChunkEvent], Chunked] = {
    (SIZE, SIZED): DATA,
    (SIZE, LAST): TRAILER,
    (DATA, READ): CRLF,
    (CRLF, LINE_END): SIZE,
    (TRAILER, TRAILERS_END): DONE,
}


class SizedBody:
    """A body of `size` bytes (Content-Length)."""

    __slots__ = ("size", "got", "parts", "charge", "done")

    def __init__(self, size: int, charge: Callable[[int], None]) -> None:
        self.size = size
        self.got = 0
        self.parts: list[bytes] = []
        self.charge = charge
        self.done = False

    def take(self, src: Source, pos: int) -> int:
        """Read what of the body lies in `src` from `pos` on; returns where the body (or `src`) ends."""
        n = min(len(src) - pos, self.size - self.got)
        if n > 0:
            self.charge(n)
            self.parts.append(cut(src, pos, pos + n))
            self.got += n
            self.done = self.got == self.size
        return pos + n

    def ended(self) -> HttpError:
        """The answer to a client that stopped sending before the body's end."""
        return HttpError(400, f"the body ended after {self.got} of its {self.size} bytes", close=True)

    def result(self) -> bytes:
        """The whole body (one piece: not copied again)."""
        return self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)


class ChunkedBody:
    """A chunked body, decoded; its chunks, each counted `CHUNK_OVERHEAD_BYTES` more, at most `cap` bytes."""

    __slots__ = ("cap", "charge", "data", "cost", "phase", "left", "size", "scanned")

    def __init__(self, cap: int, charge: Callable[[int], None]) -> None:
        self.cap = cap
        self.charge = charge
        # One growing buffer: a list of chunks would cost ~40 bytes of object per chunk (2.3 GB for 32 MiB
        # sent as 2-byte chunks).
        self.data = bytearray()
        self.cost = 0
        self.phase = SIZE  # `Chunked`, moved through `CHUNK_MOVES`
        self.left = 0  # bytes of the current chunk still to come
        self.size = 0  # the current chunk's size
        self.scanned = 0  # bytes of the current line already searched for its CRLF

    @property
    def done(self) -> bool:
        """Whether the body's last byte came."""
        return self.phase is DONE

    def take(self, src: Source, pos: int) -> int:
        """Read what of the body lies in `src` from `pos` on; returns where the body (or `src`) ends."""
        end = len(src)
        while self.phase is not DONE:
            if self.phase is DATA:
                n = min(end - pos, self.left)
                if n <= 0:
                    return pos
                self.charge(n)
                self.data += memoryview(src)[pos : pos + n]
                pos += n
                self.left -= n
                if self.left:
                    return pos
                self.phase = transition(CHUNK_MOVES, self.phase, READ)
            elif self.phase is CRLF:
                if end - pos < 2:
                    return pos
                if src[pos : pos + 2] != b"\r\n":
                    raise HttpError(400, "malformed chunked body: a chunk does not end with CRLF", close=True)
                pos += 2
                self.phase = transition(CHUNK_MOVES, self.phase, LINE_END)
            else:
                at = src.find(b"\r\n", pos + max(0, self.scanned - 1))
                if at < 0 or at - pos > MAX_LINE_BYTES:
                    if at >= 0 or end - pos > MAX_LINE_BYTES + 1:
                        raise HttpError(400, "malformed chunked body: a chunk-size line is too long", close=True)
                    self.scanned = end - pos
                    return pos
                line, pos, self.scanned = cut(src, pos, at), at + 2, 0
                if self.phase is TRAILER:
                    if not line:  # trailers are read and dropped, up to the empty line
                        self.phase = transition(CHUNK_MOVES, self.phase, TRAILERS_END)
                else:
                    self._size_line(line)
        return pos

    def _size_line(self, line: bytes) -> None:
        size_text = line.split(b";", 1)[0].strip()
        if not size_text or len(size_text) > 16 or not _HEX.issuperset(size_text):
            raise HttpError(400, "malformed chunked body: bad chunk size", close=True)
        size = int(size_text, 16)
        if size == 0:
            self.phase = transition(CHUNK_MOVES, self.phase, LAST)
            return
        self.cost += size + CHUNK_OVERHEAD_BYTES
        if self.cost > self.cap:
            raise HttpError(
                413,
                f"request body over this server's limit of {self.cap} bytes (a chunked body's every chunk counts "
                f"{CHUNK_OVERHEAD_BYTES} bytes more: send fewer, larger chunks)",
                linger=True,
            )
        self.charge(CHUNK_OVERHEAD_BYTES)
        self.size = self.left = size
        self.phase = transition(CHUNK_MOVES, self.phase, SIZED)

    def ended(self) -> HttpError:
        """The answer to a client that stopped sending before the last chunk."""
        if self.phase is DATA:
            got = self.size - self.left
            return HttpError(400, f"the body ended after {got} of its {self.size} bytes", close=True)
        return HttpError(400, "the body ended before its last chunk", close=True)

    def result(self) -> bytes:
        """The decoded body."""
        return bytes(self.data)
