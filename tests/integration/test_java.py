"""The Java client (client/java, JDK standard library only) against the session's server (`LocalServer`).

It is compiled with javac here; its example Main (MindSpore Lite's Java concurrent-inference flow: MSContext ->
RunnerConfig -> ModelParallelRunner.init -> getInputs / predict from 5 threads x 2 tasks -> free) runs against
the server, and every output it wrote is compared with the Python client's for the same input.
"""

from __future__ import annotations

import json
import urllib.request

import numpy as np
import pytest

from tests.support.other_clients import run_main
from tests.support.repository import unload

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("encoding", ["binary", "json"])
def test_multithreaded_predict_matches_the_python_client(
    server, java_classes, sample_files, python_answer, tmp_path, encoding
):
    extra = ["--json"] if encoding == "json" else []
    out = run_main(
        java_classes,
        server.http_url,
        "triton://mobilenetv2",
        str(sample_files / "input.bin"),
        "--dump",
        str(tmp_path),
        *extra,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "model: mobilenetv2\n" in out.stdout
    assert out.stdout.count("tensor name is:shape1 tensor size is:4000 tensor elements num is:1000") == 10
    assert "failed: 0" in out.stdout
    dumps = sorted(tmp_path.glob("out_*.bin"))
    assert [p.name for p in dumps] == [f"out_{t}_{k}.bin" for t in range(5) for k in range(2)]
    for p in dumps:
        got = np.fromfile(p, dtype="<f4").reshape(python_answer.shape)
        np.testing.assert_array_equal(got, python_answer, err_msg=p.name)


def test_upload_from_a_local_file(server, java_classes, sample_files, python_answer, tmp_path):
    """init with an ONNX path uploads it (with the admin key the server wrote) at 1 worker; outputs agree."""
    out = run_main(
        java_classes,
        server.http_url,
        str(sample_files / "mobilenetv2.onnx"),
        str(sample_files / "input.bin"),
        "--workers",
        "1",
        "--threads",
        "2",
        "--tasks",
        "1",
        "--dump",
        str(tmp_path),
    )
    uploaded = [line.split()[-1] for line in out.stdout.splitlines() if line.startswith("model: ")]
    try:
        assert out.returncode == 0, out.stderr[-3000:]
        (name,) = uploaded
        assert name.startswith("mobilenetv2_") and len(name) == len("mobilenetv2_") + 12
        with urllib.request.urlopen(f"{server.http_url}/v2/models/{name}/ready", timeout=10) as resp:
            assert resp.status == 200
        with urllib.request.urlopen(f"{server.http_url}/v2/models/{name}/config", timeout=10) as resp:
            batcher = json.load(resp)["dynamic_batching"]
        assert [int(v) for v in batcher["preferred_batch_size"]] == [2]  # auto-complete's CPU rule, as Python's
        dumps = sorted(tmp_path.glob("out_*.bin"))
        assert len(dumps) == 2
        for p in dumps:
            got = np.fromfile(p, dtype="<f4").reshape(python_answer.shape)
            # a different worker/thread layout than the repository model's: compare to float precision
            np.testing.assert_allclose(got, python_answer, rtol=1e-5, atol=1e-7, err_msg=p.name)
    finally:
        for name in uploaded:  # leave the server as it was
            unload(server, name)


def test_errors_reach_the_java_caller(server, java_classes, sample_files):
    out = run_main(
        java_classes, server.http_url, "triton://no_such_model", str(sample_files / "input.bin"), "--threads", "1"
    )
    assert out.returncode == 1
    assert "ModelParallelRunner init failed" in out.stderr and "model not found" in out.stderr
    assert "no_such_model" in out.stderr

    out = run_main(java_classes, server.grpc_url, "triton://mobilenetv2", "--threads", "1")
    assert out.returncode == 1 and "speaks KServe v2 over HTTP" in out.stderr

    out = run_main(
        java_classes, server.http_url, "triton://mobilenetv2", str(sample_files / "mobilenetv2.onnx"), "--threads", "1"
    )
    assert out.returncode == 1  # a file of the wrong size as input: refused before any request
    assert "needs 602112 bytes" in out.stderr
