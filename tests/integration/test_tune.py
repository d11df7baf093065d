"""`mslite-triton tune`: a two-variant Model Analyzer sweep of the tiny model, end to end, short windows.

The sweep runs once (~1 min); its result is then used both ways a user would: its config.pbtxt served from a
model repository and bound with `triton://`, and its config.ini given to a client that builds the model from
its file. Each must load the chosen number of workers with the chosen threads. The sweep tries 1 and 3
workers, so on any machine the choice differs from what a default Context plans (2 workers on 2 cores).

Model Analyzer (the `[tune]` extra) is found on PATH, beside this interpreter, or named by
`settings.MODEL_ANALYZER_ENV`; `make test` installs it, so without it the test fails rather than skips.
perf_analyzer comes from the benchmark's tools venv.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

import mslite_triton as mslite
from mslite_contract import settings
from mslite_server import cli
from mslite_triton._model_config import local_cores, plan_workers
from tests.support.processes import worker_pids
from tests.support.repository import GEN, ROOT, add_model, unload

pytestmark = pytest.mark.integration

NAME = "tuned_tiny"  # not a model of the session's repository
WORKERS = (1, 3)


@pytest.fixture(scope="module")
def model_analyzer() -> str:
    """Fail (never skip) without Model Analyzer: `make test` installs the [tune] extra."""
    found = os.environ.get(settings.MODEL_ANALYZER_ENV) or shutil.which("model-analyzer")
    found = found or shutil.which("model-analyzer", path=str(Path(sys.executable).parent))
    if not found:
        pytest.fail("Model Analyzer is not installed: pip install '.[tune]' (make test installs it)")
    return found


@pytest.fixture(scope="module")
def perf_analyzer() -> str:
    from tests.support.tools import ToolsError, ensure_tools

    try:
        return str(ensure_tools(ROOT).perf_analyzer)
    except ToolsError as e:
        pytest.fail(f"perf_analyzer could not be set up: {e}")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, model_analyzer, perf_analyzer) -> tuple[Path, Path, str]:
    """The sweep: the model's directory, tune's output folder, and what tune printed."""
    base = tmp_path_factory.mktemp("tune")
    add_model(base / "repo", NAME, GEN.build_tiny(), 'backend: "mslite"\nmax_batch_size: 8\n')
    out = base / "tuned"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = cli.main(["tune", str(base / "repo" / NAME), "--workers", ",".join(map(str, WORKERS)), "--threads", "1",
                         "--queue-delays-us", "200", "--concurrency", "2", "--window-ms", "1000", "--output", str(out),
                         "--model-analyzer", model_analyzer, "--perf-analyzer", perf_analyzer])  # fmt: skip
    assert code == 0, printed.getvalue()
    return base / "repo" / NAME, out, printed.getvalue()


def _chosen(out: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse((out / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


def test_tune_sweeps_two_variants_and_writes_the_fastest_config(tuned):
    _, out, printed = tuned
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    swept = {(int(r["workers"]), r["threads"]): float(r["throughput_infer_s"]) for r in rows if r["threads"]}
    assert set(swept) == {(w, "1") for w in WORKERS} and min(swept.values()) > 0
    assert all(float(r["p99_ms"]) > 0 for r in rows)
    assert {r["queue_delay_us"] for r in rows if r["threads"]} == {"200"}
    config = _chosen(out)
    best = max(swept, key=lambda k: swept[k])
    assert (config.name, config.instance_group[0].count) == (NAME, best[0])
    assert config.parameters["thread_num"].string_value == "1"
    assert config.dynamic_batching.max_queue_delay_microseconds == 200
    assert "<- chosen" in printed and f"chosen: {best[0]} workers x 1 threads" in printed
    ini = (out / "config.ini").read_text().splitlines()
    assert ini[1:] == ["[runner]", f"workers_num={best[0]}", "thread_num=1", "[dynamic_batching]",
                       "max_queue_delay_microseconds=200"]  # fmt: skip


def _server_config(server, name: str) -> dict:
    return server.http_json("GET", f"/v2/models/{name}/config", None)


def _predicts(runner: mslite.ModelParallelRunner) -> None:
    inputs = runner.get_inputs()
    inputs[0].set_data_from_numpy(np.ones((1, 4), np.float32))
    np.testing.assert_array_equal(runner.predict(inputs)[0].get_data_to_numpy(), np.full((1, 4), 3.0))


def test_the_tuned_config_served_from_a_repository_is_what_triton_bound_runners_get(server, repository, tuned):
    model_dir, out, _ = tuned
    workers = _chosen(out).instance_group[0].count
    served = repository / NAME
    shutil.copytree(model_dir, served)
    shutil.copyfile(out / "config.pbtxt", served / "config.pbtxt")  # what docs/tuning.md says to do
    try:
        server.http_json("POST", f"/v2/repository/models/{NAME}/load", {}, timeout_s=120)
        ctx = mslite.Context()
        ctx.server_url = server.grpc_url
        runner = mslite.ModelParallelRunner()
        runner.build_from_file(f"triton://{NAME}", ctx)
        _predicts(runner)
        assert len(worker_pids(server, NAME)) == workers
        assert _server_config(server, NAME)["parameters"]["thread_num"]["string_value"] == "1"
    finally:
        unload(server, NAME)
        shutil.rmtree(served)


def test_a_client_building_from_the_file_takes_the_tuned_config_ini(server, tuned):
    model_dir, out, _ = tuned
    workers = _chosen(out).instance_group[0].count
    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    default = plan_workers(ctx, cores=local_cores())
    assert (default.workers, default.thread_num) != (workers, 1)  # else the test would show nothing
    ctx.parallel.config_path = str(out / "config.ini")
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(str(model_dir / "1" / "model.onnx"), ctx)
    name = runner.served_name
    try:
        _predicts(runner)
        assert len(worker_pids(server, name)) == workers
        config = _server_config(server, name)
        assert len(config["instance_group"]) == workers
        assert config["parameters"]["thread_num"]["string_value"] == "1"
        assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 200
    finally:
        unload(server, name)
    # settings made in code win over the file, as config_info over config_path in MindSpore Lite
    ctx.parallel.workers_num = 2
    explicit = mslite.ModelParallelRunner()
    explicit.build_from_file(str(model_dir / "1" / "model.onnx"), ctx)
    try:
        assert len(worker_pids(server, explicit.served_name)) == 2
    finally:
        unload(server, explicit.served_name)
