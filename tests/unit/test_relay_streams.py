"""ModelStreamInfer calls in the gRPC relay's core, driven with constructed frames (`relay_wire.Wire`)."""

from __future__ import annotations

import asyncio

import hpack
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from mslite_gateway.admission import Admission
from mslite_gateway.grpc.call_states import Answers, Phase
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
    WINDOW_UPDATE,
    frame,
)
from mslite_gateway.grpc.messages import MessageReader
from mslite_gateway.grpc.stream_state import read_answer
from mslite_gateway.model_batching import ModelBatching
from tests.support.relay_wire import FakeStaging, Wire, frames_of

STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"


def _opened(**kwargs) -> tuple[Wire, hpack.Encoder]:
    wire = Wire(**kwargs)
    wire.from_client(PREFACE + frame(SETTINGS, 0, 0))
    encoder = hpack.Encoder()
    fields = [(":method", "POST"), (":scheme", "http"), (":path", STREAM), (":authority", "x")]
    wire.from_client(frame(HEADERS, END_HEADERS, 1, encoder.encode([*fields, ("content-type", "application/grpc")])))
    return wire, encoder


def _message(body: bytes) -> bytes:
    return b"\0" + U32.pack(len(body)) + body


def _request(rid: str, values: np.ndarray | None = None, model: str = "tiny") -> bytes:
    req = pb.ModelInferRequest(model_name=model, id=rid)
    values = np.arange(4, dtype=np.float32) if values is None else values
    req.inputs.add(name="x", datatype="FP32", shape=[1, values.size])
    req.raw_input_contents.append(values.tobytes())
    return _message(req.SerializeToString())


def _answer(rid: str, *, final: bool | None = True, model: str = "tiny") -> bytes:
    res = pb.ModelStreamInferResponse()
    res.infer_response.id, res.infer_response.model_name = rid, model
    if final is not None:
        res.infer_response.parameters["triton_final_response"].bool_param = final
    return _message(res.SerializeToString())


def _triton_headers(wire: Wire) -> None:
    block = hpack.Encoder().encode([(":status", "200"), ("content-type", "application/grpc")])
    wire.from_triton(frame(HEADERS, END_HEADERS, 1, block))


def _sent_to_triton(wire: Wire) -> bytes:
    """The DATA payloads Triton got on stream 1, joined."""
    return b"".join(p for k, _, sid, p in frames_of(wire.triton.data[len(PREFACE) :]) if k == DATA and sid == 1)


def _streamed_to_client(wire: Wire) -> list[pb.ModelStreamInferResponse]:
    data = b"".join(p for k, _, sid, p in frames_of(wire.client.data) if k == DATA and sid == 1)
    reader = MessageReader()
    return [pb.ModelStreamInferResponse.FromString(m.body().join()) for m in reader.feed(data)]


def _call(wire: Wire):
    return wire.core.calls.streamed.calls[1]


def test_a_message_split_over_frames_is_held_until_whole_then_goes_on():
    wire, _ = _opened()
    one, two = _request("a"), _request("b")
    both = one + two
    wire.from_client(frame(DATA, 0, 1, both[:7]))
    wire.from_client(frame(DATA, 0, 1, both[7:30]))
    assert _sent_to_triton(wire) == b""  # nothing of a message goes before it is whole (and checked)
    wire.from_client(frame(DATA, 0, 1, both[30 : len(one) + 3]))  # the end of one, the start of two
    assert _sent_to_triton(wire) == one
    wire.from_client(frame(DATA, END_STREAM, 1, both[len(one) + 3 :]))
    assert _sent_to_triton(wire) == both
    assert frames_of(wire.triton.data[len(PREFACE) :])[-1][:3] == (
        DATA,
        END_STREAM,
        1,
    )  # the client's half-close goes on
    assert _call(wire).phase is Phase.HALF_CLOSED
    assert wire.rules.admission.models == {"tiny": 2}  # both in flight for their model


def test_answers_give_the_slots_back_and_a_decoupled_models_last_answer_ends_its_request():
    wire, _ = _opened()
    wire.from_client(frame(DATA, 0, 1, _request("a") + _request("b") + _request("c")))
    admission = wire.rules.admission
    assert admission.models == {"tiny": 3} and admission.bytes > 0
    _triton_headers(wire)
    wire.from_triton(frame(DATA, 0, 1, _answer("b")))  # answers come in any order
    assert admission.models == {"tiny": 2}
    wire.from_triton(frame(DATA, 0, 1, _answer("a", final=False) + _answer("a", final=False)))
    assert admission.models == {"tiny": 2}  # a decoupled model's answers, with more to come
    wire.from_triton(frame(DATA, 0, 1, _answer("a", final=True)))
    assert admission.models == {"tiny": 1}
    error = pb.ModelStreamInferResponse(error_message="failed", infer_response=pb.ModelInferResponse(id="c"))
    wire.from_triton(frame(DATA, 0, 1, _message(error.SerializeToString())))
    assert admission.models == {} and admission.bytes == 0  # an error answer names no model: its id does
    assert [r.infer_response.id for r in _streamed_to_client(wire)] == ["b", "a", "a", "a", "c"]


def test_a_client_that_goes_gives_back_what_its_stream_held():
    staging = FakeStaging(min_bytes=1024)
    wire, _ = _opened(staging=staging)
    wire.from_client(frame(DATA, 0, 1, _request("big", np.ones(4096, np.float32)) + _request("small")))
    assert len(staging.taken) == 1  # the large one went through shared memory
    wire.from_client(frame(DATA, 0, 1, _request("half")[:20]))  # and a message in progress
    assert wire.rules.admission.models == {"tiny": 2} and wire.core.inflight == 1
    wire.apply(wire.core.closed("client"))
    assert wire.rules.admission.models == {} and wire.rules.admission.bytes == 0
    assert staging.abandoned == staging.taken  # sent, not answered: Triton may still read the region


def test_a_reset_ends_the_call_and_gives_back_its_slots():
    wire, _ = _opened()
    wire.from_client(frame(DATA, 0, 1, _request("a")))
    wire.from_client(frame(RST_STREAM, 0, 1, U32.pack(CANCEL)))
    assert wire.rules.admission.models == {} and wire.core.inflight == 0


def test_a_failing_message_is_answered_on_the_stream_after_tritons_headers_and_the_stream_goes_on():
    wire, _ = _opened()
    wire.from_client(frame(DATA, 0, 1, _request("a")))
    _triton_headers(wire)
    bad = pb.ModelInferRequest(model_name="tiny", id="bad")
    bad.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    bad.raw_input_contents.append(bytes(12))
    wire.from_client(frame(DATA, 0, 1, _message(bad.SerializeToString()) + _request("b")))
    assert _sent_to_triton(wire) == _request("a") + _request("b")  # Triton never sees the bad one
    (error,) = _streamed_to_client(wire)
    assert error.infer_response.id == "bad" and "'x'" in error.error_message and "12" in error.error_message
    assert wire.rules.admission.models == {"tiny": 2}
    # its bytes reached the client, not from Triton: the client's window updates for them are not Triton's
    owed = _call(wire).window_owed
    assert owed == len(frames_of(wire.client.data)[-1][3])
    wire.from_client(frame(WINDOW_UPDATE, 0, 1, U32.pack(owed + 10)))
    assert frames_of(wire.triton.data[len(PREFACE) :])[-1] == (WINDOW_UPDATE, 0, 1, U32.pack(10))


def test_an_answer_of_ours_waits_for_the_end_of_tritons_message():
    wire, _ = _opened()
    wire.from_client(frame(DATA, 0, 1, _request("a")))
    _triton_headers(wire)
    answer = _answer("a")
    wire.from_triton(frame(DATA, 0, 1, answer[:10]))
    wire.from_client(frame(DATA, 0, 1, _message(b"\xff\xfe garbage")))
    assert _call(wire).answers is Answers.IN_MESSAGE and len(_streamed_to_client(wire)) == 0
    wire.from_triton(frame(DATA, 0, 1, answer[10:]))
    got = _streamed_to_client(wire)
    assert [r.infer_response.id for r in got] == ["a", ""] and "not a valid" in got[1].error_message


def test_before_tritons_headers_a_probe_makes_triton_answer_and_its_answer_is_dropped():
    wire, _ = _opened()
    garbage = _message(b"\xff\xfe garbage" + bytes(200))
    wire.from_client(frame(DATA, 0, 1, garbage))
    sent = MessageReader().feed(_sent_to_triton(wire))
    assert len(sent) == 1
    probe = pb.ModelInferRequest.FromString(sent[0].body().join())
    assert probe.model_name == "/"  # no repository holds such a model: Triton answers it at once
    # the client's window comes back for its message, less the probe's bytes (Triton gives those back itself)
    window = wire.core.window
    owed = len(garbage) - sent[0].length
    assert window.streams[1] == owed and window.credit - window.debt == owed
    assert _streamed_to_client(wire) == []  # nothing of ours may go before Triton's headers
    _triton_headers(wire)
    triton_error = pb.ModelStreamInferResponse(
        error_message="unknown model", infer_response=pb.ModelInferResponse(id=probe.id)
    )
    dropped = _message(triton_error.SerializeToString())
    wire.from_triton(frame(DATA, 0, 1, dropped))
    (ours,) = _streamed_to_client(wire)
    assert "not a valid ModelInferRequest" in ours.error_message  # Triton's answer to the probe went nowhere
    # Triton's window for the dropped answer is given back to it, on the connection and the stream
    updates = [(sid, p) for k, _, sid, p in frames_of(wire.triton.data[len(PREFACE) :]) if k == WINDOW_UPDATE]
    assert updates[-2:] == [(0, U32.pack(len(dropped))), (1, U32.pack(len(dropped)))]


def test_a_message_over_the_cap_ends_the_stream_at_its_first_bytes():
    wire, _ = _opened(max_request_bytes=1000)
    wire.from_client(frame(DATA, 0, 1, _request("a")))
    _triton_headers(wire)
    wire.from_client(frame(DATA, 0, 1, b"\0" + U32.pack(5000) + bytes(100)))
    kinds = [(k, f & END_STREAM, sid) for k, f, sid, _ in frames_of(wire.client.data)]
    assert kinds[-2:] == [(HEADERS, END_STREAM, 1), (RST_STREAM, 0, 1)]
    trailers = dict(hpack.Decoder().decode(frames_of(wire.client.data)[-2][3]))
    assert trailers["grpc-status"] == "8" and ":status" not in trailers  # trailers after Triton's headers
    assert wire.rules.admission.models == {} and wire.rules.admission.bytes == 0


def test_the_per_model_limit_answers_on_the_stream():
    wire, _ = _opened(admission=Admission(max_inflight_per_model=1, max_inflight_bytes=1 << 20))
    wire.from_client(frame(DATA, 0, 1, _request("a")))
    _triton_headers(wire)
    wire.from_client(frame(DATA, 0, 1, _request("b")))
    (denied,) = _streamed_to_client(wire)
    assert denied.infer_response.id == "b" and denied.error_message.startswith("kLiteServiceDeny")
    wire.from_triton(frame(DATA, 0, 1, _answer("a")))
    wire.from_client(frame(DATA, 0, 1, _request("c")))  # the slot came back with a's answer
    assert _sent_to_triton(wire) == _request("a") + _request("c")


def _empty_batch(rid: str) -> bytes:
    req = pb.ModelInferRequest(model_name="tiny", id=rid)
    req.inputs.add(name="x", datatype="FP32", shape=[0, 0])
    req.raw_input_contents.append(b"")
    return _message(req.SerializeToString())


@pytest.mark.parametrize(("known", "refused"), [(None, True), (8, True), (0, False)])
def test_a_batch_of_zero_on_a_stream_goes_on_only_to_a_model_known_not_to_batch(known, refused):
    async def read(model: str) -> bytes:
        return b'{"max_batch_size": %d}' % known

    batching = ModelBatching(read)
    if known is not None:  # a reading made for an earlier unary call; a stream itself does not wait for one
        assert asyncio.run(batching.max_batch_size("tiny")) == known
    wire, _ = _opened(batching=batching)
    _triton_headers(wire)
    wire.from_client(frame(DATA, 0, 1, _empty_batch("z")))
    wire.from_client(frame(DATA, 0, 1, _request("a")))
    answers = _streamed_to_client(wire)
    if refused:
        (denied,) = answers
        assert denied.infer_response.id == "z" and "batch-size must be >= 1 for 'tiny'" in denied.error_message
        assert _sent_to_triton(wire) == _request("a")  # the stream went on
    else:
        assert answers == [] and _sent_to_triton(wire) == _empty_batch("z") + _request("a")


@pytest.mark.parametrize("final", [True, False, None])
def test_read_answer(final):
    message = MessageReader().feed(_answer("x", final=final))[0]
    assert read_answer(message) == ("x", "tiny", final is not False)


def test_what_a_stream_counts_comes_back_to_zero_once_answered_and_ended():
    wire, _ = _opened()
    admission = wire.rules.admission
    wire.from_client(frame(DATA, 0, 1, _request("a") + _request("b")))
    _triton_headers(wire)
    wire.from_triton(frame(DATA, 0, 1, _answer("a") + _answer("b")))
    wire.from_client(frame(DATA, 0, 1, _request("c")[:9]))  # a message in progress holds its bytes
    assert admission.bytes == 9 and wire.core.account.bytes == 9
    wire.from_client(frame(RST_STREAM, 0, 1, U32.pack(CANCEL)))
    assert admission.bytes == 0 and wire.core.account.bytes == 0 and admission.models == {}


def test_a_frame_over_the_byte_budget_has_its_message_answered_with_service_deny():
    admission = Admission(max_inflight_per_model=10, max_inflight_bytes=400)
    other, _ = _opened(admission=admission)
    other.from_client(frame(DATA, 0, 1, _request("held", np.ones(80, np.float32))[:350]))  # in progress elsewhere
    wire, _ = _opened(admission=admission)
    wire.from_client(frame(DATA, 0, 1, _request("a")))
    _triton_headers(wire)
    wire.from_client(frame(DATA, 0, 1, _request("b", np.ones(20, np.float32))))  # 80 bytes would pass 400
    (denied,) = _streamed_to_client(wire)
    assert denied.infer_response.id == "b" and denied.error_message.startswith("kLiteServiceDeny")
    assert _sent_to_triton(wire) == _request("a")  # the stream goes on: a's answer is still to come
    assert admission.models == {"tiny": 1}


def test_a_message_after_the_clients_end_of_stream_ends_the_call():
    wire, _ = _opened()
    wire.from_client(frame(DATA, END_STREAM, 1, _request("a")))
    assert _call(wire).phase is Phase.HALF_CLOSED
    wire.from_client(frame(DATA, 0, 1, _request("b")))
    assert wire.core.inflight == 0 and wire.rules.admission.models == {}
    assert frames_of(wire.client.data)[-1][0] == RST_STREAM


def test_a_client_that_sends_failing_requests_and_reads_nothing_has_its_call_ended():
    wire, _ = _opened()
    wire.from_client(frame(DATA, 0, 1, _request("a")))
    _triton_headers(wire)
    garbage = _message(b"\xff\xfe" + bytes(40))
    for _ in range(20_000):  # each answered on the stream; the client never gives window back for them
        wire.from_client(frame(DATA, 0, 1, garbage))
        if 1 not in wire.core.calls.streamed.calls:
            break
    assert 1 not in wire.core.calls.streamed.calls
    trailers = dict(hpack.Decoder().decode(frames_of(wire.client.data)[-2][3]))
    assert trailers["grpc-status"] == "8" and "not read" in trailers["grpc-message"]
    assert len(wire.client.data) < 2 << 20 and wire.rules.admission.models == {}


def test_a_call_that_ends_while_a_frame_of_either_side_is_half_read():
    wire, _ = _opened()
    wire.from_client(frame(DATA, 0, 1, _request("a")))
    _triton_headers(wire)
    answer = frame(DATA, 0, 1, _answer("a"))
    wire.from_triton(answer[:20])
    wire.from_client(frame(RST_STREAM, 0, 1, U32.pack(CANCEL)))  # the client goes while Triton's frame comes
    wire.from_triton(answer[20:])
    assert wire.core.inflight == 0 and wire.rules.admission.models == {}
    wire.from_client(frame(HEADERS, END_HEADERS, 3, hpack.Encoder().encode([(":path", STREAM)])))
    data = frame(DATA, 0, 3, _request("b"))
    wire.from_client(data[:30])
    wire.from_triton(frame(RST_STREAM, 0, 3, U32.pack(CANCEL)))  # Triton ends it while the client's frame comes
    wire.from_client(data[30:])
    assert wire.core.inflight == 0 and wire.rules.admission.bytes == 0
    assert wire.core.window.credit == len(data) - 9  # its window is given back: Triton never saw it
