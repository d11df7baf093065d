"""Triton's streaming inference (`ModelStreamInfer`) and ensembles of `mslite` steps, through the gateway.

Each message of a stream gets ModelInfer's checks: one that fails is answered with its error on the stream (with
its request's id) and the stream goes on; one over the size cap ends the stream with RESOURCE_EXHAUSTED. The
stream's slots in the per-model in-flight limit are given back as answers come, and when the client goes.
"""

from __future__ import annotations

import asyncio
import queue
import subprocess
import threading
import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

from mslite_server import GatewayLimits, LocalServer, ServerConfig
from tests.integration.test_gateway import _address, _gateway
from tests.support.repository import GEN, ROOT, add_model

pytestmark = pytest.mark.integration

CAP = 1 << 20
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
_STEP = 'backend: "mslite"\nmax_batch_size: 8\n'
# y = 2x + 1 twice: 4x + 3. Its first step takes any length, its second four values: a longer input fails there.
_PIPELINE = """name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling { step [
  { model_name: "any_length" model_version: -1 input_map { key: "x" value: "x" } output_map { key: "y" value: "mid" } },
  { model_name: "tiny" model_version: -1 input_map { key: "x" value: "mid" } output_map { key: "y" value: "y" } }
] }
"""
# Requests wait in Triton's queue for a batch of 64 (up to 8 s): they stay in flight while a test looks at the limit.
_SLOW = (
    'backend: "mslite"\nmax_batch_size: 64\n'
    "dynamic_batching { preferred_batch_size: [ 64 ] max_queue_delay_microseconds: 8000000 }\n"
)


def _any_length():
    """y = 2x + 1 on [N, L] float32."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["x2"]), helper.make_node("Add", ["x2", "one"], ["y"])],
        "any_length",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "L"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "L"])],
        initializer=[
            helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
            helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module")
def gws(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("streaming_repo")
    add_model(repo, "tiny", GEN.build_tiny(), (ROOT / "model_repository" / "tiny" / "config.pbtxt").read_text())
    add_model(repo, "any_length", _any_length(), _STEP)
    add_model(repo, "slow", GEN.build_tiny(), _SLOW)
    (repo / "pipeline" / "1").mkdir(parents=True)
    (repo / "pipeline" / "config.pbtxt").write_text(_PIPELINE)
    config = ServerConfig(
        model_repository=repo, gateway=True, gateway_limits=GatewayLimits(max_request_bytes=CAP), supervise=False
    )
    with LocalServer(config) as srv:
        yield srv


def _input(values: np.ndarray) -> grpcclient.InferInput:
    item = grpcclient.InferInput("x", list(values.shape), "FP32")
    item.set_data_from_numpy(values)
    return item


def _unary(client: grpcclient.InferenceServerClient, values: np.ndarray, model: str = "tiny") -> np.ndarray:
    return client.infer(model, [_input(values)]).as_numpy("y")


class _Answers:
    """A sync stream's callback: answers by request id."""

    def __init__(self) -> None:
        self.items: queue.Queue = queue.Queue()

    def __call__(self, result, error) -> None:
        self.items.put((result, error))

    def take(self, n: int, timeout_s: float = 60) -> tuple[dict[str, np.ndarray], list[InferenceServerException]]:
        got: dict[str, np.ndarray] = {}
        errors: list[InferenceServerException] = []
        for _ in range(n):
            result, error = self.items.get(timeout=timeout_s)
            if error is not None:
                errors.append(error)
            else:
                got[result.get_response().id] = result.as_numpy("y")
        return got, errors


def _stream_client(gws, requests: int, seed: int) -> None:
    client = grpcclient.InferenceServerClient(_address(gws.grpc_url))
    answers = _Answers()
    rng = np.random.default_rng(seed)
    inputs = {f"{seed}-{i}": rng.standard_normal((1, 4)).astype(np.float32) for i in range(requests)}
    try:
        client.start_stream(answers)
        for rid, values in inputs.items():
            client.async_stream_infer("tiny", [_input(values)], request_id=rid)
        got, errors = answers.take(requests)
        client.stop_stream()
        assert not errors and set(got) == set(inputs)
        for rid, values in inputs.items():
            np.testing.assert_array_equal(got[rid], _unary(client, values))
    finally:
        client.close()


def test_streams_answer_as_modelinfer_does(gws):
    """4 client threads with a stream of 100 requests each, then one stream of 1,000: every answer is ModelInfer's."""
    failures: list[BaseException] = []

    def run(seed: int, n: int) -> None:
        try:
            _stream_client(gws, n, seed)
        except BaseException as e:  # noqa: BLE001 - reported by the test's thread
            failures.append(e)

    threads = [threading.Thread(target=run, args=(seed, 100)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not failures, failures
    _stream_client(gws, 1000, 99)


def test_large_tensors_stream_through_shared_memory_and_answer_as_modelinfer_does(gws):
    """Messages of 400 KB: the gateway hands their tensors to Triton through its staging regions."""
    client = grpcclient.InferenceServerClient(_address(gws.grpc_url))
    answers = _Answers()
    rng = np.random.default_rng(7)
    inputs = {str(i): rng.standard_normal((1, 100_000)).astype(np.float32) for i in range(12)}
    try:
        client.start_stream(answers)
        for rid, values in inputs.items():
            client.async_stream_infer("any_length", [_input(values)], request_id=rid)
        got, errors = answers.take(len(inputs))
        client.stop_stream()
        assert not errors and set(got) == set(inputs)
        for rid, values in inputs.items():
            np.testing.assert_array_equal(got[rid], _unary(client, values, "any_length"))
    finally:
        client.close()


def test_a_compressed_stream_is_checked_and_served(gws):
    client = grpcclient.InferenceServerClient(_address(gws.grpc_url))
    answers = _Answers()
    inputs = {str(i): np.full((1, 4), i, np.float32) for i in range(10)}
    try:
        client.start_stream(answers, compression_algorithm="gzip")
        for rid, values in inputs.items():
            client.async_stream_infer("tiny", [_input(values)], request_id=rid)
        wrong = grpcclient.InferInput("x", [1, 4], "FP16")  # checked once inflated: 8 bytes for 16
        wrong.set_data_from_numpy(np.ones((1, 4), np.float16))
        client.async_stream_infer("tiny", [wrong], request_id="fp16")
        got, errors = answers.take(len(inputs) + 1)
        client.stop_stream()
    finally:
        client.close()
    assert len(errors) == 1 and "FP16" not in set(got) and "x" in str(errors[0])
    for rid, values in inputs.items():
        np.testing.assert_array_equal(got[rid], values * 2 + 1)


def test_the_asyncio_stream_api_through_the_gateway(gws):
    values = [np.full((1, 4), i, np.float32) for i in range(20)]

    async def run() -> dict[str, np.ndarray]:
        async with aioclient.InferenceServerClient(_address(gws.grpc_url)) as client:

            async def requests():
                for i, v in enumerate(values):
                    item = aioclient.InferInput("x", [1, 4], "FP32")
                    item.set_data_from_numpy(v)
                    yield {"model_name": "tiny", "inputs": [item], "request_id": str(i)}

            got = {}
            async for result, error in client.stream_infer(requests()):
                assert error is None, error
                got[result.get_response().id] = result.as_numpy("y")
                if len(got) == len(values):
                    break
            return got

    got = asyncio.run(run())
    assert sorted(got, key=int) == [str(i) for i in range(20)]
    for i, v in enumerate(values):
        np.testing.assert_array_equal(got[str(i)], v * 2 + 1)


def _raw_message(req: pb.ModelInferRequest | bytes) -> bytes:
    return req if isinstance(req, bytes) else req.SerializeToString()


def test_a_message_that_fails_a_check_is_answered_on_the_stream_and_the_next_is_served(gws):
    """Malformed, mis-shaped, a bad datatype, a region named without the key: each answered, the stream goes on."""
    good = pb.ModelInferRequest(model_name="tiny", id="good")
    tensor = good.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    good.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
    short = pb.ModelInferRequest()
    short.CopyFrom(good)
    short.id, short.raw_input_contents[0] = "short", b"\0" * 12
    dtype = pb.ModelInferRequest()
    dtype.CopyFrom(good)
    dtype.id, dtype.inputs[0].datatype = "dtype", "FP33"
    region = pb.ModelInferRequest(model_name="tiny", id="region")
    named = region.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    named.parameters["shared_memory_region"].string_param = "someone_elses"
    named.parameters["shared_memory_byte_size"].int64_param = 16
    del tensor
    sent = [b"\xff\xfe not a protobuf", short, good, dtype, region, good]
    with grpc.insecure_channel(_address(gws.grpc_url)) as channel:
        call = channel.stream_stream(STREAM)
        answers = [
            pb.ModelStreamInferResponse.FromString(a) for a in call(iter(_raw_message(m) for m in sent), timeout=30)
        ]
    assert len(answers) == len(sent)
    errors = {a.infer_response.id: a.error_message for a in answers if a.error_message}
    served = [a for a in answers if not a.error_message]
    assert len(served) == 2 and all(a.infer_response.id == "good" for a in served)
    y = np.frombuffer(served[0].infer_response.raw_output_contents[0], np.float32)
    np.testing.assert_array_equal(y, np.arange(4, dtype=np.float32) * 2 + 1)
    assert set(errors) == {"", "short", "dtype", "region"}, errors
    assert "not a valid ModelInferRequest" in errors[""]
    assert "'x'" in errors["short"] and "12" in errors["short"]
    assert "FP33" in errors["dtype"]
    assert "admin key" in errors["region"]
    for text in errors.values():
        assert "Traceback" not in text and "/tmp" not in text and ".py" not in text, text


def test_a_message_over_the_cap_ends_the_stream_with_resource_exhausted(gws):
    big = pb.ModelInferRequest(model_name="tiny", id="big")
    big.inputs.add(name="x", datatype="FP32", shape=[1, CAP // 4 + 4])
    big.raw_input_contents.append(bytes(CAP + 16))
    with grpc.insecure_channel(_address(gws.grpc_url)) as channel:
        call = channel.stream_stream(STREAM)
        with pytest.raises(grpc.RpcError) as info:
            list(call(iter([big.SerializeToString()]), timeout=30))
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"over this server's limit of {CAP} bytes" in info.value.details()


def test_a_client_that_hangs_up_mid_stream_gives_its_slots_back(gws, tmp_path):
    """At the per-model limit (2): a stream's two requests in flight hold it; once the client goes, a request fits."""
    gateway = _gateway(tmp_path, _address(gws.http_url), gws.triton_endpoints.grpc_address, max_inflight_per_model=2)
    address = f"127.0.0.1:{gateway.options.grpc_port}"
    values = np.ones((1, 4), np.float32)
    try:
        holder = grpcclient.InferenceServerClient(address)
        answers = _Answers()
        holder.start_stream(answers)
        holder.async_stream_infer("tiny", [_input(values)], request_id="first")  # Triton begins answering
        got, errors = answers.take(1)
        assert not errors and list(got) == ["first"]
        for rid in ("a", "b", "c"):  # a and b wait in Triton's queue for a batch (8 s); c is one too many
            holder.async_stream_infer("slow", [_input(values)], request_id=rid)
        result, error = answers.items.get(timeout=6)  # c's answer, on the stream, before a's and b's
        assert result is None and "kLiteServiceDeny" in str(error) and "'slow'" in str(error), (result, error)
        other = grpcclient.InferenceServerClient(address)
        with pytest.raises(InferenceServerException, match="kLiteServiceDeny"):
            _unary(other, values, "slow")  # a and b hold the limit
        holder.close()  # hangs up with both in flight
        deadline = time.monotonic() + 15
        while True:
            try:
                np.testing.assert_array_equal(_unary(other, values, "slow"), values * 2 + 1)
                break
            except InferenceServerException as e:
                assert "kLiteServiceDeny" in str(e) and time.monotonic() < deadline, e
                time.sleep(0.1)
        other.close()
    finally:
        gateway.stop()


def test_perf_analyzer_streams_through_the_gateway(gws):
    from tests.support.tools import ToolsError, ensure_tools

    try:
        tools = ensure_tools(ROOT)
    except ToolsError as e:
        pytest.fail(f"perf_analyzer could not be set up: {e}")
    args = [str(tools.perf_analyzer), "-m", "tiny", "-u", _address(gws.grpc_url), "-i", "grpc", "--streaming",
            "--concurrency-range", "4", "--measurement-interval", "1000", "-s", "1000",
            "--max-trials", "3"]  # fmt: skip
    out = subprocess.run(args, env=tools.env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, (out.stdout + out.stderr)[-2000:]
    throughput = float(out.stdout.split("Concurrency: 4, throughput:")[1].split()[0])
    assert throughput > 0


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_an_ensemble_of_two_mslite_steps_and_what_a_failing_step_reports(gws, protocol):
    module = grpcclient if protocol == "grpc" else httpclient
    url = _address(gws.grpc_url if protocol == "grpc" else gws.http_url)
    client = module.InferenceServerClient(url)
    try:
        values = np.arange(8, dtype=np.float32).reshape(2, 4)
        item = module.InferInput("x", [2, 4], "FP32")
        item.set_data_from_numpy(values)
        np.testing.assert_array_equal(client.infer("pipeline", [item]).as_numpy("y"), values * 4 + 3)
        longer = module.InferInput("x", [1, 5], "FP32")  # passes the first step; the second takes four values
        longer.set_data_from_numpy(np.ones((1, 5), np.float32))
        with pytest.raises(InferenceServerException) as info:
            client.infer("pipeline", [longer])
        text = str(info.value)
        assert "in ensemble 'pipeline'" in text, text
        assert "unexpected shape for input 'x' for model 'tiny'. Expected [-1,4], got [1,5]" in text, text
        assert "/tmp" not in text and "Traceback" not in text
    finally:
        client.close()


def test_an_ensemble_streams_through_the_gateway(gws):
    client = grpcclient.InferenceServerClient(_address(gws.grpc_url))
    answers = _Answers()
    try:
        client.start_stream(answers)
        for i in range(10):
            client.async_stream_infer("pipeline", [_input(np.full((1, 4), i, np.float32))], request_id=str(i))
        got, errors = answers.take(10)
        client.stop_stream()
    finally:
        client.close()
    assert not errors
    for i in range(10):
        np.testing.assert_array_equal(got[str(i)], np.full((1, 4), i * 4 + 3, np.float32))
