"""The gateway against clients that attack others or Triton itself, and where it answers in Triton's words.

- Naming a shared-memory region in a request needs the admin key: an attacker without it cannot read or
  write a victim client's regions (0 wrong answers for the victim), and cannot tell which regions exist.
- Deeply nested JSON on any route that parses a body is refused before Triton's reader sees it, and
  `/generate` counts against the per-model in-flight limit as `/infer` does.
- A gzip body that inflates to tens of MiB is checked off the event loop: other clients are served meanwhile.
- The gateway's staging regions survive a keyed unregister-all, and cannot be unregistered by name.
- Refusals Triton itself would give come in Triton's words and status.
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

import mslite_triton as mslite
from mslite_contract.gateway_options import GatewayLimits, GatewayOptions
from mslite_contract.protocol import (
    ADMIN_KEY_GRPC_HEADER,
    ADMIN_KEY_HEADER,
    CLIENT_REGION_PREFIX,
    GATEWAY_REGION_PREFIX,
)
from mslite_server import LocalServer, ServerConfig
from mslite_server.gateway_process import GatewayProcess
from tests.support.model_zoo import difference
from tests.support.processes import free_port
from tests.support.repository import GEN, MINIMAL, add_model
from tests.support.triton_direct import grpc_address, http_port

pytestmark = pytest.mark.integration

T = 75000  # floats per input of `pair`: 2 x 300 KB, a 600 KB request
SERVICE = "/inference.GRPCInferenceService"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    repo = tmp_path_factory.mktemp("security_repo")
    add_model(repo, "pair", difference(), MINIMAL)
    add_model(repo, "tiny", GEN.build_tiny(), MINIMAL)
    config = ServerConfig(model_repository=repo, gateway=True, supervise=False, exit_timeout_s=5)
    with LocalServer(config) as server:
        yield server


@pytest.fixture(scope="module")
def pair_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("security_files") / "pair.onnx"
    path.write_bytes(difference().SerializeToString())
    return path


def _http(port: int, path: str, body: bytes | None, headers: dict[str, str] | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST" if body is not None else "GET", path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")
    finally:
        conn.close()


def _error(answer: str) -> str:
    return str(json.loads(answer)["error"])


def _grpc_call(to: int | str, method: str, message: bytes, metadata: tuple = ()) -> tuple[grpc.StatusCode, str]:
    """One call to loopback port `to`, or to the gRPC address `to` (tritonserver's own socket)."""
    with grpc.insecure_channel(to if isinstance(to, str) else f"127.0.0.1:{to}") as channel:
        try:
            channel.unary_unary(f"{SERVICE}/{method}")(message, metadata=metadata, timeout=30)
        except grpc.RpcError as e:
            return e.code(), e.details() or ""
    return grpc.StatusCode.OK, ""


def _tiny_json(**params: object) -> dict:
    item: dict = {"name": "x", "datatype": "FP32", "shape": [1, 4]}
    if params:
        item["parameters"] = params
    else:
        item["data"] = [1, 2, 3, 4]
    return item


# -- naming another client's regions -----------------------------------------------------------------------
def test_a_victim_gets_only_right_answers_while_an_attacker_names_its_regions(srv, pair_file):
    ctx = mslite.Context()
    ctx.server_url = srv.http_url
    ctx.cpu.thread_num = 1
    ctx.parallel.workers_num = 1
    model = mslite.Model()
    model.build_from_file(str(pair_file), mslite.ModelType.MINDIR, ctx)
    served = model.served_name
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 1, T), dtype=np.float32)
    np.testing.assert_array_equal(model.predict([a, b])[0].get_data_to_numpy(), a - b)
    prefix = f"{CLIENT_REGION_PREFIX}{os.getpid()}_"
    regions = sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix))
    assert regions, "the victim's inputs did not go through shared memory"
    stop = threading.Event()
    refusals: list[tuple[str, str]] = []
    served_to_attacker: list[str] = []

    def attack() -> None:
        http_client = httpclient.InferenceServerClient(f"127.0.0.1:{srv.http_port}")
        grpc_client = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
        try:
            while not stop.is_set():
                for client, mod in ((http_client, httpclient), (grpc_client, grpcclient)):
                    for region in (*regions, f"{prefix}999"):  # the victim's, and one that does not exist
                        for where in ("input", "output"):
                            items = [mod.InferInput(n, [1, T], "FP32") for n in ("a", "b")]
                            items[1].set_data_from_numpy(b)
                            outputs = [mod.InferRequestedOutput("d")]
                            if where == "input":  # reading the victim's tensor
                                items[0].set_shared_memory(region, 4 * T)
                            else:  # writing our answer over the victim's input
                                items[0].set_data_from_numpy(np.full((1, T), 7, np.float32))
                                outputs[0].set_shared_memory(region, 4 * T)
                            try:
                                client.infer(served, items, outputs=outputs)
                                served_to_attacker.append(f"{where} {region}")
                            except InferenceServerException as e:
                                refusals.append((str(e.status()), e.message()))
        finally:
            http_client.close()
            grpc_client.close()

    attacker = threading.Thread(target=attack)
    attacker.start()
    wrong = 0
    try:
        for i in range(40):
            a, b = np.random.default_rng(100 + i).standard_normal((2, 1, T), dtype=np.float32)
            got = model.predict([a, b])[0].get_data_to_numpy()
            wrong += not np.array_equal(got, a - b)
    finally:
        stop.set()
        attacker.join()
    assert wrong == 0
    assert not served_to_attacker
    assert len(refusals) >= 8
    assert {status for status, _ in refusals} <= {"403", "StatusCode.PERMISSION_DENIED"}, set(refusals)
    # the same words for a region that exists and one that does not
    texts = {message.split(": ", 1)[1] for _, message in refusals}  # less the tensor's name
    assert len(texts) == 1, texts
    assert "needs the admin key" in refusals[0][1]


def test_a_keyed_request_may_name_a_region(srv):
    """The key opens it again: Triton's own answer for a region it does not know."""
    body = json.dumps({"inputs": [_tiny_json(shared_memory_region="nope", shared_memory_byte_size=16)]}).encode()
    status, answer = _http(srv.http_port, "/v2/models/tiny/infer", body, {ADMIN_KEY_HEADER: srv.admin_key or ""})
    assert (status, _error(answer)) == (404, "Unable to find shared memory region: 'nope'")
    status, answer = _http(srv.http_port, "/v2/models/tiny/infer", body, {ADMIN_KEY_HEADER: "not-the-key"})
    assert status == 403 and "needs the admin key" in _error(answer)


# -- deep JSON ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "path",
    [
        "/v2/models/tiny/generate",
        "/v2/models/tiny/generate_stream",
        "/v2/models/tiny/versions/1/generate",
        "/v2/models/tiny/infer",
        "/v2/repository/models/tiny/load",
        "/v2/repository/index",
        "/v2/logging",
        "/v2/systemsharedmemory/region/x/register",
    ],
)
def test_deep_json_on_any_route_leaves_tritonserver_running(srv, path):
    assert srv.process is not None
    pid = srv.process.pid
    deep = b'{"x":' + b"[" * 120_000 + b"]" * 120_000 + b"}"  # checked on the event loop; zipped, off it
    keyed = {ADMIN_KEY_HEADER: srv.admin_key or ""}
    for headers in ({}, keyed):  # every caller: a keyless one of a restricted route never reaches the check
        restricted = not headers and not path.startswith("/v2/models/")
        status, answer = _http(srv.http_port, path, deep, headers)
        if restricted:
            assert status == 403 and "needs the admin key" in _error(answer), (status, answer)
            continue
        assert (status, _error(answer)) == (400, "request JSON is nested too deeply"), (status, answer)
        zipped = {**headers, "Content-Encoding": "gzip"}
        status, answer = _http(srv.http_port, path, gzip.compress(deep), zipped)
        assert (status, _error(answer)) == (400, "request JSON is nested too deeply"), (status, answer)
    assert srv.process.pid == pid and srv.process.poll() is None
    status, answer = _http(srv.http_port, "/v2/models/tiny/generate", b'{"x": [1, 2, 3, 4]}')
    assert status == 200 and json.loads(answer)["y"] == [3.0, 5.0, 7.0, 9.0]


def test_generate_counts_against_the_in_flight_limit(srv, tmp_path):
    """A second gateway on the same tritonserver, one request per model in flight: generate is refused beyond it."""
    options = GatewayOptions(
        http_port=free_port(),
        grpc_port=free_port(),
        upstream_http=srv.triton_endpoints.http_address,
        upstream_grpc=srv.triton_endpoints.grpc_address,
        grace_s=1,
        limits=GatewayLimits(max_inflight_per_model=1),
    )
    gateway = GatewayProcess(options, log_path=tmp_path / "gateway.log", admin_key=srv.admin_key)
    gateway.start()
    port = options.http_port
    answers: list[tuple[int, str]] = []
    deadline = time.monotonic() + 3

    def flood() -> None:
        while time.monotonic() < deadline:
            answers.append(_http(port, "/v2/models/tiny/generate", b'{"x": [1, 2, 3, 4]}'))

    threads = [threading.Thread(target=flood) for _ in range(6)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        gateway.stop()
    statuses = {status for status, _ in answers}
    assert statuses == {200, 503}, answers[:5]
    denied = next(answer for status, answer in answers if status == 503)
    assert "kLiteServiceDeny" in denied and "'tiny'" in denied


# -- a gzip bomb off the event loop ----------------------------------------------------------------------------
def test_other_clients_are_served_while_a_gzip_bomb_is_checked(srv):
    values = 30 << 18  # 30 MiB of JSON: "0.0," per value
    text = b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[' + b"0.0," * (values - 1) + b"0.0]}]}"
    bomb = gzip.compress(text)
    assert len(bomb) < 200_000
    answers: list[tuple[float, float, int, str]] = []

    def send_bomb() -> None:
        start = time.monotonic()
        status, answer = _http(srv.http_port, "/v2/models/tiny/infer", bomb, {"Content-Encoding": "gzip"})
        answers.append((start, time.monotonic(), status, answer))

    bombs = [threading.Thread(target=send_bomb) for _ in range(2)]
    small = json.dumps({"inputs": [_tiny_json()]}).encode()
    latencies: list[tuple[float, float]] = []
    for thread in bombs:
        thread.start()
    try:
        while any(t.is_alive() for t in bombs):
            start = time.monotonic()
            status, answer = _http(srv.http_port, "/v2/models/tiny/infer", small)
            assert status == 200, answer
            latencies.append((start, time.monotonic() - start))
            time.sleep(0.02)
    finally:
        for thread in bombs:
            thread.join()
    for _, _, status, answer in answers:  # checked in full: 7.8 M values for a [1, 4] input
        assert status == 400 and "needs 4" in _error(answer), answer
    first, last = min(a[0] for a in answers), max(a[1] for a in answers)
    during = [lat for start, lat in latencies if first <= start <= last]
    assert len(during) >= 5, (latencies, first, last)
    assert max(during) < 2.0, during  # before: each bomb held the loop for its whole check (10-15 s here)


# -- the gateway's own regions ---------------------------------------------------------------------------------
def _registered(server: LocalServer) -> list[str]:
    status, answer = _http(http_port(server), "/v2/systemsharedmemory/status", None, _key(server))
    assert status == 200, answer
    return [str(region["name"]) for region in json.loads(answer)]


def _key(server: LocalServer) -> dict[str, str]:
    return {ADMIN_KEY_HEADER: server.admin_key or ""}


def _infer_pair(protocol: str, server: LocalServer, seed: int) -> None:
    mod = grpcclient if protocol == "grpc" else httpclient
    client = mod.InferenceServerClient(f"127.0.0.1:{server.grpc_port if protocol == 'grpc' else server.http_port}")
    try:
        a, b = np.random.default_rng(seed).standard_normal((2, 1, T), dtype=np.float32)
        items = [mod.InferInput(name, [1, T], "FP32") for name in ("a", "b")]
        items[0].set_data_from_numpy(a)
        items[1].set_data_from_numpy(b)
        np.testing.assert_array_equal(client.infer("pair", items).as_numpy("d"), a - b)
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_staging_survives_a_keyed_unregister_all(srv, protocol):
    for seed in range(3):  # gRPC readies a region during a first request and stages from the next
        _infer_pair(protocol, srv, seed)
    assert srv.gateway is not None
    ours = f"{GATEWAY_REGION_PREFIX}{srv.gateway.pid}_"
    assert any(n.startswith(ours) for n in _registered(srv))
    if protocol == "http":
        status, answer = _http(srv.http_port, "/v2/systemsharedmemory/unregister", b"", _key(srv))
        assert status == 200, answer
    else:
        metadata = ((ADMIN_KEY_GRPC_HEADER, srv.admin_key or ""),)
        request = pb.SystemSharedMemoryUnregisterRequest().SerializeToString()
        assert _grpc_call(srv.grpc_port, "SystemSharedMemoryUnregister", request, metadata)[0] == grpc.StatusCode.OK
    for seed in range(3):
        start = time.monotonic()
        _infer_pair(protocol, srv, 10 + seed)  # 600 KB
        assert time.monotonic() - start < 2.0  # the bar: within 1 s (twice that here)
    assert any(n.startswith(ours) for n in _registered(srv)), "the gateway's regions were not registered again"


def test_the_gateways_regions_cannot_be_unregistered_or_taken_by_name(srv):
    _infer_pair("http", srv, 21)
    assert srv.gateway is not None
    ours = next(n for n in _registered(srv) if n.startswith(f"{GATEWAY_REGION_PREFIX}{srv.gateway.pid}_"))
    status, answer = _http(srv.http_port, f"/v2/systemsharedmemory/region/{ours}/unregister", b"", _key(srv))
    assert status == 400 and "is the server's own" in _error(answer), answer
    register = json.dumps({"key": "/elsewhere", "offset": 0, "byte_size": 64}).encode()
    status, answer = _http(srv.http_port, f"/v2/systemsharedmemory/region/{ours}/register", register, _key(srv))
    assert status == 400 and "is the server's own" in _error(answer), answer
    metadata = ((ADMIN_KEY_GRPC_HEADER, srv.admin_key or ""),)
    request = pb.SystemSharedMemoryUnregisterRequest(name=ours).SerializeToString()
    code, details = _grpc_call(srv.grpc_port, "SystemSharedMemoryUnregister", request, metadata)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "is the server's own" in details
    assert ours in _registered(srv)
    _infer_pair("grpc", srv, 22)


# -- Triton's words --------------------------------------------------------------------------------------------
def test_refusals_triton_gives_too_come_in_its_words(srv):
    request = pb.ModelInferRequest(model_name="tiny")
    item = request.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    item.contents.fp32_contents.extend([1, 2, 3, 4])
    request.raw_input_contents.append(np.ones(4, np.float32).tobytes())
    cases = [("contents and raw_input_contents", request.SerializeToString())]
    for version in ("abc", "-1", "99999999999999999999"):
        request = pb.ModelInferRequest(model_name="tiny", model_version=version)
        request.inputs.add(name="x", datatype="FP32", shape=[1, 4])
        request.raw_input_contents.append(np.ones(4, np.float32).tobytes())
        cases.append((f"version {version}", request.SerializeToString()))
    for what, message in cases:
        ours = _grpc_call(srv.grpc_port, "ModelInfer", message)
        theirs = _grpc_call(grpc_address(srv), "ModelInfer", message)
        assert theirs[0] != grpc.StatusCode.OK and ours == theirs, what
    ready = pb.ModelReadyRequest(name="tiny", version="abc").SerializeToString()
    assert _grpc_call(srv.grpc_port, "ModelReady", ready) == _grpc_call(grpc_address(srv), "ModelReady", ready)
    body = json.dumps({"inputs": [_tiny_json()]}).encode()
    for version in ("abc", "-1", "1.0", ""):
        path = f"/v2/models/tiny/versions/{version}/infer"
        ours_http = _http(srv.http_port, path, body)
        theirs_http = _http(http_port(srv), path, body)
        assert ours_http[0] == theirs_http[0] == 404 and _error(ours_http[1]) == _error(theirs_http[1]), version
    # what Triton would serve wrongly stays refused, in our words: gRPC reads '1abc' as version 1
    request = pb.ModelInferRequest(model_name="tiny", model_version="1abc")
    request.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    request.raw_input_contents.append(np.ones(4, np.float32).tobytes())
    code, details = _grpc_call(srv.grpc_port, "ModelInfer", request.SerializeToString())
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "would read it as version 1" in details
    request.model_version = "x" * 50_000  # echoed cut short: the answer must fit one HTTP/2 frame
    code, details = _grpc_call(srv.grpc_port, "ModelInfer", request.SerializeToString())
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("failed to get model version")


LONG_NAMES = {
    "component": "file:" + "A" * 256,  # over NAME_MAX: Triton 2.51 aborts on it
    "whole": "file:" + "/".join(["a" * 200] * 21),  # over PATH_MAX under Triton's temporary directory
}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_load_naming_a_path_triton_cannot_create_is_refused(srv, protocol):
    """For every caller, on both protocols, and in a gRPC load large enough to have streamed; a normal upload works."""
    assert srv.process is not None
    pid = srv.process.pid
    mod = grpcclient if protocol == "grpc" else httpclient
    client = mod.InferenceServerClient(f"127.0.0.1:{srv.grpc_port if protocol == 'grpc' else srv.http_port}")
    config = json.dumps({"backend": "mslite"})
    big = {"file:1/pad.bin": b"\0" * (2 << 20)}  # over the 1 MiB a load override is read within
    keyed = {ADMIN_KEY_GRPC_HEADER if protocol == "grpc" else ADMIN_KEY_HEADER: srv.admin_key or ""}
    try:
        for headers in (keyed, {}):  # keyed first: without the check, Triton itself would take it, and abort
            # without the key, refused before the path is looked at
            expected = "^.*Invalid file path" if headers else "^.*needs the admin key"
            for name in LONG_NAMES.values():
                for extra in ({}, big):
                    with pytest.raises(InferenceServerException, match=expected) as refused:
                        client.load_model("longpath", config=config, files={name: b"a", **extra}, headers=headers)
                    assert "/tmp" not in str(refused.value) and "AAAA" not in str(refused.value)
        assert srv.process.pid == pid and srv.process.poll() is None
        model = {"file:1/model.onnx": GEN.build_tiny().SerializeToString(), **big}
        # a gRPC load is held whole to be checked: an override without a backend gets ours at any size
        upload_config = "{}" if protocol == "grpc" else config
        client.load_model("longpath", config=upload_config, files=model, headers=keyed)
        assert client.is_model_ready("longpath")
        client.unload_model("longpath", headers=keyed)
    finally:
        client.close()
    assert srv.process.pid == pid and srv.process.poll() is None
