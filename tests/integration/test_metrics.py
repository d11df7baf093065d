"""The backend's own metrics on Triton's metrics endpoint, next to Triton's, after real traffic."""

from __future__ import annotations

import re
import urllib.request
from collections import defaultdict

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support.eventually import eventually
from tests.support.settled import settled

pytestmark = pytest.mark.integration

MODEL = "mixed_dtypes"
_SAMPLE = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _scrape(server) -> list[tuple[str, dict[str, str], float]]:
    """Every labelled sample of the metrics page: (name, labels, value)."""
    with urllib.request.urlopen(server.metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    samples = []
    for m in map(_SAMPLE.match, text.splitlines()):
        if m:
            samples.append((m.group(1), dict(_LABEL.findall(m.group(2))), float(m.group(3))))
    return samples


def _total(samples, name: str, **labels: str) -> float:
    """Sum of a series over the model's instances."""
    return sum(v for n, lab, v in samples if n == name and lab.get("model") == MODEL and labels.items() <= lab.items())


def _stats(server) -> dict[str, int]:
    stats = server.http_json("GET", f"/v2/models/{MODEL}/stats", None)["model_stats"][0]
    return {"executions": int(stats["execution_count"]), "inferences": int(stats["inference_count"])}


def _ours(samples) -> dict[str, float]:
    return {
        "executions": _total(samples, "mslite_execution_ms_count"),
        "inferences": _total(samples, "mslite_batch_size_sum"),
        "invalid": _total(samples, "mslite_request_errors_total", kind="invalid_input"),
    }


def _cumulative_buckets(samples, name: str) -> dict[tuple[tuple[str, str], ...], list[tuple[float, float]]]:
    """Each series' buckets as (le, count), by its labels other than `le`, in the order of `le`."""
    series: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = defaultdict(list)
    for n, labels, value in samples:
        if n == name + "_bucket" and labels.get("model") == MODEL:
            key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
            series[key].append((float(labels["le"]), value))
    return {key: sorted(buckets) for key, buckets in series.items()}


def test_backend_metrics_count_what_triton_counts(server):
    samples = _scrape(server)
    before, triton_before = _ours(samples), settled(lambda: _stats(server))
    client = grpcclient.InferenceServerClient(server.grpc_url.split("://", 1)[1])
    ids = np.arange(10, dtype=np.int64).reshape(2, 5)
    h = np.zeros((2, 5), np.float16)

    def call(mask: np.ndarray) -> None:
        inputs = [grpcclient.InferInput("ids", [2, 5], "INT64"), grpcclient.InferInput("mask", [2, 5], "BOOL"),
                  grpcclient.InferInput("h", [2, 5], "FP16")]  # fmt: skip
        for item, value in zip(inputs, (ids, mask, h)):
            item.set_data_from_numpy(value)
        client.infer(MODEL, inputs)

    try:
        for _ in range(12):
            call(np.zeros((2, 5), np.bool_))
        for _ in range(3):  # BOOL bytes other than 0/1: refused by our backend, counted as invalid input
            with pytest.raises(InferenceServerException, match="0 or 1"):
                call(np.full((2, 5), 7, np.uint8).view(np.bool_))
    finally:
        client.close()
    triton = {k: v - triton_before[k] for k, v in settled(lambda: _stats(server)).items()}
    assert triton == {"executions": 15, "inferences": 30}, triton  # 15 requests of 2 samples, one at a time
    want = {**triton, "invalid": 3}

    def counted() -> list:
        samples = _scrape(server)
        ours = {k: v - before[k] for k, v in _ours(samples).items()}
        assert ours == want, (ours, triton)
        return samples

    samples = eventually(counted, "the workers' counts (sent once a second)", 60, pause_s=0.2)
    for family in ("mslite_execution_ms", "mslite_batch_size"):
        series = _cumulative_buckets(samples, family)
        assert series, family
        for labels, buckets in series.items():
            counts = [count for _, count in buckets]
            # cumulative: no bucket holds more than the next one, and +Inf holds every execution
            assert counts == sorted(counts), (family, labels, buckets)
            assert buckets[-1][0] == float("inf")
            assert buckets[-1][1] == _total(samples, family + "_count", **dict(labels)), (family, labels)
    assert 2.0 in {le for buckets in _cumulative_buckets(samples, "mslite_batch_size").values() for le, _ in buckets}
    assert any(n == "nv_inference_request_success" for n, _, _ in samples)  # Triton's own metrics are still there
