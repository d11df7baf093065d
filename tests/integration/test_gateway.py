"""The validating gateway (`ServerConfig(gateway=True)`): valid traffic passes through unchanged, on both protocols.

The malformed side is the bad-input campaign's (test_bad_input.py runs it through the gateway too); here:
the client library through the gateway on gRPC and HTTP, the admin key reaching Triton for a gRPC upload,
system shared memory registered and used through it, answers equal to Triton's own byte for byte, HTTP
framing that legitimate clients use (keep-alive, pipelining, chunked bodies, Expect: 100-continue, gzip),
the size cap on both protocols, and what a client sees while Triton is not there.
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import re
import socket
import stat
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as sysshm
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

import mslite_triton as mslite
from mslite_contract import admin_key
from mslite_contract.gateway_options import GatewayLimits, GatewayOptions
from mslite_contract.protocol import ADMIN_KEY_GRPC_HEADER, ADMIN_KEY_HEADER
from mslite_server import LocalServer, ServerConfig
from mslite_server.gateway_process import GatewayProcess
from mslite_server.ports import listening_ports, listening_unix_paths
from mslite_triton._error_table import classify
from mslite_triton.errors import ServiceDenyError
from tests.support.eventually import eventually
from tests.support.model_zoo import run_reference
from tests.support.processes import free_port
from tests.support.repository import GEN, ZOO
from tests.support.sockets import wait_until_taken
from tests.support.triton_direct import grpc_address, http_address

pytestmark = pytest.mark.integration

CAP = 4 << 20


@pytest.fixture(scope="module")
def gw(repository: Path):
    # No supervisor: test_http_requests_wait_out_a_server_restart restarts tritonserver itself, and a
    # supervisor would take the stopped server for a dead one and restart it too (healing: test_healing.py).
    config = ServerConfig(
        model_repository=repository,
        load_models=("tiny", "multi_io"),
        gateway=True,
        gateway_limits=GatewayLimits(max_request_bytes=CAP),
        supervise=False,
    )
    with LocalServer(config) as srv:
        yield srv


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("gateway_files")
    (d / "tiny.onnx").write_bytes(GEN.build_tiny().SerializeToString())
    (d / "variable_seq.onnx").write_bytes(ZOO["variable_seq"]().SerializeToString())
    return d


def _address(url: str) -> str:
    return url.split("://", 1)[1]


def _context(url: str) -> mslite.Context:
    ctx = mslite.Context()
    ctx.server_url = url
    ctx.cpu.thread_num = 1
    ctx.parallel.workers_num = 1
    return ctx


def test_triton_listens_on_no_tcp_port_but_metrics_behind_the_gateway(gw):
    assert gw.gateway is not None and gw.gateway.is_running() and gw.is_running()
    assert gw.process is not None
    assert listening_ports(gw.process.pid) == {gw.metrics_port}  # /proc/<pid>/net/tcp{,6} against its fds
    sockets = gw.triton_endpoints.socket_dir
    assert sockets is not None
    folder = os.lstat(sockets)
    assert stat.S_ISDIR(folder.st_mode) and folder.st_uid == os.geteuid(), folder
    assert stat.S_IMODE(folder.st_mode) & 0o077 == 0, oct(folder.st_mode)  # 0700 or stricter
    assert listening_unix_paths(gw.process.pid) == {
        str(gw.triton_endpoints.http_socket),
        str(gw.triton_endpoints.grpc_socket),
    }
    with urllib.request.urlopen(f"{gw.http_url}/v2/health/ready", timeout=5) as r:
        assert r.status == 200
    assert gw.triton_api().call("GET", "/v2/health/ready", None) == (200, b"")
    # the key files name the public ports: that is where clients come
    assert admin_key.key_for(gw.grpc_url) == gw.admin_key == admin_key.key_for(gw.http_url)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_client_library_uploads_and_predicts_through_the_gateway(gw, files, protocol):
    url = gw.grpc_url if protocol == "grpc" else gw.http_url
    ctx = _context(url)
    ctx.cpu.thread_num = 1 if protocol == "grpc" else 2  # a config of its own: each case uploads its own model
    loaded = set(gw.loaded_models())
    model = mslite.Model()
    model.build_from_file(str(files / "tiny.onnx"), mslite.ModelType.MINDIR, ctx)  # keyed upload
    assert model.served_name not in loaded and model.served_name in gw.loaded_models()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    (y,) = model.predict([x])
    np.testing.assert_array_equal(y.get_data_to_numpy(), x * 2 + 1)


def test_grpc_upload_needs_the_key_and_the_key_passes_through(gw, files):
    client = grpcclient.InferenceServerClient(_address(gw.grpc_url))
    config = json.dumps({"name": "keyed", "backend": "mslite"})
    model = {"file:1/model.onnx": (files / "tiny.onnx").read_bytes()}
    try:
        with pytest.raises(InferenceServerException, match="needs the admin key"):
            client.load_model("keyed", config=config, files=model)
        client.load_model("keyed", config=config, files=model, headers={ADMIN_KEY_GRPC_HEADER: gw.admin_key})
        assert client.is_model_ready("keyed")
        client.unload_model("keyed", headers={ADMIN_KEY_GRPC_HEADER: gw.admin_key})
    finally:
        client.close()


def test_a_grpc_upload_over_the_request_limit_goes_through_unread(gw, files):
    """A load message is held whole to check its file paths (`model_control`) up to the request limit; a larger
    upload (a big model) is not held but relayed as it comes, and loads."""
    client = grpcclient.InferenceServerClient(_address(gw.grpc_url))
    config = json.dumps({"name": "big_upload", "backend": "mslite"})
    model = {"file:1/model.onnx": (files / "tiny.onnx").read_bytes(), "file:1/pad.bin": b"\0" * CAP}
    try:
        client.load_model("big_upload", config=config, files=model, headers={ADMIN_KEY_GRPC_HEADER: gw.admin_key})
        assert client.is_server_live() and client.is_model_ready("big_upload")
        client.unload_model("big_upload", headers={ADMIN_KEY_GRPC_HEADER: gw.admin_key})
    finally:
        client.close()


def test_shared_memory_inputs_through_the_gateway(gw, files):
    """The client library registers a region (keyed, through the gateway) for inputs of 64 KiB and more."""
    model = mslite.Model()
    model.build_from_file(str(files / "variable_seq.onnx"), mslite.ModelType.MINDIR, _context(gw.grpc_url))
    x = np.random.default_rng(5).standard_normal((1, 32768), dtype=np.float32)  # 128 KiB
    outputs = model.predict([x])
    expected = run_reference(ZOO["variable_seq"](), {"tokens": x})
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got.get_data_to_numpy(), want, rtol=1e-5)
    client = grpcclient.InferenceServerClient(_address(gw.grpc_url))
    try:
        status = client.get_system_shared_memory_status(headers={ADMIN_KEY_GRPC_HEADER: gw.admin_key}, as_json=True)
    finally:
        client.close()
    assert any(r.startswith("mslite_client_") for r in status.get("regions", {})), status


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_tritonclient_shared_memory_register_infer_unregister(gw, protocol):
    mod = grpcclient if protocol == "grpc" else httpclient
    key = {ADMIN_KEY_GRPC_HEADER: gw.admin_key} if protocol == "grpc" else {ADMIN_KEY_HEADER: gw.admin_key}
    client = mod.InferenceServerClient(_address(gw.grpc_url if protocol == "grpc" else gw.http_url))
    name = f"gw_test_{protocol}"
    handle = sysshm.create_shared_memory_region(name, "/" + name, 64)
    try:
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        sysshm.set_shared_memory_region(handle, [x])
        client.register_system_shared_memory(name, "/" + name, 64, headers=key)
        item = mod.InferInput("x", [2, 4], "FP32")
        item.set_shared_memory(name, 32)
        # naming a region in a request needs the key too, through the gateway (Triton itself does not ask)
        np.testing.assert_array_equal(client.infer("tiny", [item], headers=key).as_numpy("y"), x * 2 + 1)
        item = mod.InferInput("x", [2, 4], "FP32")
        item.set_shared_memory(name, 16)  # shape says 32 bytes
        with pytest.raises(InferenceServerException, match="byte size mismatch"):
            client.infer("tiny", [item], headers=key)
    finally:
        try:
            _unregister_when_released(client, name, key)
        finally:
            sysshm.destroy_shared_memory_region(handle)
            client.close()


def _unregister_when_released(client, name: str, key: dict[str, str]) -> None:
    """Unregister `name`; Triton refuses while a request that named it is still being released, after its answer
    has gone out (seen once: "it is currently in use" right after the failed infer above)."""
    deadline = time.monotonic() + 5
    while True:
        try:
            client.unregister_system_shared_memory(name, headers=key)
            return
        except InferenceServerException as e:
            if "currently in use" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _http(
    url: str, path: str, body: bytes | None, headers: dict[str, str], method: str = "POST"
) -> tuple[int, bytes, str | None]:
    host, port = _address(url).rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read(), resp.getheader("Inference-Header-Content-Length")
    finally:
        conn.close()


def test_answers_equal_tritons_own_byte_for_byte(gw):
    x = np.arange(12, dtype=np.float32)
    header = json.dumps(
        {
            "inputs": [{"name": "x", "shape": [3, 4], "datatype": "FP32", "parameters": {"binary_data_size": 48}}],
            "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
        }
    ).encode()
    requests = [
        (header + x.tobytes(), {"Inference-Header-Content-Length": str(len(header))}),
        (json.dumps({"inputs": [{"name": "x", "shape": [3, 4], "datatype": "FP32", "data": x.tolist()}]}).encode(), {}),
        (b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[[NaN,Infinity,-Infinity,1e-40]]}]}', {}),
    ]
    for body, headers in requests:
        direct = _http(f"http://{http_address(gw)}", "/v2/models/tiny/infer", body, headers)
        fronted = _http(gw.http_url, "/v2/models/tiny/infer", body, headers)
        assert direct[0] == 200 and fronted == direct
    request = pb.ModelInferRequest(model_name="tiny")
    request.inputs.add(name="x", datatype="FP32", shape=[3, 4])
    request.raw_input_contents.append(x.tobytes())
    answers = []
    for url in (grpc_address(gw), _address(gw.grpc_url)):
        with grpc.insecure_channel(url) as channel:
            answers.append(
                channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")(request.SerializeToString())
            )
    assert answers[0] == answers[1]
    assert pb.ModelInferResponse.FromString(answers[1]).outputs[0].name == "y"


def test_server_metadata_lists_only_the_extensions_served(gw):
    unserved = {"sequence", "cuda_shared_memory"}  # docs/clients.md, "Not served"
    with urllib.request.urlopen(f"http://{http_address(gw)}/v2", timeout=30) as resp:
        tritons = json.loads(resp.read())["extensions"]
    assert unserved <= set(tritons)  # what Triton itself advertises
    served = [e for e in tritons if e not in unserved]
    with urllib.request.urlopen(gw.http_url + "/v2", timeout=30) as resp:
        assert resp.headers["Content-Type"] == "application/json"
        fronted = json.loads(resp.read())
    assert fronted["extensions"] == served and fronted["name"] == "triton"
    client = grpcclient.InferenceServerClient(_address(gw.grpc_url))
    try:
        for _ in range(3):  # one connection: each shortened answer gives Triton its window back
            metadata = client.get_server_metadata()
            assert list(metadata.extensions) == served and metadata.name == "triton"
        x = grpcclient.InferInput("x", [1, 4], "FP32")
        x.set_data_from_numpy(np.ones((1, 4), np.float32))
        assert client.infer("tiny", [x]).as_numpy("y").shape == (1, 4)
    finally:
        client.close()


def test_json_answers_say_they_are_json(gw):
    """A restricted API's 403 (the gateway's own: Triton restricts nothing behind it) and its other refusals."""
    calls = [
        ("POST", "/v2/repository/index", b"{}", 403),  # the key is missing
        ("GET", "/v2/systemsharedmemory/status", None, 403),
        ("GET", "/v2/models/nope", None, 404),
        ("POST", "/v2/models/tiny/infer", b"{not json", 400),  # the gateway's own check
    ]
    for method, path, body, status in calls:
        conn = http.client.HTTPConnection(*_address(gw.http_url).rsplit(":", 1), timeout=30)
        try:
            conn.request(method, path, body=body)
            resp = conn.getresponse()
            assert (resp.status, resp.getheader("Content-Type")) == (status, "application/json"), path
            assert isinstance(json.loads(resp.read())["error"], str)
        finally:
            conn.close()


def _raw_exchange(url: str, data: bytes, answers: int) -> list[bytes]:
    """Write `data` on a fresh socket, half-close, and return the status lines read until EOF."""
    host, port = _address(url).rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := s.recv(1 << 16):
            received += chunk
    lines = re.findall(rb"HTTP/1\.1 \d{3} [^\r\n]*", received)
    assert len(lines) == answers, received[:2000]
    return lines


def test_http_keep_alive_pipelining_chunked_and_expect(gw):
    body = b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'
    infer = b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    ready = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
    assert _raw_exchange(gw.http_url, infer + ready + infer, 3) == [b"HTTP/1.1 200 OK"] * 3
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:10], body[10:])) + b"0\r\n\r\n"
    head = b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert _raw_exchange(gw.http_url, head + chunked, 1) == [b"HTTP/1.1 200 OK"]
    expect = infer.replace(b"Host: x\r\n", b"Host: x\r\nExpect: 100-continue\r\n")
    assert _raw_exchange(gw.http_url, expect, 2) == [b"HTTP/1.1 100 Continue", b"HTTP/1.1 200 OK"]


def test_http_gzip_bodies_are_checked_decompressed(gw):
    client = httpclient.InferenceServerClient(_address(gw.http_url))
    try:
        x = np.ones((2, 4), np.float32)
        item = httpclient.InferInput("x", [2, 4], "FP32")
        item.set_data_from_numpy(x)
        result = client.infer("tiny", [item], request_compression_algorithm="gzip")
        np.testing.assert_array_equal(result.as_numpy("y"), x * 2 + 1)
    finally:
        client.close()
    bomb = gzip.compress(b'{"inputs":[' + b" " * (CAP + 1024) + b"]}")
    status, answer, _ = _http(gw.http_url, "/v2/models/tiny/infer", bomb, {"Content-Encoding": "gzip"})
    assert status == 413 and b"decompressed body" in answer, (status, answer)


def test_size_cap_on_both_protocols(gw):
    big = np.zeros((1, CAP // 4 + 1024), np.float32)
    status, answer, _ = _http(gw.http_url, "/v2/models/tiny/infer", big.tobytes(), {})
    assert status == 413 and str(CAP).encode() in answer, (status, answer)
    header = json.dumps({"inputs": [{"name": "x", "shape": [1 << 20, 1 << 20], "datatype": "FP32", "data": [1]}]})
    status, answer, _ = _http(gw.http_url, "/v2/models/tiny/infer", header.encode(), {})
    assert status == 413 and b"over this server's limit" in answer, (status, answer)
    client = grpcclient.InferenceServerClient(_address(gw.grpc_url))
    try:
        item = grpcclient.InferInput("x", list(big.shape), "FP32")
        item.set_data_from_numpy(big)
        with pytest.raises(InferenceServerException) as info:
            client.infer("tiny", [item])
        assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        assert client.is_server_live()
    finally:
        client.close()


def test_grpc_garbage_is_invalid(gw):
    """Bytes that are no ModelInferRequest: INVALID_ARGUMENT naming the type (streams: test_gateway_streaming.py)."""
    with grpc.insecure_channel(_address(gw.grpc_url)) as channel:
        infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with pytest.raises(grpc.RpcError) as info:
            infer(b"\xff\xfe not a protobuf", timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "ModelInferRequest" in info.value.details()


def test_http_requests_wait_out_a_server_restart(gw):
    """Triton restarting (what the supervisor does when a worker dies): HTTP requests wait instead of failing."""
    body = b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'
    statuses: list[int] = []
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            statuses.append(_http(gw.http_url, "/v2/models/tiny/infer", body, {})[0])

    thread = threading.Thread(target=hammer)
    thread.start()
    try:
        eventually(lambda: len(statuses) >= 5, "answers before the restart")
        before = len(statuses)
        gw.restart()
        eventually(lambda: len(statuses) >= before + 5, "answers after the restart")
    finally:
        stop.set()
        thread.join()
    assert len(statuses) > 10 and set(statuses) == {200}, statuses


def test_triton_unreachable_is_503_and_unavailable(tmp_path):
    http_port, grpc_port = free_port(), free_port()
    options = GatewayOptions(
        http_port=http_port,
        grpc_port=grpc_port,
        upstream_http=f"127.0.0.1:{free_port()}",  # nothing listens there
        upstream_grpc=f"127.0.0.1:{free_port()}",
        grace_s=1,
        limits=GatewayLimits(upstream_retry_s=0.5),
    )
    gateway = GatewayProcess(options, log_path=tmp_path / "gateway.log")
    gateway.start()
    try:
        status, answer, _ = _http(f"http://127.0.0.1:{http_port}", "/v2/health/ready", None, {}, "GET")
        assert status == 503 and b"not reachable" in answer
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        with pytest.raises(InferenceServerException) as info:
            client.is_server_live(client_timeout=5)
        assert info.value.status() == "StatusCode.UNAVAILABLE"
        client.close()
    finally:
        pid = gateway.pid
        gateway.stop()
    assert not gateway.is_running()

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    eventually(gone, f"the gateway (pid {pid}) to be gone", 10)


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _gateway(tmp_path: Path, upstream_http: str, upstream_grpc: str, **limits: float) -> GatewayProcess:
    options = GatewayOptions(
        http_port=free_port(),
        grpc_port=free_port(),
        upstream_http=upstream_http,
        upstream_grpc=upstream_grpc,
        grace_s=1,
        limits=GatewayLimits(**{"upstream_retry_s": 20, **limits}),
    )
    gateway = GatewayProcess(options, log_path=tmp_path / "gateway.log")
    gateway.start()
    return gateway


def test_admission_control_refuses_with_service_deny(gw, tmp_path):
    """Beyond the in-flight bounds, on both protocols together: 503 / UNAVAILABLE kLiteServiceDeny."""
    dead = f"127.0.0.1:{free_port()}"  # nothing listens: an HTTP request stays in flight (retried) for 20 s
    live_grpc = gw.triton_endpoints.grpc_address
    gateway = _gateway(
        tmp_path, dead, live_grpc, max_inflight_per_model=1, max_inflight_bytes=1 << 20, body_stall_timeout_s=120
    )
    http_port, grpc_port = gateway.options.http_port, gateway.options.grpc_port
    body = b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'
    infer = b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    held: list[socket.socket] = []
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    model_infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")

    def deny_seen(request: bytes) -> bytes:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with socket.create_connection(("127.0.0.1", http_port), timeout=30) as s:
                s.sendall(request)
                answer = s.recv(1 << 16)
            if answer.startswith(b"HTTP/1.1 503") and b"kLiteServiceDeny" in answer:
                return answer
            time.sleep(0.1)
        raise AssertionError(f"no kLiteServiceDeny: {answer[:300]!r}")

    def grpc_refusal(model: str, floats: int) -> grpc.RpcError:
        request = pb.ModelInferRequest(model_name=model)
        request.inputs.add(name="x", datatype="FP32", shape=[floats // 4, 4])
        request.raw_input_contents.append(bytes(4 * floats))
        with pytest.raises(grpc.RpcError) as info:
            model_infer(request.SerializeToString(), timeout=30)
        return info.value

    try:
        held.append(socket.create_connection(("127.0.0.1", http_port), timeout=30))
        held[-1].sendall(infer)  # in flight for model tiny until Triton answers (never: its HTTP port is dead)
        assert b"requests in flight" in deny_seen(infer)  # per model, HTTP
        error = grpc_refusal("tiny", 4)  # the same model over gRPC: the bound is the model's, not the protocol's
        assert error.code() == grpc.StatusCode.UNAVAILABLE and "kLiteServiceDeny" in error.details()
        # what a client of the library sees: ServiceDenyError, not retried as a server outage
        mapped = classify(InferenceServerException(error.details(), "StatusCode.UNAVAILABLE"), "grpc://x")
        assert isinstance(mapped, ServiceDenyError), mapped
        # 900 KiB of a body that came (the rest not sent): counted in flight as they arrive, across connections
        held.append(socket.create_connection(("127.0.0.1", http_port), timeout=30))
        head = b"POST /v2/models/other/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (1000 << 10)
        held[-1].sendall(head + b"x" * (900 << 10))
        # every byte read (so counted) before the next request comes: read interleaved with it, the held body's
        # last piece could be the one over the budget, and the held request the one refused
        wait_until_taken(held[-1])
        big = b"POST /v2/models/another/infer HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (200 << 10)
        assert b"MiB" in deny_seen(big + b"x" * (200 << 10))
        error = grpc_refusal("another", 51200)  # 200 KiB over gRPC: the same bytes budget
        assert error.code() == grpc.StatusCode.UNAVAILABLE and "MiB" in error.details()
        for s in held:
            s.close()
        # once they are gone (the held HTTP request gives up after its 20 s of retries), the same call is served
        request = pb.ModelInferRequest(model_name="tiny")
        request.inputs.add(name="x", datatype="FP32", shape=[1, 4])
        request.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
        deadline = time.monotonic() + 60
        while True:
            try:
                answer = pb.ModelInferResponse.FromString(model_infer(request.SerializeToString(), timeout=30))
                break
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.UNAVAILABLE and time.monotonic() < deadline, e
                time.sleep(0.2)
        assert np.frombuffer(answer.raw_output_contents[0], np.float32).tolist() == [1, 3, 5, 7]
    finally:
        for s in held:
            s.close()
        channel.close()
        gateway.stop()


def test_grpc_refusals_under_load_reach_the_client_and_nothing_else(gw, files, tmp_path):
    """Multi-frame gRPC requests refused by admission while others are served: the refused get kLiteServiceDeny,
    never Triton's answer to the call the gateway reset ("Unable to parse request" reached clients once)."""
    model = mslite.Model()
    model.build_from_file(str(files / "variable_seq.onnx"), mslite.ModelType.MINDIR, _context(gw.grpc_url))
    stats_client = grpcclient.InferenceServerClient(_address(gw.grpc_url))
    try:
        stats = stats_client.get_inference_statistics(as_json=True)["model_stats"]
    finally:
        stats_client.close()
    name = next(m["name"] for m in stats if m["name"].startswith("variable_seq"))
    gateway = _gateway(
        tmp_path, gw.triton_endpoints.http_address, gw.triton_endpoints.grpc_address, max_inflight_per_model=2
    )
    request = pb.ModelInferRequest(model_name=name)
    request.inputs.add(name="tokens", datatype="FP32", shape=[1, 65536])  # 256 KiB: many DATA frames
    request.raw_input_contents.append(np.ones(65536, dtype=np.float32).tobytes())
    data = request.SerializeToString()
    outcomes: dict[str, int] = {}
    lock = threading.Lock()
    stop = time.monotonic() + 6
    channel = grpc.insecure_channel(f"127.0.0.1:{gateway.options.grpc_port}")
    call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")

    def client() -> None:
        while time.monotonic() < stop:
            try:
                call(data, timeout=30)
                key = "ok"
            except grpc.RpcError as e:
                key = "deny" if "kLiteServiceDeny" in (e.details() or "") else f"{e.code()}: {e.details()}"
            with lock:
                outcomes[key] = outcomes.get(key, 0) + 1

    threads = [threading.Thread(target=client) for _ in range(12)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        channel.close()
        gateway.stop()
    assert outcomes.get("ok", 0) > 0 and outcomes.get("deny", 0) > 0, outcomes
    assert set(outcomes) == {"ok", "deny"}, outcomes


def test_tiny_chunk_flood_keeps_the_gateway_small_and_serving(gw, tmp_path):
    """32 MiB bodies in 2-byte chunks on 4 connections: gateway RSS < 512 MiB, other clients served."""
    gateway = _gateway(tmp_path, gw.triton_endpoints.http_address, gw.triton_endpoints.grpc_address)
    http_port = gateway.options.http_port
    assert gateway.pid is not None
    block = b"2\r\nab\r\n" * 50_000  # 100 KB of body per send
    outcomes: list[bytes] = []
    stop = threading.Event()

    def flood() -> None:
        with socket.create_connection(("127.0.0.1", http_port), timeout=30) as s:
            s.sendall(b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            sent = 0
            try:
                while sent < 32 << 20 and not stop.is_set():
                    s.sendall(block)
                    sent += 100_000
                s.sendall(b"0\r\n\r\n")
            except OSError:
                pass  # the gateway answered and closed
            try:
                outcomes.append(s.recv(1 << 16))
            except OSError as e:
                outcomes.append(repr(e).encode())

    threads = [threading.Thread(target=flood) for _ in range(4)]
    for t in threads:
        t.start()
    peak, served = 0.0, 0
    client = httpclient.InferenceServerClient(_address(f"http://127.0.0.1:{http_port}"), network_timeout=30)
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    item = httpclient.InferInput("x", [1, 4], "FP32")
    item.set_data_from_numpy(x)
    deadline = time.monotonic() + 60
    try:
        while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
            peak = max(peak, _rss_mib(gateway.pid))
            assert client.infer("tiny", [item]).as_numpy("y") is not None
            served += 1
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
        client.close()
        gateway.stop()
    print(f"gateway RSS peak {peak:.0f} MiB, {served} probes served")
    assert peak < 512, f"gateway RSS peaked at {peak:.0f} MiB"
    assert served > 0
    assert len(outcomes) == 4 and all(o.startswith(b"HTTP/1.1 413") for o in outcomes), outcomes


# -- the checks alone (no server) ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("header", "problem"),
    [
        (b'{"inputs":[{"name":"x","shape":[1,3],"datatype":"FP32","data":[[1],[2,3]]}]}', "ragged"),
        (b'{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1,2,3,4]]}]}', "nested as [1, 4]"),
        (b'{"inputs":[{"name":"x","shape":[1,4],"shape":[9,4],"datatype":"FP32","data":[1,2,3,4]}]}', "twice"),
        (b'{"inputs":[{"name":"x","shape":[1,1],"datatype":"FP32","data":[1e999]}]}', "out of range"),
        (b'{"inputs":[{"name":"x","shape":[1,1],"datatype":"INT8","data":[300]}]}', "out of range for INT8"),
        (b'{"inputs":[{"name":"x","shape":[1,2],"datatype":"INT32","data":[1,true]}]}', "bool"),
        (b'{"inputs":[{"name":"x","shape":[4294967297,4],"datatype":"FP32","data":[1]}]}', "dim 0"),
        (
            b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}],"parameters":{"priority":-1}}',
            "priority",
        ),
        (b'{"inputs":[{"name":"x\xff","shape":[1],"datatype":"FP32","data":[1]}]}', "UTF-8"),
    ],
)
def test_json_checks_name_the_problem(header, problem):
    from mslite_gateway.http.kserve_json import check_infer_request
    from mslite_gateway.rules import Refusal

    with pytest.raises(Refusal, match=re.escape(problem)):
        check_infer_request(header, "m", payload=None, cap=CAP)


def test_json_checks_pass_what_triton_serves():
    from mslite_gateway.http.kserve_json import check_infer_request

    for header in (
        b'{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[NaN,Infinity],[-Infinity,1]]}]}',
        b'{"inputs":[{"name":"s","shape":[2],"datatype":"BYTES","data":["a","bc"]}],"id":"7"}',
        b'{"inputs":[{"name":"b","shape":[0,3],"datatype":"BOOL","data":[]}],"outputs":[{"name":"y"}]}',
    ):
        check_infer_request(header, "m", payload=None, cap=CAP)
    binary = b'{"inputs":[{"name":"b","shape":[3],"datatype":"BOOL","parameters":{"binary_data_size":3}}]}'
    check_infer_request(binary, "m", payload=memoryview(b"\x00\x01\x01"), cap=CAP)
    with pytest.raises(Exception, match="BOOL data holds bytes other than 0 and 1"):
        check_infer_request(binary, "m", payload=memoryview(b"\x00\x02\x01"), cap=CAP)


def test_grpc_scan_accepts_exactly_what_protobuf_parses():
    """The fast path (tensor bytes set aside, no copy) and a full parse agree on every corruption of a request."""
    from mslite_gateway.grpc.checks import check_model_infer
    from mslite_gateway.rules import Refusal

    request = pb.ModelInferRequest(model_name="tiny", model_version="1")
    request.inputs.add(name="x", datatype="FP32", shape=[2, 4])
    request.inputs.add(name="m", datatype="BOOL", shape=[2])
    request.raw_input_contents.extend([bytes(32), b"\x01\x00"])
    good = request.SerializeToString()
    check_model_infer(good, CAP)
    rng = np.random.default_rng(1)
    for _ in range(2000):
        data = bytearray(good)
        for k in rng.integers(0, len(data), int(rng.integers(1, 4))):
            data[int(k)] = int(rng.integers(256))
        data = data[: int(rng.integers(1, len(data) + 1))] if rng.random() < 0.3 else data
        try:
            pb.ModelInferRequest.FromString(bytes(data))
            parses = True
        except Exception:
            parses = False
        try:
            check_model_infer(bytes(data), CAP)
            unparsable = False
        except Refusal as e:
            unparsable = "not a valid ModelInferRequest" in e.message
        assert unparsable == (not parses), bytes(data)
