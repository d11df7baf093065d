"""A weights update larger than the gateway's request size limit, from a client on the server's host.

Such a client sends every update of 1 MiB or more as a file in /dev/shm (`_weights.FILE_MIN_BYTES`), which
the worker copies or links into the store: no request carries the values, so the limit does not apply.
The same values sent inline are refused by the gateway.
"""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

import mslite_triton as mslite
from mslite_contract.protocol import PROOF_PARAMETER, UPDATE_PARAMETER, WEIGHTS_INPUT, sign_update
from mslite_server import GatewayLimits, LocalServer, ServerConfig
from tests.support.repository import MINIMAL, add_model

pytestmark = pytest.mark.integration

D = 640  # W is D x D float32: 1.6 MiB, over the 1 MiB limit below
CAP = 1 << 20
MODEL = "affine"


def _affine() -> bytes:
    """y = x @ W + b, W = I and b = 0: both updatable, so an update of W alone is partial."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        "affine",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", D])],
        [
            numpy_helper.from_array(np.eye(D, dtype=np.float32), "W"),
            numpy_helper.from_array(np.zeros(D, dtype=np.float32), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("large_update_repo")
    config_text = MINIMAL + 'parameters { key: "variable_weights_list" value { string_value: "W,b" } }\n'
    add_model(repo, MODEL, _affine(), config_text)  # in the repository: its upload would be over the limit too
    config = ServerConfig(
        model_repository=repo, gateway=True, supervise=False, gateway_limits=GatewayLimits(max_request_bytes=CAP)
    )
    with LocalServer(config) as server:
        yield server


def test_an_update_over_the_request_limit_goes_by_file_and_inline_is_refused(srv) -> None:
    ctx = mslite.Context()
    ctx.server_url = srv.http_url
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(f"triton://{MODEL}", ctx)
    x = np.ones((1, D), np.float32)

    def predict() -> np.ndarray:
        inputs = runner.get_inputs()
        inputs[0].set_data_from_numpy(x)
        return runner.predict(inputs)[0].get_data_to_numpy()

    np.testing.assert_array_equal(predict(), x)
    w = mslite.Tensor(np.ascontiguousarray(3 * np.eye(D, dtype=np.float32)))
    w.name = "W"
    assert w.data_size > CAP
    runner.update_weights([[w]])  # W only: a partial update, 1.6 MiB
    np.testing.assert_array_equal(predict(), 3 * x)

    values = (-1 * np.eye(D, dtype=np.float32)).reshape(1, -1).view(np.uint8)
    manifest = f'[{{"name": "W", "dtype": "<f4", "shape": [{D}, {D}]}}]'
    client = httpclient.InferenceServerClient(f"127.0.0.1:{srv.http_port}")
    try:
        xin = httpclient.InferInput("x", [1, D], "FP32")
        xin.set_data_from_numpy(x)
        win = httpclient.InferInput(WEIGHTS_INPUT, list(values.shape), "UINT8")
        win.set_data_from_numpy(values)
        proof = sign_update(srv.admin_key, MODEL, manifest, data=values)
        with pytest.raises(InferenceServerException, match="limit|too large|exceeds"):
            client.infer(MODEL, [xin, win], parameters={UPDATE_PARAMETER: manifest, PROOF_PARAMETER: proof})
    finally:
        client.close()
    np.testing.assert_array_equal(predict(), 3 * x)
