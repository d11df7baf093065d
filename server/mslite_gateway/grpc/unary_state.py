"""One checked unary gRPC call as state: where it is (`grpc.call_states.CallState`) and its message so far.

Its DATA is kept as the pieces the reads delivered (views, no copy) until its message is whole; then the
message goes to its check as those pieces (`grpc.checks.Pieces`), or inflated when it was compressed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mslite_gateway.grpc.call_states import CHECK_OFF_LOOP, RECEIVING, UNARY, UnaryEvent
from mslite_gateway.grpc.checks import Pieces
from mslite_gateway.grpc.messages import PREFIX, inflate
from mslite_gateway.staging import Region
from mslite_gateway.state_machine import transition

Check = Callable[["bytes | Pieces", bool], "str | None"]  # (message, keyed) -> the model it counts for
HeldFrame = tuple[int, bytes, list[Any]]  # a DATA frame's flags, raw header and payload pieces


class UnaryCall:
    """A checked unary call: what kind of call it is, its state, its message's bytes so far, what it holds."""

    __slots__ = (
        "check",
        "encoding",
        "keyed",
        "answered",
        "infer",
        "rewrite",
        "state",
        "moved",
        "parts",
        "got",
        "size",
        "region",
        "charged",
        "model",
        "held",
        "checked",
    )

    def __init__(
        self,
        check: Check,
        encoding: bytes,
        *,
        infer: bool = False,
        rewrite: Callable[[bytes], bytes | None] | None = None,
        keyed: bool = True,
        answered: Callable[[], None] | None = None,
        now: float = 0.0,
    ) -> None:
        self.check = check
        self.encoding = encoding
        self.keyed = keyed  # the call came with the admin key (or the server has none)
        self.answered = answered  # what to do once Triton answered the call
        self.infer = infer  # a ModelInfer call, whose tensors may go to Triton through shared memory
        # the message to send Triton instead of the client's (None: the client's): held until whole, as staged
        self.rewrite = rewrite
        self.state = RECEIVING
        # the clock of its state: when a byte of its message last came (RECEIVING), when it went on (SENT)
        self.moved = now
        self.parts: list[Any] = []  # bytes or memoryviews of what was read, none empty
        self.got = 0
        self.size = -1  # the message's length, once its 5-byte prefix has arrived
        self.region: Region | None = None  # where its tensors go, once chosen (`staging`)
        self.charged = 0  # request bytes counted in flight for it
        self.model: str | None = None  # the model it counts in flight for, once admitted
        # CHECKING only: the frame that completed the message, and the checked request where the check got that far
        self.held: HeldFrame | None = None
        self.checked: tuple[Any, Any] | None = None

    def move(self, event: UnaryEvent, now: float = 0.0) -> None:
        """Move on by `event` (`grpc.call_states.UNARY`); `now` starts the new state's clock.

        Raises:
            IllegalTransition: the table holds no such move.
        """
        self.state = transition(UNARY, self.state, event)
        self.moved = now

    def wait(self, held: HeldFrame) -> None:
        """The check goes on off the loop: `held`, the frame that completed the message, waits with it."""
        self.move(CHECK_OFF_LOOP)
        self.held = held

    def take_held(self) -> HeldFrame | None:
        """The frame that waits for the check off the loop (None: not CHECKING), no longer held."""
        held, self.held = self.held, None
        return held

    def add(self, data: Any) -> bool:
        """Bytes of the message (a frame's payload without padding); whether they made its size known."""
        if data:
            self.parts.append(data)
            self.got += len(data)
        if self.size < 0 and self.got >= PREFIX:
            head = self.parts[0] if len(self.parts[0]) >= PREFIX else b"".join(self.parts)
            self.size = int.from_bytes(head[1:PREFIX], "big")
            return True
        return False

    def cannot_complete(self, length: int) -> bool:
        """Whether `length` more bytes of message leave it still unfinished (its size known)."""
        return self.size >= 0 and self.got + length < PREFIX + self.size

    @property
    def replaced(self) -> bool:
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

    def packed(self) -> bytes:
        """The whole message's bytes without its prefix, as sent (compressed or not); its pieces let go."""
        parts, self.parts = self.parts, []
        return Pieces(parts, PREFIX).join()

    def message(self, cap: int) -> bytes | Pieces:
        """The whole message, without its prefix, inflated if it was sent compressed; its pieces let go.

        Raises:
            Refusal: a compressed message with no known encoding, invalid, or over `cap` once inflated.
        """
        parts, self.parts = self.parts, []
        if not parts[0][0]:
            return Pieces(parts, PREFIX)
        return inflate(self.encoding, Pieces(parts, PREFIX).join(), cap)
