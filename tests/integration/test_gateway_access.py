"""The gateway is the one place the admin key is checked behind `serve`: default-deny, on both protocols.

Tritonserver runs without its restricted-API flags behind the gateway (so the key is on no command line), so
every 403 here is the gateway's own: every restricted route and method, in every spelling, without the key
or with a wrong one, is refused; the open ones (inference, health, metadata, statistics) answer anyone.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import mslite_triton as mslite
from mslite_contract import settings
from mslite_contract.protocol import ADMIN_KEY_GRPC_HEADER, ADMIN_KEY_HEADER
from mslite_server import LocalServer, ServerConfig
from mslite_server.ports import pick_ports
from mslite_triton.errors import PermissionDeniedError
from tests.support.repository import GEN, add_model

pytestmark = pytest.mark.integration

# every restricted HTTP route (no model of these names exists: a relayed one would change nothing)
RESTRICTED_HTTP = [
    ("POST", "/v2/repository/index"),
    ("POST", "/v2/repository/models/no_such_model/load"),
    ("POST", "/v2/repository/models/no_such_model/unload"),
    ("GET", "/v2/systemsharedmemory/status"),
    ("GET", "/v2/systemsharedmemory/region/no_such_region/status"),
    ("POST", "/v2/systemsharedmemory/region/no_such_region/register"),
    ("POST", "/v2/systemsharedmemory/region/no_such_region/unregister"),
    ("POST", "/v2/systemsharedmemory/unregister"),
    ("GET", "/v2/cudasharedmemory/status"),
    ("POST", "/v2/cudasharedmemory/region/no_such_region/register"),
    ("POST", "/v2/cudasharedmemory/unregister"),
    ("GET", "/v2/logging"),
    ("POST", "/v2/logging"),
    ("GET", "/v2/trace/setting"),
    ("POST", "/v2/trace/setting"),
    ("GET", "/v2/models/tiny/trace/setting"),
    ("POST", "/v2/models/tiny/trace/setting"),
    # an open route with another method
    ("PUT", "/v2/models/tiny/infer"),
    ("DELETE", "/v2/models/tiny"),
    ("OPTIONS", "/v2/health/live"),
    ("POST", "/v2/models/tiny/config"),
]
SERVICE = "inference.GRPCInferenceService"
RESTRICTED_GRPC = [
    "RepositoryIndex",
    "RepositoryModelLoad",
    "RepositoryModelUnload",
    "SystemSharedMemoryStatus",
    "SystemSharedMemoryRegister",
    "SystemSharedMemoryUnregister",
    "CudaSharedMemoryStatus",
    "CudaSharedMemoryRegister",
    "CudaSharedMemoryUnregister",
    "TraceSetting",
    "LogSettings",
]
NO_KEY = re.compile(rf"needs the admin key.*{settings.ADMIN_KEY_ENV}.*key file")
WRONG_KEY = re.compile(rf"the admin key sent .* is not this server's key.*{settings.ADMIN_KEY_ENV}.*key file")


def spellings(path: str) -> list[str]:
    """`path` as sent, and spelled otherwise: a doubled slash, an escaped one, a trailing one, a dot segment."""
    head, _, tail = path[1:].partition("/")
    return [
        path,
        "/" + path,
        f"/{head}//{tail}",
        f"/{head}%2F{tail}",
        f"/{head}%2f{tail}",
        path + "/",
        f"/{head}/./{tail}",
        f"/{head}/x/../{tail}",
    ]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    repo = tmp_path_factory.mktemp("access_repo")
    add_model(repo, "tiny", GEN.build_tiny())
    config = ServerConfig(model_repository=repo, gateway=True, exit_timeout_s=5, startup_timeout_s=240)
    with LocalServer(config) as server:
        yield server


def _http(srv: LocalServer, method: str, target: str, headers: dict[str, str]) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.http_port, timeout=60)
    try:
        body = b"{}" if method in ("POST", "PUT") else None
        conn.request(method, target, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read().decode("latin-1")
    finally:
        conn.close()


def test_tritonserver_runs_without_the_key_on_its_command_line(srv):
    assert srv.admin_key and srv.process is not None
    cmdline = Path(f"/proc/{srv.process.pid}/cmdline").read_bytes()
    assert b"restricted" not in cmdline and srv.admin_key.encode() not in cmdline


def test_every_restricted_http_route_in_every_spelling_is_refused_by_the_gateway(srv):
    seen = 0
    for method, path in RESTRICTED_HTTP:
        for target in spellings(path):
            status, body = _http(srv, method, target, {})
            assert status == 403 and NO_KEY.search(body), (method, target, status, body[:300])
            status, body = _http(srv, method, target, {ADMIN_KEY_HEADER: "not-the-key"})
            assert status == 403 and WRONG_KEY.search(body), (method, target, status, body[:300])
            seen += 1
    assert seen == len(RESTRICTED_HTTP) * 8
    # with the key, relayed: Triton itself restricts nothing behind the gateway
    status, body = _http(srv, "POST", "/v2/repository/index", {ADMIN_KEY_HEADER: srv.admin_key})
    assert status == 200 and '"tiny"' in body, body[:300]


def test_open_http_routes_answer_without_the_key(srv):
    for target in ("/v2", "/v2/health/live", "/v2/health/ready", "/v2/models/tiny", "/v2/models/tiny/ready",
                   "/v2/models/tiny/config", "/v2/models/tiny/stats", "/v2/models/stats",
                   "/v2/models/tiny/versions/1/stats?x=1"):  # fmt: skip
        status, body = _http(srv, "GET", target, {})
        assert status == 200, (target, status, body[:300])
    conn = http.client.HTTPConnection("127.0.0.1", srv.http_port, timeout=60)
    try:
        body = b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}'
        conn.request("POST", "/v2/models/tiny/infer", body=body, headers={ADMIN_KEY_HEADER: "not-the-key"})
        assert conn.getresponse().status == 200  # a wrong key on an open route does not matter
    finally:
        conn.close()


def _grpc_status(channel: grpc.Channel, path: str, metadata: list[tuple[str, str]]) -> tuple[grpc.StatusCode, str]:
    call = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
    try:
        call(b"", metadata=metadata, timeout=60)
    except grpc.RpcError as e:
        return e.code(), e.details() or ""
    return grpc.StatusCode.OK, ""


def test_every_restricted_grpc_method_in_every_spelling_is_refused_by_the_gateway(srv):
    with grpc.insecure_channel(f"127.0.0.1:{srv.grpc_port}") as channel:
        for name in RESTRICTED_GRPC:
            for path in spellings(f"/{SERVICE}/{name}"):
                code, details = _grpc_status(channel, path, [])
                assert code == grpc.StatusCode.PERMISSION_DENIED and NO_KEY.search(details), (path, code, details)
                code, details = _grpc_status(channel, path, [(ADMIN_KEY_GRPC_HEADER, "not-the-key")])
                assert code == grpc.StatusCode.PERMISSION_DENIED and WRONG_KEY.search(details), (path, code, details)
        # with the key, relayed: Triton answers (an empty repository-index request lists the models)
        code, _ = _grpc_status(channel, f"/{SERVICE}/RepositoryIndex", [(ADMIN_KEY_GRPC_HEADER, srv.admin_key)])
        assert code == grpc.StatusCode.OK
        for name in ("ServerLive", "ServerReady", "ServerMetadata"):  # open (empty requests are valid ones)
            assert _grpc_status(channel, f"/{SERVICE}/{name}", [])[0] == grpc.StatusCode.OK, name


@pytest.mark.parametrize("url", ["grpc_url", "http_url"])
def test_the_python_client_says_a_wrong_key_was_wrong(srv, monkeypatch, tmp_path: Path, url: str):
    model = tmp_path / "tiny.onnx"
    data = GEN.build_tiny()
    model.write_bytes(data if isinstance(data, bytes) else data.SerializeToString())
    monkeypatch.setenv(settings.URL_ENV, getattr(srv, url))
    monkeypatch.setenv(settings.ADMIN_KEY_ENV, "not-the-key")
    with pytest.raises(PermissionDeniedError) as caught:  # an upload is a model load: keyed
        mslite.Model().build_from_file(str(model), mslite.ModelType.MINDIR)
    assert WRONG_KEY.search(str(caught.value)), str(caught.value)
    assert "expecting header" not in str(caught.value)


def _keys_in_cmdlines(key: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if key.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


def _serve(tmp_path: Path, env: dict[str, str], *extra: str) -> tuple[subprocess.Popen[str], list[str], str]:
    """`mslite-triton serve` on free ports, read until it serves: (process, ports, what it printed)."""
    repo = tmp_path / "repo"
    add_model(repo, "tiny", GEN.build_tiny())
    ports = [str(p) for p in pick_ports([("127.0.0.1", 0, "free")] * 3)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mslite_server.cli", "serve", "--model-repository", str(repo),
         "--http-port", ports[0], "--grpc-port", ports[1], "--metrics-port", ports[2], "--exit-timeout-s", "5",
         *extra],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []
    try:
        while not (lines and lines[-1].startswith("serving")):
            line = proc.stdout.readline()
            assert line or proc.poll() is None, proc.stderr.read()[-3000:]
            lines.append(line)
    except BaseException:
        proc.kill()
        proc.communicate(timeout=90)
        raise
    return proc, ports, "".join(lines)


@pytest.mark.parametrize("from_env", [False, True], ids=["generated key", "key from the environment"])
def test_serve_puts_the_key_on_no_command_line(tmp_path: Path, from_env: bool):
    env = {**os.environ, settings.KEY_DIR_ENV: str(tmp_path / "keys")}
    env.pop(settings.ADMIN_KEY_ENV, None)
    if from_env:
        env[settings.ADMIN_KEY_ENV] = "a-key-given-by-the-deployment-0123456789"
    proc, ports, printed = _serve(tmp_path, env)
    try:
        shown = re.search(r"^ADMIN KEY (\S+)", printed, re.M)
        key = env.get(settings.ADMIN_KEY_ENV) or (shown and shown[1])
        assert key and key != "from", printed
        assert (tmp_path / "keys" / f"127.0.0.1_{ports[0]}.key").read_text().strip() == key
        assert _keys_in_cmdlines(key) == []
        assert "WARNING" not in printed, printed
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=90)


def test_serve_without_the_gateway_says_what_it_gives_up(tmp_path: Path):
    env = {**os.environ, settings.KEY_DIR_ENV: str(tmp_path / "keys")}
    env.pop(settings.ADMIN_KEY_ENV, None)
    proc, _, printed = _serve(tmp_path, env, "--no-gateway")
    try:
        assert "WARNING (--no-gateway): the admin key is on tritonserver's command line" in printed, printed
        assert "WARNING (--no-gateway): tritonserver binds the ports itself, so a restart lets them go" in printed
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=90)
