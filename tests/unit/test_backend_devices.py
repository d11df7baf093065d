"""Provider choice (CPU / CUDA / CANN), fixed-shape buckets, and the worker metrics aggregator."""

from __future__ import annotations

import numpy as np
import pytest

from mslite_backend import buckets
from mslite_backend.errors import ConfigError, ModelLoadError
from mslite_backend.metrics import WorkerMetrics
from mslite_backend.providers import ASCEND_PRECISION, apply_env, check_available, choose


def test_cpu_and_gpu_providers():
    assert choose("CPU", 0, 0, {}).providers() == ["CPUExecutionProvider"]
    gpu = choose("GPU", 3, 1, {})
    assert gpu.providers() == [("CUDAExecutionProvider", {"device_id": 3, "use_tf32": 0})]  # enforce_fp32: no TF32
    fast = choose("GPU", 0, 0, {}, gpu_precision="preferred_fp16")
    assert fast.providers() == [("CUDAExecutionProvider", {"device_id": 0, "use_tf32": 1})]


def test_ascend_worker_takes_its_device_and_precision():
    params = {"ascend_device_ids": "4,5", "ascend_precision_mode": "preferred_fp32"}
    choice = choose("MODEL", 0, 1, params)
    assert choice.name == "CANNExecutionProvider"
    assert choice.options == {"device_id": 5, "precision_mode": "allow_fp32_to_fp16"}
    assert choice.env == {"ASCEND_DEVICE_ID": "5"}
    assert set(ASCEND_PRECISION) == {
        "enforce_fp32",
        "preferred_fp32",
        "enforce_fp16",
        "enforce_origin",
        "preferred_optimal",
    }
    with pytest.raises(ConfigError, match="worker 2 has none"):
        choose("MODEL", 0, 2, params)
    with pytest.raises(ConfigError, match="ascend_precision_mode must be one of"):
        choose("MODEL", 0, 0, {"ascend_device_ids": "0", "ascend_precision_mode": "fast"})


def test_missing_provider_is_a_load_error_naming_it(monkeypatch):
    choice = choose("MODEL", 0, 0, {"ascend_device_ids": "0"})
    with pytest.raises(ModelLoadError, match="CANNExecutionProvider is not available.*onnxruntime-cann"):
        check_available(choice, ["CPUExecutionProvider"], "model 'm'")
    check_available(choose("CPU", 0, 0, {}), ["CPUExecutionProvider"], "model 'm'")
    monkeypatch.delenv("ASCEND_DEVICE_ID", raising=False)
    apply_env(choice)
    import os

    assert os.environ["ASCEND_DEVICE_ID"] == "0"


def test_buckets_pad_and_slice_back():
    assert buckets.parse("8, 1,2,2") == (1, 2, 8)
    with pytest.raises(ValueError):
        buckets.parse("0,4")
    assert [buckets.bucket_for(n, (1, 2, 8)) for n in (1, 2, 3, 8, 9)] == [1, 2, 8, 8, 8]
    seen = []

    def run(feeds):
        seen.append(feeds["x"].shape[0])
        return {"y": feeds["x"] * 2, "s": feeds["x"].sum(axis=1, keepdims=True)}

    x = np.arange(11 * 3, dtype=np.float32).reshape(11, 3)
    out = buckets.run_in_buckets({"x": x}, (1, 2, 8), run)
    assert seen == [8, 8]  # 11 rows: 8, then 3 padded up to 8
    np.testing.assert_array_equal(out["y"], x * 2)
    np.testing.assert_array_equal(out["s"], x.sum(axis=1, keepdims=True))


def test_metrics_send_only_what_changed():
    m = WorkerMetrics()
    m.record(3.0, 1)
    m.record(30.0, 4)
    m.error("invalid_input")
    first = m.deltas()
    assert first[("exec_ms", "5")] == 1 and first[("exec_ms", "50")] == 2 and first[("exec_ms", "count")] == 2
    assert first[("batch", "4")] == 2 and first[("batch", "2")] == 1
    assert first[("errors", "invalid_input")] == 1
    assert m.deltas() == {}
    m.record(0.1, 1)
    second = m.deltas()
    assert second[("exec_ms", "0.5")] == 1 and second[("exec_ms", "count")] == 1
    assert ("errors", "invalid_input") not in second
