"""The image built from deploy/Dockerfile (on the local base of the wheel's tritonserver 2.51), run as a user runs it:
`podman run` with the repository's models, the ports published on loopback, the admin key in the environment,
and a host folder as its /dev/shm (to see what it leaves there). Every check goes through the published ports
or the engine, as a user's would; the container is stopped last."""

from __future__ import annotations

import secrets
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from mslite_contract import settings
from mslite_contract.protocol import ADMIN_KEY_GRPC_HEADER, ADMIN_KEY_HEADER
from mslite_server.ports import pick_ports
from tests.containers.engine import (
    IMAGE,
    healthcheck,
    http_status,
    infer_tiny,
    inspect,
    mobilenet_reference,
    podman,
    successes,
    tcp_listeners,
    wait_ready,
)
from tests.support.repository import ROOT

STOP_WAIT_S = 60  # `podman stop -t`: longer than `serve`'s exit time-out (30 s)


@dataclass
class Running:
    name: str
    key: str
    http: int
    grpc: int
    metrics: int
    shm: Path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    shm = tmp_path_factory.mktemp("shm")
    http, grpc_, metrics = pick_ports([("127.0.0.1", 0, "free")] * 3)
    run = Running(f"mslite-test-image-{secrets.token_hex(3)}", secrets.token_hex(24), http, grpc_, metrics, shm)
    podman("run", "-d", "--name", run.name,
           "-e", settings.ADMIN_KEY_ENV,  # the value from this environment: never on a command line
           "-v", f"{ROOT / 'model_repository'}:/models:ro", "-v", f"{shm}:/dev/shm",
           "-p", f"127.0.0.1:{http}:8000", "-p", f"127.0.0.1:{grpc_}:8001", "-p", f"127.0.0.1:{metrics}:8002",
           IMAGE, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", settings.ADMIN_KEY_ENV: run.key})  # fmt: skip
    try:
        wait_ready(http, run.name)
        yield run
    finally:
        podman("rm", "-f", "-t", "0", run.name, check=False)


def test_ready_and_the_models_loaded(server):
    assert http_status(f"http://127.0.0.1:{server.http}/v2/health/ready") == 200
    for model in ("mobilenetv2", "tiny"):
        assert http_status(f"http://127.0.0.1:{server.http}/v2/models/{model}/ready") == 200
    assert infer_tiny(server.http) == [3.0, 5.0, 7.0, 9.0]


def test_inference_over_http_and_grpc_equals_onnxruntime(server):
    x_name, x, y_name, expected = mobilenet_reference()
    http = httpclient.InferenceServerClient(f"127.0.0.1:{server.http}", network_timeout=120)
    http_in = httpclient.InferInput(x_name, list(x.shape), "FP32")
    http_in.set_data_from_numpy(x, binary_data=True)
    got_http = http.infer("mobilenetv2", [http_in]).as_numpy(y_name)
    grpc_ = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc}")
    grpc_in = grpcclient.InferInput(x_name, list(x.shape), "FP32")
    grpc_in.set_data_from_numpy(x)
    got_grpc = grpc_.infer("mobilenetv2", [grpc_in], client_timeout=120).as_numpy(y_name)
    for got in (got_http, got_grpc):
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert int(np.argmax(got_http)) == int(np.argmax(expected))


def test_model_control_needs_the_key_from_the_environment(server):
    index = f"http://127.0.0.1:{server.http}/v2/repository/index"
    assert http_status(index, b"{}") == 403
    assert http_status(index, b"{}", {ADMIN_KEY_HEADER: "not-the-key"}) == 403
    assert http_status(index, b"{}", {ADMIN_KEY_HEADER: server.key}) == 200
    grpc_ = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc}")
    with pytest.raises(InferenceServerException, match=ADMIN_KEY_GRPC_HEADER):
        grpc_.get_model_repository_index()
    listed = grpc_.get_model_repository_index(headers={ADMIN_KEY_GRPC_HEADER: server.key}, as_json=True)
    assert {m["name"] for m in listed["models"]} == {"mobilenetv2", "tiny"}
    # the key reached the container through its environment only: not in what the engine runs
    assert server.key not in inspect(server.name, "{{json .Config.Cmd}} {{json .Config.Entrypoint}} {{json .Args}}")


def test_no_tcp_listener_but_the_gateway_and_metrics(server):
    # tritonserver's own HTTP and gRPC are Unix sockets inside the container
    assert tcp_listeners(server.name) == {8000, 8001, 8002}


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        return str(r.read().decode())


def test_metrics_are_scraped_on_the_published_port(server):
    before = successes(scrape(server.metrics), "tiny")
    for _ in range(3):
        infer_tiny(server.http)
    text = scrape(server.metrics)
    assert successes(text, "tiny") == before + 3
    assert "nv_inference_request_success" in text


def test_the_images_healthcheck_passes(server):
    assert inspect(server.name, "{{json .Config.Healthcheck.Test}}") == '["CMD","mslite-triton-healthcheck"]'
    out = healthcheck(server.name)
    assert out.returncode == 0, out.stdout + out.stderr


def test_stop_ends_it_with_exit_0_and_no_shared_memory_left(server):
    """Last: `podman stop` sends SIGTERM; `serve` stops tritonserver and removes its regions."""
    assert any(server.shm.iterdir())  # the python backend's regions while it serves
    started = time.monotonic()
    podman("stop", "-t", str(STOP_WAIT_S), server.name, timeout=STOP_WAIT_S + 60)
    took = time.monotonic() - started
    assert inspect(server.name, "{{.State.ExitCode}}") == "0"
    assert took < STOP_WAIT_S, f"the engine had to kill it after {took:.0f} s"
    assert not list(server.shm.iterdir()), sorted(p.name for p in server.shm.iterdir())
    log = podman("logs", server.name).stderr + podman("logs", server.name).stdout
    assert "mslite-triton: stopped" in log and server.key not in log
