"""A relay that checks nothing: every byte read is written on at once (the floor of any gateway hop).

    .venv/bin/python -m benchmarks.passthrough_relay PORT:UPSTREAM_HOST:UPSTREAM_PORT [...]

Each argument is one listener on 127.0.0.1:PORT relaying to the upstream address, each client connection
on a connection of its own. Runs on uvloop, as the gateway does. `gateway_overhead --floor` measures
it as one more path: what one more TCP hop costs on this machine, before any check (measured here: about
as much as the same relay written in C).
"""

from __future__ import annotations

import asyncio
import sys

import uvloop


class _Upstream(asyncio.Protocol):
    def __init__(self, client: _Client) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.client.transport is not None:
            self.client.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.client.transport is not None:
            self.client.transport.close()


class _Client(asyncio.Protocol):
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream_at = upstream
        self.transport: asyncio.Transport | None = None
        self.upstream: _Upstream | None = None
        self.early: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, proto = await loop.create_connection(lambda: _Upstream(self), *self.upstream_at)
        except OSError:
            if self.transport is not None:
                self.transport.close()
            return
        self.upstream = proto  # type: ignore[assignment]
        for data in self.early:
            self.upstream.transport.write(data)  # type: ignore[union-attr]
        self.early = []

    def data_received(self, data: bytes) -> None:
        if self.upstream is None or self.upstream.transport is None:
            self.early.append(data)
        else:
            self.upstream.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()


async def _serve(routes: list[tuple[int, tuple[str, int]]]) -> None:
    loop = asyncio.get_running_loop()
    for port, upstream in routes:
        await loop.create_server(lambda up=upstream: _Client(up), "127.0.0.1", port)  # type: ignore[misc]
    print("ready", flush=True)
    await asyncio.Event().wait()


def main(argv: list[str]) -> None:
    routes = []
    for arg in argv:
        port, host, up_port = arg.split(":")
        routes.append((int(port), (host, int(up_port))))
    uvloop.run(_serve(routes))


if __name__ == "__main__":
    main(sys.argv[1:])
