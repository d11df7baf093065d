"""What Triton's own clients expect of a model: string (BYTES) tensors and the order of outputs.

Each check runs through the gateway and straight at Triton (one server with a gateway has both), on
gRPC, HTTP with binary data and HTTP with JSON data. String tensors must come back byte for byte
(embedded NULs, empty strings, multi-byte characters, and bytes that are not UTF-8 where the protocol
can carry them: not JSON), merged by the dynamic batcher and split back; outputs come in name order, as
Triton's C++ ONNX Runtime backend sends them, in every worker of every server start.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import mslite_triton as mslite
from mslite_contract.protocol import ADMIN_KEY_GRPC_HEADER, ADMIN_KEY_HEADER
from mslite_server import LocalServer, ServerConfig
from tests.support import model_zoo
from tests.support.repository import MINIMAL, add_model
from tests.support.settled import settled
from tests.support.triton_direct import grpc_address, http_address

pytestmark = pytest.mark.integration

TEXTS = [b"hello", b"he\x00llo", b"", "\u00e9\u20ac\U0001f600".encode(), b"\x00", b"end\x00"]
ROUTES = ("gateway", "triton")
PROTOCOLS = ("grpc", "http-binary", "http-json")
# one worker, a queue delay: concurrent requests reach `execute` together and are merged into one run
MERGED = (
    MINIMAL
    + "max_batch_size: 16\ninstance_group [ { kind: KIND_CPU, count: 1 } ]\n"
    + "dynamic_batching { max_queue_delay_microseconds: 50000 }\n"
    + 'parameters { key: "merge_requests" value { string_value: "true" } }\n'
)
TWO_WORKERS = MINIMAL + "instance_group [ { kind: KIND_CPU, count: 2 } ]\n"


def _repository(root: Path) -> Path:
    add_model(root, "string_identity", model_zoo.string_identity(), MERGED)
    add_model(root, "string_to_int", model_zoo.string_to_int())
    add_model(root, "six_outputs", model_zoo.six_outputs(), TWO_WORKERS)
    add_model(root, "overridden", model_zoo.six_outputs(), MINIMAL + "max_batch_size: 8\n")
    return root


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    repo = _repository(tmp_path_factory.mktemp("clients_repo"))
    with LocalServer(ServerConfig(model_repository=repo, gateway=True, supervise=False)) as srv:
        yield srv


def _client(srv: LocalServer, route: str, protocol: str):
    if protocol == "grpc":
        address = f"127.0.0.1:{srv.grpc_port}" if route == "gateway" else grpc_address(srv)
        return grpcclient, grpcclient.InferenceServerClient(address)
    address = f"127.0.0.1:{srv.http_port}" if route == "gateway" else http_address(srv)
    return httpclient, httpclient.InferenceServerClient(address, network_timeout=60)


def _infer(srv, route, protocol, model, array, datatype, outputs=()):
    module, client = _client(srv, route, protocol)
    binary = protocol != "http-json"
    tensor = module.InferInput("INPUT0", list(array.shape), datatype)
    if protocol == "grpc":
        tensor.set_data_from_numpy(array)
        wanted = [module.InferRequestedOutput(name) for name in outputs]
    else:
        tensor.set_data_from_numpy(array, binary_data=binary)
        wanted = [module.InferRequestedOutput(name, binary_data=binary) for name in outputs]
    return client.infer(model, [tensor], outputs=wanted or None)


def _strings(rows: list[list[bytes]]) -> np.ndarray:
    array = np.empty((len(rows), len(rows[0])), dtype=object)
    array[:] = rows
    return array


def _as_bytes(array: np.ndarray) -> list:
    """JSON answers carry text (`str`), binary ones `bytes`: compare as bytes."""
    return [[v if isinstance(v, bytes) else v.encode() for v in row] for row in array.tolist()]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("route", ROUTES)
def test_strings_round_trip_byte_for_byte(served, route, protocol):
    sent = _strings([TEXTS[:3], TEXTS[3:]])
    result = _infer(served, route, protocol, "string_identity", sent, "BYTES")
    got = result.as_numpy("OUTPUT0")
    assert got.shape == (2, 3)
    assert _as_bytes(got) == sent.tolist()


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("route", ROUTES)
def test_strings_cast_to_numbers(served, route, protocol):
    sent = _strings([[b"1", b"-20", b"300", b"0"], [b"2147483647", b"-2147483648", b"7", b"08"]])
    got = _infer(served, route, protocol, "string_to_int", sent, "BYTES").as_numpy("OUTPUT0")
    assert got.dtype == np.int32
    assert got.tolist() == [[1, -20, 300, 0], [2147483647, -2147483648, 7, 8]]


@pytest.mark.parametrize("route", ROUTES)
def test_strings_merged_by_the_batcher_go_back_to_their_requests(served, route):
    def stats() -> tuple[int, int]:
        row = served.http_json("GET", "/v2/models/string_identity/stats", None)["model_stats"][0]
        return int(row["inference_stats"]["success"]["count"]), int(row["execution_count"])

    requests_before, executions_before = settled(stats)
    sends = [_strings([[t + bytes([i, 0x80 + i]), t] for t in TEXTS[: 1 + i % 4]]) for i in range(12)]  # not UTF-8
    answers: list = [None] * len(sends)
    start = threading.Barrier(len(sends))

    def send(i: int) -> None:
        start.wait()
        protocol = ("grpc", "http-binary")[i % 2]
        answers[i] = _infer(served, route, protocol, "string_identity", sends[i], "BYTES").as_numpy("OUTPUT0")

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(sends))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for sent, got in zip(sends, answers):
        assert got is not None and _as_bytes(got) == sent.tolist()
    requests, executions = settled(stats)
    assert requests - requests_before == len(sends)
    assert executions - executions_before < len(sends)  # some requests shared an execute (one merged run)


@pytest.mark.parametrize("protocol", ("grpc", "http-binary"))  # JSON carries text only: no non-UTF-8 there
@pytest.mark.parametrize("route", ROUTES)
def test_strings_that_are_not_utf8_round_trip_byte_for_byte(served, route, protocol):
    sent = _strings([[b"\xff\xfe", b"ok", b"\x80\x00"], [b"", b"a\xc3", bytes(range(256))]])
    got = _infer(served, route, protocol, "string_identity", sent, "BYTES").as_numpy("OUTPUT0")
    assert got.shape == (2, 3)
    assert got.tolist() == sent.tolist()


def test_the_mslite_client_refuses_a_string_model_by_name(served):
    """MindSpore Lite's Tensor has no string type: the build says which tensor and what to use instead."""
    ctx = mslite.Context()
    ctx.server_url = served.grpc_url
    model = mslite.Model()
    with pytest.raises(RuntimeError) as info:
        model.build_from_file("triton://string_to_int", mslite.ModelType.MINDIR, ctx)
    message = str(info.value)
    assert "input 'INPUT0' is a string (BYTES) tensor" in message and "tritonclient" in message


def _check_outputs(names: list[str], values: list[np.ndarray], x: np.ndarray) -> None:
    """Outputs in name order; each one's value is the one its name stands for (x + its graph index)."""
    assert names == sorted(names)
    for name, value in zip(names, values):
        assert np.array_equal(value, x + model_zoo.SIX_OUTPUTS.index(name)), name


SUBSETS = ([], ["OUTPUT0", "OUTPUT3"], ["out_b", "OUTPUT10", "Zeta"], ["alpha"], list(model_zoo.SIX_OUTPUTS))


@pytest.mark.parametrize("protocol", ("grpc", "http-binary"))
@pytest.mark.parametrize("route", ROUTES)
def test_outputs_come_in_name_order(served, route, protocol):
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    for wanted in SUBSETS:
        result = _infer(served, route, protocol, "six_outputs", x, "FP32", wanted)
        response = result.get_response()
        if protocol == "grpc":  # by position: what raw gRPC users and other languages read
            names = [o.name for o in response.outputs]
            values = [np.frombuffer(raw, np.float32).reshape(2, 4) for raw in response.raw_output_contents]
        else:
            names = [o["name"] for o in response["outputs"]]
            values = [result.as_numpy(name) for name in names]
        assert sorted(names) == sorted(wanted or model_zoo.SIX_OUTPUTS)
        _check_outputs(names, values, x)


def _send_six(client, wanted: list[str], x: np.ndarray, orders: list) -> None:
    """One gRPC request to six_outputs; its output names go to `orders` once their values checked out."""
    tensor = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    outputs = [grpcclient.InferRequestedOutput(n) for n in wanted] or None
    response = client.infer("six_outputs", [tensor], outputs=outputs).get_response()
    values = [np.frombuffer(raw, np.float32).reshape(x.shape) for raw in response.raw_output_contents]
    _check_outputs([o.name for o in response.outputs], values, x)
    orders.append(tuple(o.name for o in response.outputs))


def test_output_order_is_the_same_in_every_server_start(tmp_path):
    """Five starts, two workers each, gRPC straight at Triton: each worker's set order differed before."""
    repo = tmp_path / "repo"
    add_model(repo, "six_outputs", model_zoo.six_outputs(), TWO_WORKERS)
    x = np.ones((1, 4), dtype=np.float32)
    seen = set()
    for _ in range(5):
        with LocalServer(ServerConfig(model_repository=repo, supervise=False, restrict_admin=False)) as srv:
            client = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")
            orders: list = []
            # concurrent requests, so both workers answer some of them; requested names in reverse order
            threads = [
                threading.Thread(target=_send_six, args=(client, list(reversed(wanted)), x, orders))
                for wanted in SUBSETS * 2
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert len(orders) == len(threads)  # every answer checked out
            seen.update(orders)
    assert tuple(sorted(model_zoo.SIX_OUTPUTS)) in seen


def test_a_failed_reload_does_not_hold_up_the_stop(tmp_path):
    """Triton 2.51 counts a failed reload of a served model as live until its exit timeout (30 s here)."""
    repo = tmp_path / "repo"
    add_model(repo, "simple", model_zoo.six_outputs())
    srv = LocalServer(ServerConfig(model_repository=repo, supervise=False, restrict_admin=False))
    try:
        srv.start()
        client = httpclient.InferenceServerClient(f"127.0.0.1:{srv.http_port}", network_timeout=60)
        with pytest.raises(InferenceServerException, match="backend 'onnxruntime'"):
            client.load_model("simple", config='{"max_batch_size": 16}')  # names no backend: Triton's default
        assert client.is_model_ready("simple")  # the served version stays
        client.close()
        started = time.monotonic()
        srv.stop()
        took = time.monotonic() - started
    finally:
        srv.stop()
        srv.remove_workspace()
    assert srv.config.exit_timeout_s == 30
    assert took < 15, f"stop took {took:.1f} s"


@pytest.mark.parametrize("protocol", ("grpc", "http-binary"))
def test_a_config_override_without_a_backend_keeps_mslite_through_the_gateway(served, protocol):
    """Triton's own model-control example overrides `max_batch_size` alone; Triton would pick `onnxruntime`."""
    module, client = _client(served, "gateway", protocol)
    key = {ADMIN_KEY_GRPC_HEADER if protocol == "grpc" else ADMIN_KEY_HEADER: served.admin_key}
    size = 4 if protocol == "grpc" else 16
    client.load_model("overridden", config=json.dumps({"max_batch_size": size}), headers=key)
    config = client.get_model_config("overridden")
    config = config.config if protocol == "grpc" else config
    assert (config["backend"] if protocol != "grpc" else config.backend) == "mslite"
    assert (config["max_batch_size"] if protocol != "grpc" else config.max_batch_size) == size
    x = np.ones((size, 4), dtype=np.float32)
    result = _infer(served, "gateway", protocol, "overridden", x, "FP32", ["alpha"])
    assert np.array_equal(result.as_numpy("alpha"), x + model_zoo.SIX_OUTPUTS.index("alpha"))
    # an override that names a backend, or one that is no JSON object, goes to Triton as it is
    with pytest.raises(InferenceServerException, match="failed to load"):
        client.load_model("overridden", config='"parameters": {{"max_batch_size": "16"}}', headers=key)
    with pytest.raises(InferenceServerException, match="backend 'onnxruntime'"):
        client.load_model("overridden", config='{"backend": "onnxruntime"}', headers=key)
