"""The C++ example (examples/cpp/predict.cc, libcurl only) built with the system compiler and run against the server.

It sends MobileNetV2's sample input as KServe v2 binary tensor data from several threads; its output must equal
the Python client's bit for bit, and a server error must reach its caller with the server's message.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import mslite_triton as mslite
from tests.support.repository import GEN, ROOT

pytestmark = pytest.mark.integration

APT_LINE = "apt-get update && apt-get install -y --no-install-recommends g++ libcurl4-openssl-dev"


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("g++") is None:
        pytest.fail(f"no C++ compiler: {APT_LINE}")
    out = tmp_path_factory.mktemp("cpp") / "predict"
    source = ROOT / "examples" / "cpp" / "predict.cc"
    build = subprocess.run(
        ["g++", "-O2", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-o", str(out), str(source), "-lcurl", "-pthread"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if "curl/curl.h" in build.stderr:
        pytest.fail(f"libcurl's headers are missing (scripts/check_system.sh says so too): {APT_LINE}")
    assert build.returncode == 0, build.stderr
    return out


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cpp_input") / "input.bin"
    path.write_bytes(GEN.make_input_bin().astype("<f4").tobytes())
    return path


def python_predict(server, x: np.ndarray) -> np.ndarray:
    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    runner = mslite.ModelParallelRunner()
    runner.build_from_file("triton://mobilenetv2", ctx)
    inputs = runner.get_inputs()
    inputs[0].shape = list(x.shape)
    inputs[0].set_data_from_numpy(x)
    (out,) = runner.predict(inputs)
    return out.get_data_to_numpy()


def test_cpp_predict_matches_the_python_client(server, binary, image, tmp_path):
    dump = tmp_path / "out.bin"
    out = subprocess.run(
        [str(binary), server.http_url, "mobilenetv2", str(image), "--threads", "4", "--dump", str(dump)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("tensor name is:shape1 shape:[1,1000] tensor elements num is:1000") == 4
    assert "requests: 4, failed: 0" in out.stdout
    expected = python_predict(server, np.fromfile(image, dtype="<f4").reshape(1, 3, 224, 224))
    np.testing.assert_array_equal(np.fromfile(dump, dtype="<f4").reshape(1, 1000), expected)


def test_cpp_batch_of_two(server, binary, image, tmp_path):
    batch = tmp_path / "batch.bin"
    x = np.concatenate([np.fromfile(image, dtype="<f4"), np.fromfile(image, dtype="<f4")[::-1]]).reshape(2, 3, 224, 224)
    batch.write_bytes(x.tobytes())
    dump = tmp_path / "out.bin"
    out = subprocess.run(
        [str(binary), server.http_url, "mobilenetv2", str(batch), "--dump", str(dump)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "shape:[2,1000] tensor elements num is:2000" in out.stdout
    np.testing.assert_array_equal(np.fromfile(dump, dtype="<f4").reshape(2, 1000), python_predict(server, x))


def test_cpp_reports_the_server_error(server, binary, image):
    out = subprocess.run(
        [str(binary), server.http_url, "no_such_model", str(image)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1
    assert "predict failed: kLiteError: HTTP 404" in out.stderr and "no_such_model" in out.stderr
