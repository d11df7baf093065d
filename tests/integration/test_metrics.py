"""The backend's own metrics on Triton's metrics endpoint, next to Triton's, after real traffic."""

from __future__ import annotations

import re
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.integration


def _scrape(server) -> str:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as resp:
        return resp.read().decode()


def _total(text: str, name: str, model: str, **labels: str) -> float:
    """Sum of a series over the model's instances."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") or f'model="{model}"' not in line:
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _stats(server, model: str) -> dict:
    return server.http_json("GET", f"/v2/models/{model}/stats", None)["model_stats"][0]


def test_backend_metrics_count_what_triton_counts(server):
    client = grpcclient.InferenceServerClient(server.grpc_url.split("://", 1)[1])
    ids = np.arange(10, dtype=np.int64).reshape(2, 5)
    h = np.zeros((2, 5), np.float16)

    def call(mask: np.ndarray) -> None:
        inputs = [grpcclient.InferInput("ids", [2, 5], "INT64"), grpcclient.InferInput("mask", [2, 5], "BOOL"),
                  grpcclient.InferInput("h", [2, 5], "FP16")]  # fmt: skip
        for item, value in zip(inputs, (ids, mask, h)):
            item.set_data_from_numpy(value)
        client.infer("mixed_dtypes", inputs)

    try:
        for _ in range(12):
            call(np.zeros((2, 5), np.bool_))
        for _ in range(3):  # BOOL bytes other than 0/1: refused by our backend, counted as invalid input
            with pytest.raises(InferenceServerException, match="0 or 1"):
                call(np.full((2, 5), 7, np.uint8).view(np.bool_))
    finally:
        client.close()
    time.sleep(2.5)  # the workers flush once a second
    text = _scrape(server)
    stats = _stats(server, "mixed_dtypes")
    assert _total(text, "mslite_execution_ms_count", "mixed_dtypes") == int(stats["execution_count"])
    assert _total(text, "mslite_batch_size_sum", "mixed_dtypes") == int(stats["inference_count"])
    assert _total(text, "mslite_request_errors_total", "mixed_dtypes", kind="invalid_input") >= 3
    # cumulative buckets: +Inf holds every execution, and no bucket holds more than the next one
    inf = _total(text, "mslite_execution_ms_bucket", "mixed_dtypes", le="+Inf")
    assert inf == int(stats["execution_count"])
    buckets = [float(m) for m in re.findall(r'mslite_batch_size_bucket\{[^}]*le="([0-9.]+)"', text)]
    assert buckets and 2.0 in buckets
    assert "nv_inference_request_success" in text  # Triton's own metrics are still there
