"""MindIR models through the real server: exported by MindSpore here, converted on load, compared with MindSpore."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import mslite_triton as mslite
from mslite_contract.protocol import ADMIN_KEY_HEADER
from tests.support.other_clients import run_main
from tests.support.repository import unload
from tests.support.triton_direct import http_address

pytestmark = pytest.mark.integration

# find_spec, not an import: MindSpore's generated protobuf code needs the pure-Python protobuf, which it can
# only select before anything (tritonclient here) has loaded protobuf; the export runs in a child process.
if importlib.util.find_spec("mindspore") is None:
    pytest.skip(
        "mindspore is not installed: install the [mindir] extra (pip install '.[mindir]')", allow_module_level=True
    )

# Runs in a child process: MindSpore also costs ~0.5 GB and its own threads, which the test process should not keep.
EXPORT = r"""
import sys
import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor

class DenseRelu(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 3)
        self.relu = nn.ReLU()

    def construct(self, x):
        return self.relu(self.fc(x))

class SmallConv(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, pad_mode="same", has_bias=True)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2, 2)
        self.flat = nn.Flatten()
        self.fc = nn.Dense(8 * 8 * 8, 5)

    def construct(self, image):
        return self.fc(self.flat(self.pool(self.relu(self.bn(self.conv(image))))))

class TwoInputs(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 3)

    def construct(self, features, mask):
        return self.fc(features) * ops.cast(mask, ms.float32)

out = sys.argv[1]
rng = np.random.default_rng(0)
cases = {
    "dense": (
        DenseRelu(),
        [rng.standard_normal((2, 4)).astype(np.float32)],
        [rng.standard_normal((5, 4)).astype(np.float32)],
    ),
    "conv": (SmallConv(), [rng.random((1, 3, 16, 16), np.float32)], [rng.random((3, 3, 16, 16), np.float32)]),
    "two": (
        TwoInputs(),
        [rng.standard_normal((2, 4)).astype(np.float32), np.ones((2, 3), np.int64)],
        [rng.standard_normal((4, 4)).astype(np.float32), rng.integers(0, 2, (4, 3)).astype(np.int64)],
    ),
}
for name, (net, example, test) in cases.items():
    net.set_train(False)
    ms.export(net, *[Tensor(a) for a in example], file_name=f"{out}/{name}", file_format="MINDIR")
    expected = net(*[Tensor(a) for a in test]).asnumpy()
    np.savez(f"{out}/{name}.npz", expected=expected, *test)
"""


class Case:
    """A MindIR file, inputs of another batch size than it was exported with, and MindSpore's outputs."""

    def __init__(self, directory: Path, name: str) -> None:
        self.path = directory / f"{name}.mindir"
        data = np.load(directory / f"{name}.npz")
        self.inputs = [data[f"arr_{i}"] for i in range(len(data.files) - 1)]
        self.expected = data["expected"]


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    out = tmp_path_factory.mktemp("mindir")
    script = out / "export.py"  # MindSpore compiles a network from its source file: `python -c` will not do
    script.write_text(EXPORT)
    env = {**os.environ, "GLOG_v": "3"}
    done = subprocess.run(
        [sys.executable, str(script), str(out)], cwd=out, capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {name: Case(out, name) for name in ("dense", "conv", "two")}


CONFIG = json.dumps({"backend": "mslite"})


def _context(server) -> mslite.Context:
    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    ctx.cpu.thread_num = 1
    return ctx


def test_python_client_uploads_mindir_names_dtypes_and_batch_axis_come_through(server, cases):
    conv = mslite.Model()
    conv.build_from_file(str(cases["conv"].path), mslite.ModelType.MINDIR, _context(server))
    (image,) = conv.get_inputs()
    assert (image.name, image.dtype, image.shape) == ("image", mslite.DataType.FLOAT32, [1, 3, 16, 16])
    got = conv.predict([cases["conv"].inputs[0]])[0].get_data_to_numpy()  # batch 3; exported at batch 1
    np.testing.assert_allclose(got, cases["conv"].expected, rtol=1e-4, atol=1e-5)

    runner = mslite.ModelParallelRunner()
    ctx = _context(server)
    ctx.parallel.workers_num = 2
    runner.build_from_file(str(cases["two"].path), ctx)
    inputs = runner.get_inputs()
    assert [(t.name, t.dtype) for t in inputs] == [
        ("features", mslite.DataType.FLOAT32),
        ("mask", mslite.DataType.INT64),
    ]
    for tensor, array in zip(inputs, cases["two"].inputs):
        tensor.shape = list(array.shape)
        tensor.set_data_from_numpy(array)
    got = runner.predict(inputs)[0].get_data_to_numpy()
    np.testing.assert_allclose(got, cases["two"].expected, rtol=1e-4, atol=1e-5)


def test_mindir_in_a_model_repository_and_uploaded_over_http(server, repository, cases):
    dense = cases["dense"]
    version = repository / "mindir_dense" / "1"
    version.mkdir(parents=True)
    (version / "model.mindir").write_bytes(dense.path.read_bytes())
    (repository / "mindir_dense" / "config.pbtxt").write_text('backend: "mslite"\n')
    # curl's way (and the Java client's): Triton's load API, the file in the request, under any name
    body = {
        "parameters": {
            "config": CONFIG,
            "file:1/model.onnx": _b64(dense.path.read_bytes()),
        }
    }
    try:
        server.http_json("POST", "/v2/repository/models/mindir_dense/load", {}, timeout_s=120)
        server.http_json("POST", "/v2/repository/models/mindir_dense_upload/load", body, timeout_s=120)
        for name in ("mindir_dense", "mindir_dense_upload"):
            config = server.http_json("GET", f"/v2/models/{name}/config", None)
            assert config["max_batch_size"] > 0, config  # the dynamic batch axis came through
            assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [("x", "TYPE_FP32", [4])]
            x = dense.inputs[0]
            request = {
                "inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape), "data": x.ravel().tolist()}]
            }
            result = server.http_json("POST", f"/v2/models/{name}/infer", request)
            got = np.array(result["outputs"][0]["data"], np.float32).reshape(result["outputs"][0]["shape"])
            np.testing.assert_allclose(got, dense.expected, rtol=1e-4, atol=1e-5)
    finally:
        for name in ("mindir_dense", "mindir_dense_upload"):
            server.http_json("POST", f"/v2/repository/models/{name}/unload", {})


def _load_error(server, name: str, body: dict) -> str:
    """Load over Triton's HTTP API with the admin key, expecting a failure: its message."""
    request = urllib.request.Request(
        f"http://{http_address(server)}/v2/repository/models/{name}/load", data=json.dumps(body).encode(), method="POST"
    )
    request.add_header(ADMIN_KEY_HEADER, server.admin_key)
    with pytest.raises(urllib.error.HTTPError) as failed:
        urllib.request.urlopen(request, timeout=120)
    return str(json.loads(failed.value.read())["error"])


def test_ms_flatbuffer_and_unconvertible_mindir_are_refused_with_what_to_do(server, tmp_path):
    ms_file = b"\x1c\x00\x00\x00MSL2" + bytes(64)
    message = _load_error(server, "ms_file", {"parameters": {"config": CONFIG, "file:1/model.onnx": _b64(ms_file)}})
    assert "kLiteNotSupport" in message and ".ms format cannot be served" in message and ".mindir" in message
    broken = b"\x0a\x031.1\x12\x09MindSpore" + bytes(32)  # MindIR's header, then nothing MindSpore can load
    message = _load_error(server, "bad_mindir", {"parameters": {"config": CONFIG, "file:1/model.mindir": _b64(broken)}})
    assert "kLiteNotSupport: MindSpore could not convert" in message and "Traceback" not in message
    assert "/tmp" not in message

    (tmp_path / "net.ms").write_bytes(ms_file)
    with pytest.raises(RuntimeError, match=r"kLiteNotSupport: MindSpore Lite's \.ms format cannot be served"):
        mslite.Model().build_from_file(str(tmp_path / "net.ms"), mslite.ModelType.MINDIR_LITE, _context(server))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# MindSpore first: it selects the pure-Python protobuf, which it needs, only before anything has loaded protobuf.
LITE_INFER_AND_CONVERTER = r"""
import sys
import numpy as np
import mindspore as ms
from mindspore import nn, Tensor
import mslite_triton as mslite

url, mindir_path, expected_path, out = sys.argv[1:5]
ctx = mslite.Context()
ctx.server_url = url
ctx.cpu.thread_num = 1

class Scale(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(3, 2)

    def construct(self, values):
        return self.fc(values) * 2

net = Scale()
net.set_train(False)
model = mslite.LiteInfer(ms.train.Model(net), Tensor(np.ones((1, 3), np.float32)), context=ctx)
assert [t.name for t in model.get_inputs()] == ["values"], model.get_inputs()
x = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
got = model.predict([x])[0].get_data_to_numpy()
np.testing.assert_allclose(got, net(Tensor(x)).asnumpy(), rtol=1e-4, atol=1e-5)

mslite.Converter().convert(mslite.FmkType.MINDIR, mindir_path, out)
built = mslite.Model()
built.build_from_file(out + ".mindir", mslite.ModelType.MINDIR, ctx)
data = np.load(expected_path)
got = built.predict([data["arr_0"]])[0].get_data_to_numpy()
np.testing.assert_allclose(got, data["expected"], rtol=1e-4, atol=1e-5)
print("compared")
"""


def test_lite_infer_and_converter_with_mindspore_in_the_process(server, cases, tmp_path):
    script = tmp_path / "lite_infer.py"
    script.write_text(LITE_INFER_AND_CONVERTER)
    dense = cases["dense"]
    args = [server.grpc_url, str(dense.path), str(dense.path.with_suffix(".npz")), str(tmp_path / "converted")]
    env = {**os.environ, "GLOG_v": "3"}
    done = subprocess.run(
        [sys.executable, str(script), *args], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0 and "compared" in done.stdout, done.stderr[-3000:]
    assert (tmp_path / "converted.mindir").read_bytes()[:1] == b"\x08"  # ONNX by content


def test_java_client_uploads_mindir(server, cases, java_classes, tmp_path):
    dense = cases["dense"]
    (tmp_path / "input.bin").write_bytes(dense.inputs[0][:1].astype("<f4").tobytes())  # one sample, as Main sends
    out = run_main(
        java_classes,
        server.http_url,
        str(dense.path),
        str(tmp_path / "input.bin"),
        *("--workers", "1", "--threads", "1", "--tasks", "1", "--dump", str(tmp_path)),
    )
    uploaded = [line.split()[-1] for line in out.stdout.splitlines() if line.startswith("model: ")]
    try:
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
        (dump,) = tmp_path.glob("out_*.bin")
        got = np.fromfile(dump, dtype="<f4").reshape(dense.expected[:1].shape)
        np.testing.assert_allclose(got, dense.expected[:1], rtol=1e-4, atol=1e-5)
    finally:
        for name in uploaded:
            unload(server, name)
