"""Admission under abuse, through a gateway in front of the session's tritonserver.

Announced bodies hold nothing, bodies and gRPC messages that stop are dropped after the stall timeout and give
their bytes back, one connection holds at most its share, and HTTP/2 rapid reset ends the connection with
GOAWAY ENHANCE_YOUR_CALM while tritonserver stays small. The last test is the bar: other clients keep being
served while 4 HTTP connections announce 64 MiB each and 33 gRPC streams stall.
"""

from __future__ import annotations

import socket
import threading
import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2 as pb

from mslite_gateway.grpc.core import MAX_RESETS_PER_WINDOW
from mslite_gateway.grpc.frames import DATA, END_STREAM, ENHANCE_YOUR_CALM, HEADERS, frame
from mslite_server import LocalServer, ServerConfig
from tests.integration.test_gateway import _address, _gateway, _rss_mib
from tests.support.raw_h2 import (
    MODEL_INFER,
    RawH2,
    announce,
    goaway_code,
    grpc_message,
    rapid_reset,
    stall_streams,
)
from tests.support.sockets import http_answer
from tests.support.traffic import Traffic
from tests.support.triton_direct import grpc_address

pytestmark = pytest.mark.integration

_TINY = b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[0,1,2,3]}]}'


@pytest.fixture(scope="module")
def server(repository):
    """A tritonserver of its own (tiny only, no supervisor): the attacks here must not touch the session's."""
    config = ServerConfig(model_repository=repository, load_models=("tiny",), supervise=False)
    with LocalServer(config) as srv:
        yield srv


def _upstreams(server) -> tuple[str, str]:
    return _address(server.http_url), grpc_address(server)


def _post(port: int, body: bytes, *, sent: int | None = None, length: int | None = None) -> socket.socket:
    """A tiny predict whose body is `body` (JSON; padded with spaces it stays valid), of which `sent` bytes go."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    n = len(body) if length is None else length
    s.sendall(b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % n + body[:sent])
    return s


def test_http_bodies_count_as_they_arrive_and_stalled_ones_are_dropped(server, tmp_path):
    gateway = _gateway(tmp_path, *_upstreams(server), max_inflight_bytes=1 << 20, body_stall_timeout_s=2.0)
    port = gateway.options.http_port
    padded = _TINY + b" " * (500 << 10)  # 500 KiB: with 700 KiB held elsewhere, over the 1 MiB budget
    announced = announce(port, 4, 64 << 20)
    stalled = None
    try:
        # 256 MiB announced and not sent hold nothing: a request whose bytes came is served
        with _post(port, padded) as s:
            assert http_answer(s).startswith(b"HTTP/1.1 200"), "announced bodies held the budget"
        # 700 KiB of a 1 MiB body did come: they are held while the body keeps moving
        stalled = _post(port, b"x" * (700 << 10), length=1 << 20)
        time.sleep(0.3)  # time passes on purpose: a body that keeps moving, however slowly, is not a stall
        stalled.sendall(b"x")  # progress
        with _post(port, padded) as s:
            answer = http_answer(s)
        assert answer.startswith(b"HTTP/1.1 503") and b"kLiteServiceDeny" in answer, answer[:300]
        stalled.sendall(b"x")
        last = time.monotonic()
        # ... and once it stops for the stall timeout (2 s here), it is dropped and what it held is given back
        answer = http_answer(stalled)
        waited = time.monotonic() - last
        assert answer.startswith(b"HTTP/1.1 408") and b"no byte of it arrived for 2 s" in answer, answer[:300]
        assert 1.9 <= waited < 20, waited
        with _post(port, padded) as s:
            assert http_answer(s).startswith(b"HTTP/1.1 200")
        for s in announced:  # those stalled too
            assert http_answer(s).startswith(b"HTTP/1.1 408")
    finally:
        for s in announced + ([stalled] if stalled else []):
            s.close()
        gateway.stop()


def _status(h2: RawH2, sid: int, timeout_s: float) -> tuple[bytes, bytes]:
    """The gateway's trailers-only answer on `sid`: (grpc-status, grpc-message)."""
    f = h2.wait_for(HEADERS, sid, timeout_s)
    assert f is not None and f.flags & END_STREAM, f"no answer on stream {sid}"
    fields = h2.answer(f)
    return fields[b"grpc-status"], fields[b"grpc-message"]


def test_grpc_streams_count_per_connection_and_stalled_ones_are_dropped(server, tmp_path):
    gateway = _gateway(
        tmp_path, *_upstreams(server), max_inflight_bytes_per_connection=1 << 20, body_stall_timeout_s=2.0
    )
    port = gateway.options.grpc_port
    with RawH2(port) as a, RawH2(port) as b, RawH2(port) as c:
        a.open(1)
        assert a.data(1, grpc_message(4 << 20, 700 << 10))  # 700 KiB of a 4 MiB message: held
        a.open(3)
        a.data(3, grpc_message(1 << 20, 500 << 10))  # the same connection: past its 1 MiB share
        code, message = _status(a, 3, 10)
        assert code == b"14" and b"kLiteServiceDeny" in message and b"per connection" in message, message
        b.open(1)
        assert b.data(1, grpc_message(1 << 20, 500 << 10))  # another connection has a share of its own
        assert b.wait_for(HEADERS, 1, timeout_s=0.2) is None
        # a client that stops inside a frame: its connection goes (no reset can reach Triton in between)
        c.open(1)
        c.send(frame(DATA, 0, 1, grpc_message(1 << 20, 16384))[:1000])
        # stream 1 on `a` keeps moving a while, then stops: dropped after the stall timeout, not before
        for _ in range(4):
            time.sleep(0.4)
            assert a.data(1, b"\0" * 10)
        last = time.monotonic()
        code, message = _status(a, 1, 20)
        waited = time.monotonic() - last
        assert code == b"4" and b"no byte of it arrived for 2 s" in message, message
        assert 1.9 <= waited < 20, waited
        assert _status(b, 1, 20)[0] == b"4"
        assert c.closed.wait(20) and c.wait_for(HEADERS, 1, timeout_s=0) is None
        # the connection that lost a stream to a stall still serves
        a.open(5, "/inference.GRPCInferenceService/ServerLive")
        assert a.data(5, b"\0" * 5, end_stream=True)
        f = a.wait_for(HEADERS, 5, timeout_s=20)
        assert f is not None and not a.closed.is_set()
    gateway.stop()


def test_rapid_reset_ends_the_connection_and_tritonserver_stays_small(server, tmp_path):
    """5 connections, each opening and cancelling up to 20,000 calls: each is closed with ENHANCE_YOUR_CALM."""
    gateway = _gateway(tmp_path, *_upstreams(server))
    port = gateway.options.grpc_port
    assert server.process is not None
    pid = server.process.pid
    before = _rss_mib(pid)
    for _ in range(5):
        goaway, closed = rapid_reset(port, 20_000)
        assert goaway is not None and goaway_code(goaway) == ENHANCE_YOUR_CALM and closed
        # the last stream Triton saw: the one whose reset went past the budget
        assert int.from_bytes(goaway.payload[:4], "big") <= 2 * MAX_RESETS_PER_WINDOW + 1
    grown = _rss_mib(pid) - before
    print(f"tritonserver RSS {before:.0f} MiB -> +{grown:.0f} MiB")
    assert server.process.pid == pid and server.is_running()
    assert grown < 32, f"tritonserver grew by {grown:.0f} MiB"  # 4 MiB here; 155-297 MiB with every reset relayed
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        assert client.is_server_live()
    finally:
        client.close()
        gateway.stop()


class _Predicts(Traffic):
    """Small predicts of tiny over raw tritonclient HTTP or gRPC, each answer checked."""

    def __init__(self, threads: int, http_port: int, grpc_port: int) -> None:
        super().__init__(threads)
        self.http_port, self.grpc_port = http_port, grpc_port
        self.local = threading.local()
        self.turn = 0

    def call(self) -> None:
        if not hasattr(self.local, "client"):
            self.turn += 1
            if self.turn % 2:
                self.local.client = httpclient.InferenceServerClient(f"127.0.0.1:{self.http_port}", network_timeout=30)
                self.local.mod = httpclient
            else:
                self.local.client = grpcclient.InferenceServerClient(f"127.0.0.1:{self.grpc_port}")
                self.local.mod = grpcclient
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        item = self.local.mod.InferInput("x", [1, 4], "FP32")
        item.set_data_from_numpy(x)
        y = self.local.client.infer("tiny", [item]).as_numpy("y")
        assert y is not None and y.tolist() == (x * 2 + 1).tolist(), y


def test_others_are_served_while_bodies_are_announced_and_streams_stall(server, tmp_path):
    """The bar, at the defaults: 4 HTTP connections announce 64 MiB and 33 gRPC streams stall with 8 MiB sent
    each; >= 95 % of other clients' predicts succeed, and the stalled ones are dropped after 10 s."""
    gateway = _gateway(tmp_path, *_upstreams(server))
    http_port, grpc_port = gateway.options.http_port, gateway.options.grpc_port
    announced = announce(http_port, 4, 64 << 20)
    attacker, held = stall_streams(grpc_port, 33, sent=8 << 20, size=64 << 20)
    try:
        assert len(held) >= 7, f"the attack holds only {len(held)} streams"
        with _Predicts(4, http_port, grpc_port) as traffic:
            time.sleep(5)  # the measurement: what the other clients get for 5 s while the attack holds
        ok, failed = traffic.ok, len(traffic.failures)
        print(f"other clients: {ok} ok, {failed} failed; {len(held)} stalled streams held")
        assert ok >= 0.95 * (ok + failed) and ok > 0, traffic.failures[:3]
        assert all(sid not in attacker.ended for sid in held), "the attack was not held for the whole measurement"
        # the defaults' stall timeout (10 s) ends them all: 408 / DEADLINE_EXCEEDED
        for sid in held:
            assert _status(attacker, sid, 30)[0] == b"4"
        for s in announced:
            assert http_answer(s).startswith(b"HTTP/1.1 408")
    finally:
        attacker.close()
        for s in announced:
            s.close()
        gateway.stop()


def test_grpc_client_library_call_is_not_taken_for_a_stall(server, tmp_path):
    """Calls whose message comes whole, with idle seconds between them, through a gateway whose stall timeout is 1 s."""
    gateway = _gateway(tmp_path, *_upstreams(server), body_stall_timeout_s=1.0)
    channel = grpc.insecure_channel(f"127.0.0.1:{gateway.options.grpc_port}")
    request = pb.ModelInferRequest(model_name="tiny")
    request.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    request.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
    try:
        call = channel.unary_unary(MODEL_INFER)
        for _ in range(3):
            answer = pb.ModelInferResponse.FromString(call(request.SerializeToString(), timeout=30))
            assert np.frombuffer(answer.raw_output_contents[0], np.float32).tolist() == [1, 3, 5, 7]
            time.sleep(1.5)  # an idle connection between calls is no stall
    finally:
        channel.close()
        gateway.stop()
