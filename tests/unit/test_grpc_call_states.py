"""The checked gRPC calls' states (`grpc.call_states`): the tables refuse what they lack, and each path through a
unary call's table is one the relay takes, driven with constructed frames (`relay_wire.Wire`)."""

from __future__ import annotations

import gzip
import itertools

import hpack
import pytest
from tritonclient.grpc import service_pb2 as pb

from mslite_gateway.grpc.call_states import (
    ANSWERING,
    ANSWERS,
    CHECKING,
    ENDED,
    PHASES,
    RECEIVING,
    SENT,
    UNARY,
    Answers,
    AnswersEvent,
    CallState,
    Phase,
    PhaseEvent,
    UnaryEvent,
)
from mslite_gateway.grpc.frames import DATA, END_HEADERS, END_STREAM, HEADERS, PREFACE, SETTINGS, U32, frame
from mslite_gateway.grpc.stream_state import StreamCall
from mslite_gateway.grpc.unary_state import UnaryCall
from mslite_gateway.model_batching import ModelBatching
from mslite_gateway.state_machine import IllegalTransition, transition
from tests.support.relay_wire import Wire

SERVICE = "/inference.GRPCInferenceService"
TABLES = [(UNARY, CallState), (PHASES, Phase), (ANSWERS, Answers)]


def _events(table: dict) -> set:
    return {event for _, event in table}


# -- the tables --
@pytest.mark.parametrize(("table", "states"), TABLES, ids=["unary", "phases", "answers"])
def test_a_move_the_table_lacks_raises_and_every_move_it_holds_is_taken(table, states):
    for state, event in itertools.product(states, _events(table)):
        if (state, event) in table:
            assert transition(table, state, event) is table[(state, event)]
        else:
            with pytest.raises(IllegalTransition, match=f"{event.name} is not a move from {state.name}"):
                transition(table, state, event)


def test_a_unary_call_reaches_every_state_from_receiving_and_ends_from_each_but_ended():
    moves: dict[CallState, set[CallState]] = {}
    for (state, _), after in UNARY.items():
        moves.setdefault(state, set()).add(after)
    reached, frontier = {RECEIVING}, [RECEIVING]
    while frontier:
        for after in moves.get(frontier.pop(), ()):
            if after not in reached:
                reached.add(after)
                frontier.append(after)
    assert reached == set(CallState)
    assert ENDED not in moves  # the end: nothing moves a call on from there
    assert all(UNARY[(state, UnaryEvent.END)] is ENDED for state in CallState if state is not ENDED)


def test_an_illegal_move_leaves_the_call_where_it_was():
    call = UnaryCall(lambda data, keyed: None, b"")
    call.move(UnaryEvent.ADMIT, 5.0)
    assert call.state is SENT and call.moved == 5.0
    with pytest.raises(IllegalTransition):
        call.move(UnaryEvent.CHECK_OFF_LOOP)  # a call sent on is never checked again
    assert call.state is SENT and call.moved == 5.0
    call.move(UnaryEvent.END)
    with pytest.raises(IllegalTransition):
        call.move(UnaryEvent.END)  # nor ended twice
    stream = StreamCall(b"", True, 0.0)
    stream.move(PhaseEvent.HALF_CLOSE)
    with pytest.raises(IllegalTransition):
        stream.move(PhaseEvent.HALF_CLOSE)
    with pytest.raises(IllegalTransition):
        stream.answers_move(AnswersEvent.BEGIN)  # no message of Triton's before its response headers
    assert stream.phase is Phase.HALF_CLOSED and stream.answers is Answers.AWAITING_HEADERS


# -- the paths a unary call takes in the relay --
def _opened(**rules) -> Wire:
    wire = Wire(**rules)
    wire.from_client(PREFACE + frame(SETTINGS, 0, 0))
    return wire


def _infer(shape: list[int], raw: bytes = b"") -> bytes:
    req = pb.ModelInferRequest(model_name="tiny")
    inp = req.inputs.add()
    inp.name, inp.datatype = "x", "FP32"
    inp.shape.extend(shape)
    req.raw_input_contents.append(raw)
    return req.SerializeToString()


def _headers(sid: int, method: str, *, gzipped: bool = False) -> bytes:
    fields = [(":method", "POST"), (":scheme", "http"), (":path", f"{SERVICE}/{method}"), (":authority", "x")]
    fields += [("content-type", "application/grpc")] + ([("grpc-encoding", "gzip")] if gzipped else [])
    return frame(HEADERS, END_HEADERS, sid, hpack.Encoder().encode(fields))


def _message(body: bytes, *, gzipped: bool = False) -> bytes:
    body = gzip.compress(body) if gzipped else body
    return (b"\1" if gzipped else b"\0") + U32.pack(len(body)) + body


def _begun(wire: Wire, method: str = "ModelInfer", *, gzipped: bool = False) -> UnaryCall:
    wire.from_client(_headers(1, method, gzipped=gzipped))
    call = wire.core.calls.unary.calls[1]
    assert call.state is RECEIVING
    return call


def _answered(wire: Wire, call: UnaryCall) -> None:
    """Triton's response headers, then its trailers: the call ends, and is no longer the relay's."""
    wire.from_triton(frame(HEADERS, END_HEADERS, 1, hpack.Encoder().encode([(":status", "200")])))
    assert call.state is ANSWERING
    wire.from_triton(frame(HEADERS, END_HEADERS | END_STREAM, 1, hpack.Encoder().encode([("grpc-status", "0")])))
    assert call.state is ENDED and 1 not in wire.core.calls.unary.calls and wire.core.inflight == 0


def test_receiving_sent_answering_ended():
    wire = _opened()
    call = _begun(wire)
    wire.from_client(frame(DATA, END_STREAM, 1, _message(_infer([1, 4], bytes(16)))))
    assert call.state is SENT
    _answered(wire, call)


def test_receiving_checking_sent_for_a_message_inflated_off_the_loop():
    wire = _opened()
    call = _begun(wire, gzipped=True)
    wire.from_client(frame(DATA, END_STREAM, 1, _message(_infer([1, 4], bytes(16)), gzipped=True)))
    assert call.state is CHECKING and len(wire.later) == 1
    wire.run_later()
    assert call.state is SENT
    _answered(wire, call)


def test_checking_twice_when_an_inflated_empty_batch_asks_for_its_models_batching():
    async def unreadable(model: str) -> None:
        return None

    wire = _opened(batching=ModelBatching(unreadable))
    call = _begun(wire, gzipped=True)
    wire.from_client(frame(DATA, END_STREAM, 1, _message(_infer([0, 4]), gzipped=True)))
    wire.run_later()  # inflated and checked: a batch of 0, so the model's max_batch_size is asked
    assert call.state is CHECKING and len(wire.later) == 1
    wire.run_later(None)  # unreadable: Triton answers for itself
    assert call.state is SENT


def test_receiving_answering_for_a_rewritten_call_which_is_not_timed():
    wire = _opened(upstream_timeout_s=30.0)
    call = _begun(wire, "RepositoryModelLoad")
    wire.from_client(
        frame(DATA, END_STREAM, 1, _message(pb.RepositoryModelLoadRequest(model_name="m").SerializeToString()))
    )
    assert call.state is ANSWERING
    wire.tick(wire.now + 60.0)  # a model load takes as long as it takes
    assert call.state is ANSWERING and wire.rules.refused == 0


@pytest.mark.parametrize("when", ["receiving", "sent"])
def test_a_refusal_or_the_upstream_timeout_ends_a_call_from_where_it_is(when):
    wire = _opened(max_request_bytes=1000, upstream_timeout_s=30.0)
    call = _begun(wire)
    if when == "receiving":
        wire.from_client(frame(DATA, 0, 1, b"\0" + U32.pack(5000)))  # over the cap from its first bytes
    else:
        wire.from_client(frame(DATA, END_STREAM, 1, _message(_infer([1, 4], bytes(16)))))
        assert call.state is SENT
        wire.tick(wire.now + 31.0)
    assert call.state is ENDED and wire.rules.refused == 1 and wire.core.inflight == 0
