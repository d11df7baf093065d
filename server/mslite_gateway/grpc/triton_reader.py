"""Triton's side of one relayed gRPC connection: its frames to the client, and the frames of ours put between them.

Every frame of Triton's goes to the client unchanged but for: the `grpc-message` of its trailers, scrubbed of
server paths, tracebacks and internal region names (`grpc.frames.scrubbed_trailers`: only that non-indexed
field is replaced, so the HPACK tables stay in step); a ServerMetadata answer, its extensions cut to those
served (`server_metadata`); and the frames of calls we answered ourselves, which are dropped (header blocks
excepted: they keep the client's HPACK table in step). Frames of ours for the client (refusals, acks) wait for
a frame boundary here and go before Triton's next frame. On a `ModelStreamInfer` call, Triton's DATA and
response headers are read whole (`grpc.stream_calls`: which requests an answer ends, where answers of ours may
go). Triton's settings say how large a header table the client's decoder (and so ours) may keep.
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
    END_STREAM,
    HEADERS,
    PADDED,
    PASS,
    PRIORITY,
    RST_STREAM,
    SETTINGS,
    SETTINGS_HEADER_TABLE_SIZE,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    U32,
    WINDOW_UPDATE,
    Frames,
    capped_settings,
    frame,
    joined,
    scrubbed_trailers,
    unpadded,
)
from mslite_gateway.grpc.messages import PREFIX, prefixed
from mslite_gateway.grpc.relay_rules import Link
from mslite_gateway.server_metadata import served_message


class TritonReader:
    """Reads Triton's byte stream for one connection; its `frames.out` is what goes to the client."""

    __slots__ = ("link", "calls", "unary", "streamed", "explain", "frames", "in_block", "ours", "stream_cap")

    def __init__(self, link: Link, calls: CheckedCalls) -> None:
        self.link = link
        self.calls = calls
        self.unary = calls.unary  # (its parts too: read on every frame)
        self.streamed = calls.streamed
        self.explain = calls.rules.explain  # what the gateway knows of a not-ready model (`load_failures`)
        self.frames = Frames()
        self.in_block = False  # between a HEADERS frame without END_HEADERS and its last CONTINUATION
        self.ours: list[bytes] = []  # frames of ours for the client, waiting for a frame boundary here
        self.stream_cap = {SETTINGS_MAX_CONCURRENT_STREAMS: calls.rules.max_streams}

    def send(self, data: bytes, *, now: bool) -> None:
        """A frame of ours to the client: at once if `now` or between frames here, else at the next boundary."""
        if now or (self.frames.at_boundary and not self.in_block):
            self.frames.out.append(data)
        else:
            self.ours.append(data)

    def feed(self, data: bytes) -> None:
        """Bytes read from Triton."""
        frames = self.frames
        frames.feed(data, self._on_header, self._on_frame)
        if self.ours and frames.at_boundary and not self.in_block:
            frames.out += self.ours
            self.ours = []

    def _on_header(self, length: int, kind: int, flags: int, sid: int) -> int:
        if self.ours and not self.in_block:  # a frame boundary: our answers go first, before Triton's
            self.frames.inject(self.ours)  # (Triton may answer a call we refused, e.g. after our reset)
            self.ours = []
        calls = self.calls
        streamed = self.streamed.calls
        if sid and sid in calls.refused_ids:
            # we ended that stream (our trailers, or REFUSED_STREAM): nothing of Triton's follows them, header
            # blocks included (Triton keeps no HPACK table for the client: `grpc.core._CLIENT_SETTINGS_CAPS`)
            if kind == HEADERS or kind == CONTINUATION:
                self.in_block = not flags & END_HEADERS
            elif kind == DATA and length:  # the window it took is given back to Triton (the client never saw it)
                self.link.for_triton.append(frame(WINDOW_UPDATE, 0, 0, U32.pack(length)))
            return DROP if kind != PRIORITY else PASS
        if kind == HEADERS or kind == CONTINUATION:
            self.in_block = not flags & END_HEADERS
            if kind == HEADERS and flags & END_STREAM:
                calls.finish(sid, answered=True)
                if flags & END_HEADERS:
                    return COLLECT  # trailers in one frame: their grpc-message is scrubbed (_on_frame)
            elif kind == HEADERS and sid in streamed:
                return COLLECT  # a stream's response headers: answers of ours may follow them (_on_frame)
            elif kind == HEADERS:
                self.unary.answering(sid)
            return PASS
        if kind == DATA and sid in streamed:
            return COLLECT  # a stream's answers are read message by message (`grpc.stream_calls`)
        if kind == RST_STREAM:
            calls.finish(sid)
        elif kind == SETTINGS and not flags & ACK:
            return COLLECT
        elif kind == DATA and sid in calls.metadata_ids:
            return COLLECT  # a server metadata answer: rewritten (`_served_metadata`)
        return PASS

    def _on_frame(self, kind: int, flags: int, sid: int, raw: bytes, parts: list[Any]) -> None:
        out = self.frames.out
        streamed = self.streamed
        if kind == HEADERS and not flags & END_STREAM:  # a ModelStreamInfer call's response headers
            out.append(raw)
            out += parts
            if sid in streamed.calls:
                streamed.triton_headers(sid, streamed.calls[sid], flags)
            return
        if kind == HEADERS:
            out += scrubbed_trailers(flags, sid, raw, parts, self.explain)
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
        # SETTINGS only: the relay's bound on open streams added (`RelayRules.max_streams`)
        payload = joined(parts) if parts else b""
        self._settings(payload)
        out.append(frame(SETTINGS, 0, 0, capped_settings(payload, self.stream_cap)))

    def _served_metadata(self, flags: int, sid: int, raw: bytes, parts: list[Any]) -> list[Any]:
        """A ServerMetadata answer's DATA frame, its list of extensions cut to those served (`server_metadata`).

        A message split over frames, or compressed, goes as it came. The frame gets shorter: the window the client
        will never give back for the bytes it did not get, we give Triton now.
        """
        payload = bytes(unpadded(joined(parts), flags)) if parts else b""
        if len(payload) < PREFIX or payload[0] != 0 or U32.unpack_from(payload, 1)[0] != len(payload) - PREFIX:
            return [raw, *parts]
        rewritten = frame(DATA, flags & ~PADDED, sid, prefixed(served_message(payload[PREFIX:])))
        owed = len(raw) + sum(map(len, parts)) - len(rewritten)
        if owed > 0:
            self.link.for_triton.append(frame(WINDOW_UPDATE, 0, 0, U32.pack(owed)))
        return [rewritten]

    def _settings(self, payload: Any) -> None:
        """Triton's settings: the header table size its decoder allows is what ours must allow too."""
        for i in range(0, len(payload) - 5, 6):
            if int.from_bytes(payload[i : i + 2], "big") == SETTINGS_HEADER_TABLE_SIZE:
                self.calls.headers.allow_table_size(int.from_bytes(payload[i + 2 : i + 6], "big"))
