"""The client's side of one relayed gRPC connection: its frames to Triton, and the frames of ours put between them.

Every frame of the client's goes to Triton as it came (the two HPACK contexts stay the client's and Triton's) but
for: the client's SETTINGS, which tell Triton to keep no header table for it (so that a header block of Triton's
on a stream the relay already ended can be dropped: nothing follows a stream's trailers); what its checked calls
change (`grpc.calls`: which call a header block opens, a checked call's DATA, the refusals); window updates that
give back window for answers of ours, which Triton never sent; and resets of streams Triton has not open. A new
stream past the connection's bound (`RelayRules.max_streams`) is refused with REFUSED_STREAM here: its header
block still goes to Triton, followed by a reset. Frames of ours for Triton (resets of refused calls, window
given back) wait for a frame boundary in this byte stream (`for_triton`).

More than `MAX_RESETS_PER_WINDOW` client resets of open streams within `RESET_WINDOW_S` (HTTP/2 "rapid reset")
calm the connection (`RelayCore.calm`).
"""

from __future__ import annotations

from typing import Any

from mslite_gateway.grpc.calls import CheckedCalls
from mslite_gateway.grpc.frames import (
    ACK,
    COLLECT,
    CONTINUATION,
    DATA,
    DROP,
    END_HEADERS,
    GOAWAY,
    HEADERS,
    PASS,
    PING,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    SETTINGS_HEADER_TABLE_SIZE,
    U32,
    WINDOW_UPDATE,
    Frames,
    capped_settings,
    frame,
    joined,
)
from mslite_gateway.grpc.link_state import ALONE, CALMED, CLOSING, ResetCounter
from mslite_gateway.grpc.relay_rules import Link
from mslite_gateway.grpc.request_headers import HeaderBlock
from mslite_gateway.grpc.window_credit import CREDIT_BATCH_BYTES

# The client's SETTINGS as Triton gets them: no dynamic HPACK table for Triton's header blocks, so that one on a
# stream the relay already ended can be dropped without the client's decoder losing step.
CLIENT_SETTINGS_CAPS = {SETTINGS_HEADER_TABLE_SIZE: 0}


class ClientReader:
    """Reads the client's byte stream for one connection; its `frames.out` is what goes to Triton."""

    __slots__ = (
        "link",
        "open",
        "calls",
        "frames",
        "preface",
        "block",
        "in_block",
        "for_triton",
        "last_sid",
        "resets",
        "max_streams",
    )

    def __init__(self, link: Link, calls: CheckedCalls, frames: Frames) -> None:
        self.link = link
        self.open = link.open  # (the connection's set itself: read on every new stream and reset)
        self.calls = calls
        self.frames = frames  # the client's bytes; its `out` is what goes to Triton
        self.preface = len(PREFACE)  # bytes of the connection preface still to come
        self.block = HeaderBlock()  # a request header block being collected
        self.in_block = False  # between a client's HEADERS frame without END_HEADERS and its last CONTINUATION
        self.for_triton: list[bytes] = []  # frames of ours for Triton, written at the next boundary
        self.last_sid = 0  # the client's latest stream
        self.resets = ResetCounter()  # the client's resets of streams Triton has open
        self.max_streams = calls.rules.max_streams  # open streams (`Link.open`) past which a new one is refused

    def flush_ours(self) -> None:
        """Frames of ours for Triton, now if this byte stream is between frames."""
        frames = self.frames
        if self.for_triton and frames.at_boundary and not self.in_block:
            frames.out += self.for_triton
            self.for_triton = []

    def feed(self, data: bytes) -> None:
        """Bytes read from the client."""
        calls = self.calls
        if calls.owed:
            calls.arrived(len(data))
        if self.preface:
            take = min(self.preface, len(data))
            done = len(PREFACE) - self.preface
            if data[:take] != PREFACE[done : done + take]:
                self.link.close()
                return
            self.preface -= take
            if self.link.state is not ALONE:
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
        link = self.link
        state = link.state
        if state is CALMED or state is CLOSING:  # the rest of what it sent goes nowhere
            return DROP
        if self.for_triton and not self.in_block:  # a frame boundary: our resets reach Triton as early as they can
            self.frames.inject(self.for_triton)
            self.for_triton = []
        if kind == HEADERS or kind == CONTINUATION:
            self.in_block = not flags & END_HEADERS
        if state is ALONE:
            if kind == DATA:
                self.calls.window.owe(length)
                return DROP
            return COLLECT if kind in (HEADERS, CONTINUATION, SETTINGS, PING, GOAWAY) else DROP
        if kind == DATA:
            return self.calls.data_header(length, flags, sid)
        if kind == HEADERS or kind == CONTINUATION:
            if kind == HEADERS and sid > self.last_sid:  # a new stream
                self.last_sid = sid
                if len(self.open) < self.max_streams:
                    self.open.add(sid)
                else:  # its header block still goes to Triton (HPACK), then the reset (`refuse_stream`)
                    self.calls.refuse_stream(sid)
            return COLLECT
        if kind == RST_STREAM:
            if sid not in self.open:
                return DROP  # never forwarded, refused by us (and reset at Triton then), or ended there
            self.calls.finish(sid)
            if self.resets.too_many(link.now):
                link.calm()
                return DROP
        elif kind == WINDOW_UPDATE and self.calls.streamed.owes(sid):
            return COLLECT  # it gives back window for answers of ours too: that part is not Triton's
        elif kind == SETTINGS and not flags & ACK:
            return COLLECT  # changed on its way (`CLIENT_SETTINGS_CAPS`)
        return PASS

    def _on_frame(self, kind: int, flags: int, sid: int, raw: bytes, parts: list[Any]) -> None:
        if kind == DATA:
            self.calls.data_frame(sid, flags, raw, parts)
            return
        payload = joined(parts) if parts else b""
        alone = self.link.state is ALONE
        if kind == HEADERS or kind == CONTINUATION:
            if not alone:
                self.frames.out += (raw, payload)  # first: the refusals below come after it
            block = self.block.add(kind, sid, flags, payload)
            if block is not None:
                self.calls.call(*block)
        elif kind == SETTINGS and not flags & ACK:
            if alone:
                self.link.send(frame(SETTINGS, ACK, 0))
            else:
                self.frames.out.append(frame(SETTINGS, 0, 0, capped_settings(payload, CLIENT_SETTINGS_CAPS)))
        elif kind == PING and not flags & ACK:
            self.link.send(frame(PING, ACK, 0, payload))
        elif kind == GOAWAY:
            self.link.close()
        elif kind == WINDOW_UPDATE and len(payload) == 4:
            increment = self.calls.streamed.window_update(sid, int.from_bytes(payload, "big") & 0x7FFFFFFF)
            if increment:
                self.frames.out.append(frame(WINDOW_UPDATE, 0, sid, U32.pack(increment)))
