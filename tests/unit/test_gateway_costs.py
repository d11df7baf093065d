"""What bounds a request's cost at the gateway, without a server: empty batches, string elements, compressed
gRPC messages inflated off the loop, and calls Triton does not answer in time (the relay core, sans-IO)."""

from __future__ import annotations

import asyncio
import gzip
import urllib.parse

import hpack
import pytest
from tritonclient.grpc import service_pb2 as pb

from mslite_gateway.admission import Admission
from mslite_gateway.grpc.checks import read_model_infer
from mslite_gateway.grpc.frames import (
    CANCEL,
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    U32,
    frame,
)
from mslite_gateway.http.checks import work_bytes
from mslite_gateway.http.kserve_json import check_infer_request
from mslite_gateway.http.messages import Request
from mslite_gateway.model_batching import ModelBatching, config_request, max_batch_size_of
from mslite_gateway.rules import Refusal, check_batches, empty_batches
from tests.support.relay_wire import Wire, frames_of

INFER = "/inference.GRPCInferenceService/ModelInfer"


def _infer(model: str, shape: list[int], *, datatype: str = "FP32", raw: bytes = b"") -> bytes:
    req = pb.ModelInferRequest(model_name=model)
    inp = req.inputs.add()
    inp.name, inp.datatype = "x", datatype
    inp.shape.extend(shape)
    req.raw_input_contents.append(raw)
    return req.SerializeToString()


def _call(sid: int, message: bytes, *, gzipped: bool = False) -> bytes:
    """One unary call's frames: its headers, then its message in one DATA frame that ends the stream."""
    fields = [(":method", "POST"), (":scheme", "http"), (":path", INFER), (":authority", "x")]
    fields += [("content-type", "application/grpc")] + ([("grpc-encoding", "gzip")] if gzipped else [])
    body = gzip.compress(message) if gzipped else message
    data = (b"\1" if gzipped else b"\0") + U32.pack(len(body)) + body
    return frame(HEADERS, END_HEADERS, sid, hpack.Encoder().encode(fields)) + frame(DATA, END_STREAM, sid, data)


def _opened(**rules) -> Wire:
    wire = Wire(**rules)
    wire.from_client(PREFACE + frame(SETTINGS, 0, 0))
    return wire


def _answer(wire: Wire, sid: int) -> dict[str, str]:
    blocks = [p for k, _, s, p in frames_of(wire.client.data) if k == HEADERS and s == sid]
    assert blocks, "no answer to the client"
    return {k: urllib.parse.unquote(v) for k, v in hpack.Decoder().decode(blocks[-1])}


def _to_triton(wire: Wire, kind: int, sid: int) -> list[bytes]:
    """The payloads of the frames of `kind` that reached Triton for stream `sid` (after the preface)."""
    return [p for k, _, s, p in frames_of(wire.triton.data[len(PREFACE) :]) if k == kind and s == sid]


def _data_to_triton(wire: Wire, sid: int) -> list[bytes]:
    return _to_triton(wire, DATA, sid)


class _Batching(ModelBatching):
    """A ModelBatching whose readings are counted and answered from a dict (no Triton)."""

    def __init__(self, sizes: dict[str, int | None]) -> None:
        async def read(model: str) -> bytes | None:
            size = sizes.get(model)
            return None if size is None else b'{"max_batch_size": %d}' % size

        super().__init__(read)


# -- the rules --
def test_only_a_first_dim_of_zero_is_an_empty_batch_and_only_a_batching_model_refuses_it():
    assert empty_batches([("a", [0, 0]), ("b", [1, 0]), ("c", []), ("d", [0])]) == [("a", [0, 0]), ("d", [0])]
    check_batches("flat", [("a", [0, 4])], 0)  # no batching: Triton answers it
    check_batches("m", [], 8)
    with pytest.raises(Refusal) as caught:
        check_batches("m", [("tokens", [0, 0])], 8)
    assert caught.value.status == 400
    assert "batch-size must be >= 1 for 'm'" in caught.value.message and "[0, 0]" in caught.value.message


def test_string_elements_past_the_limit_are_refused_naming_the_limit_and_the_setting():
    header = b'{"inputs":[{"name":"s","shape":[2,3],"datatype":"BYTES","parameters":{"binary_data_size":60}}]}'
    check_infer_request(header, "m", payload=memoryview(bytes(60)), cap=1 << 20, max_strings=6)
    with pytest.raises(Refusal) as caught:
        check_infer_request(header, "m", payload=memoryview(bytes(60)), cap=1 << 20, max_strings=5)
    assert caught.value.status == 413
    assert "6 string elements" in caught.value.message and "limit of 5" in caught.value.message
    assert "--max-string-elements" in caught.value.message
    message = _infer("m", [4_000_000], datatype="BYTES", raw=bytes(16))
    with pytest.raises(Refusal, match="limit of 1000000 per request"):
        read_model_infer(message, 1 << 20)  # the default bound, before the bytes are looked at
    read_model_infer(_infer("m", [2, 2], datatype="BYTES", raw=bytes(16)), 1 << 20, max_strings=4)


def test_a_bodys_lane_is_told_by_its_json_size_and_a_compressed_one_inflated_only_that_far():
    bomb = gzip.compress(b" " * (8 << 20))
    assert work_bytes(_post(bomb, (b"content-encoding", b"gzip")), 1 << 20) == (1 << 20) + 1
    assert work_bytes(_post(gzip.compress(b"{}"), (b"content-encoding", b"gzip")), 1 << 20) == 2
    assert work_bytes(_post(b"not gzip", (b"content-encoding", b"gzip")), 1 << 20) == 0  # its check refuses it
    assert work_bytes(_post(b" " * 5000), 1 << 20) == 5000
    header_and_binary = _post(b"{}" + bytes(5000), (b"inference-header-content-length", b"2"))
    assert work_bytes(header_and_binary, 1 << 20) == 2  # only the JSON is read
    assert work_bytes(_post(b" " * 5000), 1000) == 1001


def _post(body: bytes, *headers: tuple[bytes, bytes]) -> Request:
    return Request(b"POST", b"/v2/models/m/infer", b"HTTP/1.1", [(n, v, n + b": " + v) for n, v in headers], body)


# -- whether a model batches --
def test_a_models_batching_is_read_once_for_concurrent_askers_and_kept_a_while():
    batching = _Batching({"seq": 64, "flat": 0})

    async def scenario() -> None:
        assert await asyncio.gather(*(batching.max_batch_size("seq") for _ in range(5))) == [64] * 5
        assert batching.reads == 1 and batching.known("seq") == (True, 64)
        assert await batching.max_batch_size("gone") is None  # not loaded: left to Triton
        await batching.check("flat", [("x", [0, 4])])  # no batching: passes
        await batching.check("gone", [("x", [0, 4])])
        with pytest.raises(Refusal, match="batch-size must be >= 1"):
            await batching.check("seq", [("tokens", [0, 0])])
        assert batching.reads == 3

    asyncio.run(scenario())
    assert batching.known("other") == (False, None)


def test_a_config_answer_gives_max_batch_size_and_the_request_names_the_model_quoted():
    assert max_batch_size_of(b'{"name": "m", "max_batch_size": 8}') == 8
    assert max_batch_size_of(b'{"name": "m"}') == 0  # proto3 JSON leaves a 0 out
    assert max_batch_size_of(b"not json") is None and max_batch_size_of(None) is None
    assert config_request("a b/c", b"k", "key").startswith(b"GET /v2/models/a%20b%2Fc/config HTTP/1.1\r\n")
    assert b"\r\nk: key\r\n" in config_request("m", b"k", "key") and b"k:" not in config_request("m", b"k", None)


# -- the gRPC relay core --
def test_a_compressed_message_is_inflated_off_the_loop_and_then_passed_on():
    wire = _opened()
    wire.from_client(_call(1, _infer("tiny", [1, 4], raw=bytes(16)), gzipped=True))
    assert not _data_to_triton(wire, 1) and len(wire.later) == 1  # held until the thread's work is done
    wire.run_later()
    assert len(_data_to_triton(wire, 1)) == 1 and not wire.client.data.count(b"grpc-status")


def test_a_compressed_message_that_fails_its_check_off_the_loop_is_refused_and_reset_at_triton():
    wire = _opened(max_request_bytes=1000)
    wire.from_client(_call(1, _infer("tiny", [1, 4], raw=bytes(4000)), gzipped=True))  # 4 KB inflated
    wire.run_later()
    assert _answer(wire, 1)["grpc-status"] == "8" and not _data_to_triton(wire, 1)
    resets = _to_triton(wire, RST_STREAM, 1)
    assert resets == [U32.pack(CANCEL)]


@pytest.mark.parametrize("gzipped", [False, True])
def test_an_empty_batch_waits_for_the_models_batching_and_is_refused_when_it_batches(gzipped):
    wire = _opened(batching=_Batching({}))
    wire.from_client(_call(1, _infer("seq", [0, 0]), gzipped=gzipped))
    if gzipped:
        wire.run_later()  # inflated; then the batching is asked
    assert not _data_to_triton(wire, 1) and len(wire.later) == 1
    wire.run_later(64)
    answer = _answer(wire, 1)
    assert answer["grpc-status"] == "3" and "batch-size must be >= 1 for 'seq'" in answer["grpc-message"]
    assert not _data_to_triton(wire, 1)


def test_an_empty_batch_for_a_model_without_batching_is_passed_on():
    wire = _opened(batching=_Batching({}))
    wire.from_client(_call(1, _infer("flat", [0, 4])))
    wire.run_later(0)
    assert len(_data_to_triton(wire, 1)) == 1


def test_a_known_batching_model_refuses_an_empty_batch_at_once_and_serves_the_rest():
    batching = _Batching({"seq": 8})
    asyncio.run(batching.max_batch_size("seq"))
    wire = _opened(batching=batching)
    wire.from_client(_call(1, _infer("seq", [0, 0])) + _call(3, _infer("seq", [1, 0])))
    assert not wire.later and _answer(wire, 1)["grpc-status"] == "3"
    assert not _data_to_triton(wire, 1) and len(_data_to_triton(wire, 3)) == 1


def test_a_reset_while_its_work_runs_leaves_nothing_behind():
    admission = Admission(max_inflight_per_model=4, max_inflight_bytes=1 << 20)
    wire = _opened(batching=_Batching({}), admission=admission)
    wire.from_client(_call(1, _infer("seq", [0, 0])))
    wire.from_client(frame(RST_STREAM, 0, 1, U32.pack(CANCEL)))
    wire.run_later(64)
    assert not _data_to_triton(wire, 1) and b"grpc-status" not in wire.client.data
    assert admission.models == {} and admission.bytes == 0


def test_a_call_triton_does_not_begin_to_answer_in_time_ends_and_gives_its_slot_back():
    admission = Admission(max_inflight_per_model=4, max_inflight_bytes=1 << 20)
    wire = _opened(admission=admission, upstream_timeout_s=30.0)
    wire.from_client(_call(1, _infer("tiny", [1, 4], raw=bytes(16))))
    assert admission.models == {"tiny": 1}
    wire.tick(wire.now + 20)
    assert b"grpc-status" not in wire.client.data
    wire.tick(wire.now + 11)
    answer = _answer(wire, 1)
    assert answer["grpc-status"] == "4" and "within 30 s" in answer["grpc-message"]
    assert "--upstream-timeout-s" in answer["grpc-message"]
    assert _to_triton(wire, RST_STREAM, 1) == [U32.pack(CANCEL)]
    assert admission.models == {}
