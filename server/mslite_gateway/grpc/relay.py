"""The gateway's gRPC front: asyncio adapters around the socket-free relay core (`grpc.core`).

Each client connection gets its own connection to Triton's gRPC port. Both protocols below only move bytes:
what one side reads goes to the connection's `RelayCore`, and what it returns is written (`apply`). Back
pressure stays here: when one side's writes pile up, the other side is not read; a client whose unread bytes
(ours: Triton's stop being read) pass `RelayRules.max_unread_bytes` loses its connection. Every connection is
admitted by the gateway's `connections.Connections` (the cap, room for a new client, the idle time-out).
"""

from __future__ import annotations

import asyncio
import logging

from mslite_gateway.connections import Connections
from mslite_gateway.grpc.core import CLIENT, TRITON, RelayCore, RelayRules, Writes
from mslite_gateway.grpc.frames import ENHANCE_YOUR_CALM, GOAWAY, SETTINGS, U32, frame, write
from mslite_gateway.grpc.relay_rules import Later
from mslite_gateway.upstream_address import UpstreamAddress

log = logging.getLogger(__name__)
_SWEEPS_PER_STALL = 5  # the stall timeout is checked this often per timeout: a stream goes within 1.2 times it
_LINGER_S = 2.0  # how long a closed connection's last bytes may take to reach the client
_CONNECT_TIMEOUT_S = 10.0
# What a connection past the cap gets (none of its place was idle): our settings, then GOAWAY with the reason.
_FULL = frame(SETTINGS, 0, 0) + frame(
    GOAWAY, 0, 0, U32.pack(0) + U32.pack(ENHANCE_YOUR_CALM) + b"too many client connections; try again later"
)


class GrpcRelay:
    """Accepts client connections (`factory` for loop.create_server) and relays them to Triton's gRPC port."""

    def __init__(self, upstream: UpstreamAddress, rules: RelayRules, connections: Connections | None = None) -> None:
        self.upstream = upstream
        self.rules = rules
        self.admitted = connections or Connections()  # every front's connections: the cap, the idle time-out
        self.connections: set[_ClientProtocol] = set()
        self.sweeper: asyncio.TimerHandle | None = None

    @property
    def refused(self) -> int:
        """Calls answered by the gateway itself."""
        return self.rules.refused

    def factory(self) -> asyncio.Protocol:
        """A protocol instance for one accepted client connection."""
        return _ClientProtocol(self)

    def watch(self) -> None:
        """Start the sweep (once, with the first connection)."""
        if self.sweeper is None:
            self._schedule()

    def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        self.sweeper = loop.call_later(self.rules.admission.stall_s / _SWEEPS_PER_STALL, self.sweep)

    def sweep(self) -> None:
        """The deadlines of every connection (`RelayCore.tick`)."""
        now = asyncio.get_running_loop().time()
        for conn in list(self.connections):
            conn.apply(conn.core.tick(now))
        if not self.rules.closing:
            self._schedule()

    def inflight(self) -> int:
        """Checked streams not answered yet, over all connections."""
        return sum(c.core.inflight for c in self.connections)

    async def drain_and_close(self, grace_s: float) -> None:
        """Wait up to `grace_s` for checked streams in progress, then close every connection."""
        self.rules.closing = True
        if self.sweeper is not None:
            self.sweeper.cancel()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while self.inflight() and loop.time() < deadline:
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            conn.apply(conn.core.closed(CLIENT))


class _ClientProtocol(asyncio.Protocol):
    """The client's connection: its bytes to the core, and the core's writes to both connections."""

    def __init__(self, relay: GrpcRelay) -> None:
        self.relay = relay
        self.core = RelayCore(relay.rules)
        self.transport: asyncio.Transport | None = None
        self.upstream: _TritonProtocol | None = None
        self.connecting: asyncio.Task[None] | None = None  # kept: the loop holds only a weak reference to a task
        self.lingering = False  # the core closed the connection: written, write side shut, closing soon
        self.tasks: set[asyncio.Task[None]] = set()  # work off the loop for its streams (`grpc.relay_rules.Later`)
        self.loop = asyncio.get_running_loop()
        self.last_active = self.loop.time()  # the latest byte either way (`connections.Entry`)
        self.backed_up = False  # the client's writes passed asyncio's high-water mark: its unread bytes are watched

    # -- `connections.Entry` --
    def busy(self) -> bool:
        """Whether a checked call is in flight on this connection."""
        return self.core.inflight > 0

    def drop(self) -> None:
        """Idle, or its place is wanted: GOAWAY, then closed."""
        self.apply(self.core.goaway(self.loop.time()))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        client: asyncio.Transport = transport  # type: ignore[assignment]
        self.transport = client
        if not self.relay.admitted.admit(self):
            self.lingering = True
            client.write(_FULL)
            self._close_soon(client)
            return
        self.relay.connections.add(self)
        self.relay.watch()
        self.connecting = self.loop.create_task(self._connect())

    async def _connect(self) -> None:
        try:
            _, proto = await asyncio.wait_for(
                self.relay.upstream.create_connection(lambda: _TritonProtocol(self)), _CONNECT_TIMEOUT_S
            )
        except (OSError, asyncio.TimeoutError):
            reachable = False
        else:
            self.upstream = proto  # type: ignore[assignment]
            reachable = True
        if self.transport is None or self.transport.is_closing():
            self.apply(self.core.closed(CLIENT))
            return
        self.apply(self.core.opened(reachable, self.loop.time()))

    def apply(self, writes: Writes) -> None:
        """Do what the core asked: write to each side, then pause or close."""
        client = self.transport
        triton = self.upstream.transport if self.upstream is not None else None
        if writes.to_client and client is not None and not client.is_closing():
            write(client, writes.to_client)
            if self.backed_up and client.get_write_buffer_size() > self.relay.rules.max_unread_bytes:
                log.warning("a gRPC client left more than %d bytes unread: closed", self.relay.rules.max_unread_bytes)
                writes = self.core.closed(CLIENT)
                client.close()  # what it did not read is dropped with it
        if writes.to_triton and triton is not None and not triton.is_closing():
            write(triton, writes.to_triton)
        if writes.pause_client and client is not None:
            client.pause_reading()
        if writes.wake_s:
            self.loop.call_later(writes.wake_s, lambda: self.apply(self.core.tick(self.loop.time())))
        for sid, job in writes.later:
            task = self.loop.create_task(self._run_later(sid, job))
            self.tasks.add(task)  # kept: the loop holds only a weak reference to a task
            task.add_done_callback(self.tasks.discard)
        if writes.close:
            if triton is not None:
                triton.close()
            if client is not None:
                self._close_after_writes(client)

    async def _run_later(self, sid: int, job: Later) -> None:
        """Run a stream's work off the loop (a thread, or a reading from Triton), then hand the core its outcome."""
        value, error = None, None
        try:
            value = await (asyncio.to_thread(job.run) if job.in_thread else job.run())
        except Exception as e:  # the core decides what it means for the stream
            error = e
        self.apply(self.core.resolved(sid, job, value, error, self.loop.time()))

    def _close_after_writes(self, client: asyncio.Transport) -> None:
        """Close the client's connection so that what was written to it (a GOAWAY, a refusal) reaches it.

        Closing a socket that still holds unread bytes sends a reset, and a reset drops what is not sent yet:
        a client that keeps sending (rapid reset) would never see its GOAWAY. So the write side is shut first
        (FIN after the last byte), what the client still sends is read and dropped, and the connection is
        closed `_LINGER_S` later, or sooner when the client closes it.
        """
        if client.is_closing() or self.lingering:
            return
        self.lingering = True
        self._close_soon(client)

    def _close_soon(self, client: asyncio.Transport) -> None:
        if not client.can_write_eof():
            client.close()
            return
        client.write_eof()
        client.resume_reading()  # a paused connection would keep its unread bytes
        self.loop.call_later(_LINGER_S, client.close)

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            return  # closing: what the client still sends is dropped
        now = self.last_active = self.loop.time()
        self.apply(self.core.feed(CLIENT, data, now))

    def connection_lost(self, exc: Exception | None) -> None:
        self.relay.admitted.left(self)
        self.relay.connections.discard(self)
        self.apply(self.core.closed(CLIENT))
        self.transport = None

    def pause_writing(self) -> None:
        self.backed_up = True
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        self.backed_up = False
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.resume_reading()


class _TritonProtocol(asyncio.Protocol):
    """Triton's connection for one client's: its bytes to the client's core."""

    def __init__(self, client: _ClientProtocol) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        client = self.client
        now = client.last_active = client.loop.time()
        client.apply(client.core.feed(TRITON, data, now))

    def pause_writing(self) -> None:
        """Triton reads slower than the client sends: stop reading the client."""
        if self.client.transport is not None:
            self.client.transport.pause_reading()

    def resume_writing(self) -> None:
        """Triton caught up: read the client again."""
        if self.client.transport is not None:
            self.client.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        """Triton hung up: so does the client's connection (clients see UNAVAILABLE and retry)."""
        self.client.apply(self.client.core.closed(TRITON))


async def start_relay(
    host: str, port: int, upstream: UpstreamAddress, rules: RelayRules, connections: Connections | None = None
) -> tuple[asyncio.AbstractServer, GrpcRelay]:
    """Listen on host:port and relay to `upstream` (Triton's gRPC endpoint) under `rules` (and `connections`).

    Raises:
        OSError: the port could not be bound.
    """
    relay = GrpcRelay(upstream, rules, connections)
    server = await asyncio.get_running_loop().create_server(relay.factory, host, port, backlog=1024)
    return server, relay
