"""Workers that never finish `execute`: ended when their model is unloaded or loaded again, or at a deadline.

One server of this module's own (its supervisor kills and heals workers on purpose), serving the `spin`
model, which runs as many loop iterations as a request asks: 2**40 keep a worker busy for good.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from mslite_contract.protocol import DEADLINE_PASSED
from mslite_server import LocalServer, ServerConfig
from mslite_server.workers import Worker, workers_of
from tests.support import model_zoo
from tests.support.eventually import eventually
from tests.support.repository import MINIMAL, add_model

pytestmark = pytest.mark.integration

FOREVER = 2**40  # loop iterations: days of work for one worker
ONE_WORKER = MINIMAL + "instance_group [ { kind: KIND_CPU, count: 1 } ]\n"
DEADLINE = 'parameters { key: "execute_deadline_s" value { string_value: "2" } }\n'
WAIT_S = 120  # generous: the machine may be busy; nothing here measures speed


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    repo = tmp_path_factory.mktemp("busy")
    add_model(repo, "spin", model_zoo.spin(), ONE_WORKER)
    add_model(repo, "spin_deadline", model_zoo.spin(), ONE_WORKER + DEADLINE)
    add_model(repo, "spin_strings", model_zoo.spin_strings(), ONE_WORKER + DEADLINE)
    config = ServerConfig(model_repository=repo, startup_timeout_s=240, orphan_grace_s=2)
    with LocalServer(config) as srv:
        yield srv


class Call(threading.Thread):
    """One inference of `model` for `n` loop iterations, in a thread; `outcome` is its count or its error."""

    def __init__(self, srv: LocalServer, model: str, n: int) -> None:
        super().__init__(daemon=True)
        self.srv, self.model, self.n = srv, model, n
        self.outcome: str | float | None = None

    def run(self) -> None:
        client = httpclient.InferenceServerClient(self.srv.http_url.split("://", 1)[1], network_timeout=600)
        data = httpclient.InferInput("n", [1], "INT64")
        data.set_data_from_numpy(np.array([self.n], np.int64))
        inputs = [data]
        if self.model == "spin_strings":
            text = httpclient.InferInput("s", [1], "BYTES")
            text.set_data_from_numpy(np.array([b"x"], np.object_))
            inputs.append(text)
        try:
            self.outcome = float(client.infer(self.model, inputs).as_numpy("count")[0])
        except Exception as e:  # noqa: BLE001 - the error is what the test reads
            self.outcome = str(e)
        finally:
            client.close()

    def result(self) -> str | float | None:
        self.join(WAIT_S)
        assert not self.is_alive(), f"no answer from '{self.model}' within {WAIT_S} s"
        return self.outcome


def _live(srv: LocalServer, instance: str) -> list[Worker]:
    return [w for w in workers_of(srv.process.pid) if w.instance == instance and w.state != "Z"]


def _busy_worker(srv: LocalServer, model: str) -> tuple[Call, int]:
    """A call that keeps the model's one worker inside `execute`, and that worker's pid."""
    [worker] = _live(srv, f"{model}_0_0")
    idle = _cpu_ticks(worker.pid)  # what its load and warm-up took
    call = Call(srv, model, FOREVER)
    call.start()
    eventually(
        lambda: _cpu_ticks(worker.pid) > idle + 50, "the worker busy", WAIT_S
    )  # half a second of CPU: inside the loop
    return call, worker.pid


def _cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime + stime


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def _load(srv: LocalServer, model: str, config: dict | None = None) -> None:
    body = {"parameters": {"config": json.dumps(config)}} if config is not None else {}
    srv.http_json("POST", f"/v2/repository/models/{model}/load", body, timeout_s=WAIT_S)


def test_an_unloaded_models_busy_worker_is_ended(server: LocalServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mslite_server.healer")
    heals = len(server.supervisor.heals)
    call, pid = _busy_worker(server, "spin")
    server.http_json("POST", "/v2/repository/models/spin/unload", {}, timeout_s=WAIT_S)
    eventually(lambda: _gone(pid), "end of the unloaded model's busy worker", WAIT_S)
    assert "is not healthy" in str(call.result())  # Triton's answer once its worker is gone
    assert f"(pid {pid}): model 'spin' was unloaded, and its worker was still running 2 s later" in caplog.text
    assert len(server.supervisor.heals) == heals  # a worker ended on purpose is no loss to heal
    _load(server, "spin")
    assert _finished(server, "spin", 5) == 5.0


def test_a_reloaded_models_old_busy_worker_is_ended_and_the_new_one_serves(server: LocalServer) -> None:
    heals = len(server.supervisor.heals)
    call, old = _busy_worker(server, "spin")
    config = server.http_json("GET", "/v2/models/spin/config", None)
    config.setdefault("parameters", {})["test.reload"] = {"string_value": str(time.monotonic())}
    _load(server, "spin", config)  # new instances under the same names; the old one's unload waits on its execute
    eventually(lambda: _gone(old), "end of the replaced busy worker", WAIT_S)
    assert "is not healthy" in str(call.result())
    assert [w.pid for w in _live(server, "spin_0_0")] != [old]
    assert _finished(server, "spin", 7) == 7.0
    assert len(server.supervisor.heals) == heals


@pytest.mark.parametrize("model", ["spin_deadline", "spin_strings"])  # the Python API's run; the C API's
def test_a_request_past_the_models_execute_deadline_is_stopped_and_its_worker_serves_on(
    server: LocalServer, model: str
) -> None:
    heals = len(server.supervisor.heals)
    [worker] = _live(server, f"{model}_0_0")
    call = Call(server, model, FOREVER)  # (not `_busy_worker`: on a busy machine 2 s may bring little CPU)
    call.start()
    outcome, pid = str(call.result()), worker.pid
    assert f"model '{model}': the request {DEADLINE_PASSED} (execute_deadline_s 2 s); its run was stopped" in outcome
    assert _finished(server, model, 3) == 3.0  # the same worker serves, within the deadline
    assert [w.pid for w in _live(server, f"{model}_0_0")] == [pid]
    assert len(server.supervisor.heals) == heals


def _finished(srv: LocalServer, model: str, n: int) -> str | float | None:
    """The outcome of a short call of `model` (retried while a heal is still loading it)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        call = Call(srv, model, n)
        call.start()
        outcome = call.result()
        if isinstance(outcome, float) or time.monotonic() > deadline:
            return outcome
        time.sleep(0.5)


def test_a_stop_ends_a_worker_busy_in_execute(tmp_path: Path) -> None:
    """Triton gives requests in flight its exit timeout at a stop; then the busy worker goes with it."""
    add_model(tmp_path, "spin", model_zoo.spin(), ONE_WORKER)
    config = ServerConfig(model_repository=tmp_path, startup_timeout_s=240, exit_timeout_s=2)
    with LocalServer(config) as srv:
        call, pid = _busy_worker(srv, "spin")
    eventually(lambda: _gone(pid), "end of the busy worker after the stop", WAIT_S)
    assert call.result() is not None and not isinstance(call.outcome, float)  # answered with an error
