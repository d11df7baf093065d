"""Triton's side of one relayed gRPC connection: its frames passed on to the client, trailers scrubbed.

Our own frames for the client (refusals, acks) wait for a frame boundary in Triton's byte stream, and go
before Triton's next frame; Triton's frames for streams we answered ourselves are dropped (header blocks
excepted: they keep the client's HPACK table in step).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from mslite_gateway.grpc_frames import (
    ACK,
    COLLECT,
    CONTINUATION,
    DROP,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    PASS,
    PRIORITY,
    RST_STREAM,
    SETTINGS,
    Frames,
    joined,
    scrubbed_trailers,
    write,
)

if TYPE_CHECKING:
    from mslite_gateway.grpc_relay import _ClientSide


class UpstreamSide(asyncio.Protocol):
    """Triton's side of one relayed connection: its frames passed to the client."""

    def __init__(self, client: _ClientSide) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.frames = Frames()
        self.in_block = False  # inside a header block (HEADERS without END_HEADERS, then CONTINUATIONs)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Connected to Triton."""
        self.transport = transport  # type: ignore[assignment]

    @property
    def can_inject(self) -> bool:
        """Whether a frame of ours may be written to the client now."""
        return self.frames.at_boundary and not self.in_block

    def _on_header(self, length: int, kind: int, flags: int, sid: int) -> int:
        client = self.client
        if client.queued and not self.in_block:  # a frame boundary: our answers go first, before Triton's
            self.frames.inject(client.queued)  # (Triton may answer a call we refused, e.g. after our reset)
            client.queued = []
        if kind == HEADERS or kind == CONTINUATION:
            self.in_block = not flags & END_HEADERS
            if kind == HEADERS and flags & END_STREAM:
                client.finish(sid, answered=True)
                if flags & END_HEADERS:
                    return COLLECT  # trailers in one frame: their grpc-message is scrubbed (_on_frame)
            return PASS
        if sid and sid in client.refused_ids:
            return DROP if kind != PRIORITY else PASS  # we answered that stream: Triton's reset, data, credit go
        if kind == RST_STREAM:
            client.finish(sid)
        elif kind == SETTINGS and not flags & ACK:
            return COLLECT
        return PASS

    def _on_frame(self, kind: int, flags: int, sid: int, raw: bytes, parts: list[Any]) -> None:
        if kind == HEADERS:
            self.frames.out += scrubbed_trailers(flags, sid, raw, parts)
            return
        if parts:
            self.client.peer_settings(joined(parts))  # SETTINGS only
        self.frames.out.append(raw)
        self.frames.out += parts

    def data_received(self, data: bytes) -> None:
        """Triton's bytes: frames passed on to the client, ours put in between."""
        frames = self.frames
        frames.feed(data, self._on_header, self._on_frame)
        client = self.client
        if client.queued and self.can_inject:
            frames.out += client.queued
            client.queued = []
        if frames.out:
            out, frames.out = frames.out, []
            if client.transport is not None and not client.transport.is_closing():
                write(client.transport, out)

    def pause_writing(self) -> None:
        """Triton reads slower than the client sends: stop reading the client."""
        if self.client.transport is not None:
            self.client.transport.pause_reading()

    def resume_writing(self) -> None:
        """Triton caught up: read the client again."""
        if self.client.transport is not None:
            self.client.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        """Triton hung up: so does the client's connection."""
        self.client.upstream_lost()
