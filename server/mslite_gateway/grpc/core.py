"""The gRPC relay of one client connection, without sockets: fed the bytes either side sent, it says what to write.

As h2 does for HTTP/2, this core does no I/O and keeps no clock: `RelayCore.feed(side, data, now)` takes what
the client (`CLIENT`) or Triton (`TRITON`) sent and returns the `Writes` to make, `tick(now)` applies the
deadlines (a stalled message, the delay before closing a calmed connection), `closed(side)` a hang-up, and
`opened(reachable)` the outcome of connecting to Triton. `grpc.relay` adapts it to asyncio.

Every frame goes through unchanged (settings, flow control, pings, header blocks: the two HPACK contexts stay
the client's and Triton's), but for what Triton's side changes (`grpc.triton_reader`: scrubbed trailers, the
frames of calls we answered ourselves). The core reads the client's byte stream frame by frame and collects its
request header blocks; what concerns the client's calls (which call a header block opens, a checked call's
DATA, the refusals, the window owed back to the client) is decided by its `CheckedCalls` (`grpc.calls`).
Frames of ours for Triton (resets of refused calls) wait for a frame boundary in the client's byte stream,
frames of ours for the client one in Triton's. On a `ModelStreamInfer` call the client's window updates lose
the part that gives back window for our answers, which Triton never sent.

A message that brings no new byte for the stall timeout is dropped (DEADLINE_EXCEEDED; `tick`); a client
that stopped inside a frame loses its connection.

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
from mslite_gateway.grpc.frames import (
    ACK,
    COLLECT,
    CONTINUATION,
    DATA,
    DEADLINE_EXCEEDED,
    DROP,
    END_HEADERS,
    ENHANCE_YOUR_CALM,
    GOAWAY,
    HEADERS,
    PASS,
    PING,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    U32,
    WINDOW_UPDATE,
    Frames,
    frame,
    joined,
)
from mslite_gateway.grpc.relay_rules import Later, RelayRules
from mslite_gateway.grpc.request_headers import HeaderBlock
from mslite_gateway.grpc.triton_reader import TritonReader
from mslite_gateway.grpc.window_credit import CREDIT_BATCH_BYTES, WindowCredit
from mslite_gateway.rules import no_answer

__all__ = ["CLIENT", "TRITON", "MAX_RESETS_PER_WINDOW", "RESET_WINDOW_S", "RelayCore", "RelayRules", "Writes"]

log = logging.getLogger(__name__)
CLIENT, TRITON = "client", "triton"  # the two sides of a relayed connection
# Client resets of streams Triton has open, per connection and window. A client cancels a call when its
# deadline passes or its user gives up: a few a second. Rapid reset sends hundreds of thousands, and what
# tritonserver keeps per cancelled call grows with how many one connection cancels at once (measured: 10
# connections cutting 1,000 each grew it by 104 MiB, cutting 200 each by 12 MiB).
MAX_RESETS_PER_WINDOW = 200
RESET_WINDOW_S = 10.0
# A calmed connection's GOAWAY may wait for the end of Triton's frame in progress: closed this long after.
_CALM_CLOSE_S = 1.0


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
        self.later: list[tuple[int, Later]] = []


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


class RelayCore:
    """One relayed connection: the client's byte stream, Triton's (`TritonReader`), the checked calls between."""

    # Slots: its attributes are read on every frame (a plain instance dict of more than 30 keys is one CPython
    # 3.11 does not specialize).
    __slots__ = (
        "rules",
        "now",
        "connected",
        "alone",
        "early",
        "preface",
        "frames",
        "calls",
        "from_triton",
        "triton",
        "block",
        "in_block",
        "for_triton",
        "later",
        "open",
        "last_sid",
        "resets",
        "cut",
        "close_at",
        "wake_s",
        "pausing",
        "closing",
        "shut",
        "unusual",
        "writes",
    )

    def __init__(self, rules: RelayRules) -> None:
        self.rules = rules
        self.now = 0.0  # the time of the latest call (seconds, the adapter's clock)
        self.connected = False  # the outcome of connecting to Triton is known (`opened`)
        self.alone = False  # Triton could not be reached: answer every call UNAVAILABLE ourselves
        self.early: list[bytes] = []  # what the client sent before that
        self.preface = len(PREFACE)
        self.frames = Frames()  # the client's bytes; its `out` is what goes to Triton
        self.block = HeaderBlock()  # a request header block being collected
        self.in_block = False  # between a client's HEADERS frame without END_HEADERS and its last CONTINUATION
        self.for_triton: list[bytes] = []  # frames of ours for Triton, written at the next boundary
        self.later: list[tuple[int, Later]] = []  # work off the loop the checked calls asked for
        self.open: set[int] = set()  # streams forwarded to Triton and not ended there
        self.last_sid = 0
        self.resets = ResetCounter()  # the client's resets of streams Triton has open
        self.cut = False  # ended for too many resets: the rest of what it sent is dropped
        self.close_at = 0.0  # when a calmed connection closes (0: not calmed, or closed at once)
        self.wake_s = 0.0  # a timer for `tick` the adapter is still to be asked for (once)
        self.pausing = False
        self.closing = False
        self.shut = False  # closed: nothing more is read or written
        self.unusual = False  # alone, closing or calmed: `_writes` has more to say than the bytes
        self.writes = Writes()
        self.calls = CheckedCalls(rules, self, self.frames)  # it reads what is above
        self.from_triton = TritonReader(self, self.calls)
        self.triton = self.from_triton.frames  # Triton's bytes; its `out` is what goes to the client

    # -- the adapter's calls --
    def opened(self, reachable: bool, now: float) -> Writes:
        """Connecting to Triton succeeded or failed; what the client sent meanwhile is handled now."""
        self.now = now
        self.connected = True
        if not reachable:
            self.alone = self.unusual = True
            self.send(frame(SETTINGS, 0, 0))  # our own (empty) settings: we answer this connection ourselves
        early, self.early = self.early, []
        for data in early:
            if not self.shut:
                self._feed(data)
        return self._writes()

    def feed(self, side: str, data: bytes, now: float) -> Writes:
        """Bytes read from `side` (`CLIENT` or `TRITON`): what to write to each side, and whether to close."""
        self.now = now
        if self.shut:
            pass
        elif side == TRITON:
            self.from_triton.feed(data)
            if self.for_triton and self.frames.at_boundary and not self.in_block:  # window given back to Triton
                self.frames.out += self.for_triton
                self.for_triton = []
        elif self.connected:
            self._feed(data)
        else:
            self.early.append(data)
        return self._writes()

    def tick(self, now: float) -> Writes:
        """Deadlines: messages that brought no byte for the stall timeout are dropped; a calmed connection ends."""
        self.now = now
        if self.close_at and now >= self.close_at:
            self.close()
        calls = self.calls
        for sid in calls.stalled_ids(now):
            # not closed with the connection by the one before
            if (sid in calls.unary.calls or sid in calls.streamed.calls) and not self.shut:
                self.stalled(sid)
        overdue = calls.overdue_ids(now)
        for sid in overdue:
            if sid in calls.unary.calls and not self.shut:
                calls.refuse(sid, DEADLINE_EXCEEDED, no_answer(self.rules.upstream_timeout_s))
        if overdue:
            self._ours_to_triton()
        return self._writes()

    def resolved(self, sid: int, job: Later, value: Any, error: BaseException | None, now: float) -> Writes:
        """Work off the loop for call `sid` is done (`job.run` returned `value` or raised `error`)."""
        self.now = now
        if not self.shut:
            self.calls.resolve(sid, job, value, error)
            self._ours_to_triton()
            window = self.calls.window
            if window.credit or window.streams:
                self.calls.give_credit()
        return self._writes()

    def _ours_to_triton(self) -> None:
        """Frames of ours for Triton made between reads: now if the client's byte stream is between frames."""
        frames = self.frames
        if frames.at_boundary and not self.in_block:
            if self.for_triton:
                frames.out += self.for_triton
                self.for_triton = []
        elif frames.out:  # in the middle of a client's frame: after it
            self.for_triton += frames.out
            frames.out = []

    def closed(self, side: str) -> Writes:
        """`side` hung up: the other side is closed too (clients see UNAVAILABLE and retry)."""
        self.close()
        return self._writes()

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
        self.closing = self.unusual = True

    def _writes(self) -> Writes:
        writes = self.writes
        out = writes.to_client = self.triton.out
        if out:
            self.triton.out = []
        out = writes.to_triton = self.frames.out
        if out:
            self.frames.out = []
        later = self.later
        if later:
            writes.later, self.later = later, []
        elif writes.later:
            writes.later = []
        if self.unusual:
            if self.alone or self.closing:  # Triton's connection is gone, or goes before the frames of this read
                writes.to_triton = []
            writes.wake_s, self.wake_s = self.wake_s, 0.0
            writes.pause_client, writes.close = self.pausing, self.closing
            self.shut = self.closing
            self.pausing = False
        return writes

    def send(self, data: bytes) -> None:
        """A frame of ours to the client, now if Triton's side is between frames, else at its next boundary."""
        if not self.closing:  # what was sent before the close still goes
            self.from_triton.send(data, now=self.alone)

    # -- the client's frames --
    def _feed(self, data: bytes) -> None:
        calls = self.calls
        if calls.owed:
            calls.arrived(len(data))
        if self.preface:
            take = min(self.preface, len(data))
            done = len(PREFACE) - self.preface
            if data[:take] != PREFACE[done : done + take]:
                self.close()
                return
            self.preface -= take
            if not self.alone:
                self.frames.out.append(data[:take])
            data = data[take:]
        frames = self.frames
        frames.feed(data, self._on_header, self._on_frame)
        window = calls.window
        if (window.credit >= CREDIT_BATCH_BYTES or window.streams) and window.due:  # (cheap half first: every read)
            calls.give_credit()
        if self.for_triton and frames.at_boundary and not self.in_block:
            frames.out += self.for_triton
            self.for_triton = []

    def _on_header(self, length: int, kind: int, flags: int, sid: int) -> int:
        if self.cut:
            return DROP
        if self.for_triton and not self.in_block:  # a frame boundary: our resets reach Triton as early as they can
            self.frames.inject(self.for_triton)
            self.for_triton = []
        if kind == HEADERS or kind == CONTINUATION:
            self.in_block = not flags & END_HEADERS
        if self.alone:
            if kind == DATA:
                self.calls.window.owe(length)
                return DROP
            return COLLECT if kind in (HEADERS, CONTINUATION, SETTINGS, PING, GOAWAY) else DROP
        if kind == DATA:
            return self.calls.data_header(length, flags, sid)
        if kind == HEADERS or kind == CONTINUATION:
            if kind == HEADERS:
                self.open.add(sid)
                if sid > self.last_sid:
                    self.last_sid = sid
            return COLLECT
        if kind == RST_STREAM:
            if sid not in self.open:
                return DROP  # never forwarded, refused by us (and reset at Triton then), or ended there
            self.calls.finish(sid)
            if self.resets.too_many(self.now):
                self._calm()
                return DROP
        elif kind == WINDOW_UPDATE and self.calls.streamed.owes(sid):
            return COLLECT  # it gives back window for answers of ours too: that part is not Triton's
        return PASS

    def _calm(self) -> None:
        """Too many resets: GOAWAY ENHANCE_YOUR_CALM to the client, and both sides closed."""
        self.cut = True
        self.rules.calmed += 1
        log.warning(
            "a gRPC client reset more than %d streams within %.0f s: its connection is closed",
            MAX_RESETS_PER_WINDOW,
            RESET_WINDOW_S,
        )
        self.send(frame(GOAWAY, 0, 0, U32.pack(self.last_sid) + U32.pack(ENHANCE_YOUR_CALM)))
        if not self.from_triton.ours:
            self.close()
            return
        # Triton's side is in the middle of a frame to the client: the GOAWAY goes after it (`send`), then we close
        self.pausing = self.unusual = True
        self.close_at = self.now + _CALM_CLOSE_S
        self.wake_s = _CALM_CLOSE_S

    def stalled(self, sid: int) -> None:
        """Stream `sid`'s message brought no byte for the stall timeout: drop it (`tick`)."""
        admission = self.rules.admission
        admission.stalled += 1
        if not self.frames.at_boundary or self.in_block:
            # The client stopped inside a frame: nothing else can reach Triton on this connection (and no
            # reset of ours can go in between), so the connection goes.
            log.warning("a gRPC client stopped in the middle of a frame for %.0f s: closed", admission.stall_s)
            self.close()
            return
        self.calls.refuse(
            sid, DEADLINE_EXCEEDED, f"the request message stopped: no byte of it arrived for {admission.stall_s:g} s"
        )
        if self.for_triton:
            self.frames.out += self.for_triton
            self.for_triton = []

    def _on_frame(self, kind: int, flags: int, sid: int, raw: bytes, parts: list[Any]) -> None:
        if kind == DATA:
            self.calls.data_frame(sid, flags, raw, parts)
            return
        payload = joined(parts) if parts else b""
        if kind == HEADERS or kind == CONTINUATION:
            if not self.alone:
                self.frames.out += (raw, payload)  # first: the refusals below come after it
            block = self.block.add(kind, sid, flags, payload)
            if block is not None:
                self.calls.call(*block)
        elif kind == SETTINGS and not flags & ACK:
            self.send(frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            self.send(frame(PING, ACK, 0, payload))
        elif kind == GOAWAY:
            self.close()
        elif kind == WINDOW_UPDATE and len(payload) == 4:
            increment = self.calls.streamed.window_update(sid, int.from_bytes(payload, "big") & 0x7FFFFFFF)
            if increment:
                self.frames.out.append(frame(WINDOW_UPDATE, 0, sid, U32.pack(increment)))
