"""The serving benchmark's own set-up steps and worker accounting against a real server, for a few seconds.

`make bench` is not part of `make test`; this runs the part of it that broke unseen: the benchmark loads models
whose names share a prefix (`mobilenetv2` and `mobilenetv2_naive`; `tiny`, `tiny_1x1` and `tiny_naive`) side by
side, and each one's workers, and so its CPU per image, must be its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.scenarios import MOBILENET, Bench, make_plan, model_specs
from mslite_server.workers import workers_of
from tests.support.processes import model_worker_pids
from tests.support.tools import ToolsError, ensure_tools

ROOT = Path(__file__).resolve().parents[2]
# the quick plan's steps this runs, in its order: the server, every "together" load, and one short sweep point
START = "start tritonserver"
TOGETHER = (f"load {MOBILENET} and {MOBILENET}_naive together", "load tiny, tiny_naive")
SWEEP = f"sweep: {MOBILENET} gRPC c=1"


@pytest.fixture(scope="module")
def bench() -> Iterator[Bench]:
    try:
        tools = ensure_tools(ROOT)
    except ToolsError as e:
        pytest.fail(f"perf_analyzer could not be set up: {e}")
    b = Bench(make_plan(quick=True), tools)
    try:
        _step(b, START)
        yield b
    finally:
        b.close()


def _step(bench: Bench, label: str) -> str:
    (run,) = [fn for name, fn in bench.steps() if name.startswith(label)]
    return run()


def test_models_sharing_a_name_prefix_each_count_only_their_own_workers(bench: Bench) -> None:
    specs = {s.name: s for s in model_specs(bench.plan)}
    assert bench.server is not None
    for label in TOGETHER:
        _step(bench, label)  # raises when a model's worker count is not its spec's
        loaded = sorted(bench.server.loaded)
        owned = {name: model_worker_pids(bench.server.pid, name) for name in loaded}
        assert {name: len(pids) for name, pids in owned.items()} == {name: specs[name].workers for name in loaded}
        live = sorted(w.pid for w in workers_of(bench.server.pid) if w.state != "Z")
        assert sorted(p for pids in owned.values() for p in pids) == live  # each worker counted once, by its model
    assert sorted(bench.server.loaded) == ["tiny", "tiny_1x1", "tiny_naive"]


def test_a_sweep_point_runs_beside_a_loaded_neighbour(bench: Bench) -> None:
    assert bench.server is not None
    _step(bench, TOGETHER[0])  # mobilenetv2 beside its naive twin, as in the benchmark's rounds
    _step(bench, SWEEP)
    (point,) = bench.results["served"]["mslite"]["grpc"]
    assert point["model"] == MOBILENET and point["images"] > 0 and point["worker_cpu_ms_per_img"] > 0
