"""The gRPC relay of one client connection, without sockets: fed the bytes either side sent, it says what to write.

As h2 does for HTTP/2, this core does no I/O and keeps no clock: `RelayCore.feed(side, data, now)` takes what
the client (`CLIENT`) or Triton (`TRITON`) sent and returns the `Writes` to make, `tick(now)` applies the
deadlines (a stalled message, the delay before closing a calmed connection), `closed(side)` a hang-up, and
`opened(reachable)` the outcome of connecting to Triton. `grpc_relay` adapts it to asyncio.

Every frame goes through unchanged (settings, flow control, pings, header blocks: the two HPACK contexts stay
the client's and Triton's), but for the `grpc-message` of Triton's trailers, scrubbed of server paths,
tracebacks and internal region names (`grpc_trailers`: only that non-indexed field is replaced, so the HPACK
tables stay in step). The core reads only what its checks need: the request header blocks (decoded with
`hpack` to learn each stream's method and whether it carries the admin key) and, for the methods it checks
(ModelInfer, the version of the model-level calls, the region name of shared-memory register and unregister
calls), the request message. A checked stream's DATA frames are passed on as they arrive (and kept, as views
of what was read, for the check), except one that may complete the message (and the first, before the
message's size is known), which is held until whole: when the message is whole it is checked
(`grpc_checks.check_model_infer`, on the pieces where they lie) and the frame is passed on, or the stream is
reset at Triton (which never saw a whole message, so never ran it) and the client gets the refusal as a
trailers-only answer. Frames of our own for the client (refusals, acks) wait for a frame boundary in Triton's
byte stream and go before Triton's next frame; Triton's frames for streams we answered ourselves are dropped
(header blocks excepted: they keep the client's HPACK table in step).

Flow control: DATA that Triton never sees (refused, or staged in shared memory) never has its window given
back by Triton, so the core gives it back to the client itself, in batches, less what it sent Triton in its
place.

Admission control: a checked stream's DATA is admitted frame by frame (a frame that would pass a bound, of
all connections or of this one's, is refused with UNAVAILABLE kLiteServiceDeny) and counted as its bytes
arrive; an inference request counts for its model from its check until Triton's trailers. A message over
the size cap is RESOURCE_EXHAUSTED from its first five bytes on. A message that brings no new byte for the
stall timeout is dropped (DEADLINE_EXCEEDED; `tick`).

Resets: a client's RST_STREAM goes to Triton only for a stream Triton has open; more than
`MAX_RESETS_PER_WINDOW` of those within `RESET_WINDOW_S` on one connection (HTTP/2 "rapid reset": streams
opened and cancelled at once cost Triton per stream, and Triton 2.51 kept growing) end the connection with
GOAWAY ENHANCE_YOUR_CALM.
"""

from __future__ import annotations

import logging
from typing import Any

import hpack

from mslite_gateway.admission import Account, Admission, Overloaded
from mslite_gateway.grpc_checks import (
    SERVICE,
    VERSIONED,
    Pieces,
    check_model_infer,
    check_register,
    check_unregister,
    check_versioned,
    read_model_infer,
    staged_model_infer,
    whole,
)
from mslite_gateway.grpc_frames import (
    ACK,
    CANCEL,
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
    INVALID_ARGUMENT,
    MIN_MAX_FRAME_SIZE,
    NO_ERROR,
    PADDED,
    PASS,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    RESOURCE_EXHAUSTED,
    RST_STREAM,
    SETTINGS,
    SETTINGS_HEADER_TABLE_SIZE,
    TAP,
    U32,
    UNAVAILABLE,
    UNIMPLEMENTED,
    WINDOW_UPDATE,
    Frames,
    frame,
    grpc_code,
    joined,
    scrubbed_trailers,
    trailers_only,
    unpadded,
)
from mslite_gateway.grpc_streams import Check, RequestHeaders, Stream
from mslite_gateway.load_failures import LoadFailures
from mslite_gateway.model_control import grpc_load_message
from mslite_gateway.rules import Refusal, holds_key
from mslite_gateway.staging import Staging

log = logging.getLogger(__name__)
CLIENT, TRITON = "client", "triton"  # the two sides of a relayed connection
# The most we send Triton in place of a staged message: within its stream window (4 MiB), which the client,
# whose bytes we credit back at once, does not hold back for.
_STAGED_MAX_BYTES = 1 << 20
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


class RelayRules:
    """What every connection of one gateway shares: the checks per method, the limits, the counters."""

    def __init__(
        self,
        *,
        max_request_bytes: int,
        admission: Admission,
        staging: Staging | None,
        admin_key: str | None = None,
        failures: LoadFailures | None = None,
    ) -> None:
        self.admin_key = admin_key
        self.staging = staging
        self.explain = None if failures is None else failures.explain_now  # a not-ready error: why
        self.cap = max_request_bytes
        self.admission = admission
        self.refused = 0
        self.calmed = 0  # connections ended for too many resets
        self.closing = False  # the gateway is stopping: new calls are refused
        self.infer_path = f"/{SERVICE}/ModelInfer".encode()
        self.checks: dict[bytes, Check] = {
            self.infer_path: lambda data, keyed: check_model_infer(data, self.cap, keyed=keyed)
        }
        for name, (kind, field) in VERSIONED.items():
            self.checks[f"/{SERVICE}/{name}".encode()] = check_versioned(kind, field)
        # the gateway's own regions are not the clients' to register or unregister; after any unregister
        # call (one without a name unregisters them all) staging checks its registrations again
        self.unregister_path = f"/{SERVICE}/SystemSharedMemoryUnregister".encode()
        self.checks[self.unregister_path] = check_unregister
        self.checks[f"/{SERVICE}/SystemSharedMemoryRegister".encode()] = check_register
        self.streaming = {f"/{SERVICE}/ModelStreamInfer".encode()}
        # calls whose message may be sent on changed or refused (`model_control`): held until whole (up to the
        # cap, an upload's files too: its keys are checked), then rewritten
        self.rewrites = {f"/{SERVICE}/RepositoryModelLoad".encode(): grpc_load_message}


class Writes:
    """What one call of the core asks its adapter to do, in this order: write, then pause or close.

    Each core returns the same object every call (one read of a busy connection is a few microseconds of work:
    a new object each time cost measurably): it holds what the latest call asked, until the next call.
    """

    __slots__ = ("to_client", "to_triton", "pause_client", "close", "wake_s")

    def __init__(self) -> None:
        self.to_client: list[Any] = []  # pieces (bytes or views of what was read), in order
        self.to_triton: list[Any] = []
        self.pause_client = False  # stop reading the client (a calmed connection, until it closes)
        self.close = False  # close both connections once what is above is written
        self.wake_s = 0.0  # call `tick` again within this many seconds (0: no need beyond the usual sweep)


class RelayCore:
    """One relayed connection: the client's byte stream, Triton's, and the checked streams between them."""

    # Slots: the core has more attributes than CPython 3.11 specializes for a plain instance dict (30 keys),
    # and its attributes are read on every frame.
    __slots__ = (
        "rules",
        "now",
        "connected",
        "alone",
        "early",
        "preface",
        "frames",
        "triton",
        "headers",
        "block",
        "in_block",
        "triton_in_block",
        "block_stream",
        "streams",
        "refused_ids",
        "for_client",
        "for_triton",
        "credit",
        "stream_credit",
        "debt",
        "account",
        "owed",
        "owed_to",
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
        self.headers = RequestHeaders()
        self.block = bytearray()  # a header block being collected (HEADERS + CONTINUATIONs)
        self.in_block = False  # between a client's HEADERS frame without END_HEADERS and its last CONTINUATION
        self.triton_in_block = False  # the same in Triton's byte stream
        self.block_stream = 0
        self.streams: dict[int, Stream] = {}
        self.refused_ids: set[int] = set()
        self.for_client: list[bytes] = []  # frames of ours for the client, waiting for a boundary in Triton's
        self.for_triton: list[bytes] = []  # frames of ours for Triton, written at the next boundary
        self.credit = 0  # window to give the client back for DATA Triton never saw (connection, streams)
        self.stream_credit: dict[int, int] = {}
        self.debt = 0  # DATA bytes we sent Triton in place of the client's: Triton gives their window back
        self.account = Account()  # request bytes this connection has in flight
        self.owed = 0  # bytes of the checked DATA frame being read still to arrive (counted as they do)
        self.owed_to: tuple[int, Stream] | None = None
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
        stall_s = self.rules.admission.stall_s
        for sid in [sid for sid, s in self.streams.items() if not s.done and now - s.moved > stall_s]:
            if sid in self.streams and not self.shut:  # not closed with the connection by the one before
                self.stalled(sid)
        return self._writes()

    def closed(self, side: str) -> Writes:
        """`side` hung up: the other side is closed too (clients see UNAVAILABLE and retry)."""
        self.close()
        return self._writes()

    @property
    def inflight(self) -> int:
        """Checked streams not answered yet."""
        return len(self.streams)

    def close(self) -> None:
        """Close both sides; streams in progress are finished (their counts given back)."""
        for sid in list(self.streams):
            self.finish(sid)
        self.closing = self.unusual = True

    def _writes(self) -> Writes:
        writes = self.writes
        out = writes.to_client = self.triton.out
        if out:
            self.triton.out = []
        out = writes.to_triton = self.frames.out
        if out:
            self.frames.out = []
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

    def _on_triton_header(self, length: int, kind: int, flags: int, sid: int) -> int:
        if self.for_client and not self.triton_in_block:  # a frame boundary: our answers go first, before Triton's
            self.triton.inject(self.for_client)  # (Triton may answer a call we refused, e.g. after our reset)
            self.for_client = []
        if kind == HEADERS or kind == CONTINUATION:
            self.triton_in_block = not flags & END_HEADERS
            if kind == HEADERS and flags & END_STREAM:
                self.finish(sid, answered=True)
                if flags & END_HEADERS:
                    return COLLECT  # trailers in one frame: their grpc-message is scrubbed (_on_triton_frame)
            return PASS
        if sid and sid in self.refused_ids:
            return DROP if kind != PRIORITY else PASS  # we answered that stream: Triton's reset, data, credit go
        if kind == RST_STREAM:
            self.finish(sid)
        elif kind == SETTINGS and not flags & ACK:
            return COLLECT
        return PASS

    def _on_triton_frame(self, kind: int, flags: int, sid: int, raw: bytes, parts: list[Any]) -> None:
        out = self.triton.out
        if kind == HEADERS:
            out += scrubbed_trailers(flags, sid, raw, parts, self.rules.explain)
            return
        if parts:
            self._triton_settings(joined(parts))  # SETTINGS only
        out.append(raw)
        out += parts

    def _triton_settings(self, payload: Any) -> None:
        """Triton's settings: the header table size its decoder allows is what ours must allow too."""
        for i in range(0, len(payload) - 5, 6):
            if int.from_bytes(payload[i : i + 2], "big") == SETTINGS_HEADER_TABLE_SIZE:
                self.headers.allow_table_size(int.from_bytes(payload[i + 2 : i + 6], "big"))

    # -- the client's frames --
    def _feed(self, data: bytes) -> None:
        if self.owed:
            self._arrived(len(data))
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
        if self.credit >= _CREDIT_BATCH_BYTES or any(n >= _CREDIT_BATCH_BYTES for n in self.stream_credit.values()):
            self._give_credit()
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
                self._credit(length)
                return DROP
            return COLLECT if kind in (HEADERS, CONTINUATION, SETTINGS, PING, GOAWAY) else DROP
        if kind == DATA:
            if sid in self.refused_ids:
                self._credit(length)
                return DROP
            stream = self.streams.get(sid)
            if stream is None or stream.done:
                return PASS
            arrived = min(length, self.frames.avail)  # only what came: the rest is counted as it comes
            try:
                self.rules.admission.take_bytes(arrived, self.account, own=stream.charged, admit=length)
            except Overloaded as e:
                self._credit(length)
                self.refuse(sid, UNAVAILABLE, e.message)
                return DROP
            stream.charged += arrived
            stream.moved = self.now
            if arrived < length:
                self.owed, self.owed_to = length - arrived, (sid, stream)
            if not stream.held and not flags & (PADDED | END_STREAM) and stream.cannot_complete(length):
                stream.got += length  # all message bytes, and not the last: they go on as they arrive
                self.frames.tap = stream.parts
                return TAP
            return COLLECT  # held until whole: it may complete the message (or end the stream early)
        if kind == HEADERS or kind == CONTINUATION:
            if kind == HEADERS:
                self.open.add(sid)
                if sid > self.last_sid:
                    self.last_sid = sid
            return COLLECT
        if kind == RST_STREAM:
            if sid not in self.open:
                return DROP  # never forwarded, refused by us (and reset at Triton then), or ended there
            self.finish(sid)
            if self._too_many_resets():
                self._calm()
                return DROP
        return PASS

    def _arrived(self, n: int) -> None:
        """`n` bytes were read while a checked DATA frame was owed bytes: count those of them that are its."""
        take = min(self.owed, n)
        self.owed -= take
        assert self.owed_to is not None
        sid, stream = self.owed_to
        if self.streams.get(sid) is stream:  # not finished meanwhile (it gave back what it held then)
            self.rules.admission.count_bytes(take, self.account)
            stream.charged += take
            stream.moved = self.now
        if not self.owed:
            self.owed_to = None

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
        self.refuse(
            sid, DEADLINE_EXCEEDED, f"the request message stopped: no byte of it arrived for {admission.stall_s:g} s"
        )
        if self.for_triton:
            self.frames.out += self.for_triton
            self.for_triton = []

    def _credit(self, length: int, sid: int = 0) -> None:
        """Triton never sees this DATA, so never gives its window back: we do, in batches (`_give_credit`)."""
        self.credit += length
        if sid and length:  # a staged stream still open: its own window too
            self.stream_credit[sid] = self.stream_credit.get(sid, 0) + length

    def _give_credit(self) -> None:
        """The window updates for what this read held back, in one write (less what we sent Triton instead)."""
        paid = min(self.credit, self.debt)
        self.debt -= paid
        updates = [frame(WINDOW_UPDATE, 0, sid, U32.pack(n)) for sid, n in self.stream_credit.items()]
        if self.credit > paid:
            updates.append(frame(WINDOW_UPDATE, 0, 0, U32.pack(self.credit - paid)))
        self.credit = 0
        self.stream_credit.clear()
        if updates:
            self.send(b"".join(updates))

    def _on_frame(self, kind: int, flags: int, sid: int, raw: bytes, parts: list[Any]) -> None:
        out = self.frames.out
        if kind == DATA:
            if self._data(sid, flags, parts):
                out.append(raw)
                out += parts
            else:
                staged = sid in self.streams and self.streams[sid].held and not flags & END_STREAM
                self._credit(sum(len(p) for p in parts), sid if staged else 0)
            return
        payload = joined(parts) if parts else b""
        if kind == HEADERS or kind == CONTINUATION:
            if not self.alone:
                out += (raw, payload)  # first: the refusals below come after it
            self._header_fragment(kind, sid, flags, payload)
        elif kind == SETTINGS and not flags & ACK:
            self.send(frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            self.send(frame(PING, ACK, 0, payload))
        elif kind == GOAWAY:
            self.close()

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
            self._headers(self.block_stream, block)

    def _headers(self, sid: int, block: bytes) -> None:
        try:
            path, encoding, key = self.headers.read_call(block)
        except hpack.HPACKError:
            self.close()  # what Triton would do too: the connection's compression state is lost
            return
        if sid in self.streams or sid in self.refused_ids:
            return  # trailers of a request (gRPC clients send none)
        if self.alone:
            self.refuse(sid, UNAVAILABLE, "the inference server is not reachable (restarting?)")
            # and hang up: the client's retry connects again, and so do we to tritonserver, once it is back
            self.send(frame(GOAWAY, 0, 0, U32.pack(sid) + U32.pack(NO_ERROR)))
            self.close()  # after what is written
        elif self.rules.closing:
            self.refuse(sid, UNAVAILABLE, "the server is shutting down")
        elif path in self.rules.checks:
            answered = None
            staging = self.rules.staging
            keyed = holds_key(key, self.rules.admin_key)
            if path == self.rules.unregister_path and keyed and staging is not None:
                staging.recheck()  # now, and again once Triton has answered (a staged request may come between)
                answered = staging.recheck
            self.streams[sid] = Stream(
                self.rules.checks[path],
                encoding,
                stageable=path == self.rules.infer_path,
                keyed=keyed,
                answered=answered,
                moved=self.now,
            )
        elif path in self.rules.rewrites:
            self.streams[sid] = Stream(_no_check, encoding, rewrite=self.rules.rewrites[path], moved=self.now)
        elif path in self.rules.streaming:
            self.refuse(
                sid,
                UNIMPLEMENTED,
                "streaming inference (ModelStreamInfer) is not served through this server's gateway; use ModelInfer",
            )

    def _data(self, sid: int, flags: int, parts: list[Any]) -> bool:
        """Whether this (whole, checked-stream) DATA frame goes on to Triton."""
        stream = self.streams[sid]
        first = stream.got == 0
        if flags & PADDED:
            stream.add(unpadded(joined(parts), flags) if parts else b"")
        else:
            for part in parts:
                stream.add(part)
        cap = self.rules.cap
        if first and stream.rewrite is not None and stream.size > cap:
            # an upload larger than the request cap (a big model's files) is not held: it goes through as it
            # comes, unread, so its file names are not checked (`model_control`; loads need the admin key)
            self.finish(sid)
            return True
        if stream.size > cap or (stream.size < 0 and stream.got > cap):
            self.refuse(
                sid,
                RESOURCE_EXHAUSTED,
                f"the request message of {stream.size} bytes is over this server's limit of {cap} bytes",
            )
            return False
        if stream.stageable and stream.size >= 0:
            self._choose_region(stream)
        if stream.whole:
            return self._complete(sid, stream, flags)
        if flags & END_STREAM:
            self.refuse(sid, INVALID_ARGUMENT, "the request ended before its message did")
            return False
        return not stream.held  # a staged or rewritten stream's bytes stay here

    def _choose_region(self, stream: Stream) -> None:
        """Once the message's size is known: a large uncompressed one goes to Triton through shared memory."""
        stream.stageable = False  # decided once
        staging = self.rules.staging
        if staging is not None and not stream.parts[0][0] and staging.wants(stream.size):
            stream.region = staging.take(stream.size)

    def _complete(self, sid: int, stream: Stream, flags: int) -> bool:
        if stream.got > 5 + stream.size:
            self.refuse(sid, INVALID_ARGUMENT, "a unary call carries one request message; this one carries more")
            return False
        staged = b""
        try:
            if stream.rewrite is not None:
                data = whole(stream.message(self.rules.cap))
                self._send_message(sid, flags, stream.rewrite(data) or data)
                stream.done = True
                return False
            if stream.region is None:
                model = stream.check(stream.message(self.rules.cap), stream.keyed)
            else:
                req, raw = read_model_infer(stream.message(self.rules.cap), self.rules.cap, keyed=stream.keyed)
                model = str(req.model_name)
                staged = staged_model_infer(req, raw, stream.region.name, stream.region.view)
        except Refusal as e:
            self.refuse(sid, grpc_code(e.status), e.message)
            return False
        if model is not None:
            try:
                self.rules.admission.enter(model)
            except Overloaded as e:
                self.refuse(sid, UNAVAILABLE, e.message)
                return False
            stream.model = model
        stream.done = True
        if stream.region is None:
            return True
        if len(staged) > _STAGED_MAX_BYTES:  # typed `contents`, not raw bytes: it would not fit Triton's window
            self.refuse(
                sid,
                RESOURCE_EXHAUSTED,
                f"the request holds {len(staged)} bytes besides raw_input_contents, over this server's limit of "
                f"{_STAGED_MAX_BYTES} bytes; send large tensors as raw_input_contents",
            )
            return False
        self._send_message(sid, flags, staged)  # in place of the client's: Triton reads the region
        return False

    def _send_message(self, sid: int, flags: int, body: bytes) -> None:
        """Send Triton `body` as stream `sid`'s (uncompressed) message, in place of the client's held DATA."""
        message = b"\0" + U32.pack(len(body)) + body
        self.debt += len(message)
        last = len(message) - 1
        for a in range(0, len(message), MIN_MAX_FRAME_SIZE):
            end = flags & END_STREAM if a + MIN_MAX_FRAME_SIZE > last else 0
            self.frames.out.append(frame(DATA, end, sid, message[a : a + MIN_MAX_FRAME_SIZE]))

    # -- ends of streams --
    def refuse(self, sid: int, code: int, message: str) -> None:
        """Answer stream `sid` ourselves, and reset it at Triton (which has not seen a whole message)."""
        self.rules.refused += 1
        self.finish(sid)
        self.refused_ids.add(sid)
        if len(self.refused_ids) > 4096:  # old ids: long answered; frames for them stop coming
            self.refused_ids = {i for i in self.refused_ids if i > sid - 4096}
        self.send(trailers_only(sid, code, message) + frame(RST_STREAM, 0, sid, U32.pack(NO_ERROR)))
        if not self.alone:
            self.for_triton.append(frame(RST_STREAM, 0, sid, U32.pack(CANCEL)))

    def finish(self, sid: int, *, answered: bool = False) -> None:
        """Stream `sid` is over (`answered`: Triton's trailers came): what it counted in flight is given back."""
        self.open.discard(sid)
        stream = self.streams.pop(sid, None)
        if stream is None:
            return
        if stream.region is not None and self.rules.staging is not None:
            if answered or not stream.done:
                self.rules.staging.give_back(stream.region)
            else:  # sent, then reset or cut off: Triton may still read the region
                self.rules.staging.abandon(stream.region)
        if answered and stream.answered is not None:
            stream.answered()
        if stream.charged:
            self.rules.admission.give_bytes(stream.charged, self.account)
        if stream.model is not None:
            self.rules.admission.leave(stream.model)


def _no_check(data: bytes | Pieces, keyed: bool) -> None:
    """The check of a call the relay only rewrites (`RelayRules.rewrites`): Triton checks its message."""
    return None
