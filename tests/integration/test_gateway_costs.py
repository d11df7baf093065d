"""Bounds on what one request may cost, through a real gateway: batches of 0, string elements, upstream time.

Triton 2.51 never answers an inference request of batch size 0 to a model that batches when the rest of its
shape has no elements ([0, 0] on an [N, T] model), over HTTP and gRPC; the gateway refuses every batch of 0 to
a batching model (400 / INVALID_ARGUMENT) and still serves what Triton answers. Requests past the string
element bound are refused naming it; a request Triton does not answer ends at the upstream time-out, and one
whose client hung up is cancelled; either way its admission slot is free again.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from mslite_server import LocalServer, ServerConfig
from tests.integration.test_gateway import _address, _gateway
from tests.support import model_zoo
from tests.support.repository import GEN, add_model, flat_tiny
from tests.support.sockets import http_answer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """Its own tritonserver: a batching model with a variable dim, one without batching, one of strings."""
    repo = tmp_path_factory.mktemp("costs-repo")
    add_model(repo, "seq", model_zoo.variable_seq())
    add_model(repo, "strings", model_zoo.string_identity())
    add_model(repo, "tiny", GEN.build_tiny())
    # ~0.5 s of one core per request (100 rounds of ~5 ms; more under load), one worker: outlasts a short time-out
    add_model(repo, "slow", model_zoo.slow(rounds=100), 'backend: "mslite"\ninstance_group [ { count: 1 } ]\n')
    flat_tiny(repo)
    with LocalServer(ServerConfig(model_repository=repo, supervise=False)) as srv:
        yield srv


@pytest.fixture
def gateway(server, tmp_path):
    started = []

    def start(**limits):
        gw = _gateway(tmp_path, _address(server.http_url), server.triton_endpoints.grpc_address, **limits)
        started.append(gw)
        return gw.options.http_port, gw.options.grpc_port

    yield start
    for gw in started:
        gw.stop()


def _http(port: int, model: str, body: bytes, timeout_s: float = 30.0) -> tuple[int, dict]:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(_request(model, body))
        data = http_answer(s)
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(rest)


def _request(model: str, body: bytes) -> bytes:
    return b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (
        model.encode(),
        len(body),
        body,
    )


def _json_infer(name: str, shape: list[int], datatype: str, data: list) -> bytes:
    return json.dumps({"inputs": [{"name": name, "shape": shape, "datatype": datatype, "data": data}]}).encode()


def _clients(http_port: int, grpc_port: int):
    http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}", network_timeout=30, connection_timeout=30)
    grpc_ = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    return http, grpc_


def _infer(client, module, model: str, name: str, array: np.ndarray, **kwargs):
    datatype = "BYTES" if array.dtype == np.object_ else "FP32"
    inp = module.InferInput(name, list(array.shape), datatype)
    if module is grpcclient:
        inp.set_data_from_numpy(array)
        return client.infer(model, [inp], client_timeout=30, **kwargs)
    inp.set_data_from_numpy(array, binary_data=True)
    return client.infer(model, [inp], **kwargs)


def test_a_batch_of_0_to_a_batching_model_is_refused_on_every_front_and_what_triton_answers_is_served(gateway):
    http_port, grpc_port = gateway()
    status, doc = _http(http_port, "seq", _json_infer("tokens", [0, 0], "FP32", []))
    assert status == 400 and "batch-size must be >= 1 for 'seq'" in doc["error"] and "[0, 0]" in doc["error"]
    http, grpc_ = _clients(http_port, grpc_port)
    empty = np.zeros((0, 0), np.float32)
    for client, module, kwargs in (
        (http, httpclient, {}),
        (grpc_, grpcclient, {}),
        (grpc_, grpcclient, {"compression_algorithm": "gzip"}),
    ):
        with pytest.raises(InferenceServerException) as caught:
            _infer(client, module, "seq", "tokens", empty, **kwargs)
        assert "batch-size must be >= 1 for 'seq'" in str(caught.value)
        assert caught.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
        # what Triton answers still goes through: no batching, and a batch of 1 with an empty item
        flat = _infer(client, module, "flat", "x", np.zeros((0, 4), np.float32), **kwargs)
        assert flat.as_numpy("y").shape == (0, 4)
        assert _infer(client, module, "seq", "tokens", np.zeros((1, 0), np.float32), **kwargs).as_numpy(
            "cumsum"
        ).shape == (1, 0)
        tokens = np.arange(6, dtype=np.float32).reshape(2, 3)
        total = _infer(client, module, "seq", "tokens", tokens, **kwargs).as_numpy("total")
        np.testing.assert_allclose(total, tokens.sum(axis=1, keepdims=True))


def test_string_elements_past_the_bound_are_refused_naming_it(gateway):
    http_port, grpc_port = gateway(max_string_elements=100)
    status, doc = _http(http_port, "strings", _json_infer("INPUT0", [1, 101], "BYTES", ["ab"] * 101))
    assert status == 413 and "101 string elements" in doc["error"] and "limit of 100" in doc["error"]
    assert "--max-string-elements" in doc["error"]
    http, grpc_ = _clients(http_port, grpc_port)
    for client, module in ((http, httpclient), (grpc_, grpcclient)):
        with pytest.raises(InferenceServerException) as caught:
            _infer(client, module, "strings", "INPUT0", np.full((1, 101), b"ab", dtype=np.object_))
        assert "limit of 100 per request" in str(caught.value) and "--max-string-elements" in str(caught.value)
        assert caught.value.status() in ("413", "StatusCode.RESOURCE_EXHAUSTED")
        ok = _infer(client, module, "strings", "INPUT0", np.full((1, 100), b"ab", dtype=np.object_))
        assert ok.as_numpy("OUTPUT0").shape == (1, 100)


class _Silent:
    """An upstream that takes HTTP requests and never answers; it records when an inference arrives and leaves."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = threading.Event()
        self.closed = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        got = b""
        with conn:
            while chunk := conn.recv(1 << 16):
                got += chunk
                if b"/infer" in got:
                    self.received.set()
        if b"/infer" in got:  # an inference request's connection (not the staging pool's)
            self.closed.set()

    def close(self) -> None:
        self.sock.close()


@contextlib.contextmanager
def _in_front_of_silence(server, tmp_path, **limits):
    """A gateway whose HTTP upstream never answers (`_Silent`), at most 1 request in flight per model."""
    silent = _Silent()
    grpc_upstream = server.triton_endpoints.grpc_address
    gw = _gateway(tmp_path, f"127.0.0.1:{silent.port}", grpc_upstream, max_inflight_per_model=1, **limits)
    try:
        yield gw.options.http_port, silent
    finally:
        gw.stop()
        silent.close()


_TINY = _json_infer("x", [1, 4], "FP32", [1, 2, 3, 4])


def test_a_request_triton_does_not_answer_ends_at_the_upstream_timeout_and_frees_its_slot(server, tmp_path):
    with _in_front_of_silence(server, tmp_path, upstream_timeout_s=1.0) as (port, _):
        for _ in range(2):  # the second is let in: the first gave its slot back
            status, doc = _http(port, "tiny", _TINY)
            assert status == 504 and "within 1 s" in doc["error"] and "--upstream-timeout-s" in doc["error"]


def test_a_request_whose_client_hung_up_is_cancelled_upstream_and_frees_its_slot(server, tmp_path):
    with _in_front_of_silence(server, tmp_path, upstream_timeout_s=300.0) as (port, silent):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(_request("tiny", _TINY))
            assert silent.received.wait(60)  # forwarded upstream before this client hangs up
        # long before the 300 s time-out: the gateway closed its upstream connection for the gone client
        assert silent.closed.wait(60)
        deadline = time.monotonic() + 60
        while True:  # and the slot is free: the next request is let in (it waits upstream, unlike a 503)
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(_request("tiny", _TINY))
                s.settimeout(3)
                try:
                    answer = s.recv(1 << 16)
                except TimeoutError:
                    break  # held upstream: admitted
            assert answer.startswith(b"HTTP/1.1 503") and time.monotonic() < deadline, answer[:200]
            time.sleep(0.5)


def test_a_grpc_call_triton_does_not_begin_to_answer_in_time_ends_and_frees_its_slot(gateway):
    _, grpc_port = gateway(upstream_timeout_s=0.1, body_stall_timeout_s=0.5, max_inflight_per_model=1)
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    for _ in range(2):  # the second is let in: the first gave its slot back
        inp = grpcclient.InferInput("x", [1, 1], "FP32")
        inp.set_data_from_numpy(np.ones((1, 1), np.float32))
        with pytest.raises(InferenceServerException) as caught:
            client.infer("slow", [inp], client_timeout=60)
        assert caught.value.status() == "StatusCode.DEADLINE_EXCEEDED"
        assert "within 0.1 s" in str(caught.value) and "--upstream-timeout-s" in str(caught.value)
