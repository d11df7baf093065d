"""The flow-control window one relayed connection owes its client for DATA that Triton never saw.

Triton gives window back only for the bytes it gets. The client's bytes that stay in the relay (a refused
message, one staged in shared memory or rewritten, padding) would never be given back, and the client would
stop sending: so the relay gives their window back itself, in batches (one update per read would be a write
here and a wakeup in the client). What the relay sent Triton in their place (a staged request, a stream's
probe) Triton does give back: that much is set off against what is owed on the connection.
"""

from __future__ import annotations

from mslite_gateway.grpc.frames import U32, WINDOW_UPDATE, frame

# Window owed is given back once it reaches this much: a few updates per large request, not one per read.
# What is held back stays far below Triton's 4 MiB windows, so the client never waits for it.
CREDIT_BATCH_BYTES = 256 << 10


class WindowCredit:
    """What one connection owes its client: on the connection, on each stream, less the relay's own DATA."""

    __slots__ = ("credit", "streams", "debt")

    def __init__(self) -> None:
        self.credit = 0  # connection window owed for DATA Triton never saw, not given back yet
        self.streams: dict[int, int] = {}  # the same for each stream that stays open (staged, stream calls)
        self.debt = 0  # DATA bytes sent Triton in place of the client's, not yet set off against `credit`

    def owe(self, nbytes: int, sid: int = 0, on_stream: int | None = None) -> None:
        """`nbytes` of the client's DATA Triton never sees; `on_stream` of them (all: None) owed on stream `sid`."""
        self.credit += nbytes
        owed = nbytes if on_stream is None else on_stream
        if sid and owed > 0:
            self.streams[sid] = self.streams.get(sid, 0) + owed

    def sent_instead(self, nbytes: int) -> None:
        """The relay sent Triton `nbytes` of DATA of its own: Triton gives their window back to the client."""
        self.debt += nbytes

    @property
    def due(self) -> bool:
        """Whether enough is owed to give it back now (`updates`)."""
        return self.credit >= CREDIT_BATCH_BYTES or any(n >= CREDIT_BATCH_BYTES for n in self.streams.values())

    def updates(self) -> bytes:
        """The WINDOW_UPDATE frames for all that is owed (less the debt), in one piece; nothing is owed then."""
        paid = min(self.credit, self.debt)
        self.debt -= paid
        updates = [frame(WINDOW_UPDATE, 0, sid, U32.pack(n)) for sid, n in self.streams.items()]
        if self.credit > paid:
            updates.append(frame(WINDOW_UPDATE, 0, 0, U32.pack(self.credit - paid)))
        self.credit = 0
        self.streams.clear()
        return b"".join(updates)
