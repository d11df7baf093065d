"""A relayed gRPC connection's life as one state (`LinkState`), its table, and what one call of the core asks.

    CONNECTING --OPENED--> RELAYING --CALM (too many resets)--> CALMED
    CONNECTING --UNREACHABLE--> ALONE (every call answered UNAVAILABLE here)
    any but SHUT --CLOSE--> CLOSING --WRITTEN--> SHUT

CONNECTING holds what the client sends until connecting to Triton ends; CALMED drops the client's bytes while
its GOAWAY waits for the end of Triton's frame in progress; CLOSING writes what was asked before the close (to
the client only), SHUT reads and writes nothing. Moves go through `state_machine.transition`.
"""

from __future__ import annotations

from typing import Any

from mslite_gateway.state_machine import FastState


class LinkState(FastState):
    """Where a relayed connection is."""

    CONNECTING = "connecting"  # the outcome of connecting to Triton is not known: the client's bytes wait
    RELAYING = "relaying"  # both sides open: frames go through
    ALONE = "alone"  # Triton could not be reached: every call is answered here
    CALMED = "calmed"  # too many resets: the client's bytes are dropped, its GOAWAY goes, closed soon
    CLOSING = "closing"  # closed once what this call of the core wrote goes (to the client only)
    SHUT = "shut"  # closed: nothing more is read or written


class LinkEvent(FastState):
    """What moves a relayed connection on."""

    OPENED = "opened"  # connected to Triton
    UNREACHABLE = "unreachable"  # connecting to Triton failed
    CALM = "calm"  # the client reset too many streams Triton has open
    CLOSE = "close"  # either side hung up, or the relay ends the connection
    WRITTEN = "written"  # the writes of a closing connection were handed to the adapter


# module names: read per frame (see `grpc.call_states`)
CONNECTING, RELAYING, ALONE, CALMED, CLOSING, SHUT = (
    LinkState.CONNECTING,
    LinkState.RELAYING,
    LinkState.ALONE,
    LinkState.CALMED,
    LinkState.CLOSING,
    LinkState.SHUT,
)
LINK_MOVES: dict[tuple[LinkState, LinkEvent], LinkState] = {
    (CONNECTING, LinkEvent.OPENED): RELAYING,
    (CONNECTING, LinkEvent.UNREACHABLE): ALONE,
    (RELAYING, LinkEvent.CALM): CALMED,
    **{(state, LinkEvent.CLOSE): CLOSING for state in LinkState if state is not SHUT},
    (SHUT, LinkEvent.CLOSE): SHUT,  # a hang-up after the relay closed it
    (CLOSING, LinkEvent.WRITTEN): SHUT,
}

# Client resets of streams Triton has open, per connection and window. A client cancels a call when its
# deadline passes or its user gives up: a few a second. Rapid reset sends hundreds of thousands, and what
# tritonserver keeps per cancelled call grows with how many one connection cancels at once (measured: 10
# connections cutting 1,000 each grew it by 104 MiB, cutting 200 each by 12 MiB).
MAX_RESETS_PER_WINDOW = 200
RESET_WINDOW_S = 10.0


class Writes:
    """What one call of the core asks its adapter to do, in this order: write, then pause or close.

    Each core returns the same object every call (one read of a busy connection is a few microseconds of work:
    a new object each time cost measurably): it holds what the latest call asked, until the next call.
    """

    __slots__ = ("to_client", "to_triton", "pause_client", "close", "wake_s", "later")

    def __init__(self) -> None:
        self.to_client: list[Any] = []  # pieces (bytes or views of what was read), in order
        self.to_triton: list[Any] = []
        self.pause_client = False  # stop reading the client (a calmed connection, until it closes)
        self.close = False  # close both connections once what is above is written
        self.wake_s = 0.0  # call `tick` again within this many seconds (0: no need beyond the usual sweep)
        # work to run off the loop for these calls (`grpc.relay_rules.Later`), each followed by `resolved`
        self.later: list[tuple[int, Any]] = []


class ResetCounter:
    """A connection's client resets of streams Triton has open, counted per window of `RESET_WINDOW_S`."""

    __slots__ = ("count", "since")

    def __init__(self) -> None:
        self.count = 0  # in the window that began at `since`
        self.since = 0.0

    def too_many(self, now: float) -> bool:
        """One more reset: whether the window now holds more than `MAX_RESETS_PER_WINDOW`."""
        if now - self.since > RESET_WINDOW_S:
            self.count, self.since = 0, now
        self.count += 1
        return self.count > MAX_RESETS_PER_WINDOW
