"""A keyless client cannot hang the gateway with compressed stream messages: they are inflated off its loop.

Four connections send gzip-compressed `ModelStreamInfer` messages (~65 KB each, 64 MiB inflated) while the
gateway's liveness probe is asked and another client predicts: every probe is answered, the supervisor
restarts nothing, every predict succeeds. How long each took is `benchmarks.chaos costs --attacks
stream-gzip`'s to report, not a bar here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mslite_server import LocalServer, ServerConfig
from tests.support.repository import GEN, add_model
from tests.support.stream_bombs import bomb_while_serving

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
    heals = len(srv.supervisor.heals)
    run = bomb_while_serving(srv, BOMB_S)
    assert run.sent >= 4, "the bombers sent nothing"
    assert run.probes and all(p < float("inf") for p in run.probes), run.probes  # each answered, in hang_s
    assert run.predicts and all(p < float("inf") for p in run.predicts), run.predicts
    assert not run.restarted and len(srv.supervisor.heals) == heals
