"""The gRPC relay of one client connection, without sockets: fed the bytes either side sent, it says what to write.

As h2 does for HTTP/2, this core does no I/O and keeps no clock: `RelayCore.feed(side, data, now)` takes what
the client (`CLIENT`) or Triton (`TRITON`) sent and returns the `Writes` to make, `tick(now)` applies the
deadlines (a stalled message, the delay before closing a calmed connection), `closed(side)` a hang-up, and
`opened(reachable)` the outcome of connecting to Triton. `grpc_relay` adapts it to asyncio.

Every frame goes through unchanged (settings, flow control, pings, header blocks: the two HPACK contexts stay
the client's and Triton's), but for the `grpc-message` of Triton's trailers, scrubbed of server paths,
tracebacks and internal region names (`grpc_trailers`: only that non-indexed field is replaced, so the HPACK
tables stay in step). The core reads both byte streams frame by frame and collects the request header blocks;
what concerns the client's calls (which call a header block opens, a checked stream's DATA, the refusals, the
window owed back to the client) is decided by its `CheckedCalls` (`grpc_calls`). Frames of our own for the
client (refusals, acks) wait for a frame boundary in Triton's byte stream and go before Triton's next frame;
frames of ours for Triton (resets of refused streams) wait for one in the client's. Triton's frames for
streams we answered ourselves are dropped (header blocks excepted: they keep the client's HPACK table in step).
On a `ModelStreamInfer` call, Triton's DATA and response headers are read whole too (`grpc_stream_calls`: which
requests an answer ends, where answers of ours may go), and the client's window updates lose the part that
gives back window for our answers, which Triton never sent.

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
from mslite_gateway.grpc_calls import CheckedCalls, Later, RelayRules
from mslite_gateway.grpc_frames import (
    ACK,
    COLLECT,
    CONTINUATION,
    DATA,
    DEADLINE_EXCEEDED,
    DROP,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    GOAWAY,
    HEADERS,
    PADDED,
    PASS,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    RST_STREAM,
    SETTINGS,
    SETTINGS_HEADER_TABLE_SIZE,
    U32,
    WINDOW_UPDATE,
    Frames,
    frame,
    joined,
    scrubbed_trailers,
    unpadded,
)
from mslite_gateway.rules import no_answer
from mslite_gateway.server_metadata import served_message

__all__ = ["CLIENT", "TRITON", "MAX_RESETS_PER_WINDOW", "RESET_WINDOW_S", "RelayCore", "RelayRules", "Writes"]

log = logging.getLogger(__name__)
CLIENT, TRITON = "client", "triton"  # the two sides of a relayed connection
# Window we owe the client is given back once it reaches this much: a few updates per large request, not
# one per read (each is a write here and a wakeup in the client). What is held back stays far below
# Triton's 4 MiB windows, so the client never waits for it.
_CREDIT_BATCH_BYTES = 256 << 10
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
        # work to run off the loop for these streams (`grpc_calls.Later`), each followed by `resolved`
        self.later: list[tuple[int, Later]] = []


class RelayCore:
    """One relayed connection: the client's byte stream, Triton's, and the checked streams between them."""

    # Slots: its attributes are read on every frame (and before its checked calls became their own object,
    # it had more than the 30 keys of a plain instance dict that CPython 3.11 specializes).
    __slots__ = (
        "rules",
        "now",
        "connected",
        "alone",
        "early",
        "preface",
        "frames",
        "triton",
        "calls",
        "block",
        "in_block",
        "triton_in_block",
        "block_stream",
        "for_client",
        "for_triton",
        "later",
        "open",
        "last_sid",
        "resets",
        "resets_since",
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
        self.triton = Frames()  # Triton's bytes; its `out` is what goes to the client
        self.block = bytearray()  # a header block being collected (HEADERS + CONTINUATIONs)
        self.in_block = False  # between a client's HEADERS frame without END_HEADERS and its last CONTINUATION
        self.triton_in_block = False  # the same in Triton's byte stream
        self.block_stream = 0
        self.for_client: list[bytes] = []  # frames of ours for the client, waiting for a boundary in Triton's
        self.for_triton: list[bytes] = []  # frames of ours for Triton, written at the next boundary
        self.later: list[tuple[int, Later]] = []  # work off the loop the checked calls asked for
        self.open: set[int] = set()  # streams forwarded to Triton and not ended there
        self.last_sid = 0
        self.resets = 0  # client resets of open streams in the window that began at `resets_since`
        self.resets_since = 0.0
        self.cut = False  # ended for too many resets: the rest of what it sent is dropped
        self.close_at = 0.0  # when a calmed connection closes (0: not calmed, or closed at once)
        self.wake_s = 0.0  # a timer for `tick` the adapter is still to be asked for (once)
        self.pausing = False
        self.closing = False
        self.shut = False  # closed: nothing more is read or written
        self.unusual = False  # alone, closing or calmed: `_writes` has more to say than the bytes
        self.writes = Writes()
        self.calls = CheckedCalls(rules, self, self.frames)  # last: it reads what is above

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
            self._feed_triton(data)
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
            if (sid in calls.streams or sid in calls.streamed.calls) and not self.shut:
                self.stalled(sid)
        overdue = calls.overdue_ids(now)
        for sid in overdue:
            if sid in calls.streams and not self.shut:
                calls.refuse(sid, DEADLINE_EXCEEDED, no_answer(self.rules.upstream_timeout_s))
        if overdue:
            self._ours_to_triton()
        return self._writes()

    def resolved(self, sid: int, job: Later, value: Any, error: BaseException | None, now: float) -> Writes:
        """Work off the loop for stream `sid` is done (`job.run` returned `value` or raised `error`)."""
        self.now = now
        if not self.shut:
            self.calls.resolve(sid, job, value, error)
            self._ours_to_triton()
            if self.calls.credit or self.calls.stream_credit:
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
        """Checked streams not answered yet (a ModelStreamInfer call counts as one)."""
        return len(self.calls.streams) + len(self.calls.streamed.calls)

    @property
    def account(self) -> Account:
        """Request bytes this connection has in flight."""
        return self.calls.account

    @property
    def credit(self) -> int:
        """Window owed to the client for DATA Triton never saw, not given back yet."""
        return self.calls.credit

    @property
    def debt(self) -> int:
        """DATA bytes sent Triton in place of the client's, not yet set off against the credit."""
        return self.calls.debt

    def close(self) -> None:
        """Close both sides; streams in progress are finished (their counts given back)."""
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
        if self.closing:  # what was sent before the close still goes
            return
        if not self.alone and not (self.triton.at_boundary and not self.triton_in_block):
            self.for_client.append(data)
        else:
            self.triton.out.append(data)

    # -- Triton's frames --
    def _feed_triton(self, data: bytes) -> None:
        frames = self.triton
        frames.feed(data, self._on_triton_header, self._on_triton_frame)
        if self.for_client and frames.at_boundary and not self.triton_in_block:
            frames.out += self.for_client
            self.for_client = []
        if self.for_triton and self.frames.at_boundary and not self.in_block:  # window given back to Triton
            self.frames.out += self.for_triton
            self.for_triton = []

    def _on_triton_header(self, length: int, kind: int, flags: int, sid: int) -> int:
        if self.for_client and not self.triton_in_block:  # a frame boundary: our answers go first, before Triton's
            self.triton.inject(self.for_client)  # (Triton may answer a call we refused, e.g. after our reset)
            self.for_client = []
        streamed = self.calls.streamed.calls
        if kind == HEADERS or kind == CONTINUATION:
            self.triton_in_block = not flags & END_HEADERS
            if kind == HEADERS and flags & END_STREAM:
                self.calls.finish(sid, answered=True)
                if flags & END_HEADERS:
                    return COLLECT  # trailers in one frame: their grpc-message is scrubbed (_on_triton_frame)
            elif kind == HEADERS and sid in streamed:
                return COLLECT  # a stream's response headers: answers of ours may follow them (_on_triton_frame)
            elif kind == HEADERS:
                self.calls.answering(sid)
            return PASS
        if sid and sid in self.calls.refused_ids:
            return DROP if kind != PRIORITY else PASS  # we answered that stream: Triton's reset, data, credit go
        if kind == DATA and sid in streamed:
            return COLLECT  # a stream's answers are read message by message (`grpc_stream_calls`)
        if kind == RST_STREAM:
            self.calls.finish(sid)
        elif kind == SETTINGS and not flags & ACK:
            return COLLECT
        elif kind == DATA and sid in self.calls.metadata_ids:
            return COLLECT  # a server metadata answer: rewritten (`_served_metadata`)
        return PASS

    def _on_triton_frame(self, kind: int, flags: int, sid: int, raw: bytes, parts: list[Any]) -> None:
        out = self.triton.out
        streamed = self.calls.streamed
        if kind == HEADERS and not flags & END_STREAM:  # a ModelStreamInfer call's response headers
            out.append(raw)
            out += parts
            if sid in streamed.calls:
                streamed.triton_headers(sid, streamed.calls[sid], flags)
            return
        if kind == HEADERS:
            out += scrubbed_trailers(flags, sid, raw, parts, self.rules.explain)
            return
        if kind == DATA:
            call = streamed.calls.get(sid)
            if call is not None:
                out += streamed.triton_data(sid, call, flags, raw, parts)
            elif sid in self.calls.metadata_ids:
                out += self._served_metadata(flags, sid, raw, parts)
            elif sid not in self.calls.refused_ids:  # the call ended while this frame came (a client's reset)
                out.append(raw)
                out += parts
            return
        if parts:
            self._triton_settings(joined(parts))  # SETTINGS only
        out.append(raw)
        out += parts

    def _served_metadata(self, flags: int, sid: int, raw: bytes, parts: list[Any]) -> list[Any]:
        """A ServerMetadata answer's DATA frame, its list of extensions cut to those served (`server_metadata`).

        A message split over frames, or compressed, goes as it came. The frame gets shorter: the window the client
        will never give back for the bytes it did not get, we give Triton now.
        """
        payload = bytes(unpadded(joined(parts), flags)) if parts else b""
        if len(payload) < 5 or payload[0] != 0 or U32.unpack_from(payload, 1)[0] != len(payload) - 5:
            return [raw, *parts]
        message = served_message(payload[5:])
        rewritten = frame(DATA, flags & ~PADDED, sid, b"\0" + U32.pack(len(message)) + message)
        owed = len(raw) + sum(map(len, parts)) - len(rewritten)
        if owed > 0:
            self.for_triton.append(frame(WINDOW_UPDATE, 0, 0, U32.pack(owed)))
        return [rewritten]

    def _triton_settings(self, payload: Any) -> None:
        """Triton's settings: the header table size its decoder allows is what ours must allow too."""
        for i in range(0, len(payload) - 5, 6):
            if int.from_bytes(payload[i : i + 2], "big") == SETTINGS_HEADER_TABLE_SIZE:
                self.calls.headers.allow_table_size(int.from_bytes(payload[i + 2 : i + 6], "big"))

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
        if calls.credit >= _CREDIT_BATCH_BYTES or any(n >= _CREDIT_BATCH_BYTES for n in calls.stream_credit.values()):
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
                self.calls.credit_back(length)
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
            if self._too_many_resets():
                self._calm()
                return DROP
        elif kind == WINDOW_UPDATE and self.calls.streamed.owes(sid):
            return COLLECT  # it gives back window for answers of ours too: that part is not Triton's
        return PASS

    def _too_many_resets(self) -> bool:
        now = self.now
        if now - self.resets_since > RESET_WINDOW_S:
            self.resets, self.resets_since = 0, now
        self.resets += 1
        return self.resets > MAX_RESETS_PER_WINDOW

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
        if not self.for_client:
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
            self._header_fragment(kind, sid, flags, payload)
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

    def _header_fragment(self, kind: int, sid: int, flags: int, payload: Any) -> None:
        if kind == HEADERS:
            a, b = 0, len(payload)
            if flags & PADDED and payload:
                a, b = 1, b - payload[0]
            if flags & PRIORITY_FLAG:
                a += 5
            self.block = bytearray(payload[a:b])
            self.block_stream = sid
        else:
            self.block += payload
        if flags & END_HEADERS:
            block, self.block = bytes(self.block), bytearray()
            self.calls.call(self.block_stream, block)
