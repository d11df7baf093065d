from __future__ import annotations

import inspect
import logging
from pathlib import Path

import pytest

from mslite_triton._checkparam import Checked
from mslite_triton.context import Context


def _raises(exc_type: type[Exception], message: str, obj: object, attr: str, value: object) -> None:
    with pytest.raises(exc_type) as exc:
        setattr(obj, attr, value)
    assert type(exc.value) is exc_type
    assert str(exc.value) == message


# --- Context ---------------------------------------------------------------------------------


def test_context_defaults() -> None:
    ctx = Context()
    assert str(ctx) == "target: ['cpu']."
    assert ctx.target == ["cpu"]
    assert ctx.group_info_file == ""
    assert ctx.server_url is None


def test_parallel_sample_setup() -> None:
    context = Context()
    context.target = ["cpu"]
    context.cpu.thread_num = 1
    context.cpu.inter_op_parallel_num = 1
    context.parallel.workers_num = 3
    assert context.cpu.thread_num == 1
    assert context.cpu.inter_op_parallel_num == 1
    assert context.parallel.workers_num == 3


def test_cloud_infer_sample_context_variants() -> None:
    context = Context()
    context.target = ["cpu"]
    context.cpu.thread_num = 1
    context.cpu.thread_affinity_mode = 2
    assert context.cpu.thread_affinity_mode == 2
    context.target = ["ascend"]
    context.ascend.device_id = 0
    context.ascend.provider = "ge"
    assert context.target == ["ascend"]
    assert (context.ascend.device_id, context.ascend.provider) == (0, "ge")
    context.target = ["gpu"]
    context.gpu.device_id = 0
    assert context.target == ["gpu"] and context.gpu.device_id == 0
    # switching the target keeps what was set for the other device, and the CPU settings
    assert context.ascend.provider == "ge" and context.cpu.thread_affinity_mode == 2 and context.cpu.thread_num == 1


@pytest.mark.parametrize(
    ("target", "stored"),
    [
        (["cpu"], ["cpu"]),
        (["CPU"], ["cpu"]),
        (["gpu"], ["gpu"]),
        (["Ascend"], ["ascend"]),
        (["gpu", "cpu"], ["gpu", "cpu"]),
        ([], ["cpu"]),
        (None, ["cpu"]),
        ("", ["cpu"]),
    ],
)
def test_target(target: object, stored: list[str]) -> None:
    ctx = Context()
    ctx.target = target  # type: ignore[assignment]
    assert ctx.target == stored
    assert str(ctx) == f"target: {stored}."


@pytest.mark.parametrize(
    ("target", "exc_type", "message"),
    [
        ("cpu", TypeError, "target must be list, but got <class 'str'>."),
        (("cpu",), TypeError, "target must be list, but got <class 'tuple'>."),
        (["cpu", 1], TypeError, "target element must be str, but got <class 'int'> at index 1."),
        (["npu"], ValueError, "target elements must be in ['cpu', 'gpu', 'ascend'], but got npu."),
        (["cpu", "NPU"], ValueError, "target elements must be in ['cpu', 'gpu', 'ascend'], but got npu."),
    ],
)
def test_target_errors(target: object, exc_type: type[Exception], message: str) -> None:
    ctx = Context()
    _raises(exc_type, message, ctx, "target", target)
    assert ctx.target == ["cpu"]


def test_target_getter_returns_a_copy() -> None:
    ctx = Context()
    ctx.target.append("gpu")
    assert ctx.target == ["cpu"]
    user_list = ["gpu"]
    ctx.target = user_list
    user_list.append("ascend")
    assert ctx.target == ["gpu"]


def test_group_info_file() -> None:
    ctx = Context()
    ctx.group_info_file = "/tmp/group_config_0.pb"
    assert ctx.group_info_file == "/tmp/group_config_0.pb"
    _raises(TypeError, "group_info_file must be str, but got <class 'int'>.", ctx, "group_info_file", 1)


@pytest.mark.parametrize("url", ["grpc://127.0.0.1:8001", "http://localhost:8000", "https://triton.example:443"])
def test_server_url_accepted(url: str) -> None:
    ctx = Context()
    ctx.server_url = url
    assert ctx.server_url == url
    ctx.server_url = None
    assert ctx.server_url is None


@pytest.mark.parametrize("url", ["localhost:8001", "tcp://x:1", "GRPC//x", ""])
def test_server_url_rejected(url: str) -> None:
    ctx = Context()
    with pytest.raises(ValueError) as exc:
        ctx.server_url = url
    message = str(exc.value)
    assert message == f"server_url must start with one of ['grpc://', 'http://', 'https://'], but got {url}."
    assert ctx.server_url is None


def test_server_url_type() -> None:
    _raises(TypeError, "server_url must be str, but got <class 'int'>.", Context(), "server_url", 8001)


# --- cpu -------------------------------------------------------------------------------------


def test_cpu_defaults_and_str() -> None:
    cpu = Context().cpu
    assert cpu.thread_num == 0
    assert cpu.inter_op_parallel_num == 0
    assert cpu.thread_affinity_mode == 0
    assert cpu.thread_affinity_core_list == []
    assert cpu.precision_mode == "enforce_fp32"
    assert str(cpu) == (
        "device_type: DeviceType.kCPU,\nprecision_mode: enforce_fp32,\nthread_num: 0,\n"
        "inter_op_parallel_num: 0,\nthread_affinity_mode: 0,\nthread_affinity_core_list: []."
    )


def test_cpu_setters_and_str() -> None:
    cpu = Context().cpu
    cpu.precision_mode = "preferred_fp16"
    cpu.thread_num = 2
    cpu.inter_op_parallel_num = 2
    cpu.thread_affinity_mode = 1
    cpu.thread_affinity_core_list = [0, 1]
    assert str(cpu) == (
        "device_type: DeviceType.kCPU,\nprecision_mode: preferred_fp16,\nthread_num: 2,\n"
        "inter_op_parallel_num: 2,\nthread_affinity_mode: 1,\nthread_affinity_core_list: [0, 1]."
    )
    cpu.thread_affinity_core_list.append(5)
    assert cpu.thread_affinity_core_list == [0, 1]


@pytest.mark.parametrize(
    ("attr", "value", "exc_type", "message"),
    [
        ("thread_num", "2", TypeError, "cpu_thread_num must be int, but got <class 'str'>."),
        ("thread_num", 2.0, TypeError, "cpu_thread_num must be int, but got <class 'float'>."),
        ("thread_num", -1, ValueError, "cpu_thread_num must be a non-negative int."),
        ("inter_op_parallel_num", None, TypeError,
         "cpu_inter_op_parallel_num must be int, but got <class 'NoneType'>."),
        ("inter_op_parallel_num", -2, ValueError, "cpu_inter_op_parallel_num must be a non-negative int."),
        ("thread_affinity_mode", "1", TypeError,
         "cpu_thread_affinity_mode must be int, but got <class 'str'>."),
        ("thread_affinity_core_list", (0, 1), TypeError,
         "cpu_thread_affinity_core_list must be list, but got <class 'tuple'>."),
        ("thread_affinity_core_list", [0, "1"], TypeError,
         "cpu_thread_affinity_core_list element must be int, but got <class 'str'> at index 1."),
        ("precision_mode", 1, TypeError, "cpu_precision_mode must be str, but got <class 'int'>."),
        ("precision_mode", "enforce_fp16", ValueError,
         "cpu_precision_mode must be in [enforce_fp32, preferred_fp16], but got enforce_fp16."),
    ],
)  # fmt: skip
def test_cpu_errors(attr: str, value: object, exc_type: type[Exception], message: str) -> None:
    _raises(exc_type, message, Context().cpu, attr, value)


def test_cpu_affinity_mode_out_of_range_becomes_zero(caplog: pytest.LogCaptureFixture) -> None:
    cpu = Context().cpu
    cpu.thread_affinity_mode = 1
    with caplog.at_level(logging.WARNING, logger="mslite_triton.context"):
        cpu.thread_affinity_mode = 5
    assert cpu.thread_affinity_mode == 0
    assert "Invalid thread affinity mode 5" in caplog.text
    cpu.thread_affinity_mode = -1
    assert cpu.thread_affinity_mode == 0


# --- gpu -------------------------------------------------------------------------------------


def test_gpu_defaults_setters_and_str() -> None:
    gpu = Context().gpu
    assert gpu.device_id == 0
    assert gpu.precision_mode == "enforce_fp32"
    assert gpu.rank_id == 0
    assert gpu.group_size == 1
    gpu.precision_mode = "preferred_fp16"
    gpu.device_id = 2
    assert str(gpu) == (
        "device_type: DeviceType.kGPU,\nprecision_mode: preferred_fp16,\ndevice_id: 2,\nrank_id: 0,\ngroup_size: 1."
    )


def test_gpu_read_only() -> None:
    gpu = Context().gpu
    with pytest.raises(AttributeError):
        gpu.rank_id = 1  # type: ignore[misc]
    with pytest.raises(AttributeError):
        gpu.group_size = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    ("attr", "value", "exc_type", "message"),
    [
        ("device_id", "0", TypeError, "gpu_device_id must be int, but got <class 'str'>."),
        ("device_id", -1, ValueError, "gpu_device_id must be a non-negative int."),
        ("precision_mode", None, TypeError, "gpu_precision_mode must be str, but got <class 'NoneType'>."),
        ("precision_mode", "fp16", ValueError,
         "gpu_precision_mode must be in [enforce_fp32, preferred_fp16], but got fp16."),
    ],
)  # fmt: skip
def test_gpu_errors(attr: str, value: object, exc_type: type[Exception], message: str) -> None:
    _raises(exc_type, message, Context().gpu, attr, value)


# --- ascend ----------------------------------------------------------------------------------


def test_ascend_defaults_setters_and_str() -> None:
    ascend = Context().ascend
    assert ascend.device_id == 0
    assert ascend.rank_id == 0
    assert ascend.provider == ""
    assert ascend.precision_mode == ""
    ascend.precision_mode = "enforce_fp32"
    ascend.device_id = 2
    ascend.provider = "ge"
    ascend.rank_id = 0
    # MindSpore Lite's own string, missing line breaks included.
    assert str(ascend) == (
        "device_type: DeviceType.kAscend,\nprecision_mode: enforce_fp32,\ndevice_id: 2.provider: ge.rank_id: 0."
    )


@pytest.mark.parametrize(
    "mode", ["enforce_fp32", "preferred_fp32", "enforce_fp16", "enforce_origin", "preferred_optimal"]
)
def test_ascend_precision_modes(mode: str) -> None:
    ascend = Context().ascend
    ascend.precision_mode = mode
    assert ascend.precision_mode == mode


def test_ascend_provider_is_not_value_checked() -> None:
    ascend = Context().ascend
    ascend.provider = "anything"
    assert ascend.provider == "anything"


@pytest.mark.parametrize(
    ("attr", "value", "exc_type", "message"),
    [
        ("device_id", 1.5, TypeError, "ascend_device_id must be int, but got <class 'float'>."),
        ("device_id", -1, ValueError, "ascend_device_id must be a non-negative int."),
        ("rank_id", "0", TypeError, "ascend_rank_id must be int, but got <class 'str'>."),
        ("rank_id", -3, ValueError, "ascend_rank_id must be a non-negative int."),
        ("provider", None, TypeError, "ascend_provider must be str, but got <class 'NoneType'>."),
        ("precision_mode", 0, TypeError, "ascend_precision_mode must be str, but got <class 'int'>."),
        ("precision_mode", "preferred_fp16", ValueError,
         "ascend_precision_mode must be in [enforce_fp32, preferred_fp32, enforce_fp16, enforce_origin, "
         "preferred_optimal], but got preferred_fp16."),
    ],
)  # fmt: skip
def test_ascend_errors(attr: str, value: object, exc_type: type[Exception], message: str) -> None:
    _raises(exc_type, message, Context().ascend, attr, value)


# --- parallel --------------------------------------------------------------------------------


def test_parallel_defaults_and_str() -> None:
    parallel = Context().parallel
    assert parallel.workers_num == 0
    assert parallel.config_info == ""
    assert parallel.config_path == ""
    assert parallel.device_ids == []
    assert str(parallel) == "workers num: 0,\nconfig info: ,\nconfig file: ."


def test_parallel_str_with_values(tmp_path: Path) -> None:
    config = tmp_path / "config.txt"
    config.write_text("[model_file]\n")
    parallel = Context().parallel
    parallel.workers_num = 4
    parallel.config_info = {"model_file": {"mindir_path": "/home/user/model_graph.mindir"}}
    parallel.config_path = str(config)
    assert str(parallel) == (
        f"workers num: 4,\nconfig info: model_file: mindir_path /home/user/model_graph.mindir,\nconfig file: {config}."
    )


def test_config_info_string_sorted_and_sections_replaced() -> None:
    parallel = Context().parallel
    parallel.config_info = {
        "shared_thread_pool": {"enable_shared_thread_pool": "true", "a_key": "1"},
        "model_file": {"mindir_path": "/m.mindir"},
    }
    assert parallel.config_info == (
        "model_file: mindir_path /m.mindir\nshared_thread_pool: a_key 1\nenable_shared_thread_pool true"
    )
    # A repeated section replaces the earlier one; other sections stay.
    parallel.config_info = {"model_file": {"other": "x"}}
    assert parallel.config_info == ("model_file: other x\nshared_thread_pool: a_key 1\nenable_shared_thread_pool true")
    # What is kept is a copy of the user's dict.
    user = {"s": {"k": "v"}}
    parallel.config_info = user
    user["s"]["k"] = "changed"
    assert "\ns: k v\n" in parallel.config_info


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([("a", {})], "config_info must be dict, but got <class 'list'>."),
        ({1: {}}, "config_info_key must be str, but got <class 'int'>."),
        ({"s": "k=v"}, "config_info_value must be dict, but got <class 'str'>."),
        ({"s": {2: "v"}}, "config_info_value_key must be str, but got <class 'int'>."),
        ({"s": {"k": 3}}, "config_info_value_value must be str, but got <class 'int'>."),
    ],
)
def test_config_info_errors(value: object, message: str) -> None:
    parallel = Context().parallel
    _raises(TypeError, message, parallel, "config_info", value)


def test_config_info_validates_everything_before_setting() -> None:
    parallel = Context().parallel
    with pytest.raises(TypeError):
        parallel.config_info = {"good": {"k": "v"}, "bad": {"k": 1}}
    assert parallel.config_info == ""


@pytest.mark.parametrize(
    ("value", "exc_type", "message"),
    [
        ("4", TypeError, "workers_num must be int, but got <class 'str'>."),
        (-1, ValueError, "Set parallel failed, workers_num must be a non-negative int."),
    ],
)
def test_workers_num_errors(value: object, exc_type: type[Exception], message: str) -> None:
    _raises(exc_type, message, Context().parallel, "workers_num", value)


def test_config_path(tmp_path: Path) -> None:
    config = tmp_path / "config.ini"
    config.write_text("[execution_plan]\n")
    parallel = Context().parallel
    parallel.config_path = str(config)
    assert parallel.config_path == str(config)
    parallel.config_path = ""  # ignored
    assert parallel.config_path == str(config)
    missing = str(tmp_path / "missing.ini")
    message = f"Set parallel failed, config_path does not exist! config_path: {missing}"
    _raises(ValueError, message, parallel, "config_path", missing)
    message = "config_path must be str, but got <class 'pathlib.PosixPath'>."
    _raises(TypeError, message, parallel, "config_path", config)
    assert parallel.config_path == str(config)


def test_device_ids() -> None:
    parallel = Context().parallel
    parallel.device_ids = [0, 1, 3]
    assert parallel.device_ids == [0, 1, 3]
    parallel.device_ids.append(7)
    assert parallel.device_ids == [0, 1, 3]
    _raises(TypeError, "device_ids must be list, but got <class 'tuple'>.", parallel, "device_ids", (0,))
    _raises(
        TypeError,
        "device_ids element must be int, but got <class 'str'> at index 1.",
        parallel,
        "device_ids",
        [0, "1"],
    )
    message = "Set parallel failed, device_ids contain a negative number."
    _raises(ValueError, message, parallel, "device_ids", [0, -1])
    assert parallel.device_ids == [0, 1, 3]


def test_contexts_are_independent() -> None:
    a, b = Context(), Context()
    a.cpu.thread_num = 4
    a.parallel.config_info = {"s": {"k": "v"}}
    assert b.cpu.thread_num == 0
    assert b.parallel.config_info == ""


def test_checked_settings_document_what_they_raise() -> None:
    ctx = Context()
    thread_num = inspect.getdoc(type(ctx.cpu).thread_num)
    assert thread_num == (
        "int: Threads per worker; 0 (default) chooses automatically.\n\n"
        "Raises:\n    TypeError: not an int.\n    ValueError: negative."
    )
    modes = inspect.getdoc(type(ctx.ascend).precision_mode) or ""
    assert modes.endswith(
        "ValueError: not one of enforce_fp32, preferred_fp32, enforce_fp16, enforce_origin, preferred_optimal."
    )
    for settings in (ctx, ctx.cpu, ctx.gpu, ctx.ascend, ctx.parallel):
        for name in (n for n in dir(type(settings)) if not n.startswith("_")):
            attr = getattr(type(settings), name)
            if isinstance(attr, Checked) or getattr(attr, "fset", None):  # checked or hand-written setters
                assert "\nRaises:\n" in (inspect.getdoc(attr) or ""), f"{type(settings).__name__}.{name}"
