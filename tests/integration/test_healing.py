"""Healing: a killed worker, tritonserver or gateway, or a hung tritonserver, under predicting clients.

Each case: 4 client threads call `ModelParallelRunner.predict` on a model whose weights were updated to
10 x I; one process is killed; the test waits for the supervisor's heal event and checks that no predict
failed and that every answer, before and after, used the updated weights.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import mslite_triton as mslite
from mslite_contract import settings
from mslite_server import LocalServer, ServerConfig
from mslite_server.errors import TritonUnavailableError
from mslite_server.ports import pick_ports
from mslite_server.workers import state_of, workers_of
from tests.support.eventually import eventually, throughout
from tests.support.processes import children_of
from tests.support.repository import GEN, build_repository
from tests.support.traffic import Traffic
from tests.support.updatable import build_updated

pytestmark = pytest.mark.integration

HEAL_DEADLINE_S = 60  # generous: the bar (10 s) is the chaos benchmark's, on a quiet machine
HANG_BAR_S = 15  # a predict answered after a gateway or the workers were stopped (asserted at twice this)
SECOND_DEATH_BAR_S = 10  # every model ready again after a death during a heal (asserted at twice this)
X = np.arange(1, 5, dtype=np.float32).reshape(1, 4)


class Clients(Traffic):
    """4 threads predicting until stopped; every answer must be the updated weights' (10 x)."""

    def __init__(self, runner: mslite.ModelParallelRunner) -> None:
        super().__init__(4)
        self.runner = runner

    def call(self) -> None:
        inputs = self.runner.get_inputs()
        inputs[0].set_data_from_numpy(X)
        y = self.runner.predict(inputs)[0].get_data_to_numpy()
        if not np.array_equal(y, 10 * X):
            raise AssertionError(f"answer {y.tolist()} is not the updated weights' {(10 * X).tolist()}")


@pytest.fixture(scope="module")
def healing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalServer, mslite.ModelParallelRunner]]:
    root = tmp_path_factory.mktemp("healing")
    repo = root / "repo"
    (repo / "tiny" / "1").mkdir(parents=True)
    (repo / "tiny" / "1" / "model.onnx").write_bytes(GEN.build_tiny().SerializeToString())
    (repo / "tiny" / "config.pbtxt").write_text('backend: "mslite"\n')
    config = ServerConfig(model_repository=repo, gateway=True, exit_timeout_s=5, startup_timeout_s=240)
    with LocalServer(config) as srv:
        runner = build_updated(srv.grpc_url, root)
        eventually(lambda: runner.served_name in srv.supervisor.catalog, "the model in the catalog", HEAL_DEADLINE_S)
        yield srv, runner


def _heal_after(srv: LocalServer, clients: Clients, kill: Callable[[], None], what: str, *, strict: bool = True):
    """Kill something under the clients; returns the supervisor's heal event once they are served again.

    `strict`: no predict may fail (a kill); a hang may outlast a predict's retry window on a busy machine.
    """
    clients.wait_for(20)
    before = len(srv.supervisor.heals)
    kill()
    eventually(lambda: len(srv.supervisor.heals) > before, f"a heal of the {what}", HEAL_DEADLINE_S)
    clients.wait_for(20)
    heals = srv.supervisor.heals[before:]
    aborted = [(h.what, h.ok, "code -6" in h.cause) for h in heals] == [("tritonserver", True, True)]
    if aborted and what != "tritonserver":
        # Triton 2.51 itself aborts now and then while a model is reloaded (docs/reliability.md); healed all the same
        pytest.xfail(f"tritonserver aborted (SIGABRT) during the {what}'s heal and was restarted: {heals}")
    assert [h.what for h in heals] == [what], heals
    assert heals[0].ok, heals
    assert clients.failures == [] or not strict
    return heals[0]


def test_a_dead_worker_reloads_only_its_model_with_its_weights(healing):
    srv, runner = healing
    name, restarts = runner.served_name, srv.restarts
    with Clients(runner) as clients:
        victim = next(w for w in workers_of(srv.process.pid) if w.model == name and w.state != "Z")
        heal = _heal_after(srv, clients, lambda: os.kill(victim.pid, signal.SIGKILL), "worker")
    assert heal.models == (name,)  # not 'tiny'
    assert srv.restarts == restarts  # tritonserver itself was not restarted
    assert clients.failures == []


def test_a_worker_that_crashes_leaves_its_python_stacks_in_the_server_log(healing):
    srv, runner = healing
    name = runner.served_name
    with Clients(runner) as clients:
        victim = next(w for w in workers_of(srv.process.pid) if w.model == name and w.state != "Z")
        _heal_after(srv, clients, lambda: os.kill(victim.pid, signal.SIGSEGV), "worker")  # healed as any death
    log = srv.log_path.read_text(errors="replace")
    assert "Fatal Python error: Segmentation fault" in log and "(most recent call first)" in log, log[-2000:]


def test_a_worker_killed_before_the_supervisor_saw_it_alive_is_replaced_too(healing):
    srv, runner = healing
    name = runner.served_name
    with Clients(runner) as clients:
        clients.wait_for(20)
        before = len(srv.supervisor.heals)
        first = next(w for w in workers_of(srv.process.pid) if w.model == name and w.state != "Z")
        os.kill(first.pid, signal.SIGKILL)
        eventually(lambda: len(srv.supervisor.heals) > before, "the first heal", HEAL_DEADLINE_S)
        # at once, before the supervisor's next look: the new worker was never seen alive
        new = next(w for w in workers_of(srv.process.pid) if w.model == name and w.state != "Z")
        os.kill(new.pid, signal.SIGKILL)
        eventually(lambda: len(srv.supervisor.heals) > before + 1, "a heal of the new worker", HEAL_DEADLINE_S)
        clients.wait_for(20)
    assert [h.what for h in srv.supervisor.heals[before:]] == ["worker", "worker"]
    live = [w for w in workers_of(srv.process.pid) if w.model == name and w.state != "Z"]
    assert len(live) == 2, live
    assert clients.failures == []


def test_a_dead_gateway_comes_back_on_its_ports(healing):
    srv, runner = healing
    old_pid = srv.gateway.pid
    with Clients(runner) as clients:
        heal = _heal_after(srv, clients, lambda: os.kill(old_pid, signal.SIGKILL), "gateway")
    assert srv.gateway.pid != old_pid and heal.models == ()
    assert clients.failures == []


def test_a_dead_tritonserver_comes_back_with_its_models_and_weights(healing):
    srv, runner = healing
    restarts, key = srv.restarts, srv.admin_key
    with Clients(runner) as clients:
        heal = _heal_after(srv, clients, lambda: os.kill(srv.process.pid, signal.SIGKILL), "tritonserver")
    assert srv.restarts == restarts + 1 and srv.admin_key == key
    assert runner.served_name in heal.models  # the uploaded model, from the launcher's copy
    assert {m.name: m.state for m in srv.model_states()}["tiny"] == "READY"
    assert clients.failures == []


def test_a_hung_tritonserver_is_killed_and_restarted(healing):
    srv, runner = healing
    restarts = srv.restarts
    with Clients(runner) as clients:
        hung = srv.process.pid
        heal = _heal_after(srv, clients, lambda: os.kill(hung, signal.SIGSTOP), "tritonserver", strict=False)
    assert "hung" in heal.cause and srv.restarts == restarts + 1
    assert srv.process.pid != hung
    # what failed, failed while the server was hung: no answer, or the connection reset by the kill
    assert all("ServerUnavailableError" in f or "ExecutionTimeoutError" in f for f in clients.failures)


def _predict_after_stopping(srv: LocalServer, runner: mslite.ModelParallelRunner, pids: list[int]):
    """SIGSTOP `pids`, then one predict; returns (its seconds from the stop, the heals since)."""
    before = len(srv.supervisor.heals)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    inputs = runner.get_inputs()
    inputs[0].set_data_from_numpy(X)
    y = runner.predict(inputs)[0].get_data_to_numpy()  # retried by the client until the heal
    answered_s = time.monotonic() - stopped
    assert np.array_equal(y, 10 * X), y
    eventually(lambda: len(srv.supervisor.heals) > before, "the heal's event", HEAL_DEADLINE_S)
    return answered_s, srv.supervisor.heals[before:]


def test_a_stopped_gateway_is_killed_and_replaced(healing):
    srv, runner = healing
    stopped, server_pid = srv.gateway.pid, srv.process.pid
    answered_s, heals = _predict_after_stopping(srv, runner, [stopped])
    assert answered_s < 2 * HANG_BAR_S, answered_s
    assert [h.what for h in heals] == ["gateway"] and "hung" in heals[0].cause and heals[0].ok, heals
    assert srv.gateway.pid != stopped and not _alive(stopped)
    assert srv.process.pid == server_pid  # tritonserver kept running


def test_stopped_workers_are_killed_before_they_run_again_and_tritonserver_lives(healing):
    # Let run again, a stub that Triton found unhealthy crashed tritonserver ~3 s later: it must die stopped.
    srv, runner = healing
    name, server_pid = runner.served_name, srv.process.pid
    stopped = [w.pid for w in workers_of(server_pid) if w.model == name and w.state != "Z"]
    assert len(stopped) == 2, stopped
    answered_s, heals = _predict_after_stopping(srv, runner, stopped)  # both: no worker left to answer
    assert answered_s < 2 * HANG_BAR_S, answered_s
    assert [h.what for h in heals] == ["worker"] and heals[0].models == (name,) and heals[0].ok, heals
    assert "stopped and killed" in heals[0].cause, heals
    assert not any(_alive(pid) for pid in stopped)
    for pid in stopped:  # as an operator's SIGCONT would: nothing left to continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    with Clients(runner) as clients:
        clients.wait_for(20)
        # the crash came about 3 s after SIGCONT: tritonserver must outlive a window well past that
        throughout(lambda: srv.process.poll() is None, "tritonserver running", 5.0)
        clients.wait_for(20)
    assert srv.process.pid == server_pid and srv.process.poll() is None
    assert clients.failures == []


def _alive(pid: int) -> bool:
    return state_of(pid) not in ("", "Z")


def test_stopping_a_hung_server_does_not_wait_its_exit_timeout(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="mslite_triton")  # what the stop decided, shown if this fails
    (tmp_path / "repo").mkdir()
    srv = LocalServer(ServerConfig(model_repository=tmp_path / "repo", gateway=True, exit_timeout_s=60))
    with srv:  # as `serve` runs it: gateway and supervisor
        os.kill(srv.process.pid, signal.SIGSTOP)  # as a deadlocked signal handler would: SIGTERM does nothing
        started = time.monotonic()
        srv.stop()
        assert time.monotonic() - started < 20  # was the exit timeout and more (60 + 5 s here)


def test_a_server_found_stopped_while_it_is_given_time_to_exit_is_killed(tmp_path: Path):
    # The stop's first look can miss a SIGSTOP that has not taken effect yet (it failed 3 of 13 full runs,
    # waiting the whole exit timeout): what it waits on is looked at again. Here the look is skipped.
    (tmp_path / "repo").mkdir()
    with LocalServer(ServerConfig(model_repository=tmp_path / "repo", exit_timeout_s=60, supervise=False)) as srv:
        pid = srv.process.pid
        os.kill(pid, signal.SIGSTOP)
        eventually(lambda: state_of(pid) == "T", "the server stopped", 10)
        started = time.monotonic()
        srv.tritonserver.terminate()  # SIGTERM, and up to the exit timeout (65 s) to act on it
        assert time.monotonic() - started < 10
        assert not _alive(pid)


def test_a_second_death_during_a_heal_does_not_wait_out_the_load_deadline(tmp_path: Path):
    # The heal's loads retried against the dead server until their 60 s deadline; now a death ends them.
    build_repository(tmp_path / "repo")
    config = ServerConfig(model_repository=tmp_path / "repo", exit_timeout_s=5, startup_timeout_s=240)
    started = time.monotonic()
    with LocalServer(config) as srv:
        # what loading every model takes on this machine now: on a busy one, more than the bar
        start_s = time.monotonic() - started
        supervisor = srv.supervisor
        ready = set(srv.loaded_models())
        eventually(lambda: set(supervisor.catalog) == ready, "every ready model in the catalog", HEAL_DEADLINE_S)
        first = srv.process.pid
        os.kill(first, signal.SIGKILL)

        def loading_again() -> bool:  # the new server is up and the heal is loading the catalog's models
            process = srv.process
            if process is None or process.pid == first or not srv.answers_live(1):
                return False
            try:
                return any(m.state == "LOADING" for m in srv.model_states())
            except TritonUnavailableError:
                return False

        eventually(loading_again, "the heal loading the models again", HEAL_DEADLINE_S)
        second = srv.process.pid
        os.kill(second, signal.SIGKILL)
        killed = time.monotonic()
        # the mechanism: the next try starts at once, not after the loads' 60 s deadline
        third = lambda: srv.process is not None and srv.process.pid != second  # noqa: E731
        eventually(third, "a third tritonserver", SECOND_DEATH_BAR_S)

        def all_ready() -> bool:
            try:
                return ready <= set(srv.loaded_models())
            except TritonUnavailableError:  # not listening yet
                return False

        limit_s = 2 * max(SECOND_DEATH_BAR_S, start_s)
        eventually(all_ready, f"every model ready again (start took {start_s:.1f} s)", limit_s)
        back_s = time.monotonic() - killed
        eventually(lambda: supervisor.heals and supervisor.heals[-1].ok, "the heal's event", HEAL_DEADLINE_S)
    assert back_s < limit_s, (back_s, start_s)
    assert not supervisor.gave_up and {h.what for h in supervisor.heals} == {"tritonserver"}, supervisor.heals


AUTOSTART_CLIENT = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    from tests.integration.test_healing import Clients
    from tests.support.eventually import eventually
    from tests.support.processes import children_of
    from tests.support.updatable import build_updated
    from mslite_triton import _endpoint

    url = _endpoint.server_url(None)  # starts the server of this program's own: a `serve --private` child
    runner = build_updated(None, Path(sys.argv[2]))  # no URL: the same server
    server = _endpoint.started_server()
    time.sleep(2)  # the supervisor's catalog learns the new model at its next poll
    tritonserver = lambda: [p for p, cmdline in children_of(server.pid) if "tritonserver" in cmdline]
    (first,) = tritonserver()
    with Clients(runner) as clients:
        clients.wait_for(20)
        os.kill(first, signal.SIGKILL)
        eventually(lambda: tritonserver() and tritonserver()[0] != first, "a new tritonserver", 120)
        clients.wait_for(20, timeout_s=120)
    print("healed", tritonserver()[0] != first, "failures", len(clients.failures))
    print("first failure", clients.failures[:1])
    print("same url", _endpoint.server_url(None) == url)
    """
)


def test_the_autostarted_server_heals_a_dead_tritonserver(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k not in (settings.URL_ENV, settings.AUTOSTART_ENV)}
    root = str(Path(__file__).resolve().parents[2])
    out = subprocess.run(
        [sys.executable, "-c", AUTOSTART_CLIENT, root, str(tmp_path)],
        env={**env, "PYTHONPATH": root}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "healed True failures 0" in out.stdout, out.stdout + out.stderr[-3000:]
    assert "same url True" in out.stdout


def test_serve_heals_a_dead_tritonserver(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    ports = [str(p) for p in pick_ports([("127.0.0.1", 0, "free")] * 3)]
    env = {**os.environ, settings.KEY_DIR_ENV: str(tmp_path / "keys")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mslite_server.cli", "serve", "--model-repository", str(repo),
         "--http-port", ports[0], "--grpc-port", ports[1], "--metrics-port", ports[2], "--exit-timeout-s", "5"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        lines = []
        while not lines or not lines[-1].startswith("serving"):
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            lines.append(proc.stdout.readline())
        # the server's folder, beside its log: the catalog keeps an uploaded model's files in its uploads/
        workspace = Path(next(line.split(None, 1)[1].strip() for line in lines if line.startswith("LOG "))).parent
        os.environ[settings.KEY_DIR_ENV] = env[settings.KEY_DIR_ENV]
        try:
            runner = build_updated(f"grpc://127.0.0.1:{ports[1]}", tmp_path)
        finally:
            del os.environ[settings.KEY_DIR_ENV]
        kept = workspace / "uploads" / runner.served_name
        eventually(kept.is_dir, "the supervisor's catalog to keep the model's files (its next poll)", HEAL_DEADLINE_S)
        with Clients(runner) as clients:
            clients.wait_for(20)
            server_pid = next(p for p in children_of(proc.pid) if "tritonserver" in p[1])[0]
            os.kill(server_pid, signal.SIGKILL)

            def started_again() -> bool:
                return any("tritonserver" in p[1] and p[0] != server_pid for p in children_of(proc.pid))

            eventually(started_again, "a new tritonserver under serve", HEAL_DEADLINE_S)
            clients.wait_for(20, timeout_s=HEAL_DEADLINE_S)
        assert clients.failures == []
        assert proc.poll() is None, "serve exited"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    log = proc.stderr.read()
    assert "tritonserver healed in" in log, log[-3000:]
