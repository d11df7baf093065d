"""A relay that checks nothing: every byte read is written on at once (the floor of any gateway hop).

    .venv/bin/python -m benchmarks.passthrough_relay [--record FILE --chunks N] PORT:UPSTREAM_HOST:UPSTREAM_PORT [...]

Each route is one listener on 127.0.0.1:PORT relaying to the upstream address, each client connection
on a connection of its own. Runs on uvloop, as the gateway does: put in front of tritonserver, it measures
what one more TCP hop costs before any check (docs/performance.md, "The gateway's cost": the floor).
With `--record`, the first connection to carry N reads (either way) has them written to FILE, in order, as
a pickled list of ("client" | "server", bytes): `relay_replay` feeds them to the gateway's relay.
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import uvloop

ROOT = Path(__file__).resolve().parent.parent


def start(routes: list[str], *options: str) -> subprocess.Popen[str]:
    """This relay in a process of its own (`routes` and `options` as on the command line), once it listens.

    Raises:
        RuntimeError: it did not start (the process is gone).
    """
    cmd = [sys.executable, "-m", "benchmarks.passthrough_relay", *options, *routes]
    relay = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert relay.stdout is not None
    if relay.stdout.readline().strip() != "ready":
        relay.kill()
        relay.wait()
        raise RuntimeError("the pass-through relay did not start")
    return relay


class _Upstream(asyncio.Protocol):
    def __init__(self, client: _Client) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.client.transport is not None:
            self.client.record("server", data)
            self.client.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.client.transport is not None:
            self.client.transport.close()


class _Client(asyncio.Protocol):
    def __init__(self, upstream: tuple[str, int], record: Callable[[str, bytes], None]) -> None:
        self.upstream_at = upstream
        self.record = record
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
        self.record("client", data)
        if self.upstream is None or self.upstream.transport is None:
            self.early.append(data)
        else:
            self.upstream.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()


class _Recorder:
    """Each connection's reads, until one connection has `chunks` of them: those go to `path`."""

    def __init__(self, path: Path | None, chunks: int) -> None:
        self.path, self.chunks = path, chunks

    def connection(self) -> Callable[[str, bytes], None]:
        if self.path is None:
            return lambda side, data: None
        reads: list[tuple[str, bytes]] = []

        def record(side: str, data: bytes) -> None:
            if self.path is None:
                return
            reads.append((side, bytes(data)))
            if len(reads) >= self.chunks:
                self.path.write_bytes(pickle.dumps(reads))
                self.path = None

        return record


async def _serve(routes: list[tuple[int, tuple[str, int]]], recorder: _Recorder) -> None:
    loop = asyncio.get_running_loop()
    for port, upstream in routes:
        await loop.create_server(
            lambda up=upstream: _Client(up, recorder.connection()),  # type: ignore[misc]
            "127.0.0.1",
            port,
        )
    print("ready", flush=True)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("routes", nargs="+", help="PORT:UPSTREAM_HOST:UPSTREAM_PORT")
    ap.add_argument("--record", type=Path, help="write one connection's reads here")
    ap.add_argument("--chunks", type=int, default=20000, help="how many reads to record")
    args = ap.parse_args(argv)
    routes = []
    for arg in args.routes:
        port, host, up_port = arg.split(":")
        routes.append((int(port), (host, int(up_port))))
    uvloop.run(_serve(routes, _Recorder(args.record, args.chunks)))


if __name__ == "__main__":
    main()
