"""Crashed workers, graceful shutdown, timeouts and the admin key, on real servers."""

from __future__ import annotations

import base64
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

import mslite_triton as mslite
from mslite_contract import admin_key, settings
from mslite_server import LocalServer, ServerConfig
from mslite_server.workers import workers_of
from mslite_triton.errors import ExecutionTimeoutError
from tests.support import model_zoo
from tests.support.eventually import eventually
from tests.support.processes import free_port
from tests.support.repository import GEN

pytestmark = pytest.mark.integration

PYTHON_MODEL = b"""
import os
class TritonPythonModel:
    def execute(self, requests):
        os.system("touch /tmp/pwned")
"""


def test_admin_apis_need_the_key_on_both_protocols(server):
    path = admin_key.key_path("127.0.0.1", server.grpc_port)
    assert path.read_text().strip() == server.admin_key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    config = json.dumps({"name": "evil", "backend": "python"})
    body = {"parameters": {"config": config, "file:1/model.py": base64.b64encode(PYTHON_MODEL).decode()}}
    req = urllib.request.Request(
        f"{server.http_url}/v2/repository/models/evil/load", data=json.dumps(body).encode(), method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as http_err:
        urllib.request.urlopen(req, timeout=10)
    assert http_err.value.code == 403
    client = grpcclient.InferenceServerClient(server.grpc_url.split("://", 1)[1])
    try:
        with pytest.raises(InferenceServerException, match="restricted"):
            client.load_model("evil", config=config, files={"file:1/model.py": PYTHON_MODEL})
        with pytest.raises(InferenceServerException, match="restricted"):
            client.register_system_shared_memory("x", "/x", 64)
        assert client.is_model_ready("tiny")  # inference and metadata stay open
    finally:
        client.close()
    assert "evil" not in {m.name for m in server.model_states()}


def _hammer(runner, stop: threading.Event, failures: list, counts: list) -> None:
    x = np.ones(4, np.float32)
    while not stop.is_set():
        try:
            inputs = runner.get_inputs()
            inputs[0].set_data_from_numpy(x)
            y = runner.predict(inputs)[0].get_data_to_numpy()
            assert np.array_equal(y, np.full((1, 4), 3.0, np.float32)), y
            counts.append(1)
        except Exception as e:  # every failure is recorded and fails the test
            failures.append(repr(e))


def test_killed_workers_are_replaced_without_failed_predicts(tmp_path: Path):
    (tmp_path / "repo").mkdir()
    model = tmp_path / "tiny.onnx"
    model.write_bytes(GEN.build_tiny().SerializeToString())
    with LocalServer(ServerConfig(model_repository=tmp_path / "repo", exit_timeout_s=5)) as srv:
        ctx = mslite.Context()
        ctx.server_url = srv.grpc_url
        ctx.parallel.workers_num = 2
        runner = mslite.ModelParallelRunner()
        runner.build_from_file(str(model), ctx)
        stop, failures, counts = threading.Event(), [], []
        threads = [threading.Thread(target=_hammer, args=(runner, stop, failures, counts)) for _ in range(8)]
        for t in threads:
            t.start()
        try:
            for _ in range(2):
                served = len(counts)
                eventually(lambda n=served: len(counts) >= n + 20, "20 predicts served before the kill")
                victim = next(w for w in workers_of(srv.process.pid) if w.state != "Z")
                os.kill(victim.pid, signal.SIGKILL)
                heals = len(srv.supervisor.heals)
                eventually(lambda n=heals: len(srv.supervisor.heals) > n, "the dead worker's heal", 60)
                assert [h.what for h in srv.supervisor.heals[heals:]] == ["worker"], "dead worker not replaced"
            served = len(counts)
            eventually(lambda: len(counts) >= served + 20, "20 predicts served after the heals")
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
        assert failures == []
        assert len(counts) > 50
        workers = [w for w in workers_of(srv.process.pid) if w.state != "Z"]
        assert len(workers) == 2  # the dead ones stay registered in Triton until a restart (see supervisor.py)


def test_graceful_shutdown_under_load(tmp_path: Path, repository: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "tiny").symlink_to(repository / "tiny")
    env = {**os.environ, settings.KEY_DIR_ENV: str(tmp_path / "keys")}
    ports = [str(free_port()) for _ in range(3)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mslite_server.cli", "serve", "--model-repository", str(repo),
         "--http-port", ports[0], "--grpc-port", ports[1], "--metrics-port", ports[2], "--exit-timeout-s", "10"],
        env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        lines = []
        while not any(line.startswith("serving") for line in lines):
            line = proc.stdout.readline()
            assert line, "serve exited early"
            lines.append(line)
        prefix = _server_prefix(proc.pid)
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{ports[1]}")
        calls: list[tuple[float, float, object]] = []  # (began, ended, output or error), in any order
        stop = threading.Event()

        def loop() -> None:  # until told to stop: the load lasts through the signal and the exit
            item = grpcclient.InferInput("x", [1, 4], "FP32")
            item.set_data_from_numpy(np.ones((1, 4), np.float32))
            while not stop.is_set():
                began = time.monotonic()
                try:
                    y = client.infer("tiny", [item], client_timeout=60).as_numpy("y")
                    calls.append((began, time.monotonic(), y))
                except InferenceServerException as e:
                    calls.append((began, time.monotonic(), e))
                    time.sleep(0.01)  # a closed port refuses at once: do not spin

        threads = [threading.Thread(target=loop) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            eventually(lambda: sum(isinstance(r, np.ndarray) for _, _, r in calls) >= 20, "20 calls served", 60)
            signalled = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
            exited = time.monotonic()
            eventually(lambda: sum(began > exited for began, _, _ in calls) >= 4, "calls after the exit", 30)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=90)
        in_flight = [r for began, ended, r in calls if began < signalled < ended]
        served = [r for _, _, r in calls if isinstance(r, np.ndarray)]
        refused = [(began, r) for began, _, r in calls if not isinstance(r, np.ndarray)]
        # load at the signal, and it was served (a call that began just before may still reach a closed door)
        assert any(isinstance(r, np.ndarray) for r in in_flight), f"none of {len(in_flight)} calls in flight served"
        assert any(began > signalled for began, _ in refused), "nothing refused after the signal"
        assert all(np.array_equal(y, np.full((1, 4), 3.0)) for y in served)
        for _, e in refused:  # after shutdown began, new requests are refused, never half-served
            assert "INTERNAL" not in str(e.status()), e
        print(f"shutdown under load: {len(served)} served, {len(refused)} refused, exit in {exited - signalled:.1f} s")
        assert not list(Path("/dev/shm").glob(f"{prefix}*"))
        assert not list((tmp_path / "keys").glob("*.key"))
    finally:
        if proc.poll() is None:
            proc.kill()


def _server_prefix(cli_pid: int) -> str:
    for entry in Path("/proc").iterdir():
        try:
            args = (entry / "cmdline").read_bytes().decode().split("\0")
        except (OSError, ValueError):
            continue
        if args and args[0].endswith("tritonserver") and str(cli_pid) in "".join(args):
            flag = next(a for a in args if "shm-region-prefix-name=" in a)
            return flag.split("shm-region-prefix-name=", 1)[1]
    raise AssertionError("server process not found")


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_execution_timeout_fails_the_request_cleanly(server, monkeypatch, tmp_path, protocol):
    """A request the server is still running after `settings.TIMEOUT_S_ENV` fails with ExecutionTimeoutError."""
    path = tmp_path / "slow.onnx"
    path.write_bytes(model_zoo.slow(rounds=240).SerializeToString())  # >= 1 s a request even on a quiet machine
    url = server.grpc_url if protocol == "grpc" else server.http_url
    ctx = mslite.Context()
    ctx.server_url = url
    ctx.cpu.thread_num = 1
    ctx.parallel.workers_num = 1
    loaded = mslite.ModelParallelRunner()
    loaded.build_from_file(str(path), ctx)  # the upload and load, under the default timeout
    monkeypatch.setenv(settings.TIMEOUT_S_ENV, "0.25")
    # the same server by another name: a URL the client has no connections to yet, so they take the variable
    ctx.server_url = url.replace("127.0.0.1", "localhost")
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(f"triton://{loaded.served_name}", ctx)
    inputs = runner.get_inputs()
    inputs[0].set_data_from_numpy(np.ones((1, 1), np.float32))
    started = time.monotonic()
    with pytest.raises(ExecutionTimeoutError):  # gRPC: "Deadline Exceeded"; HTTP: "no answer from <url> within 0 s"
        runner.predict(inputs)
    assert 0.25 <= time.monotonic() - started < 60  # the timeout itself, not an early failure
