"""Triton's HTTP/1.1 answers read without I/O: `ResponseReader` is fed what the connection brings.

It says when the answer is whole. Interim 1xx answers are skipped; a body is framed as HTTP/1.1 allows (none
for 204 and 304, chunked, Content-Length, or up to the end of the connection), with the same body readers
as requests (`http.bodies`, nothing charged: an answer's size is Triton's). `http.front.Upstream` feeds it.
"""

from __future__ import annotations

import asyncio

from mslite_gateway.http.bodies import ChunkedBody, SizedBody, Source, cut
from mslite_gateway.http.messages import HttpError, Response

MAX_ANSWER_HEAD_BYTES = 1 << 20
_UNBOUNDED = 1 << 62


def _free(n: int) -> None:
    """An answer's bytes are not charged."""


class ResponseReader:
    """One answer from Triton, fed as it arrives (`feed`), b"" once Triton closed the connection."""

    __slots__ = ("_buf", "_scanned", "_head", "_headers", "_reusable", "_size", "_body", "_rest")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scanned = 0
        self._head = b""  # the status line, once read
        self._headers: list[tuple[bytes, bytes]] = []
        self._reusable = False
        self._size = 0  # a Content-Length body's size (no `_body` yet: it may come whole with the head)
        self._body: SizedBody | ChunkedBody | None = None
        self._rest: list[bytes] | None = None  # a body that ends with the connection

    def feed(self, data: bytes) -> Response | None:
        """The whole answer once it is here, else None.

        Raises:
            asyncio.IncompleteReadError: the connection ended first (`partial`: what of the answer came).
            HttpError: 502, an answer that cannot be read.
        """
        if not data:
            if self._rest is not None:
                return Response(self._head, self._headers, b"".join(self._rest), False)
            raise asyncio.IncompleteReadError(bytes(self._buf) or self._head, None)
        if self._rest is not None:
            self._rest.append(data)
            return None
        buf = self._buf
        if buf:
            buf += data
            src: Source = buf
        else:
            src = data  # the usual case: a whole answer in one read, read where it lies
        try:
            pos = 0
            if not self._head:
                pos = self._read_head(src)
                if not self._head:
                    self._keep(src, pos)
                    return None
            if self._rest is not None:  # framed by the connection's end
                self._rest.append(cut(src, pos, len(src)))
                self._keep(src, len(src))
                return None
            body = self._body
            if body is None:
                size = self._size
                end = pos + size
                if len(src) >= end:  # the whole body came with its head: the usual case
                    whole = cut(src, pos, end) if size else b""
                    if src is self._buf or end < len(src):
                        self._keep(src, end)
                    return Response(self._head, self._headers, whole, self._reusable and not self._buf)
                body = self._body = SizedBody(size, _free)
            pos = body.take(src, pos)
        except (HttpError, ValueError, IndexError):
            raise HttpError(502, "the inference server's answer could not be read") from None
        self._keep(src, pos)
        if not body.done:
            return None
        return Response(self._head, self._headers, body.result(), self._reusable and not self._buf)

    def _keep(self, src: Source, pos: int) -> None:
        """What of `src` is not read yet (from `pos` on) waits in `_buf` for the next bytes."""
        if src is self._buf:
            del self._buf[:pos]
        elif pos < len(src):
            self._buf += memoryview(src)[pos:]

    def _read_head(self, src: Source) -> int:
        """Read the answer's head (after any 1xx ones) from `src`; returns where what was read ends."""
        pos = 0
        while True:
            at = src.find(b"\r\n\r\n", pos + max(0, self._scanned - 3))
            if at < 0:
                if len(src) - pos > MAX_ANSWER_HEAD_BYTES:
                    raise ValueError("answer head too long")
                self._scanned = len(src) - pos
                return pos
            self._scanned = 0
            lines = cut(src, pos, at).split(b"\r\n")
            pos = at + 4
            code = int(lines[0].split(b" ", 2)[1])
            if not 100 <= code < 200:
                break
        headers = [(line.partition(b":")[0].strip().lower(), line) for line in lines[1:]]
        values = {name: line.partition(b":")[2].strip().lower() for name, line in headers}
        self._head, self._headers = lines[0], headers
        self._reusable = lines[0].startswith(b"HTTP/1.1") and values.get(b"connection") != b"close"
        if code in (204, 304):
            self._size = 0
        elif values.get(b"transfer-encoding") == b"chunked":
            self._body = ChunkedBody(_UNBOUNDED, _free)
        elif b"content-length" in values:
            size = int(values[b"content-length"])
            if size < 0:
                raise ValueError("a negative Content-Length")
            self._size = size
        else:
            self._rest = []
        return pos
