"""A keyless client cannot hang the gateway with compressed stream messages: they are inflated off its loop.

Four connections send gzip-compressed `ModelStreamInfer` messages (~65 KB each, 64 MiB inflated) while the
gateway's liveness probe is asked and another client predicts: every probe is answered, the supervisor
restarts nothing, every predict succeeds. How long each took is `benchmarks.chaos costs --attacks
stream-gzip`'s to report, not a bar here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from mslite_server import LocalServer, ServerConfig
from tests.support.repository import GEN, add_model
from tests.support.stream_bombs import StreamBombers

pytestmark = pytest.mark.integration

BOMB_S = 10.0


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    repo = tmp_path_factory.mktemp("bombs_repo")
    add_model(repo, "tiny", GEN.build_tiny())
    config = ServerConfig(model_repository=repo, gateway=True, exit_timeout_s=5, startup_timeout_s=240)
    with LocalServer(config) as server:
        yield server


def test_four_stream_bombers_leave_the_probe_answered_and_another_clients_predicts_served(srv):
    assert srv.gateway is not None and srv.supervisor is not None
    pid, heals = srv.gateway.pid, len(srv.supervisor.heals)
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    probes: list[bool] = []
    predicts: list[bool] = []

    def probe() -> None:
        while not done.is_set():
            # the supervisor's own probe, with its patience: a hung loop would miss it
            probes.append(srv.gateway_answers_live(timeout_s=srv.config.hang_s))
            time.sleep(0.2)

    done = threading.Event()
    bombers = StreamBombers(srv.grpc_port, count=4).start()
    prober = threading.Thread(target=probe)
    prober.start()
    try:
        end = time.monotonic() + BOMB_S
        while time.monotonic() < end:
            item = grpcclient.InferInput("x", [1, 4], "FP32")
            item.set_data_from_numpy(x)
            try:
                y = client.infer("tiny", [item], client_timeout=60).as_numpy("y")
                predicts.append(bool(np.array_equal(y, x * 2 + 1)))
            except grpcclient.InferenceServerException:
                predicts.append(False)
    finally:
        done.set()
        bombers.stop()
        prober.join(timeout=60)
        client.close()
    assert bombers.sent >= 4, "the bombers sent nothing"
    assert probes and all(probes), probes
    assert predicts and all(predicts), predicts
    assert srv.gateway is not None and srv.gateway.pid == pid and len(srv.supervisor.heals) == heals
