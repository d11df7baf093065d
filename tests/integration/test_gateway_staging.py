"""The gateway hands large inputs to Triton through shared memory of its own (`gateway/staging.py`).

Through the gateway, a request with 64 KiB or more of tensor data reaches Triton as a small request
pointing at one of the gateway's regions. Here: the answers equal Triton's own, with the bytes seen in the
region in input order, on both protocols; clients cannot name those regions; the registrations come back
after a tritonserver restart; a killed gateway's regions are unregistered and removed by the supervisor,
and a stopped one leaves none.
"""

from __future__ import annotations

import json
import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from mslite_contract.protocol import GATEWAY_REGION_PREFIX
from mslite_server import LocalServer, ServerConfig
from tests.support.eventually import eventually
from tests.support.model_zoo import difference
from tests.support.repository import MINIMAL, add_model
from tests.support.triton_direct import grpc_address, http_address

pytestmark = pytest.mark.integration

T = 20000  # 80 KB per input: over the gateway's 64 KiB threshold
SHM = Path("/dev/shm")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    repo = tmp_path_factory.mktemp("staging_repo")
    add_model(repo, "pair", difference(), MINIMAL)
    config = ServerConfig(model_repository=repo, gateway=True, exit_timeout_s=5, startup_timeout_s=240)
    with LocalServer(config) as server:
        yield server


def _inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((1, T), dtype=np.float32), rng.standard_normal((1, T), dtype=np.float32)


def _infer(protocol: str, address: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    mod = grpcclient if protocol == "grpc" else httpclient
    client = mod.InferenceServerClient(address)
    try:
        items = [mod.InferInput(name, [1, T], "FP32") for name in ("a", "b")]
        items[0].set_data_from_numpy(a)
        items[1].set_data_from_numpy(b)
        return client.infer("pair", items).as_numpy("d")
    finally:
        client.close()


def _addresses(server: LocalServer, protocol: str) -> tuple[str, str]:
    """(through the gateway, straight to Triton)."""
    if protocol == "grpc":
        return f"127.0.0.1:{server.grpc_port}", grpc_address(server)
    return f"127.0.0.1:{server.http_port}", http_address(server)


def _registered(server: LocalServer) -> list[str]:
    status, body = server.triton_api().call("GET", "/v2/systemsharedmemory/status", None)
    assert status == 200, body
    return [str(region["name"]) for region in json.loads(body)]


def _gateway_prefix(server: LocalServer) -> str:
    assert server.gateway is not None
    return f"{GATEWAY_REGION_PREFIX}{server.gateway.pid}_"


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_large_inputs_reach_triton_through_the_gateways_region(srv, protocol):
    through, direct = _addresses(srv, protocol)
    prefix = _gateway_prefix(srv)
    for seed in range(3):  # gRPC readies a region during the first request and uses it from the next
        a, b = _inputs(seed)
        got = _infer(protocol, through, a, b)
        np.testing.assert_array_equal(got, a - b)
        np.testing.assert_array_equal(got, _infer(protocol, direct, a, b))
    ours = [name for name in _registered(srv) if name.startswith(prefix)]
    assert ours, _registered(srv)
    # the last request's tensors lie in one of them, a then b, as Triton read them
    expected = a.tobytes() + b.tobytes()
    holders = [n for n in ours if (SHM / n).read_bytes()[: len(expected)] == expected]
    assert holders, "the last request's bytes are in none of the gateway's regions"
    assert stat.S_IMODE((SHM / holders[0]).stat().st_mode) == 0o600


@pytest.mark.parametrize("where", ["input", "output"])
def test_clients_cannot_name_the_gateways_regions(srv, where):
    a, b = _inputs(7)
    _infer("http", f"127.0.0.1:{srv.http_port}", a, b)  # so that a region of the gateway's exists
    region = next(n for n in _registered(srv) if n.startswith(GATEWAY_REGION_PREFIX))
    for protocol, mod in (("http", httpclient), ("grpc", grpcclient)):
        client = mod.InferenceServerClient(_addresses(srv, protocol)[0])
        try:
            items = [mod.InferInput(name, [1, T], "FP32") for name in ("a", "b")]
            items[1].set_data_from_numpy(b)
            outputs = [mod.InferRequestedOutput("d")]
            if where == "input":
                items[0].set_shared_memory(region, 4 * T)
            else:
                items[0].set_data_from_numpy(a)
                outputs[0].set_shared_memory(region, 4 * T)
            with pytest.raises(InferenceServerException, match="are the server's own") as caught:
                client.infer("pair", items, outputs=outputs)
            assert "400" in str(caught.value.status()) or "INVALID_ARGUMENT" in str(caught.value.status())
        finally:
            client.close()


def test_staging_comes_back_after_a_tritonserver_restart(srv):
    a, b = _inputs(11)
    _infer("http", f"127.0.0.1:{srv.http_port}", a, b)
    assert srv.process is not None and srv.supervisor is not None
    before = len(srv.supervisor.heals)
    os.kill(srv.process.pid, signal.SIGKILL)
    eventually(lambda: len(srv.supervisor.heals) > before and srv.supervisor.heals[-1].ok, "tritonserver's heal")
    for protocol in ("http", "grpc", "grpc"):
        np.testing.assert_array_equal(_infer(protocol, _addresses(srv, protocol)[0], a, b), a - b)
    assert any(n.startswith(_gateway_prefix(srv)) for n in _registered(srv))


def test_a_killed_gateways_regions_are_unregistered_and_removed(srv):
    a, b = _inputs(13)
    _infer("http", f"127.0.0.1:{srv.http_port}", a, b)
    old = _gateway_prefix(srv)
    assert [n for n in _registered(srv) if n.startswith(old)] and [n for n in os.listdir(SHM) if n.startswith(old)]
    assert srv.gateway is not None and srv.gateway.pid is not None and srv.supervisor is not None
    before = len(srv.supervisor.heals)
    os.kill(srv.gateway.pid, signal.SIGKILL)
    eventually(lambda: len(srv.supervisor.heals) > before, "the gateway's heal")
    eventually(lambda: not [n for n in _registered(srv) if n.startswith(old)], "its regions unregistered")
    eventually(lambda: not [n for n in os.listdir(SHM) if n.startswith(old)], "its region files removed")
    np.testing.assert_array_equal(_infer("http", f"127.0.0.1:{srv.http_port}", a, b), a - b)


def test_a_gateway_killed_after_a_tritonserver_heal_leaves_no_region(srv):
    """Its regions are not registered with the new tritonserver until it stages again: nothing lists them."""
    a, b = _inputs(19)
    _infer("http", f"127.0.0.1:{srv.http_port}", a, b)
    old = _gateway_prefix(srv)
    assert srv.process is not None and srv.supervisor is not None
    before = len(srv.supervisor.heals)
    os.kill(srv.process.pid, signal.SIGKILL)
    eventually(lambda: len(srv.supervisor.heals) > before and srv.supervisor.heals[-1].ok, "tritonserver's heal")
    assert [n for n in os.listdir(SHM) if n.startswith(old)] and not [n for n in _registered(srv) if n.startswith(old)]
    assert srv.gateway is not None and srv.gateway.pid is not None
    before = len(srv.supervisor.heals)
    os.kill(srv.gateway.pid, signal.SIGKILL)
    eventually(lambda: len(srv.supervisor.heals) > before, "the gateway's heal")
    eventually(lambda: not [n for n in os.listdir(SHM) if n.startswith(old)], "its region files removed", timeout_s=20)
    np.testing.assert_array_equal(_infer("http", f"127.0.0.1:{srv.http_port}", a, b), a - b)


def test_a_stopped_gateway_leaves_no_region(tmp_path: Path):
    add_model(tmp_path, "pair", difference(), MINIMAL)
    config = ServerConfig(model_repository=tmp_path, gateway=True, supervise=False, exit_timeout_s=5)
    with LocalServer(config) as server:
        a, b = _inputs(17)
        np.testing.assert_array_equal(_infer("http", f"127.0.0.1:{server.http_port}", a, b), a - b)
        prefix = _gateway_prefix(server)
        assert [n for n in os.listdir(SHM) if n.startswith(prefix)]
    assert not [n for n in os.listdir(SHM) if n.startswith(prefix)]


def test_a_killed_gateway_leaves_no_region_once_the_server_stops(tmp_path: Path):
    add_model(tmp_path, "pair", difference(), MINIMAL)
    config = ServerConfig(model_repository=tmp_path, gateway=True, supervise=False, exit_timeout_s=5)
    with LocalServer(config) as server:
        a, b = _inputs(23)
        np.testing.assert_array_equal(_infer("http", f"127.0.0.1:{server.http_port}", a, b), a - b)
        prefix = _gateway_prefix(server)
        assert server.gateway is not None and server.gateway.pid is not None
        assert [n for n in os.listdir(SHM) if n.startswith(prefix)]
        # no supervisor here: nothing of this server sweeps until the stop (another server's supervisor on the
        # machine, the test session's, may sweep the dead gateway's regions first: so none is looked for now)
        os.kill(server.gateway.pid, signal.SIGKILL)
        eventually(lambda: not server.gateway.is_running(), "the gateway's death")
    assert not [n for n in os.listdir(SHM) if n.startswith(prefix)]
