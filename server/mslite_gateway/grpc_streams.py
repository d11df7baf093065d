"""The request streams the gRPC relay checks: each one's message as it arrives, and the message once whole.

A stream's DATA is kept as the pieces the reads delivered (views, no copy) until its message is whole; then
the message goes to its check as those pieces (`grpc_checks.Pieces`), or inflated when it was compressed.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import hpack

from mslite_contract.protocol import ADMIN_KEY_GRPC_HEADER as GRPC_HEADER
from mslite_gateway.grpc_checks import Pieces
from mslite_gateway.rules import Refusal, inflate_bounded
from mslite_gateway.staging import Region

PREFIX = 5  # a gRPC message's prefix: compressed flag (1 byte), length (4 bytes)
_KNOWN_BLOCKS = 64
_KEY_HEADER = GRPC_HEADER.encode()
Check = Callable[["bytes | Pieces", bool], "str | None"]  # (message, keyed) -> the model it counts for


class Stream:
    """A checked request stream: its message's bytes so far."""

    __slots__ = (
        "check",
        "parts",
        "got",
        "size",
        "charged",
        "model",
        "encoding",
        "done",
        "stageable",
        "region",
        "rewrite",
        "keyed",
        "answered",
        "moved",
        "infer",
        "held_frame",
        "checked",
        "sent_at",
    )

    def __init__(
        self,
        check: Check,
        encoding: bytes,
        *,
        stageable: bool = False,
        rewrite: Callable[[bytes], bytes | None] | None = None,
        keyed: bool = True,
        answered: Callable[[], None] | None = None,
        moved: float = 0.0,
    ) -> None:
        self.check = check
        self.keyed = keyed  # the call came with the admin key (or the server has none)
        self.answered = answered  # what to do once Triton answered the call
        self.stageable = stageable  # a ModelInfer call, whose tensors may go to Triton through shared memory
        self.infer = stageable  # a ModelInfer call (`stageable` is decided once, then cleared)
        self.region: Region | None = None  # where they go, once chosen (`staging`)
        # the message to send Triton instead of the client's (None: the client's): held until whole, as staged
        self.rewrite = rewrite
        self.parts: list[Any] = []  # bytes or memoryviews of what was read, none empty
        self.got = 0
        self.size = -1  # the message's length, once its 5-byte prefix has arrived
        self.charged = 0
        self.model: str | None = None
        self.encoding = encoding
        self.done = False  # checked and passed on: later frames go through
        self.moved = moved  # when a byte of the message last arrived (seconds; `RelayCore.tick`)
        # while work for it runs off the event loop (`grpc_calls.Later`): the frame that completed the message
        # (flags, raw header, payload parts), and the checked request where the check got that far
        self.held_frame: tuple[int, bytes, list[Any]] | None = None
        self.checked: tuple[Any, Any] | None = None
        self.sent_at = 0.0  # when it went on to Triton, until Triton's answer begins (0: not timed)

    def add(self, data: Any) -> None:
        """Bytes of the message (a frame's payload without padding)."""
        if data:
            self.parts.append(data)
            self.got += len(data)
        if self.size < 0 and self.got >= PREFIX:
            head = self.parts[0] if len(self.parts[0]) >= PREFIX else b"".join(self.parts)
            self.size = int.from_bytes(head[1:PREFIX], "big")

    def cannot_complete(self, length: int) -> bool:
        """Whether `length` more bytes of message leave it still unfinished (its size known)."""
        return self.size >= 0 and self.got + length < PREFIX + self.size

    @property
    def held(self) -> bool:
        """Whether the client's DATA stays here (staged or rewritten), Triton getting the relay's own frames."""
        return self.region is not None or self.rewrite is not None

    @property
    def whole(self) -> bool:
        """Whether the message has all its bytes (or more)."""
        return self.size >= 0 and self.got >= PREFIX + self.size

    @property
    def compressed(self) -> bool:
        """Whether the message came compressed (its flag byte; the message has begun)."""
        return bool(self.parts and self.parts[0][0])

    def message(self, cap: int) -> bytes | Pieces:
        """The whole message, without its prefix, inflated if it was sent compressed; its pieces let go.

        Raises:
            Refusal: a compressed message with no known encoding, invalid, or over `cap` once inflated.
        """
        parts, self.parts = self.parts, []
        if not parts[0][0]:
            return Pieces(parts, PREFIX)
        return inflate(self.encoding, Pieces(parts, PREFIX).join(), cap)


def inflate(encoding: bytes, data: bytes, cap: int) -> bytes:
    """A compressed message inflated, at most `cap` bytes (Refusal otherwise)."""
    if encoding not in (b"gzip", b"deflate"):
        raise Refusal(f"a compressed message needs grpc-encoding gzip or deflate, not {encoding[:20]!r}")
    wbits = zlib.MAX_WBITS | 32 if encoding == b"gzip" else zlib.MAX_WBITS
    return inflate_bounded(data, cap, wbits=wbits, what="message", form=encoding.decode())


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

    def read(self, block: bytes) -> tuple[bytes, bytes]:
        """(:path, grpc-encoding) of one request header block (b"" where absent); see `read_call`."""
        return self.read_call(block)[:2]

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
