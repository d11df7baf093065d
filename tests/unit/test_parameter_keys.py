"""Every model-config parameter a client writes is one the backend reads, with the value the client meant."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from mslite_backend.config import KNOWN_KEYS, WEIGHT_KEYS, BackendConfig
from mslite_contract.protocol import SECTION_SEPARATOR, VARIABLE_WEIGHTS_KEYS
from mslite_triton._model_config import WorkerPlan, build_model_config
from mslite_triton.context import Context

CLIENTS = Path(__file__).resolve().parents[2] / "client"


def _contexts() -> dict[str, Context]:
    cpu = Context()
    cpu.cpu.thread_affinity_mode = 1
    cpu.cpu.thread_affinity_core_list = [0, 1]
    cpu.cpu.precision_mode = "preferred_fp16"
    cpu.cpu.inter_op_parallel_num = 2
    gpu = Context()
    gpu.target = ["gpu"]
    gpu.parallel.device_ids = [0, 1]
    ascend = Context()
    ascend.target = ["ascend"]
    ascend.ascend.provider = "ge"
    ascend.ascend.precision_mode = "preferred_fp32"
    ascend.parallel.device_ids = [4, 5]
    return {"cpu": cpu, "gpu": gpu, "ascend": ascend}


def _config(target: str) -> dict[str, Any]:
    sections = {"weights": {"share": "false"}, "ascend_context": {"variable_weights_list": "w"}}
    return build_model_config("m", _contexts()[target], WorkerPlan(2, 3, 2), sections=sections, resized={"x": [1, 3]})


@pytest.mark.parametrize("target", ["cpu", "gpu", "ascend"])
def test_every_key_the_python_client_writes_is_read_by_the_backend(target: str) -> None:
    config = _config(target)
    written = set(config["parameters"])
    plain = {k for k in written if SECTION_SEPARATOR not in k}
    assert plain <= KNOWN_KEYS, plain - KNOWN_KEYS
    assert written - plain <= set(VARIABLE_WEIGHTS_KEYS) | {"weights.share"}  # the sections this test forwards
    cfg = BackendConfig.from_model_config({**config, "input": [], "output": []}, cores=8)
    assert cfg.warnings == ()  # no key the backend calls unknown
    assert (cfg.intra_op_threads, cfg.inter_op_threads, cfg.workers) == (3, 2, 2)
    assert cfg.share_weights is False and cfg.variable_weights == ("w",)
    assert cfg.resized_inputs == (("x", (1, 3)),)
    if target == "cpu":
        assert (cfg.thread_affinity_mode, cfg.thread_affinity_core_list) == (1, (0, 1))
        assert cfg.precision_mode == "preferred_fp16"
    if target == "ascend":
        assert dict(cfg.device_params) == {
            "ascend_device_ids": "4,5",
            "ascend_provider": "ge",
            "ascend_precision_mode": "preferred_fp32",
        }


def test_the_keys_the_cpp_and_java_clients_write_are_read_by_the_backend() -> None:
    cpp = (CLIENTS / "cpp" / "src" / "model_configs.cc").read_text()
    java = (CLIENTS / "java" / "src" / "mslite" / "triton" / "ModelConfigs.java").read_text()
    cpp_keys = set(re.findall(r'^\s*\{"(\w+)", ', cpp, re.M))
    java_keys = set(re.findall(r'params\.put\("(\w+)"', java))
    assert {"thread_num", "precision_mode"} <= cpp_keys and {"thread_num", "thread_affinity_core_list"} <= java_keys
    assert (cpp_keys | java_keys) <= KNOWN_KEYS | WEIGHT_KEYS, (cpp_keys | java_keys) - KNOWN_KEYS
