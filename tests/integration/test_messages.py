"""What error answers must not tell a client: server paths, tracebacks, the workers' shared-memory regions.

Asserted on the text the client receives: raw tritonclient through the gateway and straight to Triton,
and the client library, which cleans every message it raises.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import mslite_triton as mslite
from mslite_contract import settings
from mslite_contract.protocol import ADMIN_KEY_GRPC_HEADER, ADMIN_KEY_HEADER
from mslite_server import LocalServer, ServerConfig
from mslite_triton.errors import InferenceError, ModelLoadError
from tests.support import private_shm
from tests.support.repository import flat_tiny
from tests.support.triton_direct import bridge, grpc_address, grpc_url, http_address

pytestmark = pytest.mark.integration

PATH = re.compile(r"(?<![\w.\-:])(?:/[\w.\-+@]+){2,}")


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("messages_repo")
    with LocalServer(ServerConfig(model_repository=repo, load_models=(), gateway=True, supervise=False)) as srv:
        yield srv


def _load_corrupt(mod, address: str, key: str, name: str) -> str:
    """The message of a keyed load of a model file that is not ONNX."""
    client = mod.InferenceServerClient(address)
    headers = {ADMIN_KEY_GRPC_HEADER if mod is grpcclient else ADMIN_KEY_HEADER: key}
    try:
        with pytest.raises(InferenceServerException) as info:
            client.load_model(
                name,
                config=json.dumps({"backend": "mslite"}),
                files={"file:1/model.onnx": b"\x08not onnx"},
                headers=headers,
            )
        return str(info.value.message())
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_failed_load_names_no_server_path_and_no_traceback(gw, protocol):
    mod = httpclient if protocol == "http" else grpcclient
    public = gw.http_port if protocol == "http" else gw.grpc_port
    private = http_address(gw) if protocol == "http" else grpc_address(gw)
    through_gateway = _load_corrupt(mod, f"127.0.0.1:{public}", gw.admin_key, f"corrupt_{protocol}")
    assert "model file 'model.onnx' is not a valid ONNX model" in through_gateway
    assert not PATH.search(through_gateway) and "At:" not in through_gateway, through_gateway
    # Triton's own port (what --no-gateway serves): its python stub still appends the frame, nameless
    direct = _load_corrupt(mod, private, gw.admin_key, f"corrupt_{protocol}_direct")
    assert "is not a valid ONNX model" in direct and not PATH.search(direct), direct
    assert "mslite/model.py" in direct  # the stub's traceback line, under a neutral file name


def test_the_client_library_reports_a_failed_load_cleanly(gw, tmp_path, monkeypatch):
    monkeypatch.setenv(settings.ADMIN_KEY_ENV, gw.admin_key)  # key files name the public ports only
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08not onnx at all")
    ctx = mslite.Context()
    ctx.server_url = grpc_url(gw)  # straight to Triton: the library cleans up itself
    with pytest.raises((ModelLoadError, RuntimeError)) as info:
        mslite.Model().build_from_file(str(bad), mslite.ModelType.MINDIR, ctx)
    text = str(info.value)
    assert "is not a valid ONNX model" in text and "At:" not in text and not PATH.search(text), text


_SERVER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from mslite_server import LocalServer, ServerConfig
    repo = Path(sys.argv[1])
    with LocalServer(ServerConfig(model_repository=repo, gateway=True, supervise=False)) as s:
        seen = {"ports": [s.http_port, s.grpc_port], "triton_grpc": str(s.triton_endpoints.grpc_socket),
                "prefix": s.workspace.shm_prefix}  # fmt: skip
        print(json.dumps(seen), flush=True)
        sys.stdin.read()  # serve until the test closes our stdin
    """
)


@pytest.fixture
def small_shm_server(tmp_path: Path):
    """A gateway server whose /dev/shm (a private 24 MiB tmpfs) cannot hold a 48 MiB request."""
    reason = private_shm.unavailable()
    if reason:
        pytest.skip(reason)
    flat_tiny(tmp_path / "repo")
    proc = private_shm.popen(
        24 * 1024,
        [sys.executable, "-c", _SERVER, str(tmp_path / "repo")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line, f"the server in the private /dev/shm did not start (rc {proc.poll()})"
        yield json.loads(line)
    finally:
        proc.stdin.close()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_full_shared_memory_pool_does_not_name_the_workers_region(small_shm_server):
    http, grpc_ = small_shm_server["ports"]
    prefix = small_shm_server["prefix"]
    x = np.ones((3 << 20, 4), np.float32)  # 48 MiB
    seen = []
    for mod, port in ((httpclient, http), (grpcclient, grpc_)):  # through the gateway
        client = mod.InferenceServerClient(f"127.0.0.1:{port}")
        item = mod.InferInput("x", list(x.shape), "FP32")
        item.set_data_from_numpy(x)
        with pytest.raises(InferenceServerException) as info:
            client.infer("flat", [item])
        client.close()
        seen.append(str(info.value.message()))
    ctx = mslite.Context()
    # straight to Triton, through the client library
    ctx.server_url = f"grpc://127.0.0.1:{bridge(Path(small_shm_server['triton_grpc']))}"
    model = mslite.Model()
    model.build_from_file("triton://flat", mslite.ModelType.MINDIR, ctx)
    with pytest.raises(InferenceError) as info:
        model.predict([mslite.Tensor(x)])
    seen.append(str(info.value))
    for text in seen:
        assert "Failed to increase the shared memory pool size to" in text, text
        assert prefix not in text and "for key" not in text, text
