"""The Java client (client/java, JDK standard library only) against the session's server (`LocalServer`).

It is compiled with javac here; its example Main (MindSpore Lite's Java concurrent-inference flow: MSContext ->
RunnerConfig -> ModelParallelRunner.init -> getInputs / predict from 5 threads x 2 tasks -> free) runs against
the server, and every output it wrote is compared with the Python client's for the same input.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import mslite_triton as mslite
from mslite_contract import settings
from tests.support.repository import GEN, ROOT

pytestmark = pytest.mark.integration

JAVA = ROOT / "client" / "java"
APT_LINE = "apt-get update && apt-get install -y --no-install-recommends default-jdk-headless"


def require_jdk() -> None:
    """Fail (never skip) without javac and java: `make test` promises every client, as for C++ and nginx."""
    missing = [tool for tool in ("javac", "java") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"no JDK ({' and '.join(missing)} not on PATH; scripts/check_system.sh says so too): {APT_LINE}")


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_jdk()
    out = tmp_path_factory.mktemp("java_classes")
    sources = sorted(str(p) for p in (JAVA / "src").rglob("*.java")) + [str(JAVA / "examples" / "Main.java")]
    build = subprocess.run(
        ["javac", "-Xlint:all", "-Werror", "--release", "17", "-d", str(out), *sources],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("java_files")
    (d / "input.bin").write_bytes(GEN.make_input_bin().astype("<f4").tobytes())
    (d / "mobilenetv2.onnx").write_bytes(GEN.build_mobilenetv2().SerializeToString())
    return d


@pytest.fixture(scope="module")
def python_output(server, files) -> np.ndarray:
    """What the Python client returns for the same input, from the repository's mobilenetv2."""
    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    runner = mslite.ModelParallelRunner()
    runner.build_from_file("triton://mobilenetv2", ctx)
    inputs = runner.get_inputs()
    inputs[0].set_data_from_numpy(np.fromfile(files / "input.bin", dtype="<f4").reshape(1, 3, 224, 224))
    (out,) = runner.predict(inputs)
    return out.get_data_to_numpy()


def run_main(classes: Path, url: str, *args: str, timeout: int = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, settings.URL_ENV: url}
    return subprocess.run(
        ["java", "-cp", str(classes), "Main", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.mark.parametrize("encoding", ["binary", "json"])
def test_multithreaded_predict_matches_the_python_client(server, classes, files, python_output, tmp_path, encoding):
    extra = ["--json"] if encoding == "json" else []
    out = run_main(
        classes, server.http_url, "triton://mobilenetv2", str(files / "input.bin"), "--dump", str(tmp_path), *extra
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "model: mobilenetv2\n" in out.stdout
    assert out.stdout.count("tensor name is:shape1 tensor size is:4000 tensor elements num is:1000") == 10
    assert "failed: 0" in out.stdout
    dumps = sorted(tmp_path.glob("out_*.bin"))
    assert [p.name for p in dumps] == [f"out_{t}_{k}.bin" for t in range(5) for k in range(2)]
    for p in dumps:
        got = np.fromfile(p, dtype="<f4").reshape(python_output.shape)
        np.testing.assert_array_equal(got, python_output, err_msg=p.name)


def test_upload_from_a_local_file(server, classes, files, python_output, tmp_path):
    """init with an ONNX path uploads it (with the admin key the server wrote) at 1 worker; outputs agree."""
    out = run_main(
        classes,
        server.http_url,
        str(files / "mobilenetv2.onnx"),
        str(files / "input.bin"),
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
            got = np.fromfile(p, dtype="<f4").reshape(python_output.shape)
            # a different worker/thread layout than the repository model's: compare to float precision
            np.testing.assert_allclose(got, python_output, rtol=1e-5, atol=1e-7, err_msg=p.name)
    finally:
        for name in uploaded:  # leave the server as it was
            unload(server, name)


def unload(server, name: str) -> None:
    req = urllib.request.Request(f"{server.http_url}/v2/repository/models/{name}/unload", data=b"{}", method="POST")
    key = getattr(server, "admin_key", None)
    if key:
        req.add_header("mslite-key", key)
    with urllib.request.urlopen(req, timeout=60):
        pass


def test_errors_reach_the_java_caller(server, classes, files):
    out = run_main(classes, server.http_url, "triton://no_such_model", str(files / "input.bin"), "--threads", "1")
    assert out.returncode == 1
    assert "ModelParallelRunner init failed" in out.stderr and "model not found" in out.stderr
    assert "no_such_model" in out.stderr

    out = run_main(classes, server.grpc_url, "triton://mobilenetv2", "--threads", "1")
    assert out.returncode == 1 and "speaks KServe v2 over HTTP" in out.stderr

    out = run_main(classes, server.http_url, "triton://mobilenetv2", str(files / "mobilenetv2.onnx"), "--threads", "1")
    assert out.returncode == 1  # a file of the wrong size as input: refused before any request
    assert "needs 602112 bytes" in out.stderr
