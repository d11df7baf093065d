"""The gRPC relay of one client connection, without sockets: fed the bytes either side sent, it says what to write.

As h2 does for HTTP/2, this core does no I/O and keeps no clock: `RelayCore.feed(side, data, now)` takes what
the client (`CLIENT`) or Triton (`TRITON`) sent and returns the `Writes` to make, `tick(now)` applies the
deadlines (a stalled message, an answer not whole within the upstream timeout, the delay before closing a calmed
connection), `closed(side)` a hang-up, `goaway(now)` an idle connection's end, and `opened(reachable)` the
outcome of connecting to Triton. `grpc.relay` adapts it to asyncio. The connection's life is one state
(`grpc.link_state.LinkState`), moved through its table.

Every frame goes through unchanged (settings, flow control, pings, header blocks: the two HPACK contexts stay
the client's and Triton's), but for what each side's reader changes: the client's (`grpc.client_reader`: its
settings, the streams past the connection's bound, the checked calls' DATA) and Triton's (`grpc.triton_reader`:
its settings, scrubbed trailers, the frames of calls we ended ourselves). What concerns the client's calls (which
call a header block opens, the refusals, the window owed back to the client) is decided by its `CheckedCalls`
(`grpc.calls`). Frames of ours for Triton wait for a frame boundary in the client's byte stream, frames of ours
for the client one in Triton's.

A message that brings no new byte for the stall timeout is dropped (DEADLINE_EXCEEDED; `tick`); a client
that stopped inside a frame loses its connection. A call whose answer has not reached the client whole within
the upstream timeout (Triton slow, or the client reading nothing) ends with DEADLINE_EXCEEDED, its slots
given back.

Resets: a client's RST_STREAM goes to Triton only for a stream Triton has open; more than
`MAX_RESETS_PER_WINDOW` of those within `RESET_WINDOW_S` on one connection (HTTP/2 "rapid reset": streams
opened and cancelled at once cost Triton per stream, and Triton 2.51 kept growing) end the connection with
GOAWAY ENHANCE_YOUR_CALM.
"""

from __future__ import annotations

import logging
from typing import Any

from mslite_gateway.admission import Account
from mslite_gateway.grpc.calls import CheckedCalls
from mslite_gateway.grpc.client_reader import ClientReader
from mslite_gateway.grpc.frames import (
    DEADLINE_EXCEEDED,
    ENHANCE_YOUR_CALM,
    GOAWAY,
    NO_ERROR,
    SETTINGS,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    U32,
    Frames,
    capped_settings,
    frame,
)
from mslite_gateway.grpc.link_state import (
    ALONE,
    CALMED,
    CLOSING,
    CONNECTING,
    LINK_MOVES,
    MAX_RESETS_PER_WINDOW,
    RELAYING,
    RESET_WINDOW_S,
    SHUT,
    LinkEvent,
    Writes,
)
from mslite_gateway.grpc.relay_rules import Later, RelayRules
from mslite_gateway.grpc.triton_reader import TritonReader
from mslite_gateway.grpc.window_credit import WindowCredit
from mslite_gateway.rules import no_answer
from mslite_gateway.state_machine import transition

__all__ = ["CLIENT", "TRITON", "MAX_RESETS_PER_WINDOW", "RESET_WINDOW_S", "RelayCore", "RelayRules", "Writes"]

log = logging.getLogger(__name__)
CLIENT, TRITON = "client", "triton"  # the two sides of a relayed connection
# A calmed connection's GOAWAY may wait for the end of Triton's frame in progress: closed this long after.
_CALM_CLOSE_S = 1.0


class RelayCore:
    """One relayed connection: the client's byte stream (`ClientReader`), Triton's (`TritonReader`), the calls."""

    # Slots: its attributes are read on every frame (a plain instance dict of many keys is one CPython 3.11
    # does not specialize).
    __slots__ = (
        "rules",
        "now",
        "state",
        "early",
        "calls",
        "client",
        "frames",
        "from_triton",
        "triton",
        "later",
        "open",
        "close_at",
        "wake_s",
        "writes",
    )

    def __init__(self, rules: RelayRules) -> None:
        self.rules = rules
        self.now = 0.0  # the time of the latest call (seconds, the adapter's clock)
        self.state = CONNECTING  # the connection's life (`grpc.link_state`), moved by `_move`
        self.early: list[bytes] = []  # what the client sent before that
        self.later: list[tuple[int, Later]] = []  # work off the loop the checked calls asked for
        self.open: set[int] = set()  # streams forwarded to Triton and not ended there
        self.close_at = 0.0  # when a calmed connection closes (0: not calmed, or closed at once)
        self.wake_s = 0.0  # a timer for `tick` the adapter is still to be asked for (once)
        self.writes = Writes()
        frames = self.frames = Frames()  # the client's bytes; its `out` is what goes to Triton
        self.calls = CheckedCalls(rules, self, frames)  # it reads what is above
        self.client = ClientReader(self, self.calls, frames)
        self.from_triton = TritonReader(self, self.calls)
        self.triton = self.from_triton.frames  # Triton's bytes; its `out` is what goes to the client

    # -- the adapter's calls --
    def opened(self, reachable: bool, now: float) -> Writes:
        """Connecting to Triton succeeded or failed; what the client sent meanwhile is handled now."""
        self.now = now
        if reachable:
            self._move(LinkEvent.OPENED)
        else:  # our own settings: we answer this connection ourselves
            self._move(LinkEvent.UNREACHABLE)
            limit = {SETTINGS_MAX_CONCURRENT_STREAMS: self.rules.max_streams}
            self.send(frame(SETTINGS, 0, 0, capped_settings(b"", limit)))
        early, self.early = self.early, []
        for data in early:
            if self.state is not SHUT:
                self.client.feed(data)
        return self._writes()

    def feed(self, side: str, data: bytes, now: float) -> Writes:
        """Bytes read from `side` (`CLIENT` or `TRITON`): what to write to each side, and whether to close."""
        self.now = now
        state = self.state
        if state is SHUT:
            pass
        elif side == TRITON:
            self.from_triton.feed(data)
            client = self.client
            if client.for_triton:  # window given back to Triton
                client.flush_ours()
        elif state is CONNECTING:
            self.early.append(data)
        else:
            self.client.feed(data)
        return self._writes()

    def tick(self, now: float) -> Writes:
        """Deadlines: stalled messages and overdue answers end their calls; a calmed connection ends."""
        self.now = now
        if self.close_at and now >= self.close_at:
            self.close()
        calls = self.calls
        for sid in calls.stalled_ids(now):
            # not closed with the connection by the one before
            if (sid in calls.unary.calls or sid in calls.streamed.calls or sid in calls.unchecked) and (
                self.state is not SHUT
            ):
                self.stalled(sid)
        overdue = calls.overdue_ids(now)
        for sid in overdue:
            if (sid in calls.unary.calls or sid in calls.streamed.calls) and self.state is not SHUT:
                calls.refuse(sid, DEADLINE_EXCEEDED, no_answer(self.rules.upstream_timeout_s))
        if overdue:
            self._ours_to_triton()
        return self._writes()

    def resolved(self, sid: int, job: Later, value: Any, error: BaseException | None, now: float) -> Writes:
        """Work off the loop for call `sid` is done (`job.run` returned `value` or raised `error`)."""
        self.now = now
        if self.state is not SHUT:
            self.calls.unary.resolve(sid, job, value, error)
            self._ours_to_triton()
            window = self.calls.window
            if window.credit or window.streams:
                self.calls.give_credit()
        return self._writes()

    def _ours_to_triton(self) -> None:
        """Frames of ours for Triton made between reads: now if the client's byte stream is between frames."""
        client = self.client
        frames = client.frames
        if frames.at_boundary and not client.in_block:
            client.flush_ours()
        elif frames.out:  # in the middle of a client's frame: after it
            client.for_triton += frames.out
            frames.out = []

    def closed(self, side: str) -> Writes:
        """`side` hung up: the other side is closed too (clients see UNAVAILABLE and retry)."""
        self.close()
        return self._writes()

    def goaway(self, now: float) -> Writes:
        """The connection is idle, or its place is wanted for a new client: GOAWAY (no error), then closed."""
        self.now = now
        if self.state is RELAYING or self.state is ALONE:
            self.send(frame(GOAWAY, 0, 0, U32.pack(self.client.last_sid) + U32.pack(NO_ERROR)))
        self.close()
        return self._writes()

    # -- what the calls and readers ask of their connection (`grpc.relay_rules.Link`) --
    @property
    def alone(self) -> bool:
        """Triton could not be reached: every call is answered here."""
        return self.state is ALONE

    @property
    def for_triton(self) -> list[bytes]:
        """Frames of ours for Triton, written at the client's next frame boundary."""
        return self.client.for_triton

    @property
    def inflight(self) -> int:
        """Checked calls not answered yet (a ModelStreamInfer call counts as one)."""
        return self.calls.inflight

    @property
    def account(self) -> Account:
        """Request bytes this connection has in flight."""
        return self.calls.account

    @property
    def window(self) -> WindowCredit:
        """Window owed to the client for DATA Triton never saw, and what we sent Triton in its place."""
        return self.calls.window

    def close(self) -> None:
        """Close both sides; calls in progress are finished (their counts given back)."""
        self.calls.finish_all()
        self._move(LinkEvent.CLOSE)

    def send(self, data: bytes) -> None:
        """A frame of ours to the client, now if Triton's side is between frames, else at its next boundary."""
        state = self.state
        if state is not CLOSING and state is not SHUT:  # what was sent before the close still goes
            self.from_triton.send(data, now=state is ALONE)

    def calm(self) -> None:
        """Too many resets: GOAWAY ENHANCE_YOUR_CALM to the client, and both sides closed."""
        self._move(LinkEvent.CALM)
        self.rules.calmed += 1
        log.warning(
            "a gRPC client reset more than %d streams within %.0f s: its connection is closed",
            MAX_RESETS_PER_WINDOW,
            RESET_WINDOW_S,
        )
        self.send(frame(GOAWAY, 0, 0, U32.pack(self.client.last_sid) + U32.pack(ENHANCE_YOUR_CALM)))
        if not self.from_triton.ours:
            self.close()
            return
        # Triton's side is in the middle of a frame to the client: the GOAWAY goes after it (`send`), then we close
        self.close_at = self.now + _CALM_CLOSE_S
        self.wake_s = _CALM_CLOSE_S

    def stalled(self, sid: int) -> None:
        """Stream `sid`'s message brought no byte for the stall timeout: drop it (`tick`)."""
        admission = self.rules.admission
        admission.stalled += 1
        client = self.client
        if not client.frames.at_boundary or client.in_block:
            # The client stopped inside a frame: nothing else can reach Triton on this connection (and no
            # reset of ours can go in between), so the connection goes.
            log.warning("a gRPC client stopped in the middle of a frame for %.0f s: closed", admission.stall_s)
            self.close()
            return
        self.calls.refuse(
            sid, DEADLINE_EXCEEDED, f"the request message stopped: no byte of it arrived for {admission.stall_s:g} s"
        )
        client.flush_ours()

    # -- the writes --
    def _move(self, event: LinkEvent) -> None:
        self.state = transition(LINK_MOVES, self.state, event)

    def _writes(self) -> Writes:
        writes = self.writes
        out = writes.to_client = self.triton.out
        if out:
            self.triton.out = []
        frames = self.frames
        out = writes.to_triton = frames.out
        if out:
            frames.out = []
        later = self.later
        if later:
            writes.later, self.later = later, []
        elif writes.later:
            writes.later = []
        state = self.state
        if state is not RELAYING:  # more to say than the bytes
            if state is ALONE or state is CLOSING:  # Triton's connection is gone, or goes before this read's frames
                writes.to_triton = []
            writes.wake_s, self.wake_s = self.wake_s, 0.0
            writes.pause_client = state is CALMED
            writes.close = state is CLOSING
            if state is CLOSING:
                self._move(LinkEvent.WRITTEN)
        return writes
