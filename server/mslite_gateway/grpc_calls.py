"""The client's calls on one relayed gRPC connection as they are checked: each stream's state and the decisions on it.

`RelayCore` (`grpc_core`) reads the frames of both sides and hands this part what concerns the client's calls:
each request header block (`call`), each DATA frame header and whole held frame of a checked stream
(`data_header`, `data_frame`), Triton's answers and resets (`finish`). What this part decides goes back
through the connection (`Link`): frames of ours for the client (`send`), resets for Triton (`for_triton`),
messages for Triton in place of the client's (the client frame reader's `out`).

A checked stream's DATA frames are passed on as they arrive (and kept, as views of what was read, for the
check), except one that may complete the message (and the first, before the message's size is known), which
is held until whole: when the message is whole it is checked (`grpc_checks.check_model_infer`, on the pieces
where they lie) and the frame is passed on, or the stream is reset at Triton (which never saw a whole
message, so never ran it) and the client gets the refusal as a trailers-only answer.

A `ModelStreamInfer` call carries many messages each way: its DATA is held and checked message by message, and
Triton's answers on it read, by `grpc_stream_calls` (this part's `streamed`).

Flow control: DATA that Triton never sees (refused, or staged in shared memory) never has its window given
back by Triton, so this part gives it back to the client itself (`give_credit`, when the core says a batch
is due), less what it sent Triton in its place.

Admission control: a checked stream's DATA is admitted frame by frame (a frame that would pass a bound, of
all connections or of this one's, is refused with UNAVAILABLE kLiteServiceDeny) and counted as its bytes
arrive; an inference request counts for its model from its check until Triton's trailers. A message over
the size cap is RESOURCE_EXHAUSTED from its first five bytes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import hpack

from mslite_contract.settings import GATEWAY_MAX_STRING_ELEMENTS, GATEWAY_UPSTREAM_TIMEOUT_S
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
    CANCEL,
    COLLECT,
    DATA,
    DROP,
    END_STREAM,
    GOAWAY,
    INTERNAL,
    INVALID_ARGUMENT,
    MIN_MAX_FRAME_SIZE,
    NO_ERROR,
    PADDED,
    PASS,
    RESOURCE_EXHAUSTED,
    RST_STREAM,
    TAP,
    U32,
    UNAVAILABLE,
    WINDOW_UPDATE,
    Frames,
    frame,
    grpc_code,
    joined,
    trailers,
    trailers_only,
    unpadded,
)
from mslite_gateway.grpc_stream_calls import StreamCalls
from mslite_gateway.grpc_stream_state import StreamCall
from mslite_gateway.grpc_streams import PREFIX, Check, RequestHeaders, Stream, inflate
from mslite_gateway.load_failures import LoadFailures
from mslite_gateway.model_batching import ModelBatching
from mslite_gateway.model_control import grpc_load_message
from mslite_gateway.rules import Refusal, check_batches, empty_batches, holds_key
from mslite_gateway.server_metadata import GRPC_PATH as METADATA_PATH
from mslite_gateway.staging import Staging

# The most we send Triton in place of a staged message: within its stream window (4 MiB), which the client,
# whose bytes we credit back at once, does not hold back for.
_STAGED_MAX_BYTES = 1 << 20
log = logging.getLogger(__name__)


INFLATED, BATCHING = "inflated", "batching"  # the kinds of work a stream waits for off the loop


class Later:
    """Work a stream waits for, done off the event loop by the adapter (`grpc_relay`), then `RelayCore.resolved`.

    `kind` INFLATED: `run()` inflates and checks a compressed message, in a thread (zlib lets go of the GIL);
    BATCHING: `run()` is a coroutine function that asks Triton for a model's max_batch_size (`model_batching`).
    """

    __slots__ = ("kind", "run")

    def __init__(self, kind: str, run: Callable[[], Any]) -> None:
        self.kind = kind
        self.run = run

    @property
    def in_thread(self) -> bool:
        """Whether `run` is plain blocking work for a thread (else a coroutine function)."""
        return self.kind == INFLATED


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
        batching: ModelBatching | None = None,
        max_strings: int = GATEWAY_MAX_STRING_ELEMENTS,
        upstream_timeout_s: float = GATEWAY_UPSTREAM_TIMEOUT_S,
    ) -> None:
        self.admin_key = admin_key
        self.batching = batching  # whether a model batches, for a request of batch size 0
        self.max_strings = max_strings
        self.upstream_timeout_s = upstream_timeout_s  # a call Triton has not begun to answer by then is ended
        self.staging = staging
        self.explain = None if failures is None else failures.explain_now  # a not-ready error: why
        self.cap = max_request_bytes
        self.admission = admission
        self.refused = 0
        self.calmed = 0  # connections ended for too many resets
        self.closing = False  # the gateway is stopping: new calls are refused
        self.infer_path = f"/{SERVICE}/ModelInfer".encode()
        # (a ModelInfer stream's check runs as `read_model_infer` in `_complete`, which also needs the request for
        # staging and the batch-of-0 rule; this entry names the path as checked, and is the same check)
        self.checks: dict[bytes, Check] = {
            self.infer_path: lambda data, keyed: check_model_infer(
                data, self.cap, keyed=keyed, max_strings=self.max_strings
            )
        }
        for name, (kind, field) in VERSIONED.items():
            self.checks[f"/{SERVICE}/{name}".encode()] = check_versioned(kind, field)
        # the gateway's own regions are not the clients' to register or unregister; after any unregister
        # call (one without a name unregisters them all) staging checks its registrations again
        self.unregister_path = f"/{SERVICE}/SystemSharedMemoryUnregister".encode()
        self.checks[self.unregister_path] = check_unregister
        self.checks[f"/{SERVICE}/SystemSharedMemoryRegister".encode()] = check_register
        self.stream_path = f"/{SERVICE}/ModelStreamInfer".encode()  # held and checked message by message
        # calls whose message may be sent on changed or refused (`model_control`): held until whole (up to the
        # cap, an upload's files too: its keys are checked), then rewritten
        self.rewrites = {f"/{SERVICE}/RepositoryModelLoad".encode(): grpc_load_message}


class Link(Protocol):
    """What the calls need of their connection (`grpc_core.RelayCore`)."""

    now: float  # the time of the latest call (seconds)
    alone: bool  # Triton could not be reached: every call is answered here
    open: set[int]  # streams forwarded to Triton and not ended there
    for_triton: list[bytes]  # frames of ours for Triton, written at the client's next frame boundary
    later: list[tuple[int, Later]]  # work for streams that the adapter runs off the loop

    def send(self, data: bytes) -> None:
        """A frame of ours to the client (at the next frame boundary in Triton's byte stream)."""

    def close(self) -> None:
        """Close both sides once what is written goes."""


class CheckedCalls:
    """The checked streams of one connection, what they hold in flight, and the window owed to the client."""

    __slots__ = (
        "rules",
        "link",
        "frames",
        "headers",
        "streams",
        "refused_ids",
        "metadata_ids",
        "credit",
        "stream_credit",
        "debt",
        "account",
        "owed",
        "owed_to",
        "streamed",
    )

    def __init__(self, rules: RelayRules, link: Link, frames: Frames) -> None:
        self.rules = rules
        self.link = link
        self.frames = frames  # the client's byte stream: its `out` is what goes to Triton
        self.headers = RequestHeaders()
        self.streams: dict[int, Stream] = {}
        self.refused_ids: set[int] = set()
        self.metadata_ids: set[int] = set()  # ServerMetadata calls: Triton's answer is rewritten (`server_metadata`)
        self.credit = 0  # window to give the client back for DATA Triton never saw (connection, streams)
        self.stream_credit: dict[int, int] = {}
        self.debt = 0  # DATA bytes we sent Triton in place of the client's: Triton gives their window back
        self.account = Account()  # request bytes this connection has in flight
        self.owed = 0  # bytes of the checked DATA frame being read still to arrive (counted as they do)
        self.owed_to: tuple[int, Stream | StreamCall] | None = None
        self.streamed = StreamCalls(self)  # the ModelStreamInfer calls (`grpc_stream_calls`)

    # -- the client's DATA --
    def data_header(self, length: int, flags: int, sid: int) -> int:
        """A DATA frame's header: what the frame reader does with it (`grpc_frames` PASS, TAP, COLLECT, DROP)."""
        if sid in self.refused_ids:
            self.credit_back(length)
            return DROP
        call = self.streamed.calls.get(sid)
        if call is not None:
            return self.streamed.data_header(sid, call, length)
        stream = self.streams.get(sid)
        if stream is None or stream.done:
            return PASS
        if stream.held_frame is not None:  # its message is whole and waits for work off the loop: no more of it
            self.credit_back(length)
            return DROP
        frames = self.frames
        arrived = min(length, frames.avail)  # only what came: the rest is counted as it comes
        try:
            self.rules.admission.take_bytes(arrived, self.account, own=stream.charged, admit=length)
        except Overloaded as e:
            self.credit_back(length)
            self.refuse(sid, UNAVAILABLE, e.message)
            return DROP
        stream.charged += arrived
        stream.moved = self.link.now
        if arrived < length:
            self.owed, self.owed_to = length - arrived, (sid, stream)
        if not stream.held and not flags & (PADDED | END_STREAM) and stream.cannot_complete(length):
            stream.got += length  # all message bytes, and not the last: they go on as they arrive
            frames.tap = stream.parts
            return TAP
        return COLLECT  # held until whole: it may complete the message (or end the stream early)

    def arrived(self, n: int) -> None:
        """`n` bytes were read while a checked DATA frame was owed bytes: count those of them that are its."""
        take = min(self.owed, n)
        self.owed -= take
        assert self.owed_to is not None
        sid, stream = self.owed_to
        # not finished meanwhile (it gave back what it held then)
        if self.streams.get(sid) is stream or self.streamed.calls.get(sid) is stream:
            self.rules.admission.count_bytes(take, self.account)
            stream.charged += take
            stream.moved = self.link.now
        if not self.owed:
            self.owed_to = None

    def data_frame(self, sid: int, flags: int, raw: bytes, parts: list[Any]) -> None:
        """A whole DATA frame the reader held (`COLLECT`): passed on, kept (its window given back), or set aside."""
        call = self.streamed.calls.get(sid)
        if call is not None:
            self.streamed.data_frame(sid, call, flags, parts)
            return
        if sid not in self.streams:  # finished while this frame came (Triton's reset or answer): Triton never sees it
            self.credit_back(sum(len(p) for p in parts))
            return
        self._frame_decided(sid, flags, raw, parts, self._data(sid, flags, parts))

    def _frame_decided(self, sid: int, flags: int, raw: bytes, parts: list[Any], verdict: bool | None) -> None:
        if verdict:
            out = self.frames.out
            out.append(raw)
            out += parts
        elif verdict is None:
            self.streams[sid].held_frame = (flags, raw, parts)
        else:
            staged = sid in self.streams and self.streams[sid].held and not flags & END_STREAM
            self.credit_back(sum(len(p) for p in parts), sid if staged else 0)

    def credit_back(self, length: int, sid: int = 0) -> None:
        """Triton never sees this DATA, so never gives its window back: we do, in batches (`give_credit`)."""
        self.credit += length
        if sid and length:  # a staged stream still open: its own window too
            self.stream_credit[sid] = self.stream_credit.get(sid, 0) + length

    def give_credit(self) -> None:
        """The window updates for what this read held back, in one write (less what we sent Triton instead)."""
        paid = min(self.credit, self.debt)
        self.debt -= paid
        updates = [frame(WINDOW_UPDATE, 0, sid, U32.pack(n)) for sid, n in self.stream_credit.items()]
        if self.credit > paid:
            updates.append(frame(WINDOW_UPDATE, 0, 0, U32.pack(self.credit - paid)))
        self.credit = 0
        self.stream_credit.clear()
        if updates:
            self.link.send(b"".join(updates))

    # -- the client's request headers --
    def call(self, sid: int, block: bytes) -> None:
        """Stream `sid`'s request header block (whole): which call it is, and whether and how it is checked."""
        link = self.link
        try:
            path, encoding, key = self.headers.read_call(block)
        except hpack.HPACKError:
            link.close()  # what Triton would do too: the connection's compression state is lost
            return
        if sid in self.streams or sid in self.refused_ids or sid in self.streamed.calls:
            return  # trailers of a request (gRPC clients send none)
        rules = self.rules
        if link.alone:
            self.refuse(sid, UNAVAILABLE, "the inference server is not reachable (restarting?)")
            # and hang up: the client's retry connects again, and so do we to tritonserver, once it is back
            link.send(frame(GOAWAY, 0, 0, U32.pack(sid) + U32.pack(NO_ERROR)))
            link.close()  # after what is written
        elif rules.closing:
            self.refuse(sid, UNAVAILABLE, "the server is shutting down")
        elif path in rules.checks:
            answered = None
            staging = rules.staging
            keyed = holds_key(key, rules.admin_key)
            if path == rules.unregister_path and keyed and staging is not None:
                staging.recheck()  # now, and again once Triton has answered (a staged request may come between)
                answered = staging.recheck
            self.streams[sid] = Stream(
                rules.checks[path],
                encoding,
                stageable=path == rules.infer_path,
                keyed=keyed,
                answered=answered,
                moved=link.now,
            )
        elif path in rules.rewrites:
            self.streams[sid] = Stream(_no_check, encoding, rewrite=rules.rewrites[path], moved=link.now)
        elif path == rules.stream_path:
            self.streamed.open(sid, encoding, holds_key(key, rules.admin_key))
        elif path == METADATA_PATH:
            self.metadata_ids.add(sid)

    # -- a held message --
    def _data(self, sid: int, flags: int, parts: list[Any]) -> bool | None:
        """Whether this (whole, checked-stream) DATA frame goes on to Triton (None: decided later, `Later`)."""
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

    def _complete(self, sid: int, stream: Stream, flags: int) -> bool | None:
        """The message is whole: check it (None: the check goes on off the loop, `Later`), then admit it."""
        if stream.got > 5 + stream.size:
            self.refuse(sid, INVALID_ARGUMENT, "a unary call carries one request message; this one carries more")
            return False
        cap, keyed = self.rules.cap, stream.keyed
        try:
            if stream.rewrite is not None:
                data = whole(stream.message(cap))
                self._send_message(sid, flags, stream.rewrite(data) or data)
                stream.done = True
                return False
            if stream.compressed:
                # 60 KiB may inflate to 60 MiB: inflated (and checked) in a thread, as HTTP bodies are
                packed, encoding, check = Pieces(stream.parts, PREFIX).join(), stream.encoding, stream.check
                stream.parts = []
                if stream.infer:
                    max_strings = self.rules.max_strings
                    job = Later(
                        INFLATED,
                        lambda: read_model_infer(
                            inflate(encoding, packed, cap), cap, keyed=keyed, max_strings=max_strings
                        ),
                    )
                else:
                    job = Later(INFLATED, lambda: check(inflate(encoding, packed, cap), keyed))
                self.link.later.append((sid, job))
                return None
            if not stream.infer:
                return self._admit(sid, stream, flags, stream.check(stream.message(cap), keyed), None)
            checked = read_model_infer(stream.message(cap), cap, keyed=keyed, max_strings=self.rules.max_strings)
        except Refusal as e:
            self.refuse(sid, grpc_code(e.status), e.message)
            return False
        return self._infer_checked(sid, stream, flags, checked)

    def _infer_checked(self, sid: int, stream: Stream, flags: int, checked: tuple[Any, Any]) -> bool | None:
        """A checked ModelInfer request: refused when it is a batch of 0 for a model that batches, else admitted."""
        req = checked[0]
        model = str(req.model_name)
        batching = self.rules.batching
        empty = empty_batches((inp.name, inp.shape) for inp in req.inputs)
        if empty and batching is not None:
            fresh, size = batching.known(model)
            if not fresh:  # Triton is asked (off the loop); the frame waits
                stream.checked = checked
                self.link.later.append((sid, Later(BATCHING, lambda: batching.max_batch_size(model))))
                return None
            if size is not None:
                try:
                    check_batches(model, empty, size)
                except Refusal as e:
                    self.refuse(sid, grpc_code(e.status), e.message)
                    return False
        return self._admit(sid, stream, flags, model, checked)

    def resolve(self, sid: int, job: Later, value: Any, error: BaseException | None) -> None:
        """Work set aside for stream `sid` (`Later`) is done: go on with the stream where it stopped.

        A stream reset or closed meanwhile is gone, and so is the outcome.
        """
        stream = self.streams.get(sid)
        if stream is None or stream.held_frame is None:
            return
        (flags, raw, parts), stream.held_frame = stream.held_frame, None
        verdict: bool | None = False
        if isinstance(error, Refusal):
            self.refuse(sid, grpc_code(error.status), error.message)
        elif error is not None:
            log.error("a gRPC request's check failed: %r", error)
            self.refuse(sid, INTERNAL, "the server could not check this request")
        elif job.kind == INFLATED:
            if stream.infer:
                verdict = self._infer_checked(sid, stream, flags, value)
            else:
                verdict = self._admit(sid, stream, flags, value, None)
        else:  # BATCHING: the model's max_batch_size (None: unreadable; Triton then answers for itself)
            checked, stream.checked = stream.checked, None
            assert checked is not None
            model = str(checked[0].model_name)
            try:
                if value is not None:
                    check_batches(model, empty_batches((i.name, i.shape) for i in checked[0].inputs), value)
            except Refusal as e:
                self.refuse(sid, grpc_code(e.status), e.message)
            else:
                verdict = self._admit(sid, stream, flags, model, checked)
        self._frame_decided(sid, flags, raw, parts, verdict)

    def _admit(self, sid: int, stream: Stream, flags: int, model: str | None, checked: tuple[Any, Any] | None) -> bool:
        """A message that passed its check: counted for its model, then passed on (or staged) to Triton."""
        staged = b""
        if stream.region is not None and checked is not None:
            staged = staged_model_infer(checked[0], checked[1], stream.region.name, stream.region.view)
        if model is not None:
            try:
                self.rules.admission.enter(model)
            except Overloaded as e:
                self.refuse(sid, UNAVAILABLE, e.message)
                return False
            stream.model = model
        stream.done = True
        stream.sent_at = self.link.now
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
    def stalled_ids(self, now: float) -> list[int]:
        """The streams whose message brought no byte for the stall timeout (`RelayCore.tick` drops them)."""
        stall_s = self.rules.admission.stall_s
        stalled = [
            sid for sid, s in self.streams.items() if not s.done and s.held_frame is None and now - s.moved > stall_s
        ]
        return stalled + self.streamed.stalled_ids(now, stall_s)

    def overdue_ids(self, now: float) -> list[int]:
        """The streams sent on to Triton that it has not begun to answer within the upstream timeout (`tick`)."""
        limit = self.rules.upstream_timeout_s
        return [sid for sid, s in self.streams.items() if s.sent_at and now - s.sent_at > limit]

    def answering(self, sid: int) -> None:
        """Triton began its answer on stream `sid` (its response headers): no longer timed here."""
        stream = self.streams.get(sid)
        if stream is not None:
            stream.sent_at = 0.0

    def refuse(self, sid: int, code: int, message: str) -> None:
        """Answer stream `sid` ourselves, and reset it at Triton (which has not seen a whole message)."""
        self.rules.refused += 1
        # a call whose answers began gets trailers; one Triton never answered, a trailers-only answer
        answer = trailers if self.streamed.headers_sent(sid) else trailers_only
        self.finish(sid)
        self.refused_ids.add(sid)
        if len(self.refused_ids) > 4096:  # old ids: long answered; frames for them stop coming
            self.refused_ids = {i for i in self.refused_ids if i > sid - 4096}
        link = self.link
        link.send(answer(sid, code, message) + frame(RST_STREAM, 0, sid, U32.pack(NO_ERROR)))
        if not link.alone:
            link.for_triton.append(frame(RST_STREAM, 0, sid, U32.pack(CANCEL)))

    def finish(self, sid: int, *, answered: bool = False) -> None:
        """Stream `sid` is over (`answered`: Triton's trailers came): what it counted in flight is given back."""
        self.link.open.discard(sid)
        self.metadata_ids.discard(sid)
        if self.streamed.finish(sid, answered=answered):
            return
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

    def finish_all(self) -> None:
        """The connection closes: every stream in progress is finished."""
        for sid in [*self.streams, *self.streamed.calls]:
            self.finish(sid)


def _no_check(data: bytes | Pieces, keyed: bool) -> None:
    """The check of a call the relay only rewrites (`RelayRules.rewrites`): Triton checks its message."""
    return None
