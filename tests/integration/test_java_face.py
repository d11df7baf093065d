"""MindSpore Lite's whole Java face against real servers: `Model`, `ModelType`, `Version`, `AscendDeviceInfo`,
the static multi-model `Model.build`, `DataType`'s constants, `MSTensor`'s typed calls, and the server the
client starts for itself when no URL is set.

A small program of ours (`FaceCheck`, below) calls each of them as a ported MindSpore Lite program would and
writes every output it got; the test compares them with in-process ONNX Runtime, bit for bit. It runs once
against the session server and once with no URL, where the client starts `mslite-triton serve` as its child
and must stop it when the program ends, normally or killed outright.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from mslite_contract import settings
from tests.support.eventually import eventually
from tests.support.other_clients import folders_left, javac, own_server_env, processes_mentioning
from tests.support.processes import command_lines_holding, descendants_of, environ_value, is_gone
from tests.support.repository import unload

pytestmark = pytest.mark.integration

HALF_VALUES = "1.0f, 65520f, 1e-7f, 0.1f, -2.5e-5f, 1.00048828125f, 1.00146484375f, -0f, 6.1e-5f, 65504f"

# Each `check` prints "ok <what>" or throws (exit 1) with what failed; outputs go to files named by the test.
FACE_CHECK = """
import mslite.triton.AscendDeviceInfo;
import mslite.triton.DataType;
import mslite.triton.DeviceType;
import mslite.triton.MSContext;
import mslite.triton.MSTensor;
import mslite.triton.Model;
import mslite.triton.ModelParallelRunner;
import mslite.triton.ModelType;
import mslite.triton.RunnerConfig;
import mslite.triton.Version;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

public class FaceCheck {
    static final float[] A = {0.5f, -1.25f, 3f, 65504f, 1e-7f, 7.1f};
    static final int[] B = {1, 2, 3, 4, 5, -6};

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
        System.out.println("ok " + what);
    }

    static void dump(Path dir, String prefix, List<MSTensor> tensors) throws Exception {
        for (MSTensor t : tensors) {
            Files.write(dir.resolve(prefix + "_" + t.tensorName() + ".bin"), t.getByteData());
            ByteBuffer widened = ByteBuffer.allocate(t.getFloatData().length * 4).order(ByteOrder.LITTLE_ENDIAN);
            widened.asFloatBuffer().put(t.getFloatData());
            Files.write(dir.resolve(prefix + "_" + t.tensorName() + "_float.bin"), widened.array());
        }
    }

    /** Batch 2 through resize; `a` from a direct buffer filled with put and not flipped, as the samples do. */
    static void fill(Model model) {
        List<MSTensor> inputs = model.getInputs();
        check(model.resize(inputs, new int[][] {{2, 3}, {2, 3}}), "resize to a batch of 2");
        ByteBuffer direct = ByteBuffer.allocateDirect(A.length * 4).order(ByteOrder.LITTLE_ENDIAN);
        for (float v : A) {
            direct.putFloat(v);
        }
        check(inputs.get(0).setData(direct), "setData(a direct buffer left unflipped)");
        check(inputs.get(1).setData(B), "setData(int[])");
    }

    public static void main(String[] args) throws Exception {
        String modelPath = args[0];
        Path out = Paths.get(args[1]);
        System.out.println("version " + Version.version());
        check(DataType.kNumberTypeInt == 31 && DataType.kNumberTypeUInt == 36 && DataType.kNumberTypeFloat == 41,
                "DataType's generic constants");

        MSContext context = new MSContext();
        context.init();
        if (args.length > 2) {
            context.setServerUrl(args[2]);
        }
        AscendDeviceInfo ascend = new AscendDeviceInfo();
        ascend.setProvider("ge");
        ascend.setDeviceID(1);
        ascend.setRankID(2);
        check(ascend.getProvider().equals("ge") && ascend.getDeviceID() == 1 && ascend.getRankID() == 2
                && ascend.getDeviceType() == DeviceType.DT_ASCEND, "AscendDeviceInfo keeps its settings");
        check(!context.addDeviceInfo(ascend), "addDeviceInfo(AscendDeviceInfo) is refused");
        check(context.addDeviceInfo(DeviceType.DT_CPU, false, 0), "addDeviceInfo(DT_CPU)");

        Model om = new Model();
        check(!om.build(modelPath, ModelType.MT_OM, context) && om.getLastError().contains("Ascend format"),
                "MT_OM is refused: " + om.getLastError());
        Model model = new Model();
        check(model.build(modelPath, ModelType.MT_MINDIR, context), "build from a file: " + model.getLastError());
        List<MSTensor> inputs = model.getInputs();
        check(inputs == model.getInputs() && inputs.size() == 2, "getInputs gives the same two tensors");
        check(model.getInputByTensorName("b") == inputs.get(1), "getInputByTensorName");
        int elements = inputs.get(0).elementsNum();
        check(elements == 3, "elementsNum is an int: " + elements);
        check(model.getOutputs().size() == 2 && model.getOutputs().get(0).getFloatData().length == 0,
                "getOutputs before predict: shapes, no data");
        fill(model);
        check(model.predict(), "predict: " + model.getLastError());
        List<MSTensor> outputs = model.getOutputs();
        check(outputs.size() == 2 && outputs.get(0).getFloatData().length == 6
                && outputs.get(1).getFloatData().length == 6, "getOutputs after predict holds the results");
        MSTensor half = model.getOutputByTensorName("half");
        check(half != null && half.getDataType() == DataType.kNumberTypeFloat16
                && Arrays.equals(half.getShape(), new int[] {2, 3}), "a float16 output");
        check(model.getOutputTensorNames().equals(List.of("sum", "half")), "outputs in the model's order: "
                + model.getOutputTensorNames());
        dump(out, "model", outputs);
        outputs.get(0).free();
        check(model.getOutputs().get(0).getFloatData().length == 6, "freeing a returned output keeps the model's");
        check(!model.resize(inputs, new int[][] {{2, 3}}), "resize needs a shape per input: " + model.getLastError());
        check(model.getOutputsByNodeName("sum").isEmpty() && model.getLastError().contains("graph nodes"),
                "getOutputsByNodeName is refused: " + model.getLastError());
        check(!model.export("x.ms", 0, true, null) && model.getLastError().contains("not served"), "export is refused");
        check(!model.loadConfig("late.ini"), "loadConfig after build is refused: " + model.getLastError());
        Model encrypted = new Model();
        check(!encrypted.build(modelPath, ModelType.MT_MINDIR, context, new char[16], "AES-GCM", "")
                && encrypted.getLastError().contains("encrypted"), "an encrypted build is refused");

        try (FileChannel file = FileChannel.open(Paths.get(modelPath))) {
            MappedByteBuffer mapped = file.map(FileChannel.MapMode.READ_ONLY, 0, file.size());
            Model fromBuffer = new Model();
            check(fromBuffer.build(mapped, ModelType.MT_ONNX, context), "build from a MappedByteBuffer: "
                    + fromBuffer.getLastError());
            fill(fromBuffer);
            check(fromBuffer.predict(), "predict of the model built from a buffer");
            dump(out, "buffer", fromBuffer.getOutputs());
            fromBuffer.free();
        }

        List<Model> pair = Model.build(modelPath, modelPath, ModelType.MT_MINDIR, context, "");
        check(pair.size() == 2, "Model.build(model, incremental model, ...) gives both");
        fill(pair.get(1));
        check(pair.get(1).predict(), "predict of the incremental model");
        dump(out, "incremental", pair.get(1).getOutputs());
        pair.forEach(Model::free);
        check(Model.build(modelPath, "/no/such/model.onnx", ModelType.MT_MINDIR, context, "").isEmpty(),
                "Model.build(...) is empty when one model fails");

        MSTensor made = MSTensor.createTensor("m", new float[][] {{1f, 2f}, {3f, 4f}});
        check(made.elementsNum() == 4 && Arrays.equals(made.getShape(), new int[] {2, 2})
                && Arrays.equals((float[]) made.getData(), new float[] {1f, 2f, 3f, 4f}),
                "createTensor(name, float[][]) and getData()");
        check(made.setShape(new int[] {4}), "setShape returns true");
        check(((long[]) MSTensor.createTensor("l", new long[] {7L, -8L}).getData())[1] == -8L,
                "createTensor(name, long[])");
        check(MSTensor.createTensor("r", new int[][] {{1}, {2, 3}}) == null, "a ragged array is refused");
        check(MSTensor.createTensor("g", DataType.kNumberTypeInt, new int[] {1}, null) == null,
                "a tensor of a generic type (kNumberTypeInt) is refused");
        MSTensor h = MSTensor.createTensor("h", DataType.kNumberTypeFloat16, new int[] {10}, null);
        check(h.setData(new float[] {HALF_VALUES}), "setData(float[]) on a float16 tensor");
        Files.write(out.resolve("half_from_float.bin"), h.getByteData());

        MSContext bound = new MSContext(); // the runner's workers bound to core 0: the list goes to the server
        bound.init(1, 0);
        if (args.length > 2) {
            bound.setServerUrl(args[2]);
        }
        bound.setThreadAffinity(new ArrayList<>(List.of(0)));
        check(bound.getThreadAffinityCoreList().equals(List.of(0)), "getThreadAffinityCoreList");
        RunnerConfig config = new RunnerConfig();
        config.init(bound);
        config.setWorkersNum(1);
        ModelParallelRunner runner = new ModelParallelRunner();
        check(runner.init(modelPath, config), "runner init: " + runner.getLastError());
        List<MSTensor> runnerInputs = runner.getInputs();
        runnerInputs.get(0).setShape(new int[] {2, 3});
        runnerInputs.get(1).setShape(new int[] {2, 3});
        runnerInputs.get(0).setData(A);
        runnerInputs.get(1).setData(B);
        check(runner.predict(runnerInputs, new ArrayList<>()), "runner predict");
        List<MSTensor> after = runner.getOutputs();
        check(after.get(0).getFloatData().length == 6, "runner getOutputs after predict holds the last results");
        dump(out, "runner", after);
        System.out.println("runner model " + runner.getModelName());
        runner.free();
        model.free();
        System.out.println("DONE");
    }
}
""".replace("HALF_VALUES", HALF_VALUES)

# Builds a model with no URL (the client starts its server), says so, then waits: the test kills it outright.
HOLD = """
import mslite.triton.*;

public class Hold {
    public static void main(String[] args) throws Exception {
        MSContext context = new MSContext();
        context.init();
        Model model = new Model();
        System.out.println(model.build(args[0], ModelType.MT_MINDIR, context) ? "BUILT" : model.getLastError());
        System.out.flush();
        System.in.read();
    }
}
"""

JAVA_BIN = shutil.which("java") or "java"  # by path: one test runs it with an empty PATH
STARTED = re.compile(r"started a server at (http://127\.0\.0\.1:(\d+)) \(pid (\d+)\)")


def face_model(path: Path) -> Path:
    """sum = a + float(b) and half = float16(sum), a batch axis on both inputs."""
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["a", "bf"], ["sum"]),
            helper.make_node("Cast", ["sum"], ["half"], to=TensorProto.FLOAT16),
        ],
        "face",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("b", TensorProto.INT32, ["N", 3]),
        ],
        [
            helper.make_tensor_value_info("sum", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("half", TensorProto.FLOAT16, ["N", 3]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())
    return path


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("java_face")
    (d / "FaceCheck.java").write_text(FACE_CHECK)
    (d / "Hold.java").write_text(HOLD)
    javac(d / "classes", d / "FaceCheck.java", d / "Hold.java")
    face_model(d / "face.onnx")
    return d


def check_outputs(out: Path, model: Path) -> None:
    a = np.array([0.5, -1.25, 3, 65504, 1e-7, 7.1], np.float32).reshape(2, 3)
    b = np.array([1, 2, 3, 4, 5, -6], np.int32).reshape(2, 3)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    want_sum, want_half = session.run(None, {"a": a, "b": b})
    for prefix in ("model", "buffer", "incremental", "runner"):
        assert (out / f"{prefix}_sum.bin").read_bytes() == want_sum.astype("<f4").tobytes(), prefix
        assert (out / f"{prefix}_half.bin").read_bytes() == want_half.astype("<f2").tobytes(), prefix
        widened = np.frombuffer((out / f"{prefix}_half_float.bin").read_bytes(), "<f4")
        assert widened.tobytes() == want_half.astype("<f4").ravel().tobytes(), prefix  # getFloatData of float16
    values = np.array([float(v.strip().rstrip("f")) for v in HALF_VALUES.split(",")], np.float32)
    with np.errstate(over="ignore"):  # 65520 rounds up to infinity, as it should
        halves = values.astype("<f2")
    assert (out / "half_from_float.bin").read_bytes() == halves.tobytes()  # rounded to nearest, ties to even


def run_face_check(
    programs: Path, out: Path, env: dict[str, str], *url: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    out.mkdir()
    run = subprocess.run(
        [JAVA_BIN, "-cp", str(programs / "classes"), "FaceCheck", str(programs / "face.onnx"), str(out), *url],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=cwd,
    )
    assert run.returncode == 0 and "DONE" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
    return run


def test_each_new_call_against_the_session_server(server, programs, tmp_path):
    before = set(server.loaded_models())
    try:
        env = {**os.environ, "JAVA_TOOL_OPTIONS": f"-Djava.io.tmpdir={tmp_path}"}
        run = run_face_check(programs, tmp_path / "out", env, server.http_url)
        assert "version MindSpore Lite API served by mslite-triton" in run.stdout
        assert "Ascend (device 1, rank 2, provider 'ge') is not available" in run.stderr
        assert "started a server" not in run.stderr
        check_outputs(tmp_path / "out", programs / "face.onnx")
        (name,) = re.findall(r"^runner model (\S+)$", run.stdout, re.MULTILINE)
        with urllib.request.urlopen(f"{server.http_url}/v2/models/{name}/config", timeout=30) as resp:
            parameters = json.load(resp)["parameters"]
        assert parameters["thread_affinity_core_list"]["string_value"] == "0"
    finally:
        for uploaded in set(server.loaded_models()) - before:  # leave the server as it was
            unload(server, uploaded)


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return True
    return False


def test_with_no_url_the_client_starts_its_server_and_stops_it_at_exit(programs, tmp_path):
    # a key in the environment is another server's: the started one made its own, which the client reads
    run = run_face_check(
        programs, tmp_path / "out", own_server_env(tmp_path, **{settings.ADMIN_KEY_ENV: "another-key"})
    )
    started = STARTED.search(run.stderr)
    assert started, run.stderr[-3000:]
    check_outputs(tmp_path / "out", programs / "face.onnx")
    # the shutdown hook stopped it before the JVM exited, and it removed its repository and workspace
    assert refused(int(started.group(2)))
    # stopped before the JVM exited: nothing should be left at all
    eventually(lambda: not processes_mentioning(str(tmp_path)), "the server's processes to end", 30, 0.5)
    assert is_gone(int(started.group(3)))
    cache = Path(settings.shared_cache_root({})).name  # the per-user build cache stays by design
    left = [p for p in tmp_path.rglob("mslite*") if cache not in p.parts]
    assert not left, left


def test_the_server_stops_when_the_program_is_killed(programs, tmp_path):
    proc = subprocess.Popen(
        [JAVA_BIN, "-cp", str(programs / "classes"), "Hold", str(programs / "face.onnx")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=own_server_env(tmp_path),
    )
    port = None
    try:
        line = proc.stdout.readline()
        assert line == "BUILT\n", line + proc.stderr.read(3000)
        for err in proc.stderr:
            if started := STARTED.search(err):
                port = int(started.group(2))
                break
        assert port is not None and not refused(port)
        # the key: in the environment of the server's processes (their account's to read), on no command line
        below = descendants_of(int(started.group(3)))
        keys = {environ_value(pid, settings.ADMIN_KEY_ENV) for pid, _ in below} - {None}
        assert len(keys) == 1 and command_lines_holding(keys.pop()) == [], below
        proc.send_signal(signal.SIGKILL)  # no shutdown hook runs: the server sees its standard input end
        proc.wait(timeout=30)
        eventually(lambda: refused(port), f"the server on port {port} to end with its killed program", 120, 0.5)
        eventually(lambda: not processes_mentioning(str(tmp_path)), "the server's processes to end", 120, 0.5)
        left = lambda: folders_left(tmp_path / "tmp")  # noqa: E731
        eventually(lambda: not left(), "the server's temporary folders to go", 30, 0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_a_clear_error_when_the_server_command_is_missing(programs, tmp_path):
    def build_error(env: dict[str, str]) -> str:
        run = subprocess.run(
            [JAVA_BIN, "-cp", str(programs / "classes"), "Hold", str(programs / "face.onnx")],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            input="",
            cwd=tmp_path,  # no checkout's .venv in it or above it
        )
        assert run.returncode == 0, run.stderr[-3000:]
        return run.stdout

    empty = tmp_path / "empty_path"
    empty.mkdir()
    missing = build_error({**own_server_env(tmp_path), "PATH": str(empty)})  # nothing on PATH: no `mslite-triton`
    assert "'mslite-triton', the command that starts a server, was not found (not on PATH, nor in .venv/bin/" in missing
    assert settings.URL_ENV in missing and f"{settings.SERVE_CMD_ENV}=/path/to/.venv/bin/mslite-triton" in missing

    named = build_error(own_server_env(tmp_path, **{settings.SERVE_CMD_ENV: str(tmp_path / "no-such-serve")}))
    assert f"'{tmp_path / 'no-such-serve'}' cannot be run" in named and settings.SERVE_CMD_ENV in named

    off = build_error(own_server_env(tmp_path, **{settings.AUTOSTART_ENV: "0"}))
    assert f"{settings.URL_ENV} is not set and {settings.AUTOSTART_ENV}=0" in off


def test_from_a_checkout_the_client_finds_the_venvs_server_command(programs, tmp_path):
    """Not on PATH, no setting: run from a folder of the checkout, the client finds `.venv/bin/mslite-triton`."""
    checkout = Path(__file__).resolve().parents[2]
    assert (checkout / ".venv" / "bin" / "mslite-triton").exists(), "the checkout's venv"
    if shutil.which("mslite-triton", path="/usr/bin:/bin"):
        pytest.skip("installed system-wide: found on PATH first")
    run = run_face_check(
        programs, tmp_path / "out", {**own_server_env(tmp_path), "PATH": "/usr/bin:/bin"}, cwd=checkout / "docs"
    )
    assert STARTED.search(run.stderr), run.stderr[-3000:]
    check_outputs(tmp_path / "out", programs / "face.onnx")
