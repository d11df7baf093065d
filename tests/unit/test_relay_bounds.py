"""What one gRPC connection may hold through the relay's core: its streams, its unread answers, its calls' time.

Driven with constructed frames (`relay_wire.Wire`): the relay's own SETTINGS_MAX_CONCURRENT_STREAMS and the
streams past it refused; nothing sent on a stream after its end; answers the client does not read end at the
upstream timeout with their slots given back; a connection's unread answers of ours bounded; the connection's
life as one state moved through its table.
"""

from __future__ import annotations

import urllib.parse

import hpack
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from mslite_contract.gateway_options import GatewayLimits, GatewayOptions
from mslite_gateway.admission import Admission
from mslite_gateway.grpc.frames import (
    CANCEL,
    DATA,
    DEADLINE_EXCEEDED,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    NO_ERROR,
    PREFACE,
    REFUSED_STREAM,
    RESOURCE_EXHAUSTED,
    RST_STREAM,
    SETTINGS,
    SETTINGS_HEADER_TABLE_SIZE,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    U32,
    UNAVAILABLE,
    frame,
)
from mslite_gateway.grpc.link_state import (
    ALONE,
    CALMED,
    CLOSING,
    CONNECTING,
    LINK_MOVES,
    RELAYING,
    SHUT,
    LinkEvent,
)
from mslite_gateway.state_machine import IllegalTransition, transition
from tests.support.relay_wire import Wire, frames_of

INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
LIVE = "/inference.GRPCInferenceService/ServerLive"
SETTINGS_INITIAL_WINDOW_SIZE = 0x4


def _settings(payload: bytes) -> dict[int, int]:
    return {
        int.from_bytes(payload[i : i + 2], "big"): U32.unpack_from(payload, i + 2)[0] for i in range(0, len(payload), 6)
    }


def _opened(client_settings: bytes = b"", **kwargs) -> tuple[Wire, hpack.Encoder]:
    wire = Wire(**kwargs)
    wire.from_client(PREFACE + frame(SETTINGS, 0, 0, client_settings))
    return wire, hpack.Encoder()


def _headers(encoder: hpack.Encoder, sid: int, path: str) -> bytes:
    fields = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "x")]
    return frame(HEADERS, END_HEADERS, sid, encoder.encode([*fields, ("content-type", "application/grpc")]))


def _message(body: bytes) -> bytes:
    return b"\0" + U32.pack(len(body)) + body


def _request(rid: str = "", model: str = "tiny") -> bytes:
    req = pb.ModelInferRequest(model_name=model, id=rid)
    req.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    req.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
    return _message(req.SerializeToString())


def _to_client(wire: Wire, sid: int) -> list[tuple[int, int, int, bytes]]:
    return [f for f in frames_of(wire.client.data) if f[2] == sid]


def _to_triton(wire: Wire, sid: int) -> list[tuple[int, int, int, bytes]]:
    return [f for f in frames_of(wire.triton.data[len(PREFACE) :]) if f[2] == sid]


def _status(payload: bytes) -> dict[str, str]:
    return {k: urllib.parse.unquote(v) for k, v in hpack.Decoder().decode(payload)}


# -- streams per connection ----------------------------------------------------------------------------------
def test_tritons_settings_reach_the_client_with_the_relays_stream_bound():
    wire, _ = _opened(max_streams=5)
    wire.from_triton(frame(SETTINGS, 0, 0))  # an empty SETTINGS frame of Triton's
    settings = [f for f in frames_of(wire.client.data) if f[0] == SETTINGS and not f[1]]
    assert _settings(settings[-1][3])[SETTINGS_MAX_CONCURRENT_STREAMS] == 5
    # Triton's own bound, where lower, stays
    wire.from_triton(frame(SETTINGS, 0, 0, SETTINGS_MAX_CONCURRENT_STREAMS.to_bytes(2, "big") + U32.pack(3)))
    settings = [f for f in frames_of(wire.client.data) if f[0] == SETTINGS and not f[1]]
    assert _settings(settings[-1][3])[SETTINGS_MAX_CONCURRENT_STREAMS] == 3


def test_the_clients_settings_ask_triton_for_no_header_table():
    window = SETTINGS_INITIAL_WINDOW_SIZE.to_bytes(2, "big") + U32.pack(0)
    table = SETTINGS_HEADER_TABLE_SIZE.to_bytes(2, "big") + U32.pack(65536)
    wire, _ = _opened(window + table)
    sent = [f for f in frames_of(wire.triton.data[len(PREFACE) :]) if f[0] == SETTINGS]
    assert _settings(sent[0][3]) == {SETTINGS_INITIAL_WINDOW_SIZE: 0, SETTINGS_HEADER_TABLE_SIZE: 0}


def test_streams_past_the_bound_are_refused_and_reset_at_triton_after_their_header_block():
    wire, encoder = _opened(max_streams=2)
    for sid in (1, 3, 5):
        wire.from_client(_headers(encoder, sid, LIVE))
    assert _to_client(wire, 1) == _to_client(wire, 3) == []
    assert _to_client(wire, 5) == [(RST_STREAM, 0, 5, U32.pack(REFUSED_STREAM))]  # clients retry it
    # Triton got every header block (its HPACK context is the client's), and a reset after the refused one
    assert [(k, f) for k, f, _, _ in _to_triton(wire, 5)] == [(HEADERS, END_HEADERS), (RST_STREAM, 0)]
    assert _to_triton(wire, 5)[1][3] == U32.pack(CANCEL)
    wire.from_client(frame(DATA, END_STREAM, 5, _message(b"")))  # a client's DATA on it goes nowhere
    assert [f[0] for f in _to_triton(wire, 5)] == [HEADERS, RST_STREAM]
    # a stream that ends makes room for a new one
    trailers = hpack.Encoder().encode([(":status", "200"), ("grpc-status", "0")])
    wire.from_triton(frame(HEADERS, END_HEADERS | END_STREAM, 1, trailers))
    wire.from_client(_headers(encoder, 7, LIVE))
    assert _to_client(wire, 7) == [] and [f[0] for f in _to_triton(wire, 7)] == [HEADERS]
    assert wire.rules.refused == 1


# -- one end per call ----------------------------------------------------------------------------------------
def test_a_refused_call_gets_one_end_and_nothing_after_it_even_when_triton_answers_it():
    """A unary call refused for the per-model cap, to a client whose window is 0: Triton's later trailers go nowhere."""
    admission = Admission(max_inflight_per_model=1, max_inflight_bytes=256 << 20)
    admission.enter("tiny")  # the model's one slot is taken
    window = SETTINGS_INITIAL_WINDOW_SIZE.to_bytes(2, "big") + U32.pack(0)
    wire, encoder = _opened(window, admission=admission)
    wire.from_client(_headers(encoder, 1, INFER) + frame(DATA, END_STREAM, 1, _request()))
    ends = [f for f in _to_client(wire, 1) if f[0] == HEADERS]
    assert len(ends) == 1 and ends[0][1] & END_STREAM
    assert _status(ends[0][3])["grpc-status"] == str(UNAVAILABLE)
    assert _to_client(wire, 1)[-1] == (RST_STREAM, 0, 1, U32.pack(NO_ERROR))
    before = len(wire.client.data)
    # Triton ends the call too, as often as it likes (its header blocks keep no table: they may be dropped)
    block = hpack.Encoder().encode([(":status", "200"), ("grpc-status", "3"), ("grpc-message", "Unable to parse")])
    for _ in range(6):
        wire.from_triton(frame(HEADERS, END_HEADERS | END_STREAM, 1, block))
        wire.from_triton(frame(DATA, 0, 1, b"\0" * 10))
    assert bytes(wire.client.data[before:]) == b""
    # the window Triton's dropped DATA took is given back to it
    given = [U32.unpack(p)[0] for k, _, sid, p in frames_of(wire.triton.data[len(PREFACE) :]) if k == 8 and sid == 0]
    assert sum(given) >= 60
    assert admission.models == {"tiny": 1}  # the refused call took no slot


# -- answers the client does not read --------------------------------------------------------------------------
def test_a_unary_answer_that_waits_for_the_clients_window_ends_at_the_upstream_timeout():
    admission = Admission(max_inflight_per_model=10, max_inflight_bytes=256 << 20)
    wire, encoder = _opened(admission=admission, upstream_timeout_s=30.0)
    wire.from_client(_headers(encoder, 1, INFER) + frame(DATA, END_STREAM, 1, _request()))
    assert admission.models == {"tiny": 1}
    head = hpack.Encoder().encode([(":status", "200"), ("content-type", "application/grpc")])
    wire.from_triton(frame(HEADERS, END_HEADERS, 1, head))  # Triton's answer begins; its DATA waits for a window
    wire.tick(wire.now + 29)
    assert admission.models == {"tiny": 1}
    wire.tick(wire.now + 2)
    ends = [f for f in _to_client(wire, 1) if f[0] == HEADERS and f[1] & END_STREAM]
    assert len(ends) == 1
    status = _status(ends[0][3])  # trailers after Triton's headers: no second :status
    assert status["grpc-status"] == str(DEADLINE_EXCEEDED) and ":status" not in status
    assert "--upstream-timeout-s" in status["grpc-message"] and "30 s" in status["grpc-message"]
    assert admission.models == {} and wire.core.inflight == 0  # its slot came back
    assert _to_triton(wire, 1)[-1] == (RST_STREAM, 0, 1, U32.pack(CANCEL))


def test_a_stream_whose_answer_is_not_read_ends_at_the_upstream_timeout_with_its_slots():
    admission = Admission(max_inflight_per_model=10, max_inflight_bytes=256 << 20)
    wire, encoder = _opened(admission=admission, upstream_timeout_s=30.0)
    wire.from_client(_headers(encoder, 1, STREAM) + frame(DATA, 0, 1, _request("a") + _request("b")))
    assert admission.models == {"tiny": 2}
    wire.tick(wire.now + 31)
    ends = [f for f in _to_client(wire, 1) if f[0] == HEADERS and f[1] & END_STREAM]
    assert len(ends) == 1 and _status(ends[0][3])["grpc-status"] == str(DEADLINE_EXCEEDED)
    assert admission.models == {} and admission.bytes == 0 and wire.core.inflight == 0


def test_a_connections_unread_error_answers_are_bounded_over_all_its_streams():
    wire, encoder = _opened(max_unread_bytes=4000)
    for sid in (1, 3, 5):
        wire.from_client(_headers(encoder, sid, STREAM))
        head = hpack.Encoder().encode([(":status", "200"), ("content-type", "application/grpc")])
        wire.from_triton(frame(HEADERS, END_HEADERS, sid, head))
    req = pb.ModelInferRequest(model_name="tiny", id="bad")  # 12 bytes for 16: answered with an error by the gateway
    req.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    req.raw_input_contents.append(bytes(12))
    bad = _message(req.SerializeToString())
    for _ in range(20):  # 60 error answers of about 90 bytes, none read
        for sid in (1, 3, 5):
            wire.from_client(frame(DATA, 0, sid, bad))
    ended = {sid for k, f, sid, _ in frames_of(wire.client.data) if k == HEADERS and f & END_STREAM}
    assert ended  # past 4,000 bytes unread on the connection, the stream that adds more ends
    reasons = [_status(p) for k, f, _, p in frames_of(wire.client.data) if k == HEADERS and f & END_STREAM]
    assert all(r["grpc-status"] == str(RESOURCE_EXHAUSTED) for r in reasons)
    assert any("--max-unread-bytes-per-connection" in r["grpc-message"] for r in reasons)
    assert wire.core.calls.streamed.unread() <= 4000


# -- the connection's state ------------------------------------------------------------------------------------
def test_the_connections_life_moves_only_through_its_table():
    assert transition(LINK_MOVES, CONNECTING, LinkEvent.OPENED) is RELAYING
    assert transition(LINK_MOVES, CONNECTING, LinkEvent.UNREACHABLE) is ALONE
    assert transition(LINK_MOVES, RELAYING, LinkEvent.CALM) is CALMED
    assert transition(LINK_MOVES, CLOSING, LinkEvent.WRITTEN) is SHUT
    for state in (CONNECTING, RELAYING, ALONE, CALMED, CLOSING):
        assert transition(LINK_MOVES, state, LinkEvent.CLOSE) is CLOSING
    with pytest.raises(IllegalTransition, match="CALM is not a move from ALONE"):
        transition(LINK_MOVES, ALONE, LinkEvent.CALM)
    with pytest.raises(IllegalTransition):
        transition(LINK_MOVES, SHUT, LinkEvent.OPENED)


def test_an_idle_connection_goes_away_with_its_last_stream_and_is_shut():
    wire, encoder = _opened()
    wire.from_client(_headers(encoder, 1, LIVE))
    wire.apply(wire.core.goaway(wire.now))
    goaway = [f for f in frames_of(wire.client.data) if f[0] == GOAWAY]
    assert goaway == [(GOAWAY, 0, 0, U32.pack(1) + U32.pack(NO_ERROR))]
    assert wire.client.closed and wire.core.state is SHUT


def test_an_unreachable_triton_still_announces_the_stream_bound():
    wire = Wire(reachable=False, max_streams=7)
    settings = [f for f in frames_of(wire.client.data) if f[0] == SETTINGS]
    assert wire.core.state is ALONE and _settings(settings[0][3]) == {SETTINGS_MAX_CONCURRENT_STREAMS: 7}


def test_an_unchecked_call_left_open_ends_at_the_stall_timeout_and_one_that_ended_its_request_does_not():
    wire, encoder = _opened()
    stall_s = wire.rules.admission.stall_s
    wire.from_client(_headers(encoder, 1, LIVE))  # headers only: left open
    wire.from_client(_headers(encoder, 3, LIVE) + frame(DATA, END_STREAM, 3, _message(b"")))  # a whole request
    wire.tick(wire.now + stall_s + 1)
    ends = [f for f in _to_client(wire, 1) if f[0] == HEADERS and f[1] & END_STREAM]
    assert len(ends) == 1 and _status(ends[0][3])["grpc-status"] == str(DEADLINE_EXCEEDED)
    assert _to_triton(wire, 1)[-1] == (RST_STREAM, 0, 1, U32.pack(CANCEL))  # Triton lets go of it
    assert _to_client(wire, 3) == [] and [f[0] for f in _to_triton(wire, 3)] == [HEADERS, DATA]
    assert 1 not in wire.core.open and 3 in wire.core.open


def test_the_connection_bounds_are_serve_options_down_to_the_gateway_process():
    from mslite_server.cli import build_parser

    argv = ["serve", "--max-connections", "9", "--idle-timeout-s", "3.5", "--max-streams-per-connection", "7"]
    args = build_parser().parse_args([*argv, "--max-unread-mib-per-connection", "2"])
    assert (args.max_connections, args.idle_timeout_s, args.max_streams_per_connection) == (9, 3.5, 7)
    assert args.max_unread_mib_per_connection == 2
    limits = GatewayLimits(
        max_connections=9, idle_timeout_s=3.5, max_streams_per_connection=7, max_unread_bytes_per_connection=2 << 20
    )
    options = GatewayOptions(
        http_port=1, grpc_port=2, upstream_http="127.0.0.1:3", upstream_grpc="127.0.0.1:4", limits=limits
    )
    assert GatewayOptions.from_argv(options.to_argv()) == options
    assert {"--max-connections=9", "--idle-timeout-s=3.5", "--max-streams-per-connection=7"} <= set(options.to_argv())
    with pytest.raises(ValueError, match="max_streams_per_connection"):
        GatewayLimits(max_streams_per_connection=0)


def test_a_staged_call_refused_after_its_window_was_owed_gets_no_window_update_on_its_ended_stream():
    from tests.support.relay_wire import FakeStaging

    admission = Admission(max_inflight_per_model=1, max_inflight_bytes=256 << 20)
    admission.enter("tiny")  # refused at admission, after its bytes stayed in the relay (staged)
    wire, encoder = _opened(admission=admission, staging=FakeStaging(min_bytes=1024))
    req = pb.ModelInferRequest(model_name="tiny")
    req.inputs.add(name="x", datatype="FP32", shape=[1024, 4])
    req.raw_input_contents.append(bytes(1024 * 16))
    message = _message(req.SerializeToString())
    wire.from_client(_headers(encoder, 1, INFER))
    for a in range(0, len(message), 16384):
        wire.from_client(frame(DATA, END_STREAM if a + 16384 >= len(message) else 0, 1, message[a : a + 16384]))
    wire.core.calls.give_credit()
    wire.apply(wire.core.tick(wire.now))
    frames = _to_client(wire, 1)
    end = next(i for i, f in enumerate(frames) if f[0] == HEADERS and f[1] & END_STREAM)
    assert _status(frames[end][3])["grpc-status"] == str(UNAVAILABLE)
    assert [f[0] for f in frames[end + 1 :]] == [RST_STREAM]  # and nothing after it
    given = sum(U32.unpack(p)[0] for k, _, sid, p in frames_of(wire.client.data) if k == 8 and sid == 0)
    assert given >= len(message)  # the window its bytes took comes back on the connection
