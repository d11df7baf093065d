"""The client's calls on one relayed gRPC connection as they are checked: which call each stream is, and its end.

`RelayCore` (`grpc.core`) reads the frames of both sides and hands this part what concerns the client's calls:
each request header block (`call`), each DATA frame header and whole held frame of a checked call
(`data_header`, `data_frame`), Triton's answers and resets (`finish`). What a call does with its messages is
its kind's part: a unary call's (`grpc.unary_calls`: one message, held until whole, checked, passed on) or a
`ModelStreamInfer` call's (`grpc.stream_calls`: messages both ways, each checked or read whole). What this part
decides goes back through the connection (`grpc.relay_rules.Link`): frames of ours for the client (`send`),
resets for Triton (`for_triton`), messages for Triton in place of the client's (the client frame reader's `out`).

Admission control: a checked call's DATA is admitted frame by frame (a frame that would pass a bound, of
all connections or of this one's, is refused with UNAVAILABLE kLiteServiceDeny) and counted as its bytes
arrive; an inference request counts for its model from its check until Triton's trailers. A message over
the size cap is RESOURCE_EXHAUSTED from its first five bytes on. A refused call is answered here and reset at
Triton (which never saw a whole message, so never ran it).

Flow control: DATA that Triton never sees (refused, or staged in shared memory) never has its window given
back by Triton, so this part gives it back to the client itself (`grpc.window_credit`).
"""

from __future__ import annotations

from typing import Any

import hpack

from mslite_gateway import server_metadata
from mslite_gateway.access import grpc_refusal
from mslite_gateway.admission import Account, Overloaded
from mslite_gateway.grpc.checks import Pieces
from mslite_gateway.grpc.frames import (
    CANCEL,
    DROP,
    END_STREAM,
    GOAWAY,
    NO_ERROR,
    PASS,
    PERMISSION_DENIED,
    REFUSED_STREAM,
    RST_STREAM,
    U32,
    UNAVAILABLE,
    Frames,
    frame,
    trailers,
    trailers_only,
)
from mslite_gateway.grpc.relay_rules import Later, Link, RelayRules
from mslite_gateway.grpc.request_headers import RequestHeaders
from mslite_gateway.grpc.stream_calls import StreamCalls
from mslite_gateway.grpc.stream_state import StreamCall
from mslite_gateway.grpc.unary_calls import UnaryCalls
from mslite_gateway.grpc.unary_state import UnaryCall
from mslite_gateway.grpc.window_credit import WindowCredit
from mslite_gateway.rules import KEY_REQUIRED, holds_key


class CheckedCalls:
    """The checked calls of one connection: which call a stream is, its frames' admission, its refusal and end.

    What each kind of call does with its messages is its own part's: `unary` (`grpc.unary_calls`), `streamed`
    (`grpc.stream_calls`).
    """

    __slots__ = (
        "rules",
        "link",
        "frames",
        "headers",
        "unary",
        "streamed",
        "refused_ids",
        "metadata_ids",
        "unchecked",
        "window",
        "account",
        "owed",
        "owed_to",
    )

    def __init__(self, rules: RelayRules, link: Link, frames: Frames) -> None:
        self.rules = rules
        self.link = link
        self.frames = frames  # the client's byte stream: its `out` is what goes to Triton
        self.headers = RequestHeaders()
        self.refused_ids: set[int] = set()
        self.metadata_ids: set[int] = set()  # ServerMetadata calls: Triton's answer is rewritten (`server_metadata`)
        # calls passed on unchecked whose request has not ended: when each opened (the stall timeout ends them, so
        # that streams opened and left do not stay open at Triton, where each costs memory)
        self.unchecked: dict[int, float] = {}
        self.window = WindowCredit()  # what is owed to the client for DATA Triton never saw
        self.account = Account()  # request bytes this connection has in flight
        self.owed = 0  # bytes of the checked DATA frame being read still to arrive (counted as they do)
        self.owed_to: tuple[int, UnaryCall | StreamCall] | None = None
        self.unary = UnaryCalls(self)  # the unary calls checked here (`grpc.unary_calls`)
        self.streamed = StreamCalls(self)  # the ModelStreamInfer calls (`grpc.stream_calls`)

    # -- the client's DATA --
    def data_header(self, length: int, flags: int, sid: int) -> int:
        """A DATA frame's header: what the frame reader does with it (`grpc.frames` PASS, TAP, COLLECT, DROP)."""
        if sid in self.refused_ids:
            self.window.owe(length)
            return DROP
        call = self.unary.calls.get(sid)
        if call is not None:
            return self.unary.data_header(sid, call, length, flags)
        streamed = self.streamed.calls.get(sid)
        if streamed is not None:
            return self.streamed.data_header(sid, streamed, length)
        if flags & END_STREAM and self.unchecked:
            self.unchecked.pop(sid, None)
        return PASS

    def take_bytes(self, sid: int, call: UnaryCall | StreamCall, length: int) -> str | None:
        """Admit a DATA frame of `length` bytes to the byte budget and count what of it came (None), or say why not."""
        arrived = min(length, self.frames.avail)  # only what came: the rest is counted as it comes
        try:
            self.rules.admission.take_bytes(arrived, self.account, own=call.charged, admit=length)
        except Overloaded as e:
            return e.message
        call.charged += arrived
        call.moved = self.link.now
        if arrived < length:
            self.owed, self.owed_to = length - arrived, (sid, call)
        return None

    def arrived(self, n: int) -> None:
        """`n` bytes were read while a checked DATA frame was owed bytes: count those of them that are its."""
        take = min(self.owed, n)
        self.owed -= take
        assert self.owed_to is not None
        sid, call = self.owed_to
        # not finished meanwhile (it gave back what it held then)
        if self.unary.calls.get(sid) is call or self.streamed.calls.get(sid) is call:
            self.rules.admission.count_bytes(take, self.account)
            call.charged += take
            call.moved = self.link.now
        if not self.owed:
            self.owed_to = None

    def data_frame(self, sid: int, flags: int, raw: bytes, parts: list[Any]) -> None:
        """A whole DATA frame the reader held (`COLLECT`): passed on, kept (its window given back), or set aside."""
        call = self.unary.calls.get(sid)
        if call is not None:
            self.unary.data_frame(sid, call, flags, raw, parts)
            return
        streamed = self.streamed.calls.get(sid)
        if streamed is not None:
            self.streamed.data_frame(sid, streamed, flags, parts)
        else:  # finished while this frame came (Triton's reset or answer): Triton never sees it
            self.window.owe(sum(len(p) for p in parts))

    def resolve(self, sid: int, job: Later, value: Any, error: BaseException | None) -> None:
        """Work off the loop for call `sid` is done: its kind of call goes on with it (`Later`)."""
        (self.streamed if sid in self.streamed.calls else self.unary).resolve(sid, job, value, error)

    def give_credit(self) -> None:
        """The window owed to the client, given back now (in one write)."""
        updates = self.window.updates()
        if updates:
            self.link.send(updates)

    # -- the client's request headers --
    def call(self, sid: int, block: bytes) -> None:
        """Stream `sid`'s request header block (whole): which call it is, and whether and how it is checked."""
        link = self.link
        try:
            path, encoding, key = self.headers.read_call(block)
        except hpack.HPACKError:
            link.close()  # what Triton would do too: the connection's compression state is lost
            return
        if sid in self.unary.calls or sid in self.refused_ids or sid in self.streamed.calls:
            return  # trailers of a request (gRPC clients send none)
        rules = self.rules
        if link.alone:
            self.refuse(sid, UNAVAILABLE, "the inference server is not reachable (restarting?)")
            # and hang up: the client's retry connects again, and so do we to tritonserver, once it is back
            link.send(frame(GOAWAY, 0, 0, U32.pack(sid) + U32.pack(NO_ERROR)))
            link.close()  # after what is written
        elif rules.closing:
            self.refuse(sid, UNAVAILABLE, "the server is shutting down")
        elif rules.key_on_every_request and not holds_key(key, rules.admin_key):
            self.refuse(sid, PERMISSION_DENIED, KEY_REQUIRED)
        elif (refusal := grpc_refusal(path, key, rules.admin_key)) is not None:  # default-deny (`access`)
            self.refuse(sid, PERMISSION_DENIED, refusal.message)
        elif path in rules.checks:
            answered = None
            staging = rules.staging
            keyed = holds_key(key, rules.admin_key)
            if path == rules.unregister_path and keyed and staging is not None:
                staging.recheck()  # now, and again once Triton has answered (a staged request may come between)
                answered = staging.recheck
            self.unary.calls[sid] = UnaryCall(
                rules.checks[path],
                encoding,
                infer=path == rules.infer_path,
                keyed=keyed,
                answered=answered,
                now=link.now,
            )
        elif path in rules.rewrites:
            self.unary.calls[sid] = UnaryCall(_no_check, encoding, rewrite=rules.rewrites[path], now=link.now)
        elif path == rules.stream_path:
            self.streamed.open(sid, encoding, holds_key(key, rules.admin_key))
        else:
            self.unchecked[sid] = link.now
            if path == server_metadata.GRPC_PATH:
                self.metadata_ids.add(sid)

    # -- ends of calls --
    def stalled_ids(self, now: float) -> list[int]:
        """The calls whose message brought no byte for the stall timeout (`RelayCore.tick` drops them)."""
        stall_s = self.rules.admission.stall_s
        left = [sid for sid, opened in self.unchecked.items() if now - opened > stall_s]
        return self.unary.stalled_ids(now, stall_s) + self.streamed.stalled_ids(now, stall_s) + left

    def overdue_ids(self, now: float) -> list[int]:
        """The calls sent on to Triton whose answer did not reach the client within the upstream timeout (`tick`)."""
        limit_s = self.rules.upstream_timeout_s
        return self.unary.overdue_ids(now, limit_s) + self.streamed.overdue_ids(now, limit_s)

    def refuse(self, sid: int, code: int, message: str) -> None:
        """Answer call `sid` ourselves, and reset it at Triton (which has not seen a whole message)."""
        self.rules.refused += 1
        # a call whose answers began gets trailers; one Triton never answered, a trailers-only answer
        answer = trailers if self.streamed.headers_sent(sid) or self.unary.headers_sent(sid) else trailers_only
        self.finish(sid)
        self._ended_here(sid)
        link = self.link
        link.send(answer(sid, code, message) + frame(RST_STREAM, 0, sid, U32.pack(NO_ERROR)))
        if not link.alone:
            link.for_triton.append(frame(RST_STREAM, 0, sid, U32.pack(CANCEL)))

    def refuse_stream(self, sid: int) -> None:
        """A new stream past the connection's bound (`RelayRules.max_streams`): REFUSED_STREAM, reset at Triton.

        Its header block still goes to Triton (its HPACK context is the client's), and the reset right after it.
        """
        self.rules.refused += 1
        self._ended_here(sid)
        self.link.send(frame(RST_STREAM, 0, sid, U32.pack(REFUSED_STREAM)))
        self.link.for_triton.append(frame(RST_STREAM, 0, sid, U32.pack(CANCEL)))

    def _ended_here(self, sid: int) -> None:
        """Stream `sid` was ended by the relay: nothing more goes to the client on it.

        Neither Triton's frames nor a window update of ours: what it is owed is given back on the connection only.
        """
        self.window.streams.pop(sid, None)
        self.refused_ids.add(sid)
        if len(self.refused_ids) > 4096:  # old ids: long answered; frames for them stop coming
            self.refused_ids = {i for i in self.refused_ids if i > sid - 4096}

    def finish(self, sid: int, *, answered: bool = False) -> None:
        """Call `sid` is over (`answered`: Triton's trailers came): what it counted in flight is given back."""
        self.link.open.discard(sid)
        self.metadata_ids.discard(sid)
        self.unchecked.pop(sid, None)
        if not self.unary.finish(sid, answered=answered):
            self.streamed.finish(sid, answered=answered)

    def finish_all(self) -> None:
        """The connection closes: every call in progress is finished."""
        for sid in [*self.unary.calls, *self.streamed.calls]:
            self.finish(sid)

    @property
    def inflight(self) -> int:
        """Checked calls not answered yet (a ModelStreamInfer call counts as one)."""
        return len(self.unary.calls) + len(self.streamed.calls)


def _no_check(data: bytes | Pieces, keyed: bool) -> None:
    """The check of a call the relay only rewrites (`RelayRules.rewrites`): Triton checks its message."""
    return None
