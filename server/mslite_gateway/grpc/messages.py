"""gRPC messages on the wire: the 5-byte prefix, a compressed message inflated, a byte stream split into messages.

A message is kept as the pieces the reads delivered it in (views of what was read, no copy) until it is whole.
"""

from __future__ import annotations

import zlib
from typing import Any

from mslite_gateway.grpc.checks import Pieces
from mslite_gateway.rules import Refusal, inflate_bounded

PREFIX = 5  # a gRPC message's prefix: compressed flag (1 byte), length (4 bytes)
# What is kept of a message whose bytes were not admitted: clients write the id (field 3) near the start
_KEPT_OF_REFUSED = 1024


def prefixed(body: bytes) -> bytes:
    """`body` as an uncompressed gRPC message (its prefix first)."""
    return b"\0" + len(body).to_bytes(4, "big") + body


def inflate(encoding: bytes, data: bytes, cap: int) -> bytes:
    """A compressed message inflated, at most `cap` bytes (Refusal otherwise)."""
    if encoding not in (b"gzip", b"deflate"):
        raise Refusal(f"a compressed message needs grpc-encoding gzip or deflate, not {encoding[:20]!r}")
    wbits = zlib.MAX_WBITS | 32 if encoding == b"gzip" else zlib.MAX_WBITS
    return inflate_bounded(data, cap, wbits=wbits, what="message", form=encoding.decode())


class Message:
    """One whole gRPC message of a stream: its pieces (views of what was read, the 5-byte prefix included)."""

    __slots__ = ("parts", "length", "refusal", "end", "tail")

    def __init__(self, parts: list[Any], length: int, refusal: str | None, end: int, tail: int) -> None:
        self.parts = parts
        self.length = length  # prefix included
        self.refusal = refusal  # admission refused some of its bytes: only its start was kept (the reason)
        self.end = end  # where it ends in the bytes fed last
        self.tail = tail  # how many of its bytes those held (`length`: all of it)

    @property
    def compressed(self) -> bool:
        """Whether its compressed flag is set."""
        return bool(self.parts[0][0])

    def body(self) -> Pieces:
        """The message without its prefix, where it lies."""
        return Pieces(self.parts, PREFIX)


class MessageReader:
    """Splits one direction of a stream's DATA into whole gRPC messages, without copying the bytes."""

    __slots__ = ("parts", "got", "length", "refusal")

    def __init__(self) -> None:
        self.parts: list[Any] = []
        self.got = 0  # bytes of the message in progress so far (kept or not)
        self.length = -1  # its length with the prefix, once the prefix has come
        self.refusal: str | None = None

    @property
    def between(self) -> bool:
        """Whether no message is in progress."""
        return self.got == 0

    def feed(self, data: Any, refusal: str | None = None) -> list[Message]:
        """The messages `data` completes; `refusal`: its bytes were not admitted (their message's start is kept)."""
        done: list[Message] = []
        view = memoryview(data)
        fed = began = 0  # bytes fed so far; where the message in progress began in them
        while view:
            if self.got == 0:
                began = fed
            if refusal is not None and self.refusal is None:
                self.refusal = refusal
            if self.length < 0:
                take = min(PREFIX - self.got, len(view))
            else:
                take = min(self.length - self.got, len(view))
            if self.refusal is None or self.length < 0:
                self.parts.append(view[:take])
            elif self.got < _KEPT_OF_REFUSED:  # the start of a refused message: its request's id is there
                self.parts.append(view[: min(take, _KEPT_OF_REFUSED - self.got)])
            self.got += take
            fed += take
            view = view[take:]
            if self.length < 0 and self.got >= PREFIX:
                head = b"".join(self.parts)[:PREFIX]
                self.length = PREFIX + int.from_bytes(head[1:PREFIX], "big")
            if self.got == self.length:
                done.append(Message(self.parts, self.length, self.refusal, fed, fed - began))
                self.parts, self.got, self.length, self.refusal = [], 0, -1, None
        return done
