"""MindSpore Lite parity of the client, without a server: messages, defaults, limits, settings that do nothing."""

from __future__ import annotations

import json
import logging
import socket
import threading
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

import mslite_triton as mslite
from mslite_contract.protocol import DEFAULT_MAX_PENDING
from mslite_contract.scrub import device_missing, scrub_json_error
from mslite_triton._build import build_failed
from mslite_triton._error_table import classify
from mslite_triton._model_config import parse_config_file, plan_workers
from mslite_triton._onnx_io import metadata_props
from mslite_triton._pending import PendingLimit, take_runner_section
from mslite_triton._remote import users_words
from mslite_triton.errors import InvalidInputError, ModelLoadError, ServerUnavailableError, ServiceDenyError

URL = "grpc://127.0.0.1:8001"


# --- exceptions ---------------------------------------------------------------------------------


def test_rejected_inputs_are_caught_as_value_error_and_runtime_error() -> None:
    error = classify(InferenceServerException("input 'x': expected FP32", status="StatusCode.INVALID_ARGUMENT"), URL)
    assert isinstance(error, InvalidInputError)
    assert isinstance(error, ValueError) and isinstance(error, RuntimeError)
    with pytest.raises(RuntimeError):  # what code written for MindSpore Lite catches
        raise error


def test_triton_advice_for_model_authors_is_dropped() -> None:
    text = (
        "unexpected shape for input 'x' for model 'tiny'. Expected [-1,4], got [2,5]. NOTE: Setting a non-zero "
        "max_batch_size in the model config requires a batch dimension to be prepended to each input shape. If you "
        "want to specify the full shape including the batch dim in your input dims config, try setting "
        "max_batch_size to zero. See the model configuration docs for more info on max_batch_size."
    )
    error = classify(InferenceServerException(text, status="StatusCode.INVALID_ARGUMENT"), URL)
    assert str(error) == "unexpected shape for input 'x' for model 'tiny'. Expected [-1,4], got [2,5]."


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("build_from_file failed", "build_from_file failed! Error is kLiteError: model file 'model.onnx' is bad"),
        (
            "ModelParallelRunner's build from file failed",
            "ModelParallelRunner's build from file failed! Error is kLiteError: model file 'model.onnx' is bad",
        ),
    ],
)
def test_build_failures_read_as_in_mindspore_lite(who: str, expected: str) -> None:
    server = (
        "load failed for model 'net_0a1b2c': version 1 is at UNAVAILABLE state: Internal: TritonModelException: "
        "model 'net_0a1b2c': model file 'model.onnx' is bad"
    )
    error = build_failed(ModelLoadError(server), who)
    assert type(error) is ModelLoadError and str(error) == expected
    local = build_failed(RuntimeError("build_from_file failed! Error is kLiteNotSupport: x.ms is a .ms file"), who)
    assert str(local) == f"{who}! Error is kLiteNotSupport: x.ms is a .ms file"
    unreachable = ServerUnavailableError(URL)
    assert build_failed(unreachable, who) is unreachable


# --- thread and worker rules ---------------------------------------------------------------------


def _context(workers: int = 0, threads: int = 0) -> mslite.Context:
    context = mslite.Context()
    context.parallel.workers_num = workers
    context.cpu.thread_num = threads
    return context


@pytest.mark.parametrize(("cores", "workers", "threads"), [(2, 3, 2), (2, 2, 1), (4, 3, 1), (32, 5, 6), (3, 4, 3)])
def test_auto_threads_with_workers_given(cores: int, workers: int, threads: int) -> None:
    # cores / N, or all cores when there are fewer cores than workers
    assert plan_workers(_context(workers=workers), cores=cores).thread_num == threads


def test_too_many_threads_are_clamped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert plan_workers(_context(workers=1, threads=11), cores=2).thread_num == 10
    assert "thread num 11 is more than 5 x 2 cores: set to 10" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert plan_workers(_context(workers=1, threads=10), cores=2).thread_num == 10
    assert "thread num" not in caplog.text


def test_execution_plan_values_lose_their_quotes(tmp_path: Path) -> None:
    path = tmp_path / "config.ini"
    path.write_text('[execution_plan]\nop_1="data_type:float16"\n[other]\nkey="kept"\n')
    sections = parse_config_file(str(path))
    assert sections["execution_plan"] == {"op_1": "data_type:float16"}
    assert sections["other"] == {"key": '"kept"'}


# --- the pending-predict bound --------------------------------------------------------------------


def test_pending_bound_defaults_to_mindspore_lites_1000() -> None:
    sections, limit = take_runner_section({"dynamic_batching": {"max_queue_size": "4"}}, "who")
    assert limit.bound == DEFAULT_MAX_PENDING == 1000
    assert sections == {"dynamic_batching": {"max_queue_size": "4"}}


def test_served_name_is_empty_before_a_build() -> None:
    assert mslite.Model().served_name == "" and mslite.ModelParallelRunner().served_name == ""


def test_runner_section_sets_the_bound_and_stays_on_the_client() -> None:
    sections, limit = take_runner_section({"runner": {"max_pending_predicts": "3"}, "a": {"b": "c"}}, "who")
    assert limit.bound == 3 and sections == {"a": {"b": "c"}}
    assert take_runner_section({"runner": {"max_pending_predicts": "0"}}, "who")[1].bound == 0
    with pytest.raises(RuntimeError, match=r"^who! Error is \[runner\] max_pending_predicts must be a non-negative"):
        take_runner_section({"runner": {"max_pending_predicts": "-1"}}, "who")
    with pytest.raises(RuntimeError, match=r"unknown keys \['max_pending'\]"):
        take_runner_section({"runner": {"max_pending": "1"}}, "who")


def test_pending_limit_refuses_beyond_the_bound_and_frees_its_places() -> None:
    limit = PendingLimit(2)
    with limit.slot(), limit.slot():
        with pytest.raises(ServiceDenyError) as info, limit.slot():
            pass
        assert limit.in_flight == 2
    assert limit.in_flight == 0
    assert info.value.status == "kLiteServiceDeny" and isinstance(info.value, RuntimeError)
    assert str(info.value).startswith("predict failed! Error is kLiteServiceDeny: The number of waiting tasks")
    with pytest.raises(KeyError), limit.slot():
        raise KeyError("a failed predict gives its place back")
    assert limit.in_flight == 0


def test_unbounded_limit_counts_without_refusing() -> None:
    limit = PendingLimit(0)
    barrier = threading.Barrier(5)

    def hold() -> None:
        with limit.slot():
            barrier.wait(timeout=30)

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        with limit.slot():
            barrier.wait(timeout=30)  # 5 in flight at once
    finally:
        for t in threads:
            t.join()
    assert limit.in_flight == 0


# --- settings that do nothing here ---------------------------------------------------------------


def test_settings_without_effect_warn_once(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build warns before it looks for the server: one with no server behind its URL is enough."""
    monkeypatch.setattr("mslite_triton.context._WARNED", set())
    nobody = socket.create_server(("127.0.0.1", 0))
    url = f"grpc://127.0.0.1:{nobody.getsockname()[1]}"
    nobody.close()  # nothing listens there now: the build fails at once, after its warnings

    def build(context: mslite.Context) -> None:
        context.server_url = url
        for owner in (mslite.Model(), mslite.ModelParallelRunner()):
            with pytest.raises(ServerUnavailableError):
                if isinstance(owner, mslite.Model):
                    owner.build_from_file("triton://any", mslite.ModelType.MINDIR, context)
                else:
                    owner.build_from_file("triton://any", context)

    context = mslite.Context()
    context.group_info_file = "group.json"
    context.cpu.precision_mode = "preferred_fp16"
    with caplog.at_level(logging.WARNING):
        build(context)  # twice: the Model's build and the runner's
    assert caplog.text.count("group_info_file") == 1
    assert caplog.text.count("preferred_fp16") == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        build(mslite.Context())
    assert "has no effect" not in caplog.text


# --- model information -----------------------------------------------------------------------------


def test_metadata_props_are_read_without_onnx() -> None:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph)
    assert metadata_props(model.SerializeToString()) == {}
    onnx.helper.set_model_props(model, {"author": "me", "task": "cls"})
    assert metadata_props(model.SerializeToString()) == {"author": "me", "task": "cls"}
    assert metadata_props(b"\xff\xff") == {}


# --- ModelGroup -----------------------------------------------------------------------------------


def test_model_group_flags_and_argument_checks() -> None:
    assert [int(f) for f in mslite.ModelGroupFlag] == [1, 2, 3]
    assert str(mslite.ModelGroupFlag.SHARE_WEIGHT) == "ModelGroupFlag.SHARE_WEIGHT"
    assert mslite.ModelGroup().flags is mslite.ModelGroupFlag.SHARE_WORKSPACE
    with pytest.raises(RuntimeError, match="Parameter flags should be"):
        mslite.ModelGroup(1)  # type: ignore[arg-type]
    group = mslite.ModelGroup(mslite.ModelGroupFlag.SHARE_WEIGHT)
    with pytest.raises(TypeError, match="models must be list/tuple"):
        group.add_model("a.onnx")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="models cannot be empty"):
        group.add_model([])
    with pytest.raises(TypeError, match="models element must be all str or Model, but got <class 'int'> at index 1."):
        group.add_model(["a.onnx", 1])
    with pytest.raises(TypeError, match="at index 0"):
        group.add_model([1])
    group.add_model(["a.onnx", "b.onnx"])
    model = mslite.Model()
    group.add_model([model])  # what it does: tests/integration/test_parity.py
    group.add_model([model])  # again into the same group: nothing changes
    with pytest.raises(RuntimeError, match=r"^ModelGroup's add model failed\. Error is kLiteError: the model has been"):
        mslite.ModelGroup(mslite.ModelGroupFlag.SHARE_WEIGHT).add_model([model])
    with pytest.raises(TypeError, match="context must be Context"):
        group.cal_max_size_of_workspace(mslite.ModelType.MINDIR, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="model_type must be ModelType"):
        group.cal_max_size_of_workspace(0, mslite.Context())  # type: ignore[arg-type]
    assert group.cal_max_size_of_workspace(mslite.ModelType.MINDIR, mslite.Context()) is None
    ascend = mslite.Context()
    ascend.target = ["ascend"]
    with pytest.raises(
        RuntimeError, match=r"^ModelGroup's cal max size of workspace failed\. Error is kLiteNotSupport"
    ):
        group.cal_max_size_of_workspace(mslite.ModelType.MINDIR, ascend)
    ascend.ascend.provider = "ge"
    with pytest.raises(RuntimeError, match=r"failed\. Error is kLiteError: Not Support GE model"):
        group.cal_max_size_of_workspace(mslite.ModelType.MINDIR, ascend)


# MindSpore Lite's cloud runtime's rules (model_group_impl.cc), as the C++ and Java tests check them too: paths
# under any flag, Model objects under SHARE_WEIGHT only (MindSpore Lite's Python has no buffers).
@pytest.mark.parametrize(
    ("flag", "models_taken"),
    [
        (mslite.ModelGroupFlag.SHARE_WEIGHT, True),
        (mslite.ModelGroupFlag.SHARE_WORKSPACE, False),
        (mslite.ModelGroupFlag.SHARE_WEIGHT_WORKSPACE, False),
    ],
)
def test_model_group_takes_what_each_flag_takes(flag: mslite.ModelGroupFlag, models_taken: bool) -> None:
    group = mslite.ModelGroup(flag)
    assert group.add_model(["a.onnx", "b.onnx"]) is None
    models = [mslite.Model(), mslite.Model()]
    if models_taken:
        assert group.add_model(models) is None
        return
    with pytest.raises(RuntimeError) as info:
        group.add_model(models)
    assert str(info.value) == (
        "ModelGroup's add model failed. Error is kLiteError: Only support share weight for add_model of Model "
        f"objects: this group was made with {flag}"
    )


# --- before a build ---------------------------------------------------------------------------------


def test_inputs_and_outputs_before_a_build() -> None:
    assert mslite.ModelParallelRunner().get_inputs() == []
    assert mslite.Model().get_outputs() == ()
    assert mslite.Model().get_inputs() == []


# --- build_from_file's check order ------------------------------------------------------------------


def test_a_missing_model_file_is_reported_before_config_and_key_checks(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.onnx")
    for kwargs in ({"config_dict": "not a dict"}, {"dec_key": 1}, {"config_path": "missing.ini"}):
        with pytest.raises(RuntimeError) as exc:
            mslite.Model().build_from_file(missing, mslite.ModelType.MINDIR, None, **kwargs)
        # MindSpore Lite's words, then the path it looked for
        assert str(exc.value) == f"build_from_file failed, model_path does not exist! model_path: {missing}"
    with pytest.raises(TypeError, match="config_path must be str"):
        mslite.Model().build_from_file(missing, mslite.ModelType.MINDIR, None, 1)  # type: ignore[arg-type]


def test_a_directory_given_as_the_model_file_is_named(tmp_path: Path) -> None:
    for build, who in (
        (lambda: mslite.Model().build_from_file(str(tmp_path), mslite.ModelType.MINDIR), "build_from_file failed"),
        (
            lambda: mslite.ModelParallelRunner().build_from_file(str(tmp_path)),
            "ModelParallelRunner's build from file failed",
        ),
    ):
        with pytest.raises(RuntimeError) as exc:
            build()
        assert (
            str(exc.value)
            == f"{who}! Error is kLiteInputParamInvalid: model_path is a directory, not a model file: {tmp_path}"
        )


def test_inputs_asked_for_before_a_build_are_none_and_an_error_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("ERROR", logger="mslite_triton"):
        assert mslite.Model().get_inputs() == [] and mslite.ModelParallelRunner().get_inputs() == []
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "Model.get_inputs",
        "ModelParallelRunner.get_inputs",
    ]


def test_weight_list_with_a_config_dict_lacking_ascend_context_is_a_key_error(tmp_path: Path) -> None:
    model_file = tmp_path / "net.onnx"
    model_file.write_bytes(b"\x08\x08")
    (tmp_path / "names.txt").write_text("w\n")
    config = tmp_path / "config.ini"
    config.write_text("[ascend_context]\nvariable_weights_file=names.txt\n")
    with pytest.raises(KeyError, match="ascend_context"):
        mslite.Model().build_from_file(
            str(model_file), mslite.ModelType.MINDIR, None, str(config), {"other": {"k": "v"}}
        )


def test_encrypted_models_are_refused_with_what_to_do(tmp_path: Path) -> None:
    model_file = tmp_path / "net.mindir"
    model_file.write_bytes(b"\x0a\x00")
    with pytest.raises(ValueError, match="^dec_mode must not be empty string!$"):
        mslite.Model().build_from_file(str(model_file), mslite.ModelType.MINDIR, dec_key=b"k" * 16, dec_mode="")
    with pytest.raises(RuntimeError, match=r"^build_from_file failed! Error is kLiteNotSupport: .*from the plain file"):
        mslite.Model().build_from_file(str(model_file), mslite.ModelType.MINDIR, dec_key=b"k" * 16)


def test_gateway_answers_leave_out_triton_advice_for_model_authors() -> None:
    body = json.dumps(
        {
            "error": "unexpected shape for input 'x'. Expected [-1,4], got [2,5]. NOTE: Setting a "
            "non-zero max_batch_size in the model config requires a batch dimension"
        }
    ).encode()
    assert json.loads(scrub_json_error(body)) == {
        "error": "unexpected shape for input 'x'. Expected [-1,4], got [2,5]."
    }


@pytest.mark.parametrize(
    ("server_text", "expected"),
    [
        (
            "unexpected shape for input 'x' for model 'mobilenetv2_582088d16767'. Expected [-1,4], got [2,5].",
            "unexpected shape for input 'x' for model 'mobilenetv2.onnx'. Expected [-1,4], got [2,5].",
        ),
        (
            "inference request batch-size must be <= 64 for 'mobilenetv2_582088d16767'",
            "inference request batch-size must be <= 64 for 'mobilenetv2.onnx': the model's max_batch_size (64 "
            "unless its config says otherwise); send fewer rows per predict, or raise it with [dynamic_batching] "
            "max_batch_size=N in the build's config (config_path, config_dict, or context.parallel.config_info)",
        ),
    ],
)
def test_server_messages_name_the_users_model_and_the_batch_limits_origin(server_text: str, expected: str) -> None:
    assert users_words(server_text, "mobilenetv2_582088d16767", "mobilenetv2.onnx") == expected


# --- a device the server lacks ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("listed", "usable"),
    [(" ", "none"), (" 1, 2", "1, 2"), (" 3;", "3")],
)
def test_one_wording_for_a_gpu_the_server_lacks(listed: str, usable: str) -> None:
    triton = (
        "load failed for model 'tiny_1a2b': version 1 is at UNAVAILABLE state: Invalid argument: instance group "
        "tiny_1a2b_0 of model tiny_1a2b specifies invalid or unsupported gpu id 7. GPUs with at least the minimum "
        f"required CUDA compute compatibility of 6.000000 are:{listed}"
    )
    assert device_missing(triton) == f"GPU 7 is not available on the server (the GPUs it can use: {usable})"
    assert device_missing("unexpected shape for input 'x'") is None
