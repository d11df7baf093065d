"""BackendConfig.from_model_config and InstanceInfo.from_args (no server)."""

from __future__ import annotations

from typing import Any

import pytest

from mslite_backend.config import KNOWN_KEYS, BackendConfig, InstanceInfo, TensorSpec
from mslite_backend.errors import ConfigError


def _config(params: dict[str, str] | None = None, *, groups: list[dict[str, Any]] | None = None, **extra: Any) -> dict:
    config: dict[str, Any] = {"name": "m", "max_batch_size": 8, **extra}
    if params is not None:
        config["parameters"] = {k: {"string_value": v} for k, v in params.items()}
    if groups is not None:
        config["instance_group"] = groups
    return config


def _parse(params: dict[str, str] | None = None, *, cores: int = 8, **kw: Any) -> BackendConfig:
    return BackendConfig.from_model_config(_config(params, **kw), cores=cores)


def _error(params: dict[str, str], *, cores: int = 8, **kw: Any) -> str:
    with pytest.raises(ConfigError) as exc:
        _parse(params, cores=cores, **kw)
    return str(exc.value)


# --- defaults ---------------------------------------------------------------------------------


def test_defaults_of_a_minimal_config() -> None:
    cfg = BackendConfig.from_model_config({"name": "m"}, cores=4)
    assert cfg.model_name == "m"
    assert cfg.max_batch_size == 0 and not cfg.batched
    assert cfg.inputs == () and cfg.outputs == ()
    assert cfg.model_filename == "model.onnx"
    assert cfg.workers == 1
    assert cfg.intra_op_threads == 4
    assert cfg.inter_op_threads == 1
    assert cfg.execution_mode == "sequential"
    assert cfg.enable_mem_arena is True
    assert cfg.graph_optimization_level == 99
    assert cfg.allow_spinning is True
    assert cfg.thread_affinity_mode == 0
    assert cfg.thread_affinity_core_list == ()
    assert cfg.precision_mode == "enforce_fp32"
    assert cfg.warmup is True
    assert cfg.warnings == ()


@pytest.mark.parametrize(
    ("cores", "counts", "threads"),
    [(8, [1], 8), (8, [2], 4), (8, [3], 2), (2, [4], 1), (32, [2, 2], 8), (7, [1, 1], 3)],
)
def test_default_threads_split_the_cores_between_all_instances(cores: int, counts: list[int], threads: int) -> None:
    cfg = _parse(cores=cores, groups=[{"kind": "KIND_CPU", "count": c} for c in counts])
    assert cfg.workers == sum(counts)
    assert cfg.intra_op_threads == threads


def test_instance_group_counts_are_summed_and_a_missing_count_is_one() -> None:
    groups = [{"kind": "KIND_CPU", "count": 3}, {"kind": "KIND_CPU"}, {"kind": "KIND_GPU", "count": 2, "gpus": [0]}]
    assert _parse(groups=groups).workers == 6
    assert _parse(groups=[]).workers == 1


def test_gpu_group_count_is_per_listed_gpu() -> None:
    cfg = _parse(groups=[{"kind": "KIND_GPU", "count": 2, "gpus": [0, 1]}], cores=8)
    assert cfg.workers == 4
    assert cfg.intra_op_threads == 2


def test_thread_num_zero_means_the_default() -> None:
    assert _parse({"thread_num": "0"}, cores=6).intra_op_threads == 6
    assert _parse({"intra_op_thread_count": "0"}, cores=6).intra_op_threads == 6
    assert _parse({"inter_op_parallel_num": "0"}).inter_op_threads == 1


def test_spinning_is_allowed_only_when_the_threads_fit_the_cores() -> None:
    assert _parse({"thread_num": "4"}, cores=8, groups=[{"count": 2}]).allow_spinning is True
    assert _parse({"thread_num": "4"}, cores=8, groups=[{"count": 3}]).allow_spinning is False
    assert _parse({"thread_num": "16"}, cores=8).allow_spinning is False
    # The default split never oversubscribes, except with more instances than cores.
    assert _parse(cores=2, groups=[{"count": 2}]).allow_spinning is True
    assert _parse(cores=2, groups=[{"count": 3}]).allow_spinning is False


# --- each parameter ---------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["intra_op_thread_count", "thread_num"])
def test_intra_op_threads_under_both_names(key: str) -> None:
    cfg = _parse({key: "3"})
    assert cfg.intra_op_threads == 3
    assert cfg.warnings == ()


@pytest.mark.parametrize("key", ["inter_op_thread_count", "inter_op_parallel_num"])
def test_inter_op_threads_under_both_names(key: str) -> None:
    cfg = _parse({key: "2"})
    assert cfg.inter_op_threads == 2
    assert cfg.warnings == ()


@pytest.mark.parametrize(
    ("raw", "mode"), [("0", "sequential"), ("sequential", "sequential"), ("1", "parallel"), (" PARALLEL ", "parallel")]
)
def test_execution_mode(raw: str, mode: str) -> None:
    assert _parse({"execution_mode": raw}).execution_mode == mode


@pytest.mark.parametrize(
    ("raw", "value"),
    [("1", True), ("true", True), ("Yes", True), ("on", True), ("0", False), ("FALSE", False), ("no", False)],
)
def test_boolean_parameters(raw: str, value: bool) -> None:
    cfg = _parse({"enable_mem_arena": raw, "warmup": raw})
    assert cfg.enable_mem_arena is value
    assert cfg.warmup is value


@pytest.mark.parametrize(
    ("raw", "level"),
    [
        ("disable_all", 0),
        ("ORT_DISABLE_ALL", 0),
        ("basic", 1),
        ("ORT_ENABLE_BASIC", 1),
        ("enable_extended", 2),
        ("all", 99),
        ("ORT_ENABLE_ALL", 99),
        ("0", 0),
        ("2", 2),
        ("99", 99),
    ],
)
def test_graph_optimization_level(raw: str, level: int) -> None:
    assert _parse({"graph_optimization_level": raw}).graph_optimization_level == level


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_thread_affinity_mode(mode: int) -> None:
    assert _parse({"thread_affinity_mode": str(mode)}).thread_affinity_mode == mode


@pytest.mark.parametrize("raw", ["0,1,2", "[0, 1, 2]", "0 1 2", " 0, 1 ,2 "])
def test_thread_affinity_core_list(raw: str) -> None:
    assert _parse({"thread_affinity_core_list": raw}).thread_affinity_core_list == (0, 1, 2)


@pytest.mark.parametrize(("raw", "mode"), [("enforce_fp32", "enforce_fp32"), ("Preferred_FP16", "preferred_fp16")])
def test_precision_mode(raw: str, mode: str) -> None:
    assert _parse({"precision_mode": raw}).precision_mode == mode


def test_tensors_and_model_filename() -> None:
    config = _config(
        input=[{"name": "a", "data_type": "TYPE_FP32", "dims": [3]}, {"name": "b", "dims": [], "optional": True}],
        output=[{"name": "y", "data_type": "TYPE_INT64", "dims": ["-1", 2]}],
        default_model_filename="net.onnx",
    )
    cfg = BackendConfig.from_model_config(config, cores=2)
    assert cfg.inputs == (TensorSpec("a", "TYPE_FP32", (3,)), TensorSpec("b", "TYPE_INVALID", (), optional=True))
    assert cfg.outputs == (TensorSpec("y", "TYPE_INT64", (-1, 2)),)
    assert cfg.model_filename == "net.onnx"
    assert cfg.batched


def test_reshape_is_refused() -> None:
    config = _config(input=[{"name": "a", "data_type": "TYPE_FP32", "dims": [3], "reshape": {"shape": [1, 3]}}])
    with pytest.raises(ConfigError, match="'a'.*reshape"):
        BackendConfig.from_model_config(config, cores=2)


def test_the_config_is_frozen() -> None:
    cfg = _parse()
    with pytest.raises(AttributeError):
        cfg.workers = 2  # type: ignore[misc]


# --- the alias rule ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ort_key", "ms_key", "attr"),
    [
        ("intra_op_thread_count", "thread_num", "intra_op_threads"),
        ("inter_op_thread_count", "inter_op_parallel_num", "inter_op_threads"),
    ],
)
def test_aliases_with_equal_values_are_accepted(ort_key: str, ms_key: str, attr: str) -> None:
    cfg = _parse({ort_key: "2", ms_key: " 02 "})
    assert getattr(cfg, attr) == 2


@pytest.mark.parametrize(
    ("ort_key", "ms_key"), [("intra_op_thread_count", "thread_num"), ("inter_op_thread_count", "inter_op_parallel_num")]
)
def test_aliases_with_different_values_name_both_keys(ort_key: str, ms_key: str) -> None:
    message = _error({ort_key: "2", ms_key: "4"})
    assert "model 'm'" in message
    assert f"'{ort_key}'=2" in message and f"'{ms_key}'=4" in message


# --- bad values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "raw"),
    [
        ("intra_op_thread_count", "many"),
        ("thread_num", "-1"),
        ("inter_op_thread_count", "1.5"),
        ("inter_op_parallel_num", "-2"),
        ("execution_mode", "2"),
        ("enable_mem_arena", "maybe"),
        ("graph_optimization_level", "3"),
        ("graph_optimization_level", "-1"),
        ("thread_affinity_mode", "3"),
        ("thread_affinity_mode", "-1"),
        ("thread_affinity_mode", "big"),
        ("thread_affinity_core_list", "0,a"),
        ("precision_mode", "fp8"),
        ("warmup", ""),
    ],
)
def test_bad_values_name_model_and_key(key: str, raw: str) -> None:
    message = _error({key: raw})
    assert "model 'm'" in message
    assert f"'{key}'" in message


def test_negative_max_batch_size_names_model_and_field() -> None:
    with pytest.raises(ConfigError, match=r"model 'm'.*'max_batch_size'.*-1"):
        BackendConfig.from_model_config({"name": "m", "max_batch_size": -1}, cores=2)


# --- unknown keys -----------------------------------------------------------------------------


def test_unknown_keys_are_warned_about_not_rejected() -> None:
    cfg = _parse({"thread_nmu": "2", "zeta": "1", "thread_num": "2"})
    assert cfg.intra_op_threads == 2
    assert len(cfg.warnings) == 2
    assert "model 'm'" in cfg.warnings[0] and "'thread_nmu'" in cfg.warnings[0]
    assert "'zeta'" in cfg.warnings[1]
    assert "thread_num" in cfg.warnings[0]  # the known keys are listed


def test_section_keys_are_not_warned_about() -> None:
    cfg = _parse({"common_context.enable_parallel": "true", "ascend_context.precision_mode": "x"})
    assert cfg.warnings == ()


def test_every_known_key_is_accepted_without_warning() -> None:
    values = {
        "intra_op_thread_count": "1",
        "thread_num": "1",
        "inter_op_thread_count": "1",
        "inter_op_parallel_num": "1",
        "execution_mode": "0",
        "enable_mem_arena": "1",
        "graph_optimization_level": "1",
        "thread_affinity_mode": "0",
        "thread_affinity_core_list": "0",
        "precision_mode": "enforce_fp32",
        "warmup": "0",
        "batch_buckets": "1,2,4",
        "merge_requests": "auto",
        "io_binding": "auto",
        "cuda_graphs": "1",
        "bucket_sessions": "auto",
        "max_request_bytes": "1048576",
        "metrics": "0",
        "execute_deadline_s": "30",
        "ascend_device_ids": "0,1",
        "ascend_provider": "ge",
        "ascend_precision_mode": "enforce_fp16",
        "resized_inputs": '{"x": [1, 4]}',
    }
    assert set(values) == KNOWN_KEYS
    assert _parse(values).warnings == ()


@pytest.mark.parametrize(
    ("raw", "cpu", "gpu"), [(None, False, True), ("auto", False, True), ("true", True, True), ("off", False, False)]
)
def test_merge_requests_default_and_values(raw: str | None, cpu: bool, gpu: bool) -> None:
    cfg = _parse({"merge_requests": raw} if raw else {})
    assert (cfg.merges_for("CPU"), cfg.merges_for("GPU"), cfg.merges_for("MODEL")) == (cpu, gpu, gpu)


@pytest.mark.parametrize(("raw", "light_cpu"), [(None, True), ("auto", True), ("true", True), ("off", False)])
def test_a_light_graph_merges_on_cpu_unless_the_config_says_no(raw: str | None, light_cpu: bool) -> None:
    cfg = _parse({"merge_requests": raw} if raw else {})
    assert cfg.merges_for("CPU", light=True) is light_cpu
    assert cfg.merges_for("GPU", light=True) is (raw != "off")


def test_merge_requests_rejects_other_words() -> None:
    with pytest.raises(ConfigError, match="merge_requests.*auto"):
        _parse({"merge_requests": "sometimes"})


def test_parameters_in_plain_form_are_accepted() -> None:
    config = {"name": "m", "parameters": {"thread_num": "3"}}
    assert BackendConfig.from_model_config(config, cores=8).intra_op_threads == 3


def test_client_built_config_parses_without_warnings() -> None:
    from mslite_triton._model_config import WorkerPlan, build_model_config
    from mslite_triton.context import Context

    context = Context()
    context.cpu.thread_affinity_core_list = [0, 1]
    plan = WorkerPlan(workers=2, thread_num=1, inter_op_parallel_num=1)
    config = build_model_config("net_0123", context, plan, sections={"common_context": {"enable_parallel": "false"}})
    cfg = BackendConfig.from_model_config(config, cores=2)
    assert cfg.warnings == ()
    assert (cfg.workers, cfg.intra_op_threads, cfg.inter_op_threads) == (2, 1, 1)
    assert cfg.thread_affinity_core_list == (0, 1)
    assert cfg.allow_spinning is True


# --- InstanceInfo -----------------------------------------------------------------------------


def test_instance_info_from_args() -> None:
    args = {"model_instance_name": "m_0_1", "model_instance_kind": "GPU", "model_instance_device_id": "3"}
    assert InstanceInfo.from_args(args) == InstanceInfo(name="m_0_1", kind="GPU", device_id=3)


def test_instance_info_defaults_and_case() -> None:
    assert InstanceInfo.from_args({}) == InstanceInfo(name="", kind="CPU", device_id=0)
    info = InstanceInfo.from_args({"model_instance_kind": "model", "model_instance_device_id": ""})
    assert (info.kind, info.device_id) == ("MODEL", 0)


def test_buckets_default_on_gpu_only_and_capped_by_max_batch_size() -> None:
    config = {"name": "m", "max_batch_size": 16, "parameters": {}}
    cfg = BackendConfig.from_model_config(config, cores=2)
    assert cfg.buckets_for("CPU") == ()
    assert cfg.buckets_for("GPU") == (1, 2, 4, 8, 16)
    config["parameters"] = {"batch_buckets": {"string_value": "3,40"}}
    assert BackendConfig.from_model_config(config, cores=2).buckets_for("CPU") == (3, 16)
    config["max_batch_size"] = 0
    assert BackendConfig.from_model_config(config, cores=2).buckets_for("GPU") == ()
    config["max_batch_size"] = 8
    config["parameters"] = {"batch_buckets": {"string_value": "0,2"}}
    with pytest.raises(ConfigError, match="batch_buckets"):
        BackendConfig.from_model_config(config, cores=2)


def test_the_execute_deadline_is_off_by_default_and_read_in_seconds() -> None:
    assert _parse().execute_deadline_s == 0
    assert _parse({"execute_deadline_s": "2.5"}).execute_deadline_s == 2.5


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon"])
def test_a_bad_execute_deadline_fails_the_load_naming_it(value: str) -> None:
    assert "'execute_deadline_s'" in _error({"execute_deadline_s": value})
