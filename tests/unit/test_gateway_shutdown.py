"""A gateway stopped with requests still waiting for Triton ends them quietly (`http.front.HttpFront.handle`);
one that cannot bind its ports ends at once, saying why; its watch of Triton ends when it is cancelled.

The gateway process runs against loopback ports where nothing listens, as while Triton restarts: an HTTP
request then waits in the upstream's retry sleep. Stopped with a short grace period, the gateway cancels it;
its log holds the usual closing line and no error or traceback.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from pathlib import Path

import pytest

from mslite_contract.gateway_options import GatewayLimits, GatewayOptions
from mslite_gateway.staging import Staging
from mslite_gateway.upstream_address import UpstreamAddress
from mslite_server.gateway_process import GatewayError, GatewayProcess
from tests.support.processes import free_port
from tests.support.sockets import wait_until_taken


def test_a_stop_cancels_requests_waiting_for_triton_without_a_traceback(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    http_port = free_port()
    options = GatewayOptions(
        http_port=http_port,
        grpc_port=free_port(),
        upstream_http=f"127.0.0.1:{free_port()}",  # nothing listens: the request is offered again and again
        upstream_grpc=f"127.0.0.1:{free_port()}",
        grace_s=0.3,
        limits=GatewayLimits(upstream_retry_s=60.0),
    )
    gateway = GatewayProcess(options, log_path=log)
    gateway.start()
    clients = []
    try:
        for _ in range(3):
            c = socket.create_connection(("127.0.0.1", http_port), timeout=10)
            c.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
            clients.append(c)
        # the gateway has read each request: it offered it to Triton (refused in microseconds), and waits to again
        for c in clients:
            wait_until_taken(c)
        proc = gateway.process
        assert proc is not None
        gateway.stop(timeout_s=20)
        assert proc.returncode == 0
        for c in clients:  # ended without an answer: the connection closes
            assert c.recv(1024) == b""
    finally:
        gateway.stop()
        for c in clients:
            c.close()
    text = log.read_text(errors="replace")
    assert "gateway stopped" in text, text
    for sign in ("Traceback", "CancelledError", " ERROR "):
        assert sign not in text, text


def test_a_port_it_cannot_bind_ends_its_start_at_once_with_the_reason(tmp_path: Path) -> None:
    # Its watch of Triton started before the ports were bound, and the failed start then stayed in asyncio's
    # clean-up: the launcher waited its 30 s and reported no reason, so it could not try other ports.
    for taken in ("http", "grpc"):
        with socket.socket() as occupant:
            occupant.bind(("127.0.0.1", 0))
            occupant.listen()
            port = occupant.getsockname()[1]
            ports = {"http_port": free_port(), "grpc_port": free_port(), taken + "_port": port}
            options = GatewayOptions(
                upstream_http=f"127.0.0.1:{free_port()}", upstream_grpc=f"127.0.0.1:{free_port()}", **ports
            )
            gateway = GatewayProcess(options, log_path=tmp_path / f"{taken}.log")
            started = time.monotonic()
            with pytest.raises(GatewayError, match=f"port {port} on 127.0.0.1 could not be bound: .*already in use"):
                gateway.start(timeout_s=30)
            assert time.monotonic() - started < 10


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Python 3.10's gateway uses asyncio.wait_for")
def test_a_stop_that_comes_as_the_watch_of_triton_connects_ends_the_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    # Python 3.11's wait_for returns the connection and drops a cancel that comes in that instant: the watch then
    # read from Triton until it closed, and the stopping gateway stayed in asyncio's clean-up.
    async def scenario() -> None:
        connection = asyncio.get_running_loop().create_future()
        with socket.socket() as triton:
            triton.bind(("127.0.0.1", 0))
            triton.listen()
            reader, writer = await asyncio.open_connection("127.0.0.1", triton.getsockname()[1])
            monkeypatch.setattr(asyncio, "open_connection", lambda *args, **kwargs: connection)  # the watch's
            pool = Staging(UpstreamAddress("127.0.0.1", 1), None, max_bytes=1 << 20)
            pool.start()
            (watch,) = pool._tasks
            await asyncio.sleep(0)  # the watch now waits for its connection
            connection.set_result((reader, writer))
            watch.cancel()
            done, _ = await asyncio.wait({watch}, timeout=2)
            writer.close()
        assert done and watch.cancelled(), "the watch went on after it was cancelled"

    asyncio.run(scenario())
