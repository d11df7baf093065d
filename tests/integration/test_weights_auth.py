"""Weights updates need the admin key: the worker checks each update's proof, with or without the gateway.

One server with the gateway serves both ways in: its public ports (the gateway) and Triton's own ports
behind it (what `--no-gateway` serves publicly); the check lives in the worker, so both must refuse.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

import mslite_triton as mslite
from mslite_contract import settings
from mslite_contract.protocol import (
    PROOF_PARAMETER,
    UPDATE_PARAMETER,
    WEIGHTS_INPUT,
    sign_update,
)
from mslite_server import LocalServer, ServerConfig
from mslite_triton.errors import PermissionDeniedError
from tests.support.triton_direct import grpc_address, http_address

pytestmark = pytest.mark.integration

MODEL = "matmul_updatable"
X = np.arange(1, 5, dtype=np.float32).reshape(1, 4)
MANIFEST = json.dumps([{"name": "W", "dtype": "<f4", "shape": [4, 4]}])


def _matmul() -> bytes:
    """y = x @ W, W the 4 x 4 identity: predictions show the weights served."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        MODEL,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(np.eye(4, dtype=np.float32), "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("auth_repo")
    (repo / MODEL / "1").mkdir(parents=True)
    (repo / MODEL / "1" / "model.onnx").write_bytes(_matmul())
    (repo / MODEL / "config.pbtxt").write_text(
        'backend: "mslite"\ninstance_group [ { kind: KIND_CPU, count: 1 } ]\n'
        'parameters { key: "variable_weights_list" value { string_value: "W" } }\n'
    )
    # no supervisor: the test restarts tritonserver itself, as a heal does
    config = ServerConfig(model_repository=repo, gateway=True, supervise=False, startup_timeout_s=240)
    with LocalServer(config) as srv:
        yield srv


def _ways_in(server: LocalServer) -> dict[str, tuple[object, str]]:
    """(tritonclient module, address) of each way to the worker: the gateway and Triton's own ports."""
    return {
        "http-gateway": (httpclient, f"127.0.0.1:{server.http_port}"),
        "grpc-gateway": (grpcclient, f"127.0.0.1:{server.grpc_port}"),
        "http-direct": (httpclient, http_address(server)),
        "grpc-direct": (grpcclient, grpc_address(server)),
    }


def _update(mod, address: str, weights: np.ndarray, parameters: dict[str, str]) -> None:
    """A weights update as any client can send it: raw tritonclient, no admin key in the headers."""
    client = mod.InferenceServerClient(address)
    try:
        x = mod.InferInput("x", [1, 4], "FP32")
        x.set_data_from_numpy(np.zeros((1, 4), np.float32))
        data = _sent(weights)
        w = mod.InferInput(WEIGHTS_INPUT, list(data.shape), "UINT8")
        w.set_data_from_numpy(data)
        client.infer(MODEL, [x, w], parameters=parameters)
    finally:
        client.close()


def _sent(weights: np.ndarray) -> np.ndarray:
    """The bytes of an inline update of `weights`, as WEIGHTS_INPUT carries them (and a proof signs them)."""
    return weights.astype(np.float32).reshape(1, -1).view(np.uint8)


def _proof(key: str, weights: np.ndarray) -> str:
    return sign_update(key, MODEL, MANIFEST, data=_sent(weights))


def _predict(server: LocalServer) -> np.ndarray:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    try:
        x = httpclient.InferInput("x", [1, 4], "FP32")
        x.set_data_from_numpy(X)
        return client.infer(MODEL, [x]).as_numpy("y")
    finally:
        client.close()


@pytest.mark.parametrize("way", ["http-gateway", "grpc-gateway", "http-direct", "grpc-direct"])
def test_an_update_without_the_key_is_refused_and_changes_nothing(gw, way):
    before = _predict(gw)
    mod, address = _ways_in(gw)[way]
    attempts = {
        "no proof": ({UPDATE_PARAMETER: MANIFEST}, "it must prove the server's admin key"),
        "wrong key": (
            {UPDATE_PARAMETER: MANIFEST, PROOF_PARAMETER: sign_update("guessed", MODEL, MANIFEST)},
            "its proof does not match the server's admin key",
        ),
    }
    for parameters, why in attempts.values():
        with pytest.raises(InferenceServerException) as info:
            _update(mod, address, -7 * np.eye(4), parameters)
        assert f"model '{MODEL}': weights update refused: {why}" in info.value.message()
    np.testing.assert_array_equal(_predict(gw), before)
    np.testing.assert_array_equal(before, X)  # still the model file's identity


def test_an_update_with_the_key_is_applied_once(gw):
    mod, address = _ways_in(gw)["http-gateway"]
    try:
        parameters = {UPDATE_PARAMETER: MANIFEST, PROOF_PARAMETER: _proof(gw.admin_key, 3 * np.eye(4))}
        _update(mod, address, 3 * np.eye(4), parameters)
        np.testing.assert_array_equal(_predict(gw), 3 * X)
        with pytest.raises(InferenceServerException, match="its proof was already used"):  # a replay
            _update(mod, address, -7 * np.eye(4), parameters)
        np.testing.assert_array_equal(_predict(gw), 3 * X)
    finally:
        _restore(gw)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_client_library_proves_the_key_and_without_it_is_told_why(gw, protocol, monkeypatch, tmp_path):
    ctx = mslite.Context()
    ctx.server_url = gw.grpc_url if protocol == "grpc" else gw.http_url
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(f"triton://{MODEL}", ctx)
    w = mslite.Tensor(np.ascontiguousarray(5 * np.eye(4, dtype=np.float32)))
    w.name = "W"
    try:
        runner.update_weights([[w]])  # the key comes from the server's key file
        np.testing.assert_array_equal(_predict(gw), 5 * X)
    finally:
        _restore(gw)
    # a client without the key: a new process would find no key file and no key variable (settings.ADMIN_KEY_ENV)
    monkeypatch.setenv(settings.KEY_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(settings.ADMIN_KEY_ENV, raising=False)
    keyless = mslite.ModelParallelRunner()
    keyless.build_from_file(f"triton://{MODEL}", ctx)
    with pytest.raises(PermissionDeniedError, match="update weight failed! .*weights update refused: it must prove"):
        keyless.update_weights([[w]])
    np.testing.assert_array_equal(_predict(gw), X)


def _restore(server: LocalServer) -> None:
    parameters = {UPDATE_PARAMETER: MANIFEST, PROOF_PARAMETER: _proof(server.admin_key, np.eye(4))}
    _update(httpclient, f"127.0.0.1:{server.http_port}", np.eye(4), parameters)


def test_the_key_survives_a_restart_of_tritonserver(gw):
    """The launcher hands the same key to every start: refusals and signed updates work as before."""
    key, pid = gw.admin_key, gw.process.pid
    gw.restart()
    assert gw.process.pid != pid and gw.admin_key == key
    before = _predict(gw)
    with pytest.raises(InferenceServerException, match="weights update refused: it must prove"):
        _update(httpclient, http_address(gw), -7 * np.eye(4), {UPDATE_PARAMETER: MANIFEST})
    np.testing.assert_array_equal(_predict(gw), before)
    try:
        parameters = {UPDATE_PARAMETER: MANIFEST, PROOF_PARAMETER: _proof(key, 2 * np.eye(4))}
        _update(grpcclient, f"127.0.0.1:{gw.grpc_port}", 2 * np.eye(4), parameters)
        np.testing.assert_array_equal(_predict(gw), 2 * X)
    finally:
        _restore(gw)


def test_a_used_proof_is_refused_by_the_workers_of_a_new_tritonserver(gw):
    """The accepted proofs live in the launcher's weights store, which every worker shares and a heal keeps."""
    parameters = {UPDATE_PARAMETER: MANIFEST, PROOF_PARAMETER: _proof(gw.admin_key, 3 * np.eye(4))}
    try:
        _update(grpcclient, f"127.0.0.1:{gw.grpc_port}", 3 * np.eye(4), parameters)
        _restore(gw)
        gw.restart()  # new workers: none of them saw the proof
        for weights, why in (
            (3 * np.eye(4), "its proof was already used"),
            (-7 * np.eye(4), "its proof was already used"),
        ):
            with pytest.raises(InferenceServerException, match=f"weights update refused: {why}"):
                _update(httpclient, f"127.0.0.1:{gw.http_port}", weights, parameters)
        np.testing.assert_array_equal(_predict(gw), X)
    finally:
        _restore(gw)
