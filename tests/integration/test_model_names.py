"""Model names that would reach the file system as paths: refused by the gateway, never made a path by the launcher.

With the admin key, an upload named `..` used to end in `shutil.rmtree(<workspace>/uploads/..)`, which emptied the
launcher's workspace. The gateway refuses such names on both protocols (400 / INVALID_ARGUMENT naming the rule);
a `--no-gateway` server hears them unchecked, and its launcher neither keeps their files nor loads them again.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from mslite_contract.model_names import MODEL_NAME_RULE
from mslite_contract.protocol import ADMIN_KEY_GRPC_HEADER, ADMIN_KEY_HEADER
from mslite_server import LocalServer, ServerConfig
from mslite_server.workers import workers_of
from tests.support.eventually import eventually
from tests.support.repository import GEN, MINIMAL, add_model

pytestmark = pytest.mark.integration

NAMES = ["..", ".hidden", "a/b", "a\\b", "x" * 201]


def _workspace_entries(srv: LocalServer) -> set[str]:
    return {p.name for p in srv.workspace.path.iterdir()}


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    repo = tmp_path_factory.mktemp("names_repo")
    add_model(repo, "tiny", GEN.build_tiny(), MINIMAL)
    with LocalServer(ServerConfig(model_repository=repo, gateway=True, supervise=True, exit_timeout_s=5)) as server:
        yield server


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_gateway_refuses_loads_and_unloads_of_bad_names(gated: LocalServer, protocol: str) -> None:
    """Keyed uploads, loads and unloads of names the rule refuses: 400 / INVALID_ARGUMENT; the workspace stays."""
    assert gated.process is not None
    pid, before = gated.process.pid, _workspace_entries(gated)
    grpc = protocol == "grpc"
    mod = grpcclient if grpc else httpclient
    client = mod.InferenceServerClient(f"127.0.0.1:{gated.grpc_port if grpc else gated.http_port}")
    keyed = {ADMIN_KEY_GRPC_HEADER if grpc else ADMIN_KEY_HEADER: gated.admin_key or ""}
    files = {"file:1/model.onnx": GEN.build_tiny().SerializeToString()}
    config = json.dumps({"backend": "mslite"})
    try:
        for name in NAMES if grpc else [n for n in NAMES if n != "a/b"]:  # HTTP: a '/' splits the path itself
            for call in (
                lambda n: client.load_model(n, config=config, files=files, headers=keyed),
                lambda n: client.load_model(n, headers=keyed),
                lambda n: client.unload_model(n, headers=keyed),
            ):
                with pytest.raises(InferenceServerException, match="invalid model name") as refused:
                    call(name)
                assert MODEL_NAME_RULE in str(refused.value)
                if grpc:
                    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
                else:
                    assert refused.value.status() == "400"
        client.load_model("good_name", config=config, files=files, headers=keyed)  # a good name still loads
        assert client.is_model_ready("good_name")
        client.unload_model("good_name", headers=keyed)
    finally:
        client.close()
    if not grpc:  # percent-encoded: '%2E%2E' is '..' and '%2F' a '/'
        for encoded in ("%2E%2E", "a%2Fb", ".%2E"):
            conn = http.client.HTTPConnection("127.0.0.1", gated.http_port, timeout=30)
            conn.request("POST", f"/v2/repository/models/{encoded}/load", body=b"{}", headers=keyed)
            resp = conn.getresponse()
            assert resp.status == 400 and "invalid model name" in resp.read().decode()
            conn.close()
    assert gated.process.pid == pid and gated.process.poll() is None
    assert _workspace_entries(gated) >= before


def test_without_a_gateway_the_launcher_makes_no_path_of_a_bad_name(tmp_path: Path) -> None:
    """`--no-gateway`: Triton takes an upload named `..`; the workspace stays whole, a dead worker of it is not
    loaded again, and neither restarts tritonserver; the other model keeps serving."""
    repo = tmp_path / "repo"
    add_model(repo, "tiny", GEN.build_tiny(), MINIMAL)
    config = ServerConfig(model_repository=repo, gateway=False, supervise=True, exit_timeout_s=5)
    with LocalServer(config) as srv:
        assert srv.process is not None and srv.supervisor is not None
        pid, before = srv.process.pid, _workspace_entries(srv)
        keyed = {ADMIN_KEY_HEADER: srv.admin_key or ""}
        client = httpclient.InferenceServerClient(f"127.0.0.1:{srv.http_port}")
        try:
            files = {"file:1/model.onnx": GEN.build_tiny().SerializeToString()}
            client.load_model("..", config=json.dumps({"backend": "mslite"}), files=files, headers=keyed)
            eventually(lambda: ".." in srv.supervisor.healer.catalog.refused, "the catalog saw the bad name")
            assert ".." not in srv.supervisor.catalog
            # its worker dies (an upload's instance: `<group>_<n>`): not loaded again, nothing else restarted
            dead = [w.pid for w in workers_of(pid) if w.instance == ".._0"]
            assert dead, [w.instance for w in workers_of(pid)]
            os.kill(dead[0], signal.SIGKILL)
            eventually(
                lambda: any(h.what == "worker" and ".." in h.cause for h in srv.supervisor.heals), "the heal was noted"
            )
            assert _workspace_entries(srv) >= before
            assert (srv.workspace.backends).is_dir()
            assert srv.process.pid == pid and srv.process.poll() is None
            assert not any(h.what == "tritonserver" for h in srv.supervisor.heals)
            assert client.is_model_ready("tiny")
        finally:
            client.close()
