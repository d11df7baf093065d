"""Scale-out on loopback: two local servers behind Debian's nginx (HTTP and gRPC), the client bound by name.

The nginx configuration is deploy/nginx/mslite-triton.conf.template, filled for loopback the way the official
nginx image fills it in docker-compose.yml. Each replica serves `mobilenetv2` from its own repository; the
client library is pointed at nginx with shared memory off and binds with `build_from_file("triton://...")`.
The kill run drives both protocols for LOAD_S seconds and SIGKILLs one replica at KILL_AT_S.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import mslite_triton as mslite
from mslite_contract import settings
from mslite_contract.owned_files import region_owner
from mslite_server import LocalServer, ServerConfig
from tests.support.processes import free_port
from tests.support.repository import GEN, ROOT
from tests.support.settled import settled

pytestmark = pytest.mark.integration

TEMPLATE = ROOT / "deploy" / "nginx" / "mslite-triton.conf.template"
MODEL = "mobilenetv2"
LOAD_S = 14.0  # bounded load: the whole kill run takes this long
KILL_AT_S = 5.0
GRPC_THREADS = 3
HTTP_THREADS = 1
_VARIABLE = re.compile(r"\$\{(MSLITE_[A-Z_]+)\}")


def fill_template(text: str, values: dict[str, str]) -> str:
    """envsubst restricted to `${MSLITE_*}`, as the nginx image does for defined variables (nginx's own stay)."""

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in values:
            raise KeyError(f"template variable {m.group(1)} has no value")
        return values[m.group(1)]

    return _VARIABLE.sub(sub, text)


@dataclass
class Proxy:
    """A running nginx in front of the replicas."""

    process: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int
    prefix: Path

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"grpc://127.0.0.1:{self.grpc_port}"

    def error_log(self) -> str:
        path = self.prefix / "error.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


@pytest.fixture(scope="module", autouse=True)
def no_shm():
    """Through a proxy a registered region would exist on one replica only: the client must send inline."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(settings.SHM_ENV, "0")
        yield


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory):
    """Two local servers, each with its own copy of the repository's mobilenetv2, started in parallel."""
    mobilenet = ROOT / "model_repository" / MODEL
    if not (mobilenet / "1" / "model.onnx").exists():
        GEN.save_model(GEN.build_mobilenetv2(), mobilenet / "1" / "model.onnx")
    servers = []
    for i in range(2):
        repo = tmp_path_factory.mktemp(f"replica{i}")
        shutil.copytree(mobilenet, repo / MODEL, ignore=shutil.ignore_patterns("input.bin"))
        # no supervisor: the killed replica must stay down, the proxy's failover is what is measured
        config = ServerConfig(model_repository=repo, load_models=(MODEL,), exit_timeout_s=5, supervise=False)
        servers.append(LocalServer(config))
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda s: s.start(), servers))
        for s in servers:
            assert [m.state for m in s.model_states()] == ["READY"], s.log_tail()
        yield servers
    finally:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda s: s.stop(timeout_s=10), servers))
        for s in servers:
            s.remove_workspace()


def nginx_binary() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
    if found is None:
        pytest.fail(
            "Debian's nginx is missing (scripts/check_system.sh says so too): "
            "apt-get update && apt-get install -y --no-install-recommends nginx"
        )
    return found


@pytest.fixture(scope="module")
def proxy(replicas, tmp_path_factory: pytest.TempPathFactory):
    """Debian's nginx on loopback with the shipped template filled for the two replicas."""
    nginx = nginx_binary()
    prefix = tmp_path_factory.mktemp("nginx")
    http_port, grpc_port = free_port(), free_port()
    body = fill_template(
        TEMPLATE.read_text(),
        {
            "MSLITE_HTTP_LISTEN": f"127.0.0.1:{http_port}",
            "MSLITE_GRPC_LISTEN": f"127.0.0.1:{grpc_port}",
            "MSLITE_HTTP_SERVERS": " ".join(
                f"server 127.0.0.1:{s.http_port} max_fails=1 fail_timeout=10s;" for s in replicas
            ),
            "MSLITE_GRPC_SERVERS": " ".join(
                f"server 127.0.0.1:{s.grpc_port} max_fails=1 fail_timeout=10s;" for s in replicas
            ),
        },
    )
    (prefix / "mslite-triton.conf").write_text(body)
    temp_paths = "\n".join(
        f"    {kind}_temp_path {prefix / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    # One process, no user switch: the test's temp directories are private to the user running it.
    (prefix / "nginx.conf").write_text(
        f"daemon off;\nmaster_process off;\npid {prefix / 'nginx.pid'};\nerror_log {prefix / 'error.log'} warn;\n"
        f"events {{ worker_connections 512; }}\n"
        f"http {{\n    access_log off;\n{temp_paths}\n    include {prefix / 'mslite-triton.conf'};\n}}\n"
    )
    cmd = [nginx, "-e", str(prefix / "error.log"), "-p", str(prefix), "-c", str(prefix / "nginx.conf")]
    check = subprocess.run([*cmd, "-t"], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
    process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    running = Proxy(process, http_port, grpc_port, prefix)
    try:
        deadline = time.monotonic() + 20
        while _status(f"{running.http_url}/v2/health/ready") != 200:
            assert process.poll() is None, f"nginx exited: {running.error_log()}"
            assert time.monotonic() < deadline, f"nginx not answering: {running.error_log()}"
            time.sleep(0.1)
        yield running
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


def _success_count(server: LocalServer) -> int:
    with urllib.request.urlopen(f"{server.http_url}/v2/models/{MODEL}/stats", timeout=5) as resp:
        stats = json.load(resp)["model_stats"]
    return sum(int(m["inference_stats"]["success"]["count"]) for m in stats)


def _runner(url: str) -> mslite.ModelParallelRunner:
    ctx = mslite.Context()
    ctx.server_url = url
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(f"triton://{MODEL}", ctx)
    return runner


def _predict(runner: mslite.ModelParallelRunner, x: np.ndarray) -> np.ndarray:
    inputs = runner.get_inputs()
    inputs[0].set_data_from_numpy(x)
    (out,) = runner.predict(inputs)
    return out.get_data_to_numpy()


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    return GEN.make_input_bin()


@pytest.fixture(scope="module")
def expected(replicas, image) -> np.ndarray:
    """MobileNetV2's output for the sample image, straight from one replica (no proxy)."""
    return _predict(_runner(replicas[0].grpc_url), image)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_bind_by_name_through_the_proxy(replicas, proxy, image, expected, protocol):
    url = proxy.grpc_url if protocol == "grpc" else proxy.http_url
    runner = _runner(url)
    (meta,) = runner.get_inputs()
    assert meta.name == "input" and meta.shape == [1, 3, 224, 224]
    out = _predict(runner, image)
    assert out.shape == (1, 1000)
    np.testing.assert_array_equal(out, expected)
    # settings.SHM_ENV=0 honoured: tensors went inline, no region of this process is registered on either replica
    regions = [r["name"] for s in replicas for r in s.http_json("GET", "/v2/systemsharedmemory/status", None) or []]
    assert [n for n in regions if region_owner(n) == os.getpid()] == [], regions


def test_requests_are_spread_over_both_replicas(replicas, proxy, image, expected):
    def counts() -> list[int]:
        return [_success_count(s) for s in replicas]

    before = settled(counts)
    http = _runner(proxy.http_url)
    for _ in range(8):
        np.testing.assert_array_equal(_predict(http, image), expected)
    grpc = _runner(proxy.grpc_url)
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: _predict(grpc, image), range(16)))
    for out in outs:
        np.testing.assert_array_equal(out, expected)
    served = [a - b for a, b in zip(settled(counts), before)]
    assert sum(served) == 24 and min(served) > 0, served


@dataclass
class KillRun:
    """What one bounded load run with a replica killed mid-run recorded."""

    calls: list[tuple[float, str, str | None]] = field(default_factory=list)  # (t, protocol, error or None)
    kill_t: float = 0.0
    survivor_served: tuple[int, int] = (0, 0)  # the survivor's success count (Triton's statistics) at kill, at end
    figures: dict[str, float] = field(default_factory=dict)

    def rate(self, t0: float, t1: float) -> float:
        """Successful predictions per second finishing within [t0, t1)."""
        done = sum(1 for t, _, err in self.calls if err is None and t0 <= t < t1)
        return done / (t1 - t0)

    @property
    def failures(self) -> list[tuple[float, str, str | None]]:
        return [c for c in self.calls if c[2] is not None]


@pytest.fixture(scope="module")
def kill_run(replicas, proxy, image, expected) -> KillRun:
    """Predict through nginx from gRPC and HTTP threads for LOAD_S s; SIGKILL replica 1 at KILL_AT_S.

    Runs after the tests above (module order), as it leaves one replica dead.
    """
    grpc = _runner(proxy.grpc_url)
    run = KillRun()
    lock = threading.Lock()
    start = time.monotonic()

    def drive(protocol: str) -> None:
        # The HTTP transport's pooled connections (gevent) only work in the thread that created them, so the
        # HTTP driver builds its own runner here, on a URL spelled differently so that it gets its own pool.
        try:
            runner = grpc if protocol == "grpc" else _runner(proxy.http_url + "/")
        except Exception as e:
            with lock:
                run.calls.append((time.monotonic() - start, protocol, f"build: {type(e).__name__}: {e}"))
            return
        while time.monotonic() - start < LOAD_S:
            try:
                out = _predict(runner, image)
                error = None if np.array_equal(out, expected) else "wrong output"
            except Exception as e:  # every failure is recorded, whatever its type
                error = f"{type(e).__name__}: {e}"
            with lock:
                run.calls.append((time.monotonic() - start, protocol, error))

    protocols = ["grpc"] * GRPC_THREADS + ["http"] * HTTP_THREADS
    threads = [threading.Thread(target=drive, args=(p,), daemon=True) for p in protocols]
    for t in threads:
        t.start()
    time.sleep(KILL_AT_S)
    victim = replicas[1].process
    assert victim is not None
    os.kill(victim.pid, signal.SIGKILL)
    run.kill_t = time.monotonic() - start
    at_kill = _success_count(replicas[0])
    for t in threads:
        t.join(LOAD_S + 120)
    assert not any(t.is_alive() for t in threads), "a predict call hung past the load window"
    run.survivor_served = (at_kill, _success_count(replicas[0]))
    run.figures = {
        "before_kill_per_s": run.rate(1.0, run.kill_t),
        "after_kill_per_s": run.rate(run.kill_t + 3.0, LOAD_S),
        "calls": float(len(run.calls)),
        "failed": float(len(run.failures)),
    }
    print(
        f"\nscale-out: {run.figures['before_kill_per_s']:.1f} predictions/s with 2 replicas, "
        f"{run.figures['after_kill_per_s']:.1f}/s after SIGKILL of one; "
        f"{len(run.calls)} calls, {len(run.failures)} failed"
    )
    return run


def test_the_survivor_serves_after_a_replica_is_killed(kill_run, replicas, proxy, image, expected, record_property):
    for key, value in kill_run.figures.items():  # the rates are figures to read, not bars: speed is for benchmarks
        record_property(key, value)
    assert not replicas[1].is_running()
    assert kill_run.figures["before_kill_per_s"] > 0
    at_kill, at_end = kill_run.survivor_served
    assert at_end > at_kill, kill_run.survivor_served  # the proxy sent the load to the survivor
    for protocol in ("grpc", "http"):  # both proxy paths kept serving after the kill
        assert any(p == protocol and err is None and t > kill_run.kill_t + 3.0 for t, p, err in kill_run.calls)
    # and the proxy keeps answering both protocols on the survivor
    for url in (proxy.grpc_url, proxy.http_url):
        np.testing.assert_array_equal(_predict(_runner(url), image), expected)


def test_no_failed_predict_when_a_replica_is_killed(kill_run):
    assert kill_run.failures == [], kill_run.failures[:5]
