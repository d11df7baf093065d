"""`mslite-triton tune`: a two-variant Model Analyzer sweep of the tiny model, end to end, short windows.

Needs the `[tune]` extra (Model Analyzer): found on PATH, beside this interpreter, or named by
MSLITE_TRITON_MODEL_ANALYZER; skipped without it. perf_analyzer comes from the benchmark's tools venv.
"""

from __future__ import annotations

import csv
import os
import shutil
import sys
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from mslite_triton.server import cli
from tests.support.repository import GEN, ROOT, add_model

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def model_analyzer() -> str:
    found = os.environ.get("MSLITE_TRITON_MODEL_ANALYZER") or shutil.which("model-analyzer")
    found = found or shutil.which("model-analyzer", path=str(Path(sys.executable).parent))
    if not found:
        pytest.skip("Model Analyzer is not installed (pip install 'mslite-triton[tune]')")
    return found


@pytest.fixture(scope="module")
def perf_analyzer() -> str:
    from benchmarks.tools import ToolsError, ensure_tools

    try:
        return str(ensure_tools(ROOT).perf_analyzer)
    except ToolsError as e:
        pytest.fail(f"perf_analyzer could not be set up: {e}")


def test_tune_sweeps_two_variants_and_writes_the_fastest_config(tmp_path, model_analyzer, perf_analyzer, capsys):
    add_model(tmp_path / "repo", "tiny", GEN.build_tiny(), 'backend: "mslite"\nmax_batch_size: 8\n')
    out = tmp_path / "tuned"
    code = cli.main(["tune", str(tmp_path / "repo" / "tiny"), "--workers", "1,2", "--threads", "1",
                     "--queue-delays-us", "200", "--concurrency", "2", "--window-ms", "1000", "--output", str(out),
                     "--model-analyzer", model_analyzer, "--perf-analyzer", perf_analyzer])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    swept = {(int(r["workers"]), r["threads"]): float(r["throughput_infer_s"]) for r in rows if r["threads"]}
    assert set(swept) == {(1, "1"), (2, "1")} and min(swept.values()) > 0
    assert all(float(r["p99_ms"]) > 0 for r in rows)
    assert {r["queue_delay_us"] for r in rows if r["threads"]} == {"200"}
    config = text_format.Parse((out / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    best = max(swept, key=lambda k: swept[k])
    assert (config.name, config.instance_group[0].count) == ("tiny", best[0])
    assert config.parameters["thread_num"].string_value == "1"
    assert config.dynamic_batching.max_queue_delay_microseconds == 200
    assert "<- chosen" in printed and f"chosen: {best[0]} workers x 1 threads" in printed
