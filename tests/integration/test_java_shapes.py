"""The Java client's shapes and groups as MindSpore Lite has them, against the session server.

A small program of ours (`ShapesCheck`, below) resizes a model whose dims are all fixed to a batch of 2
(`Model.resize`, and a runner's predict at batch 2, where MindSpore Lite's workers resize), compares nothing
itself and writes the outputs; the test compares them with ONNX Runtime at batch 2, as the C++ and Python tests
do. It also adds each kind of model to a `ModelGroup` of each flag (MindSpore Lite's cloud runtime's rules).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.other_clients import assert_fixed_answer, javac, write_fixed_case
from tests.support.repository import unload

pytestmark = pytest.mark.integration

# Each line: "<what> <true|false> <getLastError()>" or a value the test reads.
SHAPES_CHECK = """
import mslite.triton.DeviceType;
import mslite.triton.MSContext;
import mslite.triton.MSTensor;
import mslite.triton.Model;
import mslite.triton.ModelGroup;
import mslite.triton.ModelGroupFlag;
import mslite.triton.ModelParallelRunner;
import mslite.triton.ModelType;
import mslite.triton.RunnerConfig;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

public class ShapesCheck {
    static void print(String what, boolean ok, String error) {
        System.out.println(what + " " + ok + " " + (ok ? "" : error));
    }

    static MSContext context(String url, int threads) {
        MSContext context = new MSContext();
        context.init(threads, 0);
        context.setServerUrl(url);
        context.addDeviceInfo(DeviceType.DT_CPU, false, 0);
        return context;
    }

    public static void main(String[] args) throws Exception {
        String url = args[0];
        String file = args[1];
        byte[] input = Files.readAllBytes(Paths.get(args[2]));
        Path out = Paths.get(args[3]);

        Model model = new Model();
        print("build", model.build(file, ModelType.MT_MINDIR, context(url, 1)), model.getLastError());
        String built = model.getModelName();
        System.out.println("model: " + built);
        List<MSTensor> inputs = model.getInputs();
        System.out.println("fixed_input " + Arrays.toString(inputs.get(0).getShape()));
        print("fixed_resize", model.resize(inputs, new int[][] {{2, 224, 224, 3}}), model.getLastError());
        System.out.println("model: " + model.getModelName());
        System.out.println("fixed_resized " + Arrays.toString(model.getInputs().get(0).getShape()));
        print("fixed_set_data", inputs.get(0).setData(input), "");
        print("fixed_predict", model.predict(), model.getLastError());
        Files.write(out.resolve("fixed_model.bin"), model.getOutputs().get(0).getByteData());
        print("fixed_rank", model.resize(inputs, new int[][] {{2, 224, 224}}), model.getLastError());
        print("fixed_channels", model.resize(inputs, new int[][] {{2, 224, 224, 4}}), model.getLastError());
        System.out.println("fixed_after_refusal " + Arrays.toString(model.getInputs().get(0).getShape()));

        RunnerConfig config = new RunnerConfig();
        config.init(context(url, 1));
        config.setWorkersNum(1);
        ModelParallelRunner runner = new ModelParallelRunner();
        print("fixed_runner_init", runner.init(file, config), runner.getLastError());
        List<MSTensor> batch = runner.getInputs();
        batch.get(0).setShape(new int[] {2, 224, 224, 3});
        batch.get(0).setData(input);
        List<MSTensor> outputs = new ArrayList<>();
        print("fixed_runner_predict", runner.predict(batch, outputs), runner.getLastError());
        Files.write(out.resolve("fixed_runner.bin"), outputs.get(0).getByteData());

        Model bound = new Model();
        print("fixed_bound", bound.build("triton://" + built, ModelType.MT_MINDIR, context(url, 1)), "");
        print("fixed_bound_resize", bound.resize(bound.getInputs(), new int[][] {{2, 224, 224, 3}}),
                bound.getLastError());

        // weight sharing: models of the same bytes share one server model, whatever their contexts
        ModelGroup shared = new ModelGroup(ModelGroupFlag.SHARE_WEIGHT);
        Model a = new Model();
        Model b = new Model();
        print("add_models", shared.addModel(List.of(a, b)), shared.getLastError());
        print("build_a", a.build(file, ModelType.MT_MINDIR, context(url, 1)), a.getLastError());
        print("build_b", b.build(file, ModelType.MT_MINDIR, context(url, 2)), b.getLastError());
        System.out.println("model: " + a.getModelName());
        System.out.println("weights_shared " + a.getModelName().equals(b.getModelName()));
        print("add_built", shared.addModel(List.of(a)), shared.getLastError());
        Model c = new Model();
        print("add_models_again", shared.addModel(List.of(c)), shared.getLastError());
        ModelGroup other = new ModelGroup(ModelGroupFlag.SHARE_WEIGHT);
        print("add_other_group", other.addModel(List.of(c)), other.getLastError());
        print("resize_shared", b.resize(b.getInputs(), new int[][] {{2, 224, 224, 3}}), b.getLastError());
        System.out.println("model: " + b.getModelName());

        // MindSpore Lite's cloud runtime's flag rules: each kind of addModel under each flag
        byte[] bytes = Files.readAllBytes(Paths.get(file));
        String[] names = {"weight", "workspace", "both", "unknown"};
        int[] flags = {ModelGroupFlag.SHARE_WEIGHT, ModelGroupFlag.SHARE_WORKSPACE,
                ModelGroupFlag.SHARE_WEIGHT_WORKSPACE, 99};
        for (int i = 0; i < flags.length; i++) {
            ModelGroup group = new ModelGroup(flags[i]);
            String name = "flag_" + names[i];
            print(name + "_paths", group.addModel(List.of(file, file)), group.getLastError());
            print(name + "_buffers", group.addModel(List.of(ByteBuffer.wrap(bytes))), group.getLastError());
            print(name + "_models", group.addModel(List.of(new Model())), group.getLastError());
            print(name + "_workspace", group.calMaxSizeOfWorkspace(ModelType.MT_MINDIR, context(url, 1)),
                    group.getLastError());
        }
        RunnerConfig onGpu = new RunnerConfig();  // a device the server lacks, in every client's words
        MSContext gpu = new MSContext();
        gpu.init(1, 0);
        gpu.setServerUrl(url);
        gpu.addDeviceInfo(DeviceType.DT_GPU, false, 0);
        onGpu.init(gpu);
        onGpu.setWorkersNum(1);
        onGpu.setDeviceIds(new ArrayList<>(List.of(99)));
        ModelParallelRunner gpuRunner = new ModelParallelRunner();
        print("build_gpu", gpuRunner.init(file, onGpu), gpuRunner.getLastError());

        ModelGroup workspace = new ModelGroup();
        print("add_no_paths", workspace.addModel(List.of()), workspace.getLastError());
        print("add_mixed", workspace.addModel(List.of(file, a)), workspace.getLastError());
        print("workspace_om", workspace.calMaxSizeOfWorkspace(ModelType.MT_OM, context(url, 1)),
                workspace.getLastError());
        print("workspace_null", workspace.calMaxSizeOfWorkspace(ModelType.MT_MINDIR, null), workspace.getLastError());
        System.out.println("DONE");
    }
}
"""

# MindSpore Lite's cloud runtime (model_group_impl.cc), as tests/integration/test_cpp.py checks it for C++:
# paths under any flag; buffers under SHARE_WORKSPACE only; Model objects under SHARE_WEIGHT only.
GROUP_FLAG_RULES = {
    ("weight", "paths"): True,
    ("weight", "buffers"): False,
    ("weight", "models"): True,
    ("workspace", "paths"): True,
    ("workspace", "buffers"): True,
    ("workspace", "models"): False,
    ("both", "paths"): True,
    ("both", "buffers"): False,
    ("both", "models"): False,
    ("unknown", "paths"): True,
    ("unknown", "buffers"): False,
    ("unknown", "models"): False,
}


def line(text: str, what: str) -> str:
    (found,) = [x for x in text.splitlines() if x.startswith(f"{what} ")]
    return found


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("java_shapes")
    (d / "ShapesCheck.java").write_text(SHAPES_CHECK)
    return javac(d / "classes", d / "ShapesCheck.java")


def test_fixed_dims_resize_and_group_flags(server, program, tmp_path):
    case = write_fixed_case(tmp_path)
    before = set(server.loaded_models())
    java = shutil.which("java") or "java"
    args = [server.http_url, str(case.model), str(case.input), str(tmp_path)]
    run = subprocess.run([java, "-cp", str(program), "ShapesCheck", *args], capture_output=True, text=True, timeout=900)
    try:
        assert run.returncode == 0 and "DONE" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
        text = run.stdout
        assert "fixed_input [1, 224, 224, 3]\n" in text and "fixed_resized [2, 224, 224, 3]\n" in text
        for step in ("build", "fixed_resize", "fixed_predict", "fixed_runner_init", "fixed_runner_predict"):
            assert line(text, step) == f"{step} true ", text
        assert_fixed_answer(tmp_path / "fixed_model.bin", case)
        assert_fixed_answer(tmp_path / "fixed_runner.bin", case)
        assert line(text, "fixed_rank") == (  # the model is at batch 2 by now
            "fixed_rank false resize failed! Error is kLiteInputParamInvalid: input 'input' has 4 dims "
            "[2,224,224,3], got [2,224,224]: a resize keeps the rank"
        )
        channels = line(text, "fixed_channels")
        assert channels.startswith("fixed_channels false resize failed! Error is ")
        assert "cannot run input 'input' at shape [2, 224, 224, 4]" in channels and "At:" not in channels
        assert "fixed_after_refusal [2, 224, 224, 3]\n" in text
        assert line(text, "fixed_bound_resize") == (
            "fixed_bound_resize false resize failed! Error is kLiteNotSupport: a model bound with triton:// keeps "
            "the shapes of its server config; it cannot take input 'input' [2,224,224,3]"
        )
        assert "weights_shared true\n" in text and line(text, "resize_shared") == "resize_shared true "
        assert line(text, "add_built").startswith(
            "add_built false addModel failed! Error is kLiteParamInvalid: add models to a group before building"
        )
        assert line(text, "add_models_again") == "add_models_again true "
        assert line(text, "add_other_group") == (
            "add_other_group false addModel failed! Error is kLiteError: the model has been in another group"
        )
        for (flag, kind), taken in GROUP_FLAG_RULES.items():
            got = line(text, f"flag_{flag}_{kind}")
            assert got.split()[1] == str(taken).lower(), got
            if not taken:
                wanted = "share weight" if kind == "models" else "share workspace"
                assert f"addModel failed! Error is kLiteError: Only support {wanted} for addModel of " in got, got
        for flag in ("weight", "workspace", "both"):
            assert line(text, f"flag_{flag}_workspace") == f"flag_{flag}_workspace true "
        assert "flag_unknown_workspace false calMaxSizeOfWorkspace failed! Error is kLiteError: Only Support" in text
        assert "add_no_paths false addModel failed! Error is kLiteParamInvalid" in text
        assert "add_mixed false addModel failed! Error is kLiteParamInvalid: models must be all String" in text
        assert "workspace_om false calMaxSizeOfWorkspace failed! Error is kLiteNotSupport" in text
        assert "workspace_null false calMaxSizeOfWorkspace failed! Error is kLiteNullptr" in text
        assert line(text, "build_gpu").startswith(
            "build_gpu false ModelParallelRunner's init failed! Error is kLiteNotSupport: GPU 99 is not available on "
            "the server (the GPUs it can use: "
        ), text
    finally:
        for name in set(server.loaded_models()) - before:
            unload(server, name)
