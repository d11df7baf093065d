"""The client library against the real server: seed scripts, Model, ModelParallelRunner, errors."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import pytest

import mslite_triton as mslite
from mslite_contract import settings
from mslite_triton._transport import Transport
from mslite_triton.errors import (
    InvalidInputError,
    ModelLoadError,
    MSLiteError,
    ServerUnavailableError,
    ServiceDenyError,
)
from tests.support.eventually import eventually
from tests.support.model_zoo import broken_bytes, run_reference, slow, small_classifier
from tests.support.processes import descendants_of, is_gone
from tests.support.repository import GEN, ROOT, ZOO

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ONNX files on the client's disk, as a user would have them."""
    d = tmp_path_factory.mktemp("client_files")
    (d / "mobilenetv2.onnx").write_bytes(GEN.build_mobilenetv2().SerializeToString())
    (d / "input.bin").write_bytes(GEN.make_input_bin().tobytes())
    for name, build in ZOO.items():
        (d / f"{name}.onnx").write_bytes(build().SerializeToString())
    (d / "tiny.onnx").write_bytes(GEN.build_tiny().SerializeToString())
    # MobileNetV2's interface under the HTTP upload limit: one file per HTTP case, so each really uploads
    for seed in (0, 1):
        (d / f"small_classifier_{seed}.onnx").write_bytes(small_classifier(seed).SerializeToString())
    return d


# gRPC uploads MobileNetV2 itself; HTTP, whose uploads stop at 2 MiB, a model of the same interface
UPLOADS = {"grpc": "mobilenetv2.onnx", "http": "small_classifier_0.onnx"}


def _reference(files: Path, name: str) -> onnx.ModelProto:
    return onnx.load(str(files / name))


def _context(server, protocol: str = "grpc", workers: int = 2) -> mslite.Context:
    ctx = mslite.Context()
    ctx.server_url = server.grpc_url if protocol == "grpc" else server.http_url
    ctx.cpu.thread_num = 1
    ctx.parallel.workers_num = workers
    return ctx


@pytest.mark.parametrize("script", ["quick_start_parallel_python.py", "quick_start_python.py"])
def test_seed_scripts_run_unchanged(server, files, tmp_path, script):
    (tmp_path / "model").mkdir()
    shutil.copy(files / "mobilenetv2.onnx", tmp_path / "model" / "mobilenetv2.onnx")
    shutil.copy(files / "input.bin", tmp_path / "model" / "input.bin")
    env = {**os.environ, settings.URL_ENV: server.grpc_url}
    parallel = "parallel" in script
    run = [str(ROOT / "scripts" / "whole_lines.py")] if parallel else []  # as `make demo` runs it
    proc = subprocess.run(
        [sys.executable, *run, str(ROOT / "examples" / script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    x = np.fromfile(files / "input.bin", dtype=np.float32).reshape(1, 3, 224, 224)
    (expected,) = run_reference(GEN.build_mobilenetv2(), {"input": x})
    runs = 10 if parallel else 1
    assert proc.stdout.count("output data is:") == runs
    for value in expected.flatten()[:5]:
        assert proc.stdout.count(str(value)) >= runs, value
    assert "tensor elements num is:1000" in proc.stdout
    if parallel:  # 5 threads print at once: each line whole, one result's values on one line
        shown = " ".join(str(v) for v in expected.flatten()[:5])
        whole = (
            r"parallel id:  [0-4]  \| task index:  [12]  \| run once time:  \S+  s",
            r"tensor name is:\S+ tensor size is:4000 tensor elements num is:1000",
            re.escape(f"output data is: {shown} "),
        )
        lines = proc.stdout.splitlines()
        assert lines.pop().startswith("total run time: ")
        bad = [line for line in lines if not any(re.fullmatch(w, line) for w in whole)]
        assert not bad and len(lines) == 3 * runs, proc.stdout


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_model_happy_path(server, files, protocol):
    loaded = set(server.loaded_models())
    model = mslite.Model()
    model.build_from_file(str(files / UPLOADS[protocol]), mslite.ModelType.MINDIR, _context(server, protocol))
    if protocol == "http":  # uploaded here, over HTTP, not found already loaded by another case
        assert model.served_name not in loaded
    inputs = model.get_inputs()
    assert [t.name for t in inputs] == ["input"] and inputs[0].shape == [1, 3, 224, 224]
    assert inputs[0].dtype == mslite.DataType.FLOAT32
    (meta,) = model.get_outputs()
    assert isinstance(meta, mslite.TensorMeta) and meta.name == "shape1" and meta.shape == [1, 1000]
    assert meta.element_num == 1000 and meta.data_size == 4000
    x = np.fromfile(files / "input.bin", dtype=np.float32)
    inputs[0].set_data_from_numpy(x)
    (out,) = model.predict(inputs)
    (expected,) = run_reference(_reference(files, UPLOADS[protocol]), {"input": x.reshape(1, 3, 224, 224)})
    assert out.name == "shape1" and out.shape == [1, 1000] and out.data_size == 4000 and out.element_num == 1000
    np.testing.assert_array_equal(out.get_data_to_numpy(), expected)
    (again,) = model.predict([x.reshape(1, 3, 224, 224)])  # numpy inputs are accepted too
    np.testing.assert_array_equal(again.get_data_to_numpy(), expected)
    assert model.get_model_info("current_pid") == str(os.getpid())


def test_http_refuses_uploads_over_2_mib(server, files):
    """Triton 2.51's HTTP load API crashes the server on bodies of a few MiB: the client refuses before sending."""
    loaded = set(server.loaded_models())
    model = mslite.Model()
    ctx = _context(server, "http")
    ctx.cpu.thread_num = 2  # a config no other test builds: not loaded yet, so the client must upload it
    with pytest.raises(ModelLoadError, match=r"cannot upload 1\d\.\d MiB over HTTP: .* use a grpc:// URL") as info:
        model.build_from_file(str(files / "mobilenetv2.onnx"), mslite.ModelType.MINDIR, ctx)
    assert isinstance(info.value, RuntimeError)
    assert set(server.loaded_models()) == loaded and server.is_running()


def test_same_file_and_config_reuse_the_loaded_model(server, files, monkeypatch):
    loads: list[str] = []  # the client's calls of Triton's load API (an event, not a duration)
    load_model = Transport.load_model

    def counted(self, name, config, model_files):
        loads.append(name)
        return load_model(self, name, config, model_files)

    monkeypatch.setattr(Transport, "load_model", counted)
    a, b = mslite.ModelParallelRunner(), mslite.ModelParallelRunner()
    a.build_from_file(str(files / "tiny.onnx"), _context(server))
    loads_after_a = list(loads)
    b.build_from_file(str(files / "tiny.onnx"), _context(server))
    assert a.served_name == b.served_name
    assert loads == loads_after_a  # no second load
    c = mslite.ModelParallelRunner()
    c.build_from_file(str(files / "tiny.onnx"), _context(server, workers=1))
    assert c.served_name != a.served_name


@pytest.mark.parametrize(("protocol", "upload"), [("grpc", "mobilenetv2.onnx"), ("http", "small_classifier_1.onnx")])
def test_runner_concurrent_predict_is_exact(server, files, protocol, upload):
    loaded = set(server.loaded_models())
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(str(files / upload), _context(server, protocol))
    if protocol == "http":
        assert runner.served_name not in loaded
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((1, 3, 224, 224), dtype=np.float32) for _ in range(4)]
    expected = [run_reference(_reference(files, upload), {"input": x})[0] for x in xs]

    def task(i: int) -> np.ndarray:
        inputs = runner.get_inputs()  # fresh tensors per call
        inputs[0].set_data_from_numpy(xs[i % 4])
        return runner.predict(inputs)[0].get_data_to_numpy()

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(task, range(16)))
    for i, y in enumerate(results):
        np.testing.assert_array_equal(y, expected[i % 4])
    a, b = runner.get_inputs(), runner.get_inputs()
    assert a[0] is not b[0]


def test_runner_outputs_argument_and_dynamic_shapes(server, files):
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(str(files / "variable_seq.onnx"), _context(server))
    model = ZOO["variable_seq"]()
    for t in (2, 9):
        x = np.arange(3 * t, dtype=np.float32).reshape(3, t)
        outs = [mslite.Tensor(), mslite.Tensor()]
        got = runner.predict([mslite.Tensor(x)], outs)
        assert got is outs
        for tensor, ref in zip(outs, run_reference(model, {"tokens": x})):
            np.testing.assert_allclose(tensor.get_data_to_numpy(), ref, rtol=1e-6)


def test_model_resize_and_mixed_dtypes(server, files):
    model = mslite.Model()
    model.build_from_file(str(files / "variable_seq.onnx"), mslite.ModelType.MINDIR, _context(server))
    inputs = model.get_inputs()
    model.resize(inputs, [[2, 5]])
    assert inputs[0].shape == [2, 5]
    x = np.ones((2, 5), np.float32)
    inputs[0].set_data_from_numpy(x)
    cumsum, total = model.predict(inputs)
    np.testing.assert_array_equal(total.get_data_to_numpy(), np.full((2, 1), 5.0, np.float32))
    with pytest.raises(RuntimeError, match="resize failed"):
        model.resize(inputs, [[2, 5, 1]])
    mixed = mslite.Model()
    mixed.build_from_file(str(files / "mixed_dtypes.onnx"), mslite.ModelType.MINDIR, _context(server, "http"))
    ids = np.arange(10, dtype=np.int64).reshape(2, 5)
    mask = ids % 2 == 0
    h = np.linspace(-1, 1, 10, dtype=np.float16).reshape(2, 5)
    outs = mixed.predict([ids, mask, h])
    assert [o.dtype for o in outs] == [mslite.DataType.INT64, mslite.DataType.BOOL, mslite.DataType.FLOAT16]
    for out, ref in zip(outs, run_reference(ZOO["mixed_dtypes"](), {"ids": ids, "mask": mask, "h": h})):
        np.testing.assert_array_equal(out.get_data_to_numpy(), ref)


def test_bind_by_name(server):
    runner = mslite.ModelParallelRunner()
    runner.build_from_file("triton://tiny", _context(server))
    inputs = runner.get_inputs()
    inputs[0].set_data_from_numpy(np.ones(4, np.float32))
    np.testing.assert_array_equal(runner.predict(inputs)[0].get_data_to_numpy(), np.full((1, 4), 3.0))


def test_documented_errors(server, files, tmp_path):
    runner = mslite.ModelParallelRunner()
    with pytest.raises(TypeError, match="model_path must be str"):
        runner.build_from_file(1)
    missing = str(tmp_path / "nope.onnx")
    with pytest.raises(RuntimeError) as exc:
        runner.build_from_file(missing)
    want = f"ModelParallelRunner's build from file failed, model_path does not exist! model_path: {missing}"
    assert str(exc.value) == want
    with pytest.raises(TypeError, match="context must be Context"):
        runner.build_from_file(str(files / "tiny.onnx"), "cpu")
    ctx = _context(server)
    ctx.cpu.thread_affinity_mode = 2
    with pytest.raises(RuntimeError, match="Currently only HIGH_CPU and NO_BIND are supported"):
        runner.build_from_file(str(files / "tiny.onnx"), ctx)
    model = mslite.Model()
    with pytest.raises(TypeError, match="model_type must be ModelType"):
        model.build_from_file(str(files / "tiny.onnx"), 0)
    with pytest.raises(RuntimeError) as exc:
        model.build_from_file(str(files / "tiny.onnx"), mslite.ModelType.MINDIR, _context(server), "missing.ini")
    assert str(exc.value) == "build_from_file failed, config_path does not exist! config_path: missing.ini"
    mindir = tmp_path / "net.mindir"
    mindir.write_bytes(b"\x0a\x051.0.0\x12\x04name" + bytes(64))
    with pytest.raises(RuntimeError, match="kLiteNotSupport"):  # sent for conversion, which fails (or no MindSpore)
        model.build_from_file(str(mindir), mslite.ModelType.MINDIR, _context(server))
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x08" + broken_bytes())
    with pytest.raises(ModelLoadError) as info:
        model.build_from_file(str(corrupt), mslite.ModelType.MINDIR, _context(server))
    assert "At:" not in str(info.value) and "/backends/" not in str(info.value)

    model.build_from_file(str(files / "tiny.onnx"), mslite.ModelType.MINDIR, _context(server))
    with pytest.raises(TypeError, match="inputs must be list or tuple"):
        model.predict("x")
    with pytest.raises(RuntimeError, match="model input len:1 not equal input len:2!"):
        model.predict([np.ones((1, 4), np.float32)] * 2)
    with pytest.raises(TypeError, match="inputs element must be Tensor, of numpy."):
        model.predict([1])
    with pytest.raises(InvalidInputError, match="INT32") as bad:
        model.predict([np.ones((1, 4), np.int32)])
    assert isinstance(bad.value, ValueError) and isinstance(bad.value, MSLiteError)
    runner.build_from_file(str(files / "tiny.onnx"), _context(server))
    with pytest.raises(TypeError, match="inputs element must be Tensor, but got <class 'numpy.ndarray'> at index 0."):
        runner.predict([np.ones((1, 4), np.float32)])


def test_unreachable_server_names_the_url(files):
    ctx = mslite.Context()
    ctx.server_url = "grpc://127.0.0.1:9"
    with pytest.raises(ServerUnavailableError, match=r"grpc://127\.0\.0\.1:9.*mslite-triton serve") as info:
        mslite.ModelParallelRunner().build_from_file(str(files / "tiny.onnx"), ctx)
    assert isinstance(info.value, RuntimeError)


def test_autostart_off_names_the_variable_and_starts_nothing(files):
    """`settings.AUTOSTART_ENV`=0 with no URL: ServerUnavailableError at build, and no server process."""
    script = (
        "import sys, mslite_triton as mslite\n"
        "from mslite_triton import _endpoint\n"
        "try:\n"
        "    mslite.ModelParallelRunner().build_from_file(sys.argv[1])\n"
        "except mslite.errors.ServerUnavailableError as e:\n"
        "    print('REFUSED', e, flush=True)\n"
        "print('STARTED', _endpoint.started_server(), flush=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != settings.URL_ENV}
    env[settings.AUTOSTART_ENV] = "0"
    proc = subprocess.run(
        [sys.executable, "-c", script, str(files / "tiny.onnx")], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "REFUSED" in proc.stdout and f"{settings.AUTOSTART_ENV}=0" in proc.stdout, proc.stdout
    assert "STARTED None" in proc.stdout, proc.stdout


def test_overload_and_bad_input_are_never_retried(server, tmp_path, monkeypatch):
    """One request reaches the server for a predict refused as bad input or for a full queue (README: never retried)."""
    import tritonclient.grpc as grpcclient

    sent: list[int] = []  # the thread of each gRPC infer call the client makes
    infer = grpcclient.InferenceServerClient.infer

    def counted(self, *args, **kwargs):
        sent.append(threading.get_ident())
        return infer(self, *args, **kwargs)

    monkeypatch.setattr(grpcclient.InferenceServerClient, "infer", counted)
    mine = threading.get_ident()

    mixed = mslite.Model()
    mixed.build_from_file("triton://mixed_dtypes", mslite.ModelType.MINDIR, _context(server))
    ids, h = np.zeros((1, 5), np.int64), np.zeros((1, 5), np.float16)
    sent.clear()
    with pytest.raises(InvalidInputError, match="0 or 1"):  # BOOL bytes other than 0/1: the backend refuses
        mixed.predict([ids, np.full((1, 5), 7, np.uint8).view(np.bool_), h])
    assert sent == [mine]

    # a full queue: one slow request running, one queued, the others refused at once (kLiteServiceDeny)
    path = tmp_path / "slow.onnx"
    path.write_bytes(slow(rounds=64).SerializeToString())  # >= 0.3 s a request even on a quiet machine
    ctx = _context(server, workers=1)
    ctx.cpu.thread_num = 1
    ctx.parallel.config_info = {"dynamic_batching": {"max_queue_size": "1", "max_batch_size": "1"}}
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(str(path), ctx)
    outcomes: dict[int, str] = {}
    all_started = threading.Barrier(6)  # no thread ends before all have started: their idents stay distinct

    def one_predict() -> None:
        all_started.wait(timeout=60)
        try:
            runner.predict([mslite.Tensor(np.ones((1, 1), np.float32))])
            outcomes[threading.get_ident()] = "served"
        except ServiceDenyError:
            outcomes[threading.get_ident()] = "denied"

    sent.clear()
    threads = [threading.Thread(target=one_predict) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    denied = [tid for tid, what in outcomes.items() if what == "denied"]
    assert denied and "served" in outcomes.values(), outcomes
    assert all(sent.count(tid) == 1 for tid in denied), [sent.count(tid) for tid in denied]


AUTOSTART = """
import os, sys, numpy as np
import mslite_triton as mslite
from mslite_triton import _endpoint
r = mslite.ModelParallelRunner()
r.build_from_file(sys.argv[1])
i = r.get_inputs(); i[0].set_data_from_numpy(np.ones(4, np.float32))
print("RESULT", r.predict(i)[0].get_data_to_numpy().tolist(), flush=True)
server = _endpoint.started_server()
print("PID", server.pid, flush=True)
if sys.argv[2] == "hang":
    import time; time.sleep(600)
"""


@pytest.mark.parametrize("ending", ["exit", "hang"])
def test_autostarted_server_stops_with_its_parent(files, ending):
    """The `serve` child, tritonserver and the gateway under it end with the program (SIGKILL: at its input's end)."""
    env = {k: v for k, v in os.environ.items() if k != settings.URL_ENV}
    proc = subprocess.Popen(
        [sys.executable, "-c", AUTOSTART, str(files / "tiny.onnx"), ending], env=env, stdout=subprocess.PIPE, text=True
    )
    lines = [proc.stdout.readline(), proc.stdout.readline()]
    assert lines[0].startswith("RESULT [[3.0, 3.0, 3.0, 3.0]]"), lines
    pid = int(lines[1].split()[1])
    below = [p for p, _ in descendants_of(pid)]
    if ending == "hang":
        assert below, "tritonserver and the gateway run under the server while the program does"
        proc.kill()  # no atexit: the server sees its standard input end
    proc.wait(timeout=60)
    for each in [pid, *below]:
        eventually(lambda each=each: is_gone(each), f"the server's process {each} to end with its parent", 60, 0.2)
    assert not list(Path("/dev/shm").glob(f"mslite{pid}_*"))  # the launcher's regions are named after its pid


def test_the_autostarted_server_gets_its_own_key_whatever_the_key_variable_says(files):
    """A key set for another server (`ADMIN_KEY_ENV`) is not sent to the auto-started one: its upload would get 403."""
    env = {k: v for k, v in os.environ.items() if k != settings.URL_ENV}
    env[settings.ADMIN_KEY_ENV] = "the-key-of-another-server"
    out = subprocess.run(
        [sys.executable, "-c", AUTOSTART, str(files / "tiny.onnx"), "exit"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("RESULT [[3.0, 3.0, 3.0, 3.0]]"), out.stdout


SHM_SCRIPT = """
import glob, os, sys, numpy as np
import mslite_triton as mslite
ctx = mslite.Context(); ctx.server_url = sys.argv[2]; ctx.parallel.workers_num = 1
r = mslite.ModelParallelRunner(); r.build_from_file(sys.argv[1], ctx)
x = np.random.default_rng(0).standard_normal((8, 3, 224, 224), dtype=np.float32)
y = r.predict([mslite.Tensor(x)])[0].get_data_to_numpy()
np.save(sys.argv[3], y)
mine = glob.glob(f"/dev/shm/mslite_client_{os.getpid()}_*")
print("REGIONS", len(mine), "PID", os.getpid(), flush=True)
"""


@pytest.mark.parametrize("shm", ["1", "0"])
def test_large_inputs_use_shared_memory_locally(server, files, tmp_path, shm):
    env = {**os.environ, settings.SHM_ENV: shm}
    out = tmp_path / "y.npy"
    proc = subprocess.run(
        [sys.executable, "-c", SHM_SCRIPT, str(files / "mobilenetv2.onnx"), server.grpc_url, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    regions = int(proc.stdout.split("REGIONS")[1].split()[0])
    assert regions == (1 if shm == "1" else 0)
    pid = proc.stdout.split("PID")[1].split()[0]
    assert not glob.glob(f"/dev/shm/mslite_client_{pid}_*"), "region left behind at exit"
    x = np.random.default_rng(0).standard_normal((8, 3, 224, 224), dtype=np.float32)
    (expected,) = run_reference(GEN.build_mobilenetv2(), {"input": x})
    np.testing.assert_array_equal(np.load(out), expected)
