"""The trust boundary of `mslite-triton serve`: tritonserver reachable only through the gateway.

Behind the gateway tritonserver listens on Unix sockets in a folder only the server's user may enter, and on
no TCP port but its (public) metrics port. A local process that takes every TCP port the server had while
it restarts receives nothing; the gateway's public ports are never free (the launcher holds them across
gateway restarts), and a metrics port someone holds delays a restart without ending the service.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from mslite_contract.protocol import ADMIN_KEY_GRPC_HEADER, ADMIN_KEY_HEADER
from mslite_server import LocalServer, ServerConfig
from mslite_server.ports import listening_ports, listening_unix_paths
from tests.support.eventually import eventually
from tests.support.repository import GEN, add_model
from tests.support.squatter import Squatter

pytestmark = pytest.mark.integration

BACK_WITHIN_S = 30.0  # the bound on a restart with the ports taken; generous for this machine


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    repo = tmp_path_factory.mktemp("boundary_repo")
    add_model(repo, "tiny", GEN.build_tiny())
    config = ServerConfig(model_repository=repo, gateway=True, exit_timeout_s=5, startup_timeout_s=240)
    with LocalServer(config) as server:
        yield server


def _predict_http(srv: LocalServer) -> list[float]:
    """A predict through the gateway's HTTP port, carrying the admin key as a careless client might."""
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]})
    request = urllib.request.Request(f"{srv.http_url}/v2/models/tiny/infer", body.encode(), method="POST")
    request.add_header(ADMIN_KEY_HEADER, srv.admin_key or "")
    with urllib.request.urlopen(request, timeout=10) as r:
        return list(json.load(r)["outputs"][0]["data"])


def _predict_grpc(srv: LocalServer) -> list[float]:
    client = grpcclient.InferenceServerClient(srv.grpc_url.split("://", 1)[1])
    try:
        x = grpcclient.InferInput("x", [1, 4], "FP32")
        x.set_data_from_numpy(np.array([[1, 2, 3, 4]], np.float32))
        answer = client.infer("tiny", [x], headers={ADMIN_KEY_GRPC_HEADER: srv.admin_key or ""}, client_timeout=10)
        return [float(v) for v in answer.as_numpy(answer.get_response().outputs[0].name).ravel()]
    finally:
        client.close()


def _serving_again(srv: LocalServer, within_s: float, expected: list[float]) -> float:
    """Seconds until both protocols answer a predict through the gateway; requests keep going meanwhile."""
    started = time.monotonic()
    while True:
        try:
            if _predict_http(srv) == expected and _predict_grpc(srv) == expected:
                return time.monotonic() - started
        except (OSError, grpcclient.InferenceServerException, urllib.error.URLError):
            pass
        assert time.monotonic() - started < within_s, f"not serving again within {within_s:.0f} s:\n{srv.log_tail()}"
        time.sleep(0.2)


def test_tritonserver_listens_on_no_tcp_port_but_metrics(srv):
    assert srv.process is not None and srv.triton_endpoints.socket_dir is not None
    assert listening_ports(srv.process.pid) == {srv.metrics_port}
    folder = os.lstat(srv.triton_endpoints.socket_dir)
    assert stat.S_ISDIR(folder.st_mode) and folder.st_uid == os.geteuid()
    assert stat.S_IMODE(folder.st_mode) & 0o077 == 0, oct(folder.st_mode)
    assert len(os.fsencode(str(srv.triton_endpoints.grpc_socket))) < 108  # what a socket path may be


def test_a_squatter_on_every_port_triton_had_gets_nothing_and_the_server_comes_back(srv):
    """tritonserver killed while another local process takes every TCP port it had (the public ones excepted)."""
    expected = _predict_http(srv)
    assert srv.process is not None and srv.triton_endpoints.http_socket and srv.triton_endpoints.grpc_socket
    pid, restarts = srv.process.pid, srv.restarts
    public = {srv.metrics_port, srv.http_port, srv.grpc_port}
    private = sorted(listening_ports(pid) - public)
    sockets = [str(srv.triton_endpoints.http_socket), str(srv.triton_endpoints.grpc_socket)]
    squatter = Squatter(private, sockets, as_other_user=True)
    try:
        squatter.waiting()
        os.kill(pid, signal.SIGKILL)
        assert squatter.taken() == private
        _serving_again(srv, BACK_WITHIN_S, expected)
        for _ in range(5):  # and a few more, key and all
            assert _predict_http(srv) == expected and _predict_grpc(srv) == expected
        seen = squatter.report()
    finally:
        squatter.kill()
    assert srv.restarts > restarts and srv.process is not None and srv.process.pid != pid
    assert seen["received"] == "", seen["received"][:300]
    if squatter.other_user:  # another user can neither reach tritonserver's sockets nor stand in for them
        assert all(outcome == "PermissionError" for outcome in seen["sockets"].values()), seen["sockets"]


def test_a_held_metrics_port_delays_the_restart_and_the_log_names_its_holder(srv, caplog):
    """The metrics port is public: someone holding it is waited out, however long, and never given up on."""
    expected = _predict_http(srv)
    assert srv.process is not None
    squatter = Squatter([srv.metrics_port], [], as_other_user=False)
    try:
        with caplog.at_level(logging.WARNING, logger="mslite_triton"):
            squatter.waiting()
            os.kill(srv.process.pid, signal.SIGKILL)
            assert squatter.taken() == [srv.metrics_port]
            failed = "restarting tritonserver failed, trying again"
            # more failed starts than the 3 tries after which the supervisor used to give up
            eventually(lambda: caplog.text.count(failed) >= 4, "four failed restarts")
            assert f"port {srv.metrics_port} on this host is held by pid {squatter.pid}" in caplog.text, caplog.text
            assert srv.is_serving() and "giving up" not in caplog.text
            assert squatter.report()["received"] == ""
        _serving_again(srv, BACK_WITHIN_S, expected)
    finally:
        squatter.kill()


def test_a_squatter_never_gets_the_gateway_ports_and_service_comes_back_through_them(srv):
    """The gateway SIGKILLed while another process loops binding its public ports (SO_REUSEADDR): the launcher
    holds them across the restart (`bind_public`), so that process binds neither, and the next gateway serves."""
    expected = _predict_http(srv)
    assert srv.gateway is not None and srv.gateway.pid is not None
    pid = srv.gateway.pid
    squatter = Squatter([srv.http_port, srv.grpc_port], [], patience_s=15.0, as_other_user=True)
    try:
        squatter.waiting()
        os.kill(pid, signal.SIGKILL)
        _serving_again(srv, BACK_WITHIN_S, expected)
        assert srv.gateway is not None and srv.gateway.pid != pid
        assert squatter.taken() == []  # it kept trying for its whole patience, the restart included
        seen = squatter.report()
    finally:
        squatter.kill()
    assert seen["received"] == ""


def test_a_socket_folder_no_longer_private_is_replaced(srv):
    """A private endpoint that cannot be made where it was gets a new place, and the gateway follows it."""
    expected = _predict_http(srv)
    old = srv.triton_endpoints.socket_dir
    assert old is not None and srv.process is not None
    os.chmod(old, 0o755)
    os.kill(srv.process.pid, signal.SIGKILL)
    _serving_again(srv, BACK_WITHIN_S, expected)
    new = srv.triton_endpoints.socket_dir
    assert new is not None and new != old and stat.S_IMODE(os.lstat(new).st_mode) == 0o700
    assert srv.process is not None
    assert {str(Path(p).parent) for p in listening_unix_paths(srv.process.pid)} == {str(new)}
