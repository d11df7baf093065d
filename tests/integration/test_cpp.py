"""The C++ client (client/cpp, libcurl only) built with the system compiler and run against the session's server.

The library, MindSpore Lite's ported sample (examples/cpp/main.cc), tests/integration/cpp_driver.cc (the
runner's cases) and tests/integration/cpp_model_driver.cc (Model, ModelGroup, device infos, a server of its
own) are compiled once with -Wall -Wextra -Werror, and once more with -fsanitize=address,undefined (LeakSanitizer
included), each source in parallel. Outputs must equal the Python client's bit for bit; each failure must
come back as MindSpore Lite's Status with the reason in ToString().
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import mslite_triton as mslite
from mslite_contract import own_server, protocol, settings
from tests.support.eventually import eventually
from tests.support.other_clients import (
    assert_fixed_answer,
    folders_left,
    own_server_env,
    private_model,
    processes_mentioning,
    run_with_a_held_predict,
    write_fixed_case,
)
from tests.support.processes import command_lines_holding, descendants_of, environ_value, free_port, worker_pids
from tests.support.repository import GEN, ROOT, unload

pytestmark = pytest.mark.integration

APT_LINE = "apt-get update && apt-get install -y --no-install-recommends g++ libcurl4-openssl-dev"
CPP = ROOT / "client" / "cpp"
WARNINGS = ["-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{CPP / 'include'}"]
FLAVOURS = {
    "plain": ["-O2"],
    "asan": ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"],
}
SANITIZER_REPORT = re.compile(r"ERROR: (Address|Leak)Sanitizer|runtime error:")


@dataclass(frozen=True)
class Build:
    main: Path  # the sample
    driver: Path
    model_driver: Path


def compile_flavour(out: Path, flags: list[str], pool: ThreadPoolExecutor) -> Build:
    sources = sorted((CPP / "src").glob("*.cc"))
    here = Path(__file__)
    programs = {
        "main": ROOT / "examples" / "cpp" / "main.cc",
        "driver": here.with_name("cpp_driver.cc"),
        "model_driver": here.with_name("cpp_model_driver.cc"),
    }
    jobs = {
        src: pool.submit(
            subprocess.run,
            ["g++", *WARNINGS, *flags, "-c", str(src), "-o", str(out / f"{src.parent.name}_{src.stem}.o")],
            capture_output=True,
            text=True,
            timeout=600,
        )
        for src in [*sources, *programs.values()]
    }
    for src, job in jobs.items():
        done = job.result()
        if "curl/curl.h" in done.stderr:
            pytest.fail(f"libcurl's headers are missing (scripts/check_system.sh says so too): {APT_LINE}")
        assert done.returncode == 0, f"{src.name}:\n{done.stderr}"
    library = [str(out / f"src_{src.stem}.o") for src in sources]
    for name, src in programs.items():
        link = subprocess.run(
            ["g++", *flags, "-o", str(out / name), str(out / f"{src.parent.name}_{src.stem}.o"), *library]
            + ["-lcurl", "-pthread"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert link.returncode == 0, link.stderr
    return Build(out / "main", out / "driver", out / "model_driver")


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Build]:
    if shutil.which("g++") is None:
        pytest.fail(f"no C++ compiler: {APT_LINE}")
    with ThreadPoolExecutor(max_workers=2) as pool:  # the machine's two cores
        return {
            name: compile_flavour(tmp_path_factory.mktemp(f"cpp_{name}"), flags, pool)
            for name, flags in FLAVOURS.items()
        }


def run(program: Path, url: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, settings.URL_ENV: url, "ASAN_OPTIONS": "detect_leaks=1"}
    return subprocess.run([str(program), *args], capture_output=True, text=True, timeout=timeout, env=env)


def assert_dumps_equal(folder: Path, expected: np.ndarray, threads: int, tasks: int) -> None:
    dumps = sorted(folder.glob("out_*.bin"))
    assert sorted(p.name for p in dumps) == sorted(f"out_{t}_{k}.bin" for t in range(threads) for k in range(tasks))
    for p in dumps:
        np.testing.assert_array_equal(np.fromfile(p, dtype="<f4").reshape(expected.shape), expected, err_msg=p.name)


def test_cpp_names_match_the_wire_contract() -> None:
    """protocol.h's copies of the names Python defines (protocol.py, settings.py, own_server.py)."""
    text = (CPP / "src" / "protocol.h").read_text()
    cpp: dict[str, object] = dict(re.findall(r'inline constexpr char (\w+)\[\] = "([^"]*)";', text))
    cpp.update({k: int(v) for k, v in re.findall(r"inline constexpr int (\w+) = (\d+);", text)})
    shared = {name: value for name, value in vars(protocol).items() if name in cpp}
    assert set(shared) >= {"BATCHING_SECTION", "MAX_BATCH_SIZE_KEY", "MAX_QUEUE_SIZE_KEY", "QUEUE_POLICY_KEY"}
    assert {name: cpp[name] for name in shared} == shared
    for module in (settings, own_server):
        mine = {name: value for name, value in vars(module).items() if name in cpp}
        assert mine and {name: cpp[name] for name in mine} == mine
    assert {"HTTP_LINE", "KEY_LINE", "SERVING_LINE", "SERVE_PROGRAM", "CHECKOUT_VENV_BIN"} <= set(cpp)
    private = re.search(r"PRIVATE_ARGS\[\] = \{([^}]*)\}", text)
    assert private and tuple(re.findall(r'"([^"]*)"', private.group(1))) == own_server.PRIVATE_ARGS
    assert {
        "RUNNER_SECTION",
        "MAX_PENDING_KEY",
        "DEFAULT_MAX_PENDING",
        "ADMIN_KEY_HEADER",
        "URL_ENV",
        "KEY_DIR_ENV",
    } <= set(cpp)
    assert {"RUNNER_SECTION", "MAX_PENDING_KEY", "ADMIN_KEY_HEADER"} <= set(shared)


def test_sample_at_8_threads_matches_the_python_client(server, builds, sample_files, python_answer, tmp_path):
    sample = str(sample_files / "input.bin")
    args = ["triton://mobilenetv2", sample, "--threads", "8", "--tasks", "2", "--dump", str(tmp_path)]
    out = run(builds["plain"].main, server.http_url, *args)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "model: mobilenetv2\n" in out.stdout and "clients: 8, failed: 0" in out.stdout
    assert out.stdout.count("tensor name is:shape1 tensor size is:4000 tensor elements num is:1000") == 16
    assert_dumps_equal(tmp_path, python_answer, 8, 2)


def test_sample_under_address_sanitizer(server, builds, sample_files, python_answer, tmp_path):
    """The same 8 x 2 predicts and every error path below: no memory error, no leak, no undefined behaviour."""
    sample = str(sample_files / "input.bin")
    args = ["triton://mobilenetv2", sample, "--threads", "8", "--tasks", "2", "--dump", str(tmp_path)]
    out = run(builds["asan"].main, server.http_url, *args)
    assert out.returncode == 0 and not SANITIZER_REPORT.search(out.stderr), out.stderr[-4000:]
    assert_dumps_equal(tmp_path, python_answer, 8, 2)
    for args, url in [
        (["triton://no_such_model"], server.http_url),
        (["triton://mobilenetv2"], f"http://127.0.0.1:{free_port()}"),
        ([str(sample_files / "missing.onnx")], server.http_url),
    ]:
        failed = run(builds["asan"].main, url, *args)
        assert failed.returncode == 1 and "Build model error" in failed.stderr, failed.stderr[-3000:]
        assert not SANITIZER_REPORT.search(failed.stderr), failed.stderr[-4000:]
    for mode, extra in [("shape", ["1,3,224,225"]), ("grown", []), ("inplace", [])]:
        driven = run(builds["asan"].driver, server.http_url, mode, server.http_url, "mobilenetv2", *extra)
        assert driven.returncode == 0 and not SANITIZER_REPORT.search(driven.stderr), driven.stderr[-4000:]


def test_sample_uploads_a_local_file(server, builds, sample_files, python_answer, tmp_path):
    """Init with an ONNX path uploads it (with the admin key the server wrote) at 1 worker, as Python's would."""
    model = str(sample_files / "mobilenetv2.onnx")
    layout = ["--workers", "1", "--threads", "2", "--tasks", "1"]
    out = run(
        builds["plain"].main, server.http_url, model, str(sample_files / "input.bin"), *layout, "--dump", str(tmp_path)
    )
    uploaded = [line.split()[-1] for line in out.stdout.splitlines() if line.startswith("model: ")]
    try:
        assert out.returncode == 0, out.stderr[-3000:]
        (name,) = uploaded
        assert re.fullmatch(r"mobilenetv2_[0-9a-f]{12}", name), name
        with urllib.request.urlopen(f"{server.http_url}/v2/models/{name}/config", timeout=10) as resp:
            config = resp.read().decode()
        assert '"count":1' in config.replace(" ", "") and config.count("KIND_CPU") == 1
        dumps = sorted(tmp_path.glob("out_*.bin"))
        assert len(dumps) == 2
        for p in dumps:  # another worker/thread layout than the repository model's: float precision
            got = np.fromfile(p, dtype="<f4").reshape(python_answer.shape)
            np.testing.assert_allclose(got, python_answer, rtol=1e-5, atol=1e-7, err_msg=p.name)
        again = run(builds["plain"].main, server.http_url, model, *layout)
        assert again.returncode == 0 and f"model: {name}\n" in again.stdout  # the same file and config: reused
    finally:
        for name in uploaded:  # leave the server as it was
            unload(server, name)


def test_init_from_a_buffer(server, builds, sample_files):
    """Init(model_data, data_size, config) uploads the bytes as `model_<hash>`; kernel callbacks are refused."""
    out = run(
        builds["plain"].driver, server.http_url, "buffer", server.http_url, str(sample_files / "mobilenetv2.onnx")
    )
    uploaded = [line.split()[-1] for line in out.stdout.splitlines() if line.startswith("model: ")]
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        (name,) = uploaded
        assert re.fullmatch(r"model_[0-9a-f]{12}", name), name
        assert "predict kSuccess" in out.stdout
        assert "callback kLiteNotSupport kLiteNotSupport: predict failed! kernel callbacks" in out.stdout
    finally:
        for name in uploaded:
            unload(server, name)


def test_each_failure_gives_its_status(server, builds, sample_files):
    main, driver = builds["plain"].main, builds["plain"].driver
    unknown = run(main, server.http_url, "triton://no_such_model")
    assert unknown.returncode == 1
    assert "Build model error kLiteError: ModelParallelRunner's init failed! model not found:" in unknown.stderr
    assert "no_such_model" in unknown.stderr

    down = run(main, f"http://127.0.0.1:{free_port()}", "triton://mobilenetv2")
    assert down.returncode == 1
    assert "Build model error kLiteError: ModelParallelRunner's init failed! cannot reach the server" in down.stderr

    grpc = run(main, server.grpc_url, "triton://mobilenetv2")
    assert grpc.returncode == 1 and "kLiteParamInvalid" in grpc.stderr and "KServe v2 over HTTP" in grpc.stderr

    missing = run(main, server.http_url, str(sample_files / "missing.onnx"))
    assert missing.returncode == 1 and "Build model error kLiteFileError" in missing.stderr

    not_a_model = run(main, server.http_url, str(sample_files / "input.bin"))
    assert not_a_model.returncode == 1 and "kLiteNotSupport" in not_a_model.stderr

    shape = run(driver, server.http_url, "shape", server.http_url, "mobilenetv2", "1,3,224")
    assert shape.returncode == 0, shape.stderr
    assert "init kSuccess" in shape.stdout
    (line,) = [x for x in shape.stdout.splitlines() if x.startswith("predict ")]
    assert line.startswith("predict kLiteInputTensorError kLiteInputTensorError: predict failed!"), line
    assert "1,3,224]" in line and "(HTTP 400)" in line and "NOTE:" not in line
    # a size in a dim the model fixes: the runner would build it again, which a repository model cannot be
    fixed = run(driver, server.http_url, "shape", server.http_url, "mobilenetv2", "1,3,224,225")
    assert fixed.returncode == 0, fixed.stderr
    assert (
        "predict kLiteNotSupport kLiteNotSupport: predict failed! a model bound with triton:// keeps the shapes of its "
        "server config; it cannot take input 'input' [1,3,224,225]" in fixed.stdout
    ), fixed.stdout

    grown = run(driver, server.http_url, "grown", server.http_url, "mobilenetv2")  # refused before any request
    assert grown.returncode == 0, grown.stderr
    assert (
        "predict kLiteInputTensorError kLiteInputTensorError: predict failed! input 'input' holds 602112 bytes;"
        in grown.stdout
    )
    assert "its shape needs 1204224" in grown.stdout


def test_outputs_fill_the_callers_buffers(server, builds):
    """MindSpore Lite's sample allocates its outputs (one element spare); Predict writes into them."""
    out = run(builds["plain"].driver, server.http_url, "inplace", server.http_url, "mobilenetv2")
    assert out.returncode == 0, out.stderr
    assert "predict kSuccess" in out.stdout and "output shape1 same_buffer=1 elements=1000" in out.stdout


def test_a_batch_of_two(server, builds, sample_files, tmp_path):
    """SetShape on the dynamic batch dim: two images in one predict, equal to the Python client's bit for bit."""
    one = np.fromfile(sample_files / "input.bin", dtype="<f4")
    x = np.concatenate([one, one[::-1]]).reshape(2, 3, 224, 224)
    (tmp_path / "batch.bin").write_bytes(x.tobytes())
    args = ["batch", server.http_url, "mobilenetv2", str(tmp_path / "batch.bin"), str(tmp_path / "out.bin")]
    out = run(builds["plain"].driver, server.http_url, *args)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "predict kSuccess" in out.stdout and "shape 2 1000\n" in out.stdout

    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    runner = mslite.ModelParallelRunner()
    runner.build_from_file("triton://mobilenetv2", ctx)
    inputs = runner.get_inputs()
    inputs[0].shape = list(x.shape)
    inputs[0].set_data_from_numpy(x)
    (expected,) = runner.predict(inputs)
    np.testing.assert_array_equal(
        np.fromfile(tmp_path / "out.bin", dtype="<f4").reshape(2, 1000), expected.get_data_to_numpy()
    )


def test_runner_refuses_predicts_beyond_its_bound(server, builds, tmp_path: Path) -> None:
    """[runner] max_pending_predicts=1: a second predict while one is held fails at once with kLiteServiceDeny."""
    name, worker = private_model(server, tmp_path, "cpp_bound")  # the C++ runner binds to this model
    run = run_with_a_held_predict([str(builds["plain"].driver), "bound", server.http_url, name], worker)
    assert run.returncode == 0, run.stderr
    assert run.second.startswith("SECOND kLiteServiceDeny kLiteServiceDeny: predict failed! "), run.second
    assert "max_pending_predicts=1" in run.second
    assert "HELD_RESULT kSuccess" in run.rest and "AFTER kSuccess" in run.rest and "PLAIN kSuccess" in run.rest


def test_runner_applies_a_tuned_config_ini(server, builds, tmp_path: Path) -> None:
    """`mslite-triton tune`'s [runner] workers_num and thread_num size an upload where the code sets none."""
    model = GEN.build_tiny()
    helper.set_model_props(model, {"test": "cpp tuned config"})
    (tmp_path / "tuned.onnx").write_bytes(model.SerializeToString())
    tuned = tmp_path / "config.ini"
    tuned.write_text("[runner]\nworkers_num=2\nthread_num=1\n")  # as `mslite-triton tune` writes it
    bad = tmp_path / "bad.ini"
    bad.write_text("[runner]\nworkers_num=many\n")

    def init(ini: Path, threads: int = 0, workers: int = 0, *extra: str) -> str:
        args = ["tuned", server.http_url, str(tmp_path / "tuned.onnx"), str(ini), str(threads), str(workers), *extra]
        out = run(builds["plain"].driver, server.http_url, *args)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    uploaded: list[str] = []
    try:
        # the tuned values where the code sets none; the code's values where it sets them
        for args, workers, threads in (((tuned,), 2, "1"), ((tuned, 2, 1), 1, "2")):
            out = init(*args)
            assert "init kSuccess" in out, out
            (name,) = re.findall(r"^model: (\S+)$", out, re.M)
            uploaded.append(name)
            config = server.http_json("GET", f"/v2/models/{name}/config", None)
            assert config["parameters"]["thread_num"]["string_value"] == threads
            assert sum(group["count"] for group in config["instance_group"]) == workers
            assert len(worker_pids(server, name)) == workers
        assert (
            "init kLiteParamInvalid kLiteParamInvalid: ModelParallelRunner's init failed! [runner] has unknown keys "
            "[bogus]; known: [max_pending_predicts, workers_num, thread_num]" in init(tuned, 0, 0, "bogus")
        )
        assert (
            "init kLiteParamInvalid kLiteParamInvalid: ModelParallelRunner's init failed! [runner] workers_num must "
            "be a non-negative int, got 'many'" in init(bad)
        )
    finally:
        for name in uploaded:
            unload(server, name)


# -- MindSpore Lite's single-model face: Model, ModelGroup, device infos, and a server of its own -------------


@pytest.fixture(scope="module")
def ort_outputs(sample_files) -> dict[int, np.ndarray]:
    """In-process ONNX Runtime on the same file and input, at batch 1 and 2 (the input twice)."""
    session = ort.InferenceSession(str(sample_files / "mobilenetv2.onnx"), providers=["CPUExecutionProvider"])
    x = np.fromfile(sample_files / "input.bin", dtype="<f4").reshape(1, 3, 224, 224)
    name = session.get_inputs()[0].name
    return {n: session.run(None, {name: np.concatenate([x] * n)})[0] for n in (1, 2)}


def assert_close(path: Path, expected: np.ndarray) -> None:
    """Another thread layout than in-process ONNX Runtime's: float precision, as for the runner's uploads."""
    got = np.fromfile(path, dtype="<f4")
    assert got.size == expected.size, path.name
    np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=1e-5, atol=1e-7, err_msg=path.name)


def uploaded_models(stdout: str) -> list[str]:
    return sorted(set(re.findall(r"^model: (\S+)$", stdout, re.M)))


def test_model_face_under_sanitizers(server, builds, sample_files, ort_outputs, tmp_path):
    """Every Model call MindSpore Lite's samples make, against the real server, clean under ASan/UBSan."""
    ini = tmp_path / "config.ini"
    ini.write_text("[runner]\nthread_num=1\n")
    args = [
        "model",
        server.http_url,
        str(sample_files / "mobilenetv2.onnx"),
        str(sample_files / "input.bin"),
        str(tmp_path),
        str(ini),
    ]
    out = run(builds["asan"].model_driver, server.http_url, *args)
    names = uploaded_models(out.stdout)
    try:
        assert out.returncode == 0 and not SANITIZER_REPORT.search(out.stderr), out.stdout + out.stderr[-4000:]
        text = out.stdout
        assert "config_missing kLiteFileError kLiteFileError: LoadConfig failed! cannot read the config file" in text
        assert "rebuild kLiteModelRebuild kLiteModelRebuild: Build failed! the model is built already" in text
        assert "input input 1 3 224 224\noutput shape1 1 1000\nby_name 1 1 1 1 shape1\n" in text
        for step in ("predict", "predict_into", "predict_noargs", "resize", "predict_batch", "predict_buffer"):
            assert f"\n{step} kSuccess kSuccess\n" in text, step
        assert "own_outputs 1\n" in text and "same_buffer 1\n" in text
        assert "resized 2 3 224 224 / 2 1000\n" in text  # the output shape learnt from the run at the new shape
        assert (
            "resize_rank kLiteInputParamInvalid kLiteInputParamInvalid: Resize failed! input 'input' has 4 dims" in text
        )
        assert "after_refusal 2 3 224 224\n" in text  # a refused resize changes nothing
        assert "device_data 1\n" in text
        assert (
            "predict_device kLiteNotSupport kLiteNotSupport: predict failed! input 'input' lies in device memory"
            in text
        )
        assert "predict_callback kLiteNotSupport kLiteNotSupport: predict failed! kernel callbacks" in text
        for case in ("plain", "inplace", "noargs", "buffer"):
            assert_close(tmp_path / f"{case}.bin", ort_outputs[1])
        assert_close(tmp_path / "batch.bin", ort_outputs[2])
        built, from_buffer = (
            [n for n in names if n.startswith("mobilenetv2_")],
            [n for n in names if n.startswith("model_")],
        )
        assert len(built) == 1 and len(from_buffer) == 1, names
        config = server.http_json("GET", f"/v2/models/{built[0]}/config", None)
        assert config["parameters"]["thread_num"]["string_value"] == "2"  # UpdateConfig's value over the file's 1
        assert sum(group["count"] for group in config["instance_group"]) == 1  # one Model, one worker
    finally:
        for name in names:
            unload(server, name)


def test_fixed_dims_model_resized_to_batch_2(server, builds, tmp_path):
    """MindSpore Lite resizes a model whose dims are all fixed: Model::Resize, and the runner at predict."""
    case = write_fixed_case(tmp_path)
    before = set(server.loaded_models())
    out = run(builds["asan"].model_driver, server.http_url, "fixed", server.http_url, str(case.model),
              str(case.input), str(tmp_path))  # fmt: skip
    try:
        assert out.returncode == 0 and not SANITIZER_REPORT.search(out.stderr), out.stdout + out.stderr[-4000:]
        text = out.stdout
        assert "fixed_input 1 224 224 3\n" in text
        steps = ("fixed_resize", "fixed_predict", "fixed_runner_init", "fixed_runner_predict", "fixed_group")
        for step in (*steps, "fixed_shared_resize", "fixed_shared_predict"):
            assert f"\n{step} kSuccess kSuccess\n" in text, (step, text)
        assert "fixed_resized 2 224 224 3 / 2 10\n" in text
        for answer in ("fixed_model", "fixed_runner", "fixed_shared"):
            assert_fixed_answer(tmp_path / f"{answer}.bin", case)
        assert (
            "fixed_rank kLiteInputParamInvalid kLiteInputParamInvalid: Resize failed! input 'input' has 4 dims" in text
        )
        (channels,) = [line for line in text.splitlines() if line.startswith("fixed_channels ")]
        assert "Resize failed! " in channels and "cannot run input 'input' at shape [2, 224, 224, 4]" in channels
        assert "At:" not in channels and "/tmp" not in channels, channels
        assert "fixed_after_refusal 2 224 224 3\n" in text  # a refused resize changes nothing
        assert (
            "fixed_bound_resize kLiteNotSupport kLiteNotSupport: Resize failed! a model bound with triton:// keeps the "
            "shapes of its server config; it cannot take input 'input' [2,224,224,3]" in text
        )
    finally:
        for name in set(server.loaded_models()) - before:
            unload(server, name)


# MindSpore Lite's cloud runtime (model_group_impl.cc): paths under any flag; buffers under kShareWorkspace only;
# Model objects under kShareWeight only. Each AddModel under each flag: the status it gives there.
GROUP_FLAG_RULES = {
    ("weight", "paths"): "kSuccess",
    ("weight", "buffers"): "kLiteError",
    ("weight", "models"): "kSuccess",
    ("workspace", "paths"): "kSuccess",
    ("workspace", "buffers"): "kSuccess",
    ("workspace", "models"): "kLiteError",
    ("both", "paths"): "kSuccess",
    ("both", "buffers"): "kLiteError",
    ("both", "models"): "kLiteError",
    ("unknown", "paths"): "kSuccess",
    ("unknown", "buffers"): "kLiteError",
    ("unknown", "models"): "kLiteError",
}


def assert_group_flag_rules(text: str) -> None:
    for (flag, kind), status in GROUP_FLAG_RULES.items():
        (line,) = [x for x in text.splitlines() if x.startswith(f"flag_{flag}_{kind} ")]
        assert line.split()[1] == status, line
        if status == "kLiteError":
            wanted = "share weight" if kind == "models" else "share workspace"
            assert f"AddModel failed! Only support {wanted} for AddModel of " in line, line
    for flag in ("weight", "workspace", "both"):
        assert f"flag_{flag}_workspace kSuccess" in text
    assert "flag_unknown_workspace kLiteError kLiteError: CalMaxSizeOfWorkspace failed! Only Support share" in text


def test_model_group_and_device_infos(server, builds, sample_files):
    """kShareWeight shares one server model between contexts; Ascend and AIR get statuses naming Ascend."""
    group = run(
        builds["plain"].model_driver, server.http_url, "group", server.http_url, str(sample_files / "mobilenetv2.onnx")
    )
    names = uploaded_models(group.stdout)
    try:
        assert group.returncode == 0, group.stdout + group.stderr
        text = group.stdout
        assert "weights_shared 1\n" in text and "workspace_shared 0\n" in text
        assert "add_built kLiteParamInvalid kLiteParamInvalid: AddModel failed! add models to a group before" in text
        assert "add_models_again kSuccess" in text
        assert "add_other_group kLiteError kLiteError: AddModel failed! the model has been in another group" in text
        assert_group_flag_rules(text)
        assert "add_no_paths kLiteParamInvalid" in text and "add_no_buffers kLiteParamInvalid" in text
        assert "workspace_cpu kSuccess" in text
        assert (
            "workspace_ascend kLiteNotSupport kLiteNotSupport: CalMaxSizeOfWorkspace failed! the shared workspace is "
            "Ascend" in text
        )
        assert "workspace_ge kLiteError kLiteError: CalMaxSizeOfWorkspace failed! Not Support GE model" in text
        assert "workspace_null kLiteNullptr" in text
        (pinned,) = re.findall(r"^pinned_model (\S+)$", text, re.M)
        config = server.http_json("GET", f"/v2/models/{pinned}/config", None)
        assert config["parameters"]["thread_affinity_core_list"]["string_value"] == "0"  # SetThreadAffinity(cores)
    finally:
        for name in names:
            unload(server, name)

    env = {**os.environ, "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4"}  # as mpirun sets them
    devices = subprocess.run(
        [str(builds["plain"].model_driver), "devices", server.http_url, str(sample_files / "mobilenetv2.onnx")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert devices.returncode == 0, devices.stdout + devices.stderr
    text = devices.stdout
    assert "gpu_rank 3 4\n" in text and "ascend_rank 5 1 ge\n" in text
    assert "build_ascend kLiteNotSupport kLiteNotSupport: Build failed! Ascend is not available on this server" in text
    assert "build_air kLiteNotSupport kLiteNotSupport: Build failed! AIR and OM models run on Ascend only" in text
    assert (
        "build_gpu kLiteNotSupport kLiteNotSupport: Build failed! GPU 99 is not available on the server (the GPUs it "
        "can use: " in text
    ), text
    assert "build_unknown_type kLiteParamInvalid" in text and "build_missing kLiteFileError" in text
    assert "inputs_before_build 0\n" in text


def test_model_starts_a_server_of_its_own(builds, sample_files, ort_outputs, tmp_path):
    """No URL: the first Build starts `mslite-triton serve` on free ports, and it is gone, files and all, at exit.

    A key in the environment is another server's: the started server makes its own, which the client reads.
    """
    assert shutil.which("mslite-triton", path=str(Path(sys.executable).parent)), "the venv's mslite-triton"
    env = own_server_env(
        tmp_path, ASAN_OPTIONS="detect_leaks=1", **{settings.ADMIN_KEY_ENV: "the-key-of-another-server"}
    )
    args = ["run", str(sample_files / "mobilenetv2.onnx"), str(sample_files / "input.bin"), str(tmp_path / "out.bin")]
    out = subprocess.run(
        [str(builds["asan"].model_driver), *args], capture_output=True, text=True, timeout=600, env=env
    )
    assert out.returncode == 0 and not SANITIZER_REPORT.search(out.stderr), out.stdout + out.stderr[-4000:]
    assert "build kSuccess" in out.stdout and "predict kSuccess" in out.stdout
    assert_close(tmp_path / "out.bin", ort_outputs[1])
    assert processes_mentioning(str(tmp_path)) == []  # stopped before the program ended
    # the client's folder (model repository, log) and the server's workspace; other libraries' files may stay
    assert folders_left(tmp_path / "tmp") == []
    assert not list((tmp_path / "keys").glob("*.key"))  # the admin key files go with the server


def test_model_builds_a_mindir(server, builds, tmp_path):
    """A MindIR exported by MindSpore, built with kMindIR (the server converts it): MindSpore's own outputs."""
    from tests.integration import test_mindir  # skips without MindSpore (the [mindir] extra)

    script = tmp_path / "export.py"  # MindSpore compiles a network from its source file
    script.write_text(test_mindir.EXPORT)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "GLOG_v": "3"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    dense = test_mindir.Case(tmp_path, "dense")
    dense.inputs[0][:1].astype("<f4").tofile(tmp_path / "input.bin")  # one sample: the model's batch of 1
    args = ["run", str(dense.path), str(tmp_path / "input.bin"), str(tmp_path / "out.bin")]
    out = run(builds["plain"].model_driver, server.http_url, *args)
    try:
        assert out.returncode == 0 and "predict kSuccess" in out.stdout, out.stdout + out.stderr[-3000:]
        got = np.fromfile(tmp_path / "out.bin", dtype="<f4").reshape(dense.expected[:1].shape)
        np.testing.assert_allclose(got, dense.expected[:1], rtol=1e-4, atol=1e-5)
    finally:
        for name in uploaded_models(out.stdout):
            unload(server, name)


def test_a_killed_program_takes_its_server_along(builds, sample_files, tmp_path):
    """SIGKILL leaves no exit handler to run: the server sees its standard input end, stops, removes its folders.

    While it runs, its key is in its processes' environment only, on no command line.
    """
    env = own_server_env(tmp_path)
    proc = subprocess.Popen(
        [str(builds["plain"].model_driver), "hold", str(sample_files / "mobilenetv2.onnx")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        lines = [proc.stdout.readline() for _ in range(3)]  # build, model:, READY
        assert lines[-1] == "READY\n", lines
        assert processes_mentioning(str(tmp_path)), "the server runs while the program does"
        below = descendants_of(proc.pid)
        keys = {environ_value(pid, settings.ADMIN_KEY_ENV) for pid, _ in below} - {None}
        assert len(keys) == 1 and command_lines_holding(keys.pop()) == [], below
        proc.kill()
        proc.wait(timeout=30)
        # `serve` stops tritonserver, the gateway and the workers first
        eventually(lambda: not processes_mentioning(str(tmp_path)), "the server's processes to end", 120, 0.5)
        left = lambda: folders_left(tmp_path / "tmp")  # noqa: E731
        eventually(lambda: not left(), "the server's temporary folders to go", 30, 0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_no_server_command_gives_a_clear_status(builds, sample_files, tmp_path):
    """Without `mslite-triton` (or with the setting naming a missing command), Build says what to do."""
    missing = "/nonexistent/mslite-triton"
    cases = {
        "setting": (
            {settings.SERVE_CMD_ENV: missing},
            f"'{missing}' is not installed ({settings.SERVE_CMD_ENV} names it)",
        ),
        "path": (
            {"PATH": "/usr/bin:/bin"},
            "'mslite-triton', the command that starts a server, was not found (not on PATH, nor in .venv/bin/ of the "
            "current folder or one above it)",
        ),
        "off": ({settings.AUTOSTART_ENV: "0"}, None),
    }
    for case, (extra, words) in cases.items():
        if case == "path" and shutil.which("mslite-triton", path=extra["PATH"]):
            continue  # installed system-wide: nothing to test this way
        (tmp_path / case).mkdir()
        env = own_server_env(tmp_path / case, **extra)
        out = subprocess.run(
            [str(builds["plain"].model_driver), "hold", str(sample_files / "mobilenetv2.onnx")],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=tmp_path / case,  # no checkout's .venv in it or above it
        )
        assert out.returncode == 1, out.stdout + out.stderr
        if words is None:
            assert "build kLiteParamInvalid kLiteParamInvalid: Build failed! no server: " in out.stdout, out.stdout
        else:
            assert f"build kLiteError kLiteError: Build failed! cannot start a server: {words}: install" in out.stdout
            assert f"{settings.SERVE_CMD_ENV}=/path/to/.venv/bin/mslite-triton" in out.stdout
        assert settings.URL_ENV in out.stdout


def test_from_a_checkout_the_client_finds_the_venvs_server_command(builds, sample_files, tmp_path):
    """Nothing on PATH, no setting: run from a folder of the checkout, Build finds `.venv/bin/mslite-triton`."""
    checkout = Path(__file__).resolve().parents[2]
    assert (checkout / ".venv" / "bin" / "mslite-triton").exists(), "the checkout's venv"
    env = {**own_server_env(tmp_path), "PATH": "/usr/bin:/bin"}
    args = ["run", str(sample_files / "mobilenetv2.onnx"), str(sample_files / "input.bin"), str(tmp_path / "out.bin")]
    out = subprocess.run(
        [str(builds["plain"].model_driver), *args], capture_output=True, text=True, timeout=600, env=env,
        cwd=checkout / "docs",
    )  # fmt: skip
    assert out.returncode == 0 and "predict kSuccess" in out.stdout, out.stdout + out.stderr[-3000:]
