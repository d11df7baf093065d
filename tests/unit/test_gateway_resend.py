"""The gateway's HTTP upstream sends again only what is safe to repeat (`http.upstream.Upstream`).

A loopback stand-in for Triton reads each request and, for the first one of a kind, hangs up without an
answer, as a tritonserver that died of it would; later ones are answered. Inference is sent again (and
answered); model control is sent once and the client gets 502; a request on a pooled connection that
breaks is not taken for a stale keep-alive connection unless it may be repeated.
"""

from __future__ import annotations

import asyncio

import pytest

from mslite_gateway.http.messages import HttpError
from mslite_gateway.http.upstream import Upstream
from mslite_gateway.upstream_address import UpstreamAddress

_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


class _DyingServer:
    """Counts requests by target; hangs up on the first request to each target listed in `kill`."""

    def __init__(self, kill: set[bytes]) -> None:
        self.kill = set(kill)
        self.seen: dict[bytes, int] = {}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1]
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                await reader.readexactly(length)
                self.seen[target] = self.seen.get(target, 0) + 1
                if target in self.kill:
                    self.kill.discard(target)
                    writer.transport.abort()  # no answer: as a server that died of this request
                    return
                writer.write(_OK)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def _request(method: bytes, target: bytes) -> tuple[bytes, bytes]:
    body = b"{}"
    return method + b" " + target + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n", body


async def _scenario(pooled: bool) -> dict[bytes, object]:
    infer, load = b"/v2/models/tiny/infer", b"/v2/repository/models/tiny/load"
    fake = _DyingServer({infer, load})
    server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    upstream = Upstream(UpstreamAddress("127.0.0.1", port), timeout_s=10, retry_s=5)
    outcome: dict[bytes, object] = {}
    try:
        for target, idempotent in ((infer, True), (load, False)):
            if pooled:  # a keep-alive connection in the pool, as after any earlier request
                await upstream.exchange(*_request(b"GET", b"/v2/health/ready"), idempotent=True)
            try:
                resp = await upstream.exchange(*_request(b"POST", target), idempotent=idempotent)
                outcome[target] = resp.status_line
            except HttpError as e:
                outcome[target] = e.status
        outcome[b"seen"] = dict(fake.seen)
    finally:
        upstream.close()
        server.close()
        await server.wait_closed()
    return outcome


@pytest.mark.parametrize("pooled", [False, True], ids=["fresh", "pooled"])
def test_only_inference_is_sent_again_after_the_server_hung_up(pooled):
    outcome = asyncio.run(_scenario(pooled))
    seen = outcome[b"seen"]
    assert isinstance(seen, dict)
    assert outcome[b"/v2/models/tiny/infer"] == b"HTTP/1.1 200 OK"
    assert seen[b"/v2/models/tiny/infer"] == 2  # the one that was dropped, and again
    assert outcome[b"/v2/repository/models/tiny/load"] == 502
    assert seen[b"/v2/repository/models/tiny/load"] == 1  # never repeated
