"""perf_analyzer, Triton's C++ load generator, drives the server over gRPC and HTTP (the C++ face of the API)."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.repository import ROOT

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def perf_analyzer():
    from tests.support.tools import ToolsError, ensure_tools

    try:
        return ensure_tools(ROOT)  # a separate tools venv with tritonclient 2.40's binary (docs/tuning.md)
    except ToolsError as e:
        pytest.fail(f"perf_analyzer could not be set up: {e}")


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_perf_analyzer_smoke(server, perf_analyzer, protocol):
    url = (server.grpc_url if protocol == "grpc" else server.http_url).split("://", 1)[1]
    args = [str(perf_analyzer.perf_analyzer), "-m", "mobilenetv2", "-u", url, "-i", protocol,
            "--concurrency-range", "2", "--measurement-interval", "1000", "-s", "1000",
            "--max-trials", "3"]  # fmt: skip
    # any three windows are accepted (-s 1000): on a busy machine a stability bar fails a smoke test
    out = subprocess.run(args, env=perf_analyzer.env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, (out.stdout + out.stderr)[-2000:]
    assert "Concurrency: 2, throughput:" in out.stdout
    throughput = float(out.stdout.split("Concurrency: 2, throughput:")[1].split()[0])
    assert throughput > 0


def test_the_runner_reads_a_real_run(server, perf_analyzer):
    """The benchmarks' and tune's runner: its command line, environment and CSV against the real binary."""
    from pathlib import Path

    from tests.support.perf_analyzer import PerfRun, run

    url = server.grpc_url.split("://", 1)[1]
    spec = PerfRun(Path(perf_analyzer.perf_analyzer), "mobilenetv2", url, concurrency=2, interval_ms=1000,
                   shared_memory="none")  # fmt: skip
    # (registering shared memory takes the admin key on the served ports, which perf_analyzer cannot send)
    got = run(spec, perf_analyzer.env)  # any three windows are accepted: it always gives figures
    assert got is not None
    assert got.infer_s > 0 and 0 < got.p50_ms <= got.p99_ms
    assert got.row["Concurrency"] == "2" and "compute_infer" in got.breakdown_us
