"""Reloading a live model through Triton's load API, with a config override, while clients keep calling it."""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from mslite_contract.protocol import ADMIN_KEY_HEADER
from mslite_server import LocalServer, ServerConfig
from mslite_server.workers import workers_of
from tests.support.eventually import eventually
from tests.support.repository import GEN, add_model
from tests.support.traffic import Traffic
from tests.support.triton_direct import http_address

pytestmark = pytest.mark.integration

MODEL = "reloaded"


def _config(count: int, **parameters: str) -> dict[str, Any]:
    return {
        "backend": "mslite",
        "max_batch_size": 8,
        "instance_group": [{"kind": "KIND_CPU", "count": count}],
        "parameters": {k: {"string_value": v} for k, v in parameters.items()},
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """A server of its own: a crash here must not take the session's server with it, nor be healed.

    Without the supervisor, a tritonserver that aborts stays dead, and the tests see it.
    """
    repo = tmp_path_factory.mktemp("reload")
    add_model(repo, MODEL, GEN.build_tiny(), 'backend: "mslite"\n')
    with LocalServer(ServerConfig(model_repository=repo, load_models=(), supervise=False)) as srv:
        yield srv


def _load(server: LocalServer, config: dict[str, Any]) -> None:
    """Load (or reload) the model with `config`; a refusal fails the test with Triton's message."""
    body = json.dumps({"parameters": {"config": json.dumps(config)}}).encode()
    req = urllib.request.Request(
        f"http://{http_address(server)}/v2/repository/models/{MODEL}/load", body, method="POST"
    )
    req.add_header(ADMIN_KEY_HEADER, server.admin_key or "")
    try:
        urllib.request.urlopen(req, timeout=60).close()
    except urllib.error.HTTPError as e:
        pytest.fail(f"load refused ({e.code}): {e.read().decode(errors='replace')}")
    except OSError as e:  # a server that aborted hangs in its signal handler
        pytest.fail(f"no answer to the load ({e}); server log:\n{server.log_tail(15)}")


class _Traffic(Traffic):
    """Raw gRPC clients calling the model in a loop, one connection per thread."""

    def __init__(self, server: LocalServer, clients: int = 3) -> None:
        super().__init__(clients, pause_after_failure_s=0.05)
        self.url = server.grpc_url.split("://", 1)[1]
        self._local = threading.local()

    def call(self) -> None:
        if not hasattr(self._local, "client"):
            self._local.client = grpcclient.InferenceServerClient(self.url)
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        item = grpcclient.InferInput("x", [1, 4], "FP32")
        item.set_data_from_numpy(x)
        y = self._local.client.infer(MODEL, [item], client_timeout=30).as_numpy("y")
        assert np.array_equal(y, x * 2 + 1)


def _series_pids(server: LocalServer, name: str) -> dict[str, set[int]]:
    """instance -> the worker pids that have a `name` series of the model on the metrics page."""
    text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    found: dict[str, set[int]] = {}
    for line in text.splitlines():
        if line.startswith(name + "{") and f'model="{MODEL}"' in line:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            found.setdefault(labels["instance"], set()).add(int(labels["pid"]))
    return found


def _workers(server: LocalServer) -> dict[str, int]:
    assert server.process is not None
    return {w.instance: w.pid for w in workers_of(server.process.pid) if w.model == MODEL}


def _wait_workers(server: LocalServer, count: int, timeout_s: float = 60) -> dict[str, int]:
    """instance -> pid of the model's workers, once they are exactly instances 0..count-1 (old ones exit late)."""
    expected = {f"{MODEL}_0_{k}" for k in range(count)}

    def exactly() -> dict[str, int]:
        workers = _workers(server)
        assert set(workers) == expected, f"workers {sorted(workers)}, expected {sorted(expected)}"
        return workers

    return eventually(exactly, "the model's workers", timeout_s, pause_s=0.2)


def _wait_series(server: LocalServer, expected: dict[str, set[int]], timeout_s: float = 30) -> None:
    def exactly() -> bool:
        got = _series_pids(server, "mslite_execution_ms_count")
        assert got == expected, f"execution series by instance: {got}, expected {expected}"
        return True

    eventually(exactly, "one execution series per live worker", timeout_s, pause_s=0.5)


def test_reloads_with_metrics_under_traffic_keep_the_server_serving(server: LocalServer) -> None:
    _load(server, _config(2))
    pid = server.process.pid if server.process else 0
    with _Traffic(server) as traffic:
        traffic.wait_for(50)
        for i in range(5):  # a changed parameter each time: a real reload, new workers beside the old ones
            _load(server, _config(2, metrics="true", intra_op_thread_count=str(1 + i % 2)))
            traffic.wait_for(50)
            assert server.is_running(), f"tritonserver died after reload {i + 1}:\n{server.log_tail(20)}"
        # the new workers flush their metrics (once a second) under the traffic: each live worker publishes its
        # own series, the old workers' series left with them
        _wait_series(server, {name: {worker} for name, worker in _wait_workers(server, 2).items()})
        traffic.wait_for(50)
    assert server.process is not None and server.process.pid == pid and server.is_running()
    assert "Signal (" not in server.log_tail(400)


def test_more_instances_through_a_reload(server: LocalServer) -> None:
    _load(server, _config(1))
    first = _wait_workers(server, 1)
    # only the count differs: Triton adds an instance to the live model rather than reloading it
    _load(server, _config(2))
    workers = _wait_workers(server, 2)
    assert workers[f"{MODEL}_0_0"] == first[f"{MODEL}_0_0"]
    with _Traffic(server, clients=4) as traffic:
        traffic.wait_for(200)
        _wait_series(server, {name: {worker} for name, worker in workers.items()})  # both workers served
    assert traffic.failures == []
