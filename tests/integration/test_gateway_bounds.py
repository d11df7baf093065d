"""Connections, streams and unread answers bounded, through a real gateway in front of a tritonserver of its own.

The cap on client connections (both ports together) makes room for a new client by dropping the longest idle
one, and refuses a new one only when every connection has a call in flight; idle connections close after the
idle time-out; a gRPC connection gets the gateway's SETTINGS_MAX_CONCURRENT_STREAMS and streams past it are
refused with REFUSED_STREAM; an answer the client never reads (its window at 0) ends at the upstream timeout and
gives its slot back, and a call the gateway ended gets nothing after its end.
"""

from __future__ import annotations

import socket

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb

from mslite_gateway.grpc.frames import (
    DATA,
    END_STREAM,
    GOAWAY,
    HEADERS,
    NO_ERROR,
    REFUSED_STREAM,
    RST_STREAM,
    SETTINGS,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    U32,
)
from mslite_server import LocalServer, ServerConfig
from tests.integration.test_gateway import _address, _gateway
from tests.support.eventually import eventually
from tests.support.raw_h2 import MODEL_INFER, RawH2, goaway_code, grpc_message
from tests.support.sockets import http_answer
from tests.support.triton_direct import grpc_address

pytestmark = pytest.mark.integration

_INITIAL_WINDOW_SIZE = 0x4
_TINY_JSON = b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[0,1,2,3]}]}'


@pytest.fixture(scope="module")
def server(repository):
    """A tritonserver of its own (tiny only, no supervisor): the attacks here must not touch the session's."""
    config = ServerConfig(model_repository=repository, load_models=("tiny",), supervise=False)
    with LocalServer(config) as srv:
        yield srv


@pytest.fixture
def gateway(server, tmp_path):
    started = []

    def start(**limits):
        gw = _gateway(tmp_path, _address(server.http_url), grpc_address(server), **limits)
        started.append(gw)
        return gw.options.http_port, gw.options.grpc_port

    yield start
    for gw in started:
        gw.stop()


def _tiny_message() -> bytes:
    req = pb.ModelInferRequest(model_name="tiny")
    req.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    req.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
    body = req.SerializeToString()
    return b"\0" + U32.pack(len(body)) + body


def _grpc_infer(port: int, client: grpcclient.InferenceServerClient | None = None) -> np.ndarray:
    """A tiny predict over gRPC, on `client`'s connection (kept open) or on one of its own."""
    own = client is None
    client = client or grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        inp = grpcclient.InferInput("x", [1, 4], "FP32")
        inp.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(1, 4))
        return client.infer("tiny", [inp], client_timeout=60).as_numpy("y")
    finally:
        if own:
            client.close()


def _http_infer(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        head = b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(_TINY_JSON)
        s.sendall(head + _TINY_JSON)
        return http_answer(s)


def _fields(h2: RawH2, sid: int, timeout_s: float = 60.0) -> dict[bytes, bytes]:
    """The fields of the block that ended stream `sid` (Triton keeps no header table: a fresh decoder reads it)."""

    def end():
        with h2.lock:
            return next((f for f in h2.frames if f.kind == HEADERS and f.sid == sid and f.flags & END_STREAM), None)

    return h2.answer(eventually(end, f"the end of stream {sid}", timeout_s))


def test_at_the_cap_the_longest_idle_connection_makes_room_for_a_new_client(gateway):
    http_port, grpc_port = gateway(max_connections=4, idle_timeout_s=600.0)
    idle = [RawH2(grpc_port) for _ in range(4)]  # the cap, all idle
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")  # kept open: the cap stays full
    try:
        eventually(lambda: all(h2.wait_for(SETTINGS, 0, 0) for h2 in idle), "the idle connections' settings")
        assert _grpc_infer(grpc_port, client).shape == (1, 4)  # a new client is served: an idle one went
        gone = eventually(lambda: [h2 for h2 in idle if h2.wait_for(GOAWAY, 0, 0)], "an idle connection's GOAWAY")
        assert len(gone) == 1 and goaway_code(gone[0].wait_for(GOAWAY, 0, 0)) == NO_ERROR
        assert gone[0].closed.wait(60)
        assert _http_infer(http_port).startswith(b"HTTP/1.1 200")  # both ports share the cap: another went
        eventually(lambda: sum(h2.closed.is_set() for h2 in idle) == 2, "a second idle connection closed")
    finally:
        client.close()
        for h2 in idle:
            h2.close()


def test_when_every_connection_has_a_call_in_flight_a_new_one_is_refused(gateway):
    http_port, grpc_port = gateway(max_connections=2, body_stall_timeout_s=600.0)
    busy = [RawH2(grpc_port) for _ in range(2)]
    try:
        for h2 in busy:  # a message that stops half-way: a call in flight on each connection
            h2.open(1)
            assert h2.data(1, grpc_message(1000, 10), timeout_s=30)
            assert h2.ping(timeout_s=60)  # the gateway has read the call: the connection counts as busy
        eventually(lambda: all(h2.wait_for(SETTINGS, 0, 0) for h2 in busy), "the busy connections' settings")
        answer = _http_infer(http_port)
        seen = [[(f.kind, f.flags, f.sid, f.payload[:60]) for f in h2.frames] for h2 in busy]
        assert answer.startswith(b"HTTP/1.1 503") and b"too many client connections" in answer, (answer[:300], seen)
        with RawH2(grpc_port) as late:
            refused = late.wait_for(GOAWAY, 0, 60)
            assert refused is not None and b"too many client connections" in refused.payload
        assert not any(h2.closed.is_set() for h2 in busy)  # a busy connection is never dropped for room
    finally:
        for h2 in busy:
            h2.close()


def test_idle_connections_close_after_the_idle_timeout_on_both_ports(gateway):
    http_port, grpc_port = gateway(idle_timeout_s=1.0)
    with RawH2(grpc_port) as h2, socket.create_connection(("127.0.0.1", http_port), timeout=60) as s:
        goaway = h2.wait_for(GOAWAY, 0, 60)
        assert goaway is not None and goaway_code(goaway) == NO_ERROR
        assert h2.closed.wait(60)
        assert s.recv(1) == b""  # closed quietly: no request was in progress


def test_streams_past_the_connections_bound_are_refused(gateway):
    _, grpc_port = gateway(max_streams_per_connection=4, body_stall_timeout_s=600.0)
    with RawH2(grpc_port) as h2:
        settings = h2.wait_for(SETTINGS, 0, 60)
        assert settings is not None
        sent = {
            int.from_bytes(settings.payload[i : i + 2], "big"): U32.unpack_from(settings.payload, i + 2)[0]
            for i in range(0, len(settings.payload), 6)
        }
        assert sent[SETTINGS_MAX_CONCURRENT_STREAMS] == 4
        for sid in range(1, 13, 2):  # six calls that stay open (their messages stop half-way)
            h2.open(sid, MODEL_INFER)
            h2.data(sid, grpc_message(1000, 10), timeout_s=5)
        for sid in (9, 11):
            reset = h2.wait_for(RST_STREAM, sid, 60)
            assert reset is not None and reset.payload == U32.pack(REFUSED_STREAM)
        assert h2.wait_for(RST_STREAM, 1, 0) is None and not h2.closed.is_set()


def test_an_answer_never_read_ends_at_the_upstream_timeout_and_a_refused_call_gets_one_end(gateway):
    """A client whose receive window is 0: its answer waits; a second call is refused for the per-model cap."""
    _, grpc_port = gateway(max_inflight_per_model=1, upstream_timeout_s=3.0)
    window_0 = _INITIAL_WINDOW_SIZE.to_bytes(2, "big") + U32.pack(0)
    with RawH2(grpc_port, settings=window_0) as h2:
        h2.open(1)
        assert h2.data(1, _tiny_message(), end_stream=True)
        h2.wait_for(HEADERS, 1, 60)  # Triton's answer began; its DATA waits for a window that never comes
        h2.open(3)
        assert h2.data(3, _tiny_message(), end_stream=True)
        refused = _fields(h2, 3)
        assert refused[b"grpc-status"] == b"14" and b"kLiteServiceDeny" in refused[b"grpc-message"]
        ended = _fields(h2, 1, 60)
        assert ended[b"grpc-status"] == b"4" and b"--upstream-timeout-s" in ended[b"grpc-message"]
        assert _grpc_infer(grpc_port).shape == (1, 4)  # the slot came back
        # nothing came on either stream after its end (Triton's own end of the refused call went nowhere)
        for sid in (1, 3):
            frames = [f for f in h2.frames if f.sid == sid]
            last_end = max(i for i, f in enumerate(frames) if f.kind == HEADERS and f.flags & END_STREAM)
            assert all(f.kind == RST_STREAM for f in frames[last_end + 1 :]), frames[last_end:]
            assert sum(f.kind == HEADERS and f.flags & END_STREAM for f in frames) == 1
            assert not any(f.kind == DATA for f in frames[last_end:])
