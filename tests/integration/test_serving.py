"""The mslite backend behind the real server: exact results, batching, dtypes, odd names, per-request errors."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

import mslite_triton as mslite
from tests.support.model_zoo import run_reference
from tests.support.repository import GEN, ZOO, private_tiny
from tests.support.settled import settled

pytestmark = pytest.mark.integration


def _infer(server, model, feeds, protocol="grpc"):
    mod = grpcclient if protocol == "grpc" else httpclient
    url = server.grpc_url if protocol == "grpc" else server.http_url
    client = mod.InferenceServerClient(url.split("://", 1)[1])
    try:
        inputs = []
        for name, arr in feeds.items():
            item = mod.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
            item.set_data_from_numpy(arr)
            inputs.append(item)
        result = client.infer(model, inputs)
        names = [
            o["name"]
            for o in (result.get_response(as_json=True) if protocol == "grpc" else result.get_response())["outputs"]
        ]
        return {n: result.as_numpy(n) for n in names}
    finally:
        client.close()


def test_mobilenet_equals_in_process_onnxruntime(server):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 224, 224), dtype=np.float32)
    served = _infer(server, "mobilenetv2", {"input": x})["shape1"]
    (expected,) = run_reference(GEN.build_mobilenetv2(), {"input": x}, intra_op_threads=1)
    assert served.shape == (2, 1000)
    assert np.max(np.abs(served - expected)) == 0.0


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("name", sorted(ZOO))
def test_unusual_models_served_exactly(server, name, protocol):
    model = ZOO[name]()
    rng = np.random.default_rng(1)
    feeds = {}
    for inp in model.graph.input:
        elem = inp.type.tensor_type.elem_type
        dims = [d.dim_value or (2 if d.dim_param == "N" else 7) for d in inp.type.tensor_type.shape.dim]
        dtype = {1: np.float32, 7: np.int64, 9: np.bool_, 10: np.float16}[elem]
        feeds[inp.name] = (
            (rng.standard_normal(dims) * 10).astype(dtype) if dtype != np.bool_ else rng.random(dims) > 0.5
        )
    served = _infer(server, name, feeds, protocol)
    expected = run_reference(model, feeds)
    for out, ref in zip(model.graph.output, expected):
        assert served[out.name].dtype == ref.dtype
        np.testing.assert_array_equal(served[out.name], ref)


def test_client_built_configs_follow_the_light_model_rule(server, tmp_path):
    """The client judges a light model as auto-complete does: the tiny model takes every queued request."""
    sizes = {}
    for name, model in (("tiny", GEN.build_tiny()), ("variable_seq", ZOO["variable_seq"]())):
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(model.SerializeToString())
        ctx = mslite.Context()
        ctx.server_url = server.grpc_url
        ctx.parallel.workers_num = 2
        runner = mslite.ModelParallelRunner()
        runner.build_from_file(str(path), ctx)
        client = httpclient.InferenceServerClient(server.http_url.split("://", 1)[1])
        try:
            config = client.get_model_config(runner.served_name)
        finally:
            client.close()
        sizes[name] = [int(v) for v in config["dynamic_batching"].get("preferred_batch_size", [])]
        sizes[name + "_max"] = [int(config["max_batch_size"])]
    assert sizes["variable_seq"] == [2], sizes
    assert max(sizes["tiny"], default=0) in (0, sizes["tiny_max"][0]), sizes  # Triton's own sizes


def test_concurrent_requests_are_batched_and_exact(server, tmp_path):
    """32 concurrent requests to a 1-instance model: the batcher merges them; each result is still its own.

    The batcher may wait up to 2 s for a batch of 16, so merging does not depend on how quickly the requests
    arrive on a busy machine (the repository's `batched` model waits 5 ms).
    """
    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    ctx.parallel.workers_num = 1
    ctx.parallel.config_info = {
        "dynamic_batching": {"max_queue_delay_microseconds": "2000000", "preferred_batch_size": "16"}
    }
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(str(private_tiny(tmp_path, "batching")), ctx)
    name = runner.served_name
    before = _stats(server, name)
    xs = [np.full((1 + i % 3, 4), i, dtype=np.float32) for i in range(32)]
    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(lambda x: _infer(server, name, {"x": x})["y"], xs))
    for x, y in zip(xs, results):
        np.testing.assert_array_equal(y, x * 2 + 1)
    after = settled(lambda: _stats(server, name))
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == sum(x.shape[0] for x in xs)
    # without the batcher Triton's default scheduler still pairs a few (30 executions, measured): ask for more
    assert executions <= 8, f"32 requests in {executions} executions: the batcher did not merge them"


def test_minimal_config_gets_no_queue_bound_and_two_requests_per_execute_on_cpu(server):
    client = httpclient.InferenceServerClient(server.http_url.split("://", 1)[1])
    try:
        configs = {name: client.get_model_config(name) for name in ("cpu_defaults", "tiny", "variable_seq")}
    finally:
        client.close()
    for config in configs.values():  # Triton prefetches batches only without a queue policy
        served = config["dynamic_batching"]
        assert not int((served.get("default_queue_policy") or {}).get("max_queue_size", 0))
    # variable_seq (no instance groups: one worker) has a dim of unknown size: two requests per execute
    assert [int(v) for v in configs["variable_seq"]["dynamic_batching"]["preferred_batch_size"]] == [2]
    # the tiny model is light (graph.is_light): a worker takes every queued request, up to max_batch_size
    for name in ("cpu_defaults", "tiny"):
        sizes = [int(v) for v in configs[name]["dynamic_batching"].get("preferred_batch_size", [])]
        assert max(sizes, default=0) in (0, int(configs[name]["max_batch_size"])), (name, sizes)


def _stats(server, model):
    client = httpclient.InferenceServerClient(server.http_url.split("://", 1)[1])
    try:
        stats = client.get_inference_statistics(model)["model_stats"][0]
    finally:
        client.close()
    return {"inference_count": int(stats["inference_count"]), "execution_count": int(stats["execution_count"])}


def test_variable_sequence_lengths_in_one_batch(server):
    model = ZOO["variable_seq"]()
    xs = [np.arange(t, dtype=np.float32).reshape(1, t) for t in (3, 5, 3, 8)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda x: _infer(server, "variable_seq", {"tokens": x}), xs))
    for x, got in zip(xs, results):
        cumsum, total = run_reference(model, {"tokens": x})
        np.testing.assert_array_equal(got["cumsum"], cumsum)
        np.testing.assert_allclose(got["total"], total, rtol=1e-6)  # float reductions depend on alignment


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize(
    ("feeds", "fragment"),
    [
        ({"x": np.zeros((1, 4), np.int32)}, "INT32"),
        ({"x": np.zeros((1, 5), np.float32)}, "[-1,4]"),
        ({"x": np.zeros((1, 4), np.float32), "extra": np.zeros((1, 4), np.float32)}, "extra"),
        ({"wrong": np.zeros((1, 4), np.float32)}, "wrong"),
        ({"x": np.zeros((100, 4), np.float32)}, "batch"),
    ],
)
def test_bad_requests_fail_alone_with_clear_messages(server, protocol, feeds, fragment):
    with pytest.raises(InferenceServerException) as info:
        _infer(server, "tiny", feeds, protocol)
    message = info.value.message()
    assert fragment in message
    assert "Traceback" not in message and "/model.py" not in message
    assert str(info.value.status()) in ("400", "StatusCode.INVALID_ARGUMENT")
    np.testing.assert_array_equal(_infer(server, "tiny", {"x": np.ones((1, 4), np.float32)})["y"], np.full((1, 4), 3.0))


def test_concurrent_smoke(server):
    x = np.random.default_rng(2).standard_normal((1, 3, 224, 224), dtype=np.float32)
    (expected,) = run_reference(GEN.build_mobilenetv2(), {"input": x}, intra_op_threads=1)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: _infer(server, "mobilenetv2", {"input": x})["shape1"], range(24)))
    for y in results:
        np.testing.assert_array_equal(y, expected)
