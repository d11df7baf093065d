"""A model that failed to load, called without the admin key through the gateway: the answer says why.

Triton alone answers `Model version not ready` / `... has no available versions`; the gateway appends the
reason from the repository index (`mslite_gateway.load_failures`), scrubbed, keeping Triton's status.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from mslite_server import LocalServer, ServerConfig
from tests.support import model_zoo
from tests.support.repository import GEN, ROOT, add_model

pytestmark = pytest.mark.integration

REASON = ": the model failed to load: model file 'model.onnx' is not a valid ONNX"
_PATH = re.compile(r"(?<![\w.\-:])(?:/[\w.\-+@]+){2,}")


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("load_failure_repo")
    add_model(repo, "tiny", GEN.build_tiny(), (ROOT / "model_repository" / "tiny" / "config.pbtxt").read_text())
    add_model(repo, "corrupt", model_zoo.broken_bytes())
    config = ServerConfig(model_repository=repo, gateway=True, supervise=False, startup_timeout_s=240)
    with LocalServer(config) as srv:
        yield srv


def _http(srv: LocalServer, method: str, path: str, body: bytes | None = None) -> tuple[int, str]:
    """(status, the JSON error message or the body) of a call without the admin key."""
    req = urllib.request.Request(srv.http_url + path, data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())["error"]


def _no_server_detail(text: str, srv: LocalServer) -> None:
    assert not _PATH.search(text) and "At:" not in text, text
    assert str(srv.config.model_repository) not in text and "Traceback" not in text, text


def test_http_calls_of_a_failed_model_say_why_and_keep_tritons_status(gw: LocalServer):
    infer = json.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}]}).encode()
    for method, path, body, status, triton_says in [
        ("GET", "/v2/models/corrupt/ready", None, 400, "Model version not ready"),
        ("GET", "/v2/models/corrupt", None, 404, "Request for unknown model: 'corrupt' has no available versions"),
        ("POST", "/v2/models/corrupt/infer", infer, 404, "has no available versions"),
    ]:
        code, message = _http(gw, method, path, body)
        assert code == status, (path, code, message)
        assert triton_says in message and REASON in message, (path, message)
        _no_server_detail(message, gw)
    # a model that is not there, and a model that loaded, answer as Triton does
    code, message = _http(gw, "GET", "/v2/models/nope/ready")
    assert (code, message) == (400, "Model version not ready"), message
    assert _http(gw, "GET", "/v2/models/tiny/ready")[0] == 200


def test_grpc_calls_of_a_failed_model_say_why_and_keep_tritons_status(gw: LocalServer):
    client = grpcclient.InferenceServerClient(gw.grpc_url.split("://", 1)[1])
    x = grpcclient.InferInput("x", [1], "FP32")
    x.set_data_from_numpy(np.ones(1, np.float32))
    calls = {"infer": lambda: client.infer("corrupt", [x]), "metadata": lambda: client.get_model_metadata("corrupt")}
    for name, call in calls.items():
        # gRPC tells the index as last read (its first failing call may start the reading): within a few calls
        deadline, message = time.monotonic() + 20, ""
        while REASON not in message and time.monotonic() < deadline:
            with pytest.raises(InferenceServerException) as info:
                call()
            assert info.value.status() == "StatusCode.NOT_FOUND", (name, info.value)
            message = info.value.message()
            assert "'corrupt' has no available versions" in message, (name, message)
            time.sleep(0.2)
        assert REASON in message, (name, message)
        _no_server_detail(message, gw)
    with pytest.raises(InferenceServerException) as info:
        client.infer("nope", [x])
    assert "failed to load" not in info.value.message()
    client.close()
