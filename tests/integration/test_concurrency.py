"""Workers, threads, pinning, batching settings and the bounded queue, on the real server."""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

import mslite_triton as mslite
from mslite_triton.errors import ServiceDenyError
from tests.support.processes import worker_pids
from tests.support.repository import GEN

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("conc") / "tiny.onnx"
    path.write_bytes(GEN.build_tiny().SerializeToString())
    return str(path)


def _build(server, path: str, **cpu) -> mslite.ModelParallelRunner:
    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    ctx.parallel.workers_num = 2
    for key, value in cpu.items():
        setattr(ctx.cpu, key, value)
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(path, ctx)
    return runner


def _predict(runner):
    inputs = runner.get_inputs()
    inputs[0].set_data_from_numpy(np.ones(4, np.float32))
    return runner.predict(inputs)[0].get_data_to_numpy()


def test_big_core_binding_gives_each_worker_its_own_core(server, tiny):
    runner = _build(server, tiny, thread_num=1, thread_affinity_mode=1)
    np.testing.assert_array_equal(_predict(runner), np.full((1, 4), 3.0))
    pids = worker_pids(server, runner.served_name)
    assert len(pids) == 2
    for core, pid in enumerate(pids):  # worker i on core i, and every thread of it, ORT's included
        threads = {int(t.name): os.sched_getaffinity(int(t.name)) for t in Path(f"/proc/{pid}/task").iterdir()}
        assert len(threads) > 1 and all(cores == {core} for cores in threads.values()), (core, threads)


def test_core_list_slices_follow_worker_order(server, tiny):
    runner = _build(server, tiny, thread_num=1, thread_affinity_core_list=[1, 0])
    pids = worker_pids(server, runner.served_name)
    assert [os.sched_getaffinity(p) for p in pids] == [{1}, {0}]


def test_bad_core_list_fails_at_build(server, tiny):
    with pytest.raises(RuntimeError, match="thread_affinity_core_list has 3 cores, expected"):
        _build(server, tiny, thread_num=1, thread_affinity_core_list=[0, 1, 0])


def test_unbound_workers_may_use_every_core(server, tiny):
    runner = _build(server, tiny, thread_num=1)
    pids = worker_pids(server, runner.served_name)
    every_core = os.sched_getaffinity(0)  # what this test (and the server it started) may use
    assert len(pids) == 2 and len(every_core) >= 2 and os.sched_getaffinity(server.process.pid) == every_core
    assert [os.sched_getaffinity(p) for p in pids] == [every_core, every_core]


def test_batching_section_configures_the_batcher(server, tiny):
    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    ctx.parallel.workers_num = 1
    ctx.parallel.config_info = {
        "dynamic_batching": {
            "max_queue_delay_microseconds": "250",
            "preferred_batch_size": "1,4",
            "max_queue_size": "7",
        }
    }
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(tiny, ctx)
    client = httpclient.InferenceServerClient(server.http_url.split("://", 1)[1])
    try:
        config = client.get_model_config(runner.served_name)
    finally:
        client.close()
    batching = config["dynamic_batching"]
    assert batching["max_queue_delay_microseconds"] == 250
    assert batching["preferred_batch_size"] == [1, 4]
    assert batching["default_queue_policy"]["max_queue_size"] == 7
    bad = mslite.Context()
    bad.server_url = server.grpc_url
    bad.parallel.config_info = {"dynamic_batching": {"max_queue_size": "many"}}
    with pytest.raises(RuntimeError, match="max_queue_size must be an int"):
        mslite.ModelParallelRunner().build_from_file(tiny, bad)


def test_full_queue_rejects_at_once_with_service_deny(server):

    path = server.workspace.path / "mobilenet_q1.onnx"
    path.write_bytes(GEN.build_mobilenetv2().SerializeToString())
    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    ctx.parallel.workers_num = 1
    ctx.cpu.thread_num = 1
    ctx.parallel.config_info = {"dynamic_batching": {"max_queue_size": "1", "max_batch_size": "1"}}
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(str(path), ctx)
    x = np.zeros((1, 3, 224, 224), np.float32)

    def call(_):
        try:
            return runner.predict([mslite.Tensor(x)])[0].get_data_to_numpy()
        except ServiceDenyError as e:
            return e

    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(call, range(24)))
    denied = [r for r in results if isinstance(r, ServiceDenyError)]
    served = [r for r in results if isinstance(r, np.ndarray)]
    assert denied and served and len(denied) + len(served) == 24
    assert denied[0].status == "kLiteServiceDeny" and isinstance(denied[0], RuntimeError)
    assert "kLiteServiceDeny" in str(denied[0])
    for y in served:
        np.testing.assert_array_equal(y, served[0])


def test_middle_core_mode_on_a_model_warns_and_does_not_pin(server, tiny, caplog):
    """thread_affinity_mode 2: a ModelParallelRunner refuses it (as MindSpore Lite does), a Model warns, unpinned."""
    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    ctx.cpu.thread_num = 1
    ctx.cpu.thread_affinity_mode = 2
    model = mslite.Model()
    with caplog.at_level(logging.WARNING, logger="mslite_triton"):
        model.build_from_file(tiny, mslite.ModelType.MINDIR, ctx)
    assert "thread_affinity_mode 2 (middle cores) is not supported by the server" in caplog.text
    (y,) = model.predict([np.ones((1, 4), np.float32)])
    np.testing.assert_array_equal(y.get_data_to_numpy(), np.full((1, 4), 3.0))
    (pid,) = worker_pids(server, model.served_name)
    assert os.sched_getaffinity(pid) == os.sched_getaffinity(0)  # every core this test may use: not pinned
