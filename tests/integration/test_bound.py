"""A model served on bound buffers (`io_binding` on a CPU worker): the path a GPU worker takes by default.

Concurrent requests reach one worker's `execute` together, are written row by row into the bound buckets,
and must come back exactly as a plain ONNX Runtime session computes them. A model the bound path cannot
run is served the ordinary way, and the log says why, once.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from mslite_server import LocalServer, ServerConfig
from tests.support import model_zoo
from tests.support.repository import MINIMAL, add_model
from tests.support.triton_direct import grpc_address

pytestmark = pytest.mark.integration

BOUND = (
    MINIMAL
    + "max_batch_size: 8\ninstance_group [ { kind: KIND_CPU, count: 1 } ]\n"
    + "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
    + 'parameters { key: "merge_requests" value { string_value: "true" } }\n'
    + 'parameters { key: "io_binding" value { string_value: "true" } }\n'
)
FALLBACK_LINE = "model 'control_flow': buckets run plain, not on bound buffers: the graph has control flow (If)"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    repo: Path = tmp_path_factory.mktemp("bound_repo")
    add_model(repo, "bound", model_zoo.multi_io(), BOUND)
    add_model(repo, "control_flow", model_zoo.control_flow(), BOUND)
    with LocalServer(ServerConfig(model_repository=repo, supervise=False)) as srv:
        yield srv


def _infer(srv: LocalServer, model: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    client = grpcclient.InferenceServerClient(grpc_address(srv))
    tensors = []
    for name, array in feeds.items():
        tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    result = client.infer(model, tensors)
    return {name: result.as_numpy(name) for name in ("sum", "prod", "y") if result.get_output(name) is not None}


def test_concurrent_requests_on_bound_buffers_equal_plain_runs(served: LocalServer) -> None:
    log = Path(served.log_path).read_text()
    assert "executor=bound" in log  # the worker took the bound path
    rng = np.random.default_rng(3)
    requests = [
        {"a": rng.standard_normal((n, 3), dtype=np.float32), "b": rng.standard_normal((n, 3), dtype=np.float32)}
        for n in (1, 3, 2, 8, 5, 1, 4, 7, 2, 6, 1, 3)
    ]
    with ThreadPoolExecutor(max_workers=6) as pool:  # several requests per execute: merged, padded, split
        results = list(pool.map(lambda feeds: _infer(served, "bound", feeds), requests))
    for feeds, got in zip(requests, results):
        want = model_zoo.run_reference(model_zoo.multi_io(), feeds)
        assert got["sum"].tobytes() == want[0].tobytes() and got["prod"].tobytes() == want[1].tobytes()


def test_a_model_the_bound_path_cannot_run_is_served_and_logged_once(served: LocalServer) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(_infer(served, "control_flow", {"x": x})["y"], x)
    log = Path(served.log_path).read_text()
    assert log.count(FALLBACK_LINE) == 1  # one worker, one line
