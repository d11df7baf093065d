"""The gRPC relay's socket-free core (`grpc.core.RelayCore`): recorded traffic replayed, and the cases around it.

The golden files are what the relay wrote to each side when it was still two asyncio protocols tied together
(before the core was split out), fed the same recorded reads: the core must write the same bytes. Changes
since, on purpose: perf_analyzer's ServerMetadata answer lists only the extensions served (30 bytes shorter),
and Triton gets that window back in a WINDOW_UPDATE of ours; Triton's SETTINGS carry the relay's bound on open
streams (SETTINGS_MAX_CONCURRENT_STREAMS) and the client's tell Triton to keep no HPACK table for it.
"""

from __future__ import annotations

import urllib.parse

import hpack
import pytest
from tritonclient.grpc import service_pb2 as pb

from mslite_gateway.admission import Admission
from mslite_gateway.grpc.core import MAX_RESETS_PER_WINDOW
from mslite_gateway.grpc.frames import (
    CANCEL,
    DATA,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    GOAWAY,
    HEADERS,
    PING,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    SETTINGS_HEADER_TABLE_SIZE,
    U32,
    WINDOW_UPDATE,
    capped_settings,
    frame,
)
from mslite_gateway.grpc.window_credit import CREDIT_BATCH_BYTES
from mslite_gateway.server_metadata import UNSERVED_EXTENSIONS
from tests.support import relay_traffic
from tests.support.relay_wire import Wire, frames_of

INFER = "/inference.GRPCInferenceService/ModelInfer"
# One connection each, recorded by benchmarks/relay_replay.py on the tiny model (its first 250 reads): perf_analyzer
# at c=8, and tritonclient with 8 calls in flight and now and then a call Triton refuses (`--driver tritonclient`).
RECORDINGS = [relay_traffic.HERE / "perf_analyzer_tiny.reads", relay_traffic.HERE / "tritonclient_tiny.reads"]


def _trailers(payload: bytes) -> dict[str, str]:
    return {k: urllib.parse.unquote(v) for k, v in hpack.Decoder().decode(payload)}


def _headers(encoder: hpack.Encoder, sid: int, path: str, flags: int = END_HEADERS) -> bytes:
    fields = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "x")]
    fields += [("content-type", "application/grpc")]
    return frame(HEADERS, flags, sid, encoder.encode(fields))


def _settings(payload: bytes) -> dict[int, int]:
    return {
        int.from_bytes(payload[i : i + 2], "big"): U32.unpack_from(payload, i + 2)[0] for i in range(0, len(payload), 6)
    }


def _opened(**kwargs) -> Wire:
    wire = Wire(**kwargs)
    wire.from_client(PREFACE + frame(SETTINGS, 0, 0))
    return wire


def _infer_message(size: int) -> bytes:
    """A gRPC message of `size` bytes (not a valid ModelInferRequest past its length: it is never completed)."""
    return b"\0" + U32.pack(size) + bytes(size)


# -- recorded traffic --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("recorded", RECORDINGS, ids=lambda p: p.stem)
@pytest.mark.parametrize("split", [None, 7, 4096])
def test_recorded_traffic_is_relayed_byte_for_byte_as_before(recorded, split):
    reads = relay_traffic.load(recorded)
    wire = Wire()
    for side, data in reads:
        pieces = [data] if split is None else [data[i : i + split] for i in range(0, len(data), split)]
        for piece in pieces:  # the same bytes in other reads: the writes must not depend on where reads end
            (wire.from_client if side == "client" else wire.from_triton)(piece)
    assert bytes(wire.client.data) == recorded.with_suffix(".to_client").read_bytes()
    assert bytes(wire.triton.data) == recorded.with_suffix(".to_triton").read_bytes()
    assert not wire.client.closed and not wire.triton.closed
    assert 0 < wire.core.inflight <= 8  # the recording stops with calls in flight (the client kept 8 at most)
    wire.apply(wire.core.closed("client"))
    assert wire.core.inflight == 0 and wire.rules.admission.bytes == 0  # what they held is given back


@pytest.mark.parametrize("recorded", RECORDINGS, ids=lambda p: p.stem)
def test_recorded_traffic_is_passed_to_triton_unchanged(recorded):
    reads = relay_traffic.load(recorded)
    sent = b"".join(d for side, d in reads if side == "client")
    relayed = frames_of(recorded.with_suffix(".to_triton").read_bytes()[len(PREFACE) :])
    # the client's SETTINGS reach Triton with a header table of 0 (and the rest as they were)
    settings = [f for f in frames_of(sent[len(PREFACE) :]) if f[0] == SETTINGS and not f[1]]
    assert [f for f in relayed if f[0] == SETTINGS and not f[1]] == [
        (SETTINGS, 0, 0, capped_settings(f[3], {SETTINGS_HEADER_TABLE_SIZE: 0})) for f in settings
    ]
    assert all(_settings(f[3])[SETTINGS_HEADER_TABLE_SIZE] == 0 for f in relayed if f[0] == SETTINGS and not f[1])
    client_frames = [f for f in frames_of(sent[len(PREFACE) :]) if f not in settings]
    relayed = [f for f in relayed if not (f[0] == SETTINGS and not f[1])]
    ours = [f for f in relayed if f not in client_frames]
    # nothing refused: Triton sees what was sent, and the window of a shortened metadata answer (a frame of ours)
    assert [f for f in relayed if f not in ours] == client_frames
    assert all(k == WINDOW_UPDATE and sid == 0 for k, _, sid, _ in ours) and len(ours) <= 1
    infers = [f for f in frames_of(sent[len(PREFACE) :]) if f[0] == DATA]
    assert len(infers) > 100


def test_a_server_metadata_answer_lists_only_served_extensions_and_its_window_goes_back():
    recorded = relay_traffic.HERE / "perf_analyzer_tiny.reads"  # perf_analyzer asks for it first
    reads = relay_traffic.load(recorded)
    wire = Wire()
    for side, data in reads:
        (wire.from_client if side == "client" else wire.from_triton)(data)
    from_triton = b"".join(d for side, d in reads if side == "server")
    sent = b"".join(d for side, d in reads if side == "client")
    answers = {}
    for name, data in (("triton", from_triton), ("client", bytes(wire.client.data))):
        (payload,) = [p for k, _, sid, p in frames_of(data) if k == DATA and p.find(b"system_shared_memory") > 0]
        answers[name] = (len(payload), pb.ServerMetadataResponse.FromString(payload[5:]))
    assert {"sequence", "cuda_shared_memory"} <= set(answers["triton"][1].extensions)
    served = [e for e in answers["triton"][1].extensions if e not in UNSERVED_EXTENSIONS]
    assert list(answers["client"][1].extensions) == served and answers["client"][1].version

    def window(data: bytes) -> int:
        return sum(int.from_bytes(p, "big") for k, _, sid, p in frames_of(data) if k == WINDOW_UPDATE and sid == 0)

    cut = answers["triton"][0] - answers["client"][0]
    assert cut > 0 and window(wire.triton.data[len(PREFACE) :]) - window(sent[len(PREFACE) :]) == cut


# -- flow control ------------------------------------------------------------------------------------------------
def test_the_window_of_refused_data_is_given_back_to_the_client():
    wire = _opened(max_request_bytes=1000)
    encoder = hpack.Encoder()
    message = _infer_message(4000)  # over the cap: refused at its first bytes
    wire.from_client(_headers(encoder, 1, INFER) + frame(DATA, 0, 1, message[:16000]))
    refusal = [f for f in frames_of(wire.client.data) if f[0] == HEADERS]
    assert refusal and _trailers(refusal[0][3])["grpc-status"] == "8"  # RESOURCE_EXHAUSTED
    # the rest of the message keeps coming (it was in flight): Triton never sees it, so we give its window back
    for _ in range(40):
        wire.from_client(frame(DATA, 0, 1, bytes(10000)))
    credited = sum(
        int.from_bytes(p, "big") for k, _, sid, p in frames_of(wire.client.data) if k == WINDOW_UPDATE and sid == 0
    )
    assert credited >= CREDIT_BATCH_BYTES
    assert credited == len(message[:16000]) + 40 * 10000 - wire.core.window.credit  # all of it, given back in batches
    assert not [f for f in frames_of(wire.triton.data[len(PREFACE) :]) if f[0] == DATA]


# -- refused streams, resets, trailers ---------------------------------------------------------------------------
def test_a_refused_stream_is_answered_here_and_reset_at_triton_and_its_late_frames_dropped():
    wire = _opened(max_request_bytes=1000)
    encoder = hpack.Encoder()
    wire.from_client(_headers(encoder, 1, INFER) + frame(DATA, END_STREAM, 1, _infer_message(2000)))
    to_client = frames_of(wire.client.data)
    assert [(k, sid) for k, _, sid, _ in to_client if k in (HEADERS, RST_STREAM)] == [(HEADERS, 1), (RST_STREAM, 1)]
    assert "over this server's limit of 1000 bytes" in _trailers(to_client[0][3])["grpc-message"]
    to_triton = frames_of(wire.triton.data[len(PREFACE) :])
    assert (RST_STREAM, 0, 1, U32.pack(CANCEL)) in to_triton  # Triton got the headers, never a whole message
    before = len(wire.client.data)
    wire.from_triton(frame(RST_STREAM, 0, 1, U32.pack(CANCEL)) + frame(WINDOW_UPDATE, 0, 1, U32.pack(5)))
    assert len(wire.client.data) == before  # Triton's frames for a stream we answered go nowhere
    assert wire.rules.refused == 1 and wire.core.inflight == 0


def test_our_answers_wait_for_a_frame_boundary_in_tritons_bytes():
    wire = _opened(max_request_bytes=1000)
    encoder = hpack.Encoder()
    big = frame(DATA, 0, 3, bytes(5000))
    wire.from_triton(big[:100])  # Triton is in the middle of a frame to the client
    wire.from_client(_headers(encoder, 1, INFER) + frame(DATA, END_STREAM, 1, _infer_message(2000)))
    assert bytes(wire.client.data) == big[:100]  # the refusal waits ...
    wire.from_triton(big[100:] + frame(PING, 0, 0, bytes(8)))
    kinds = [(k, sid) for k, _, sid, _ in frames_of(wire.client.data)]
    assert kinds == [(DATA, 3), (HEADERS, 1), (RST_STREAM, 1), (PING, 0)]  # ... and goes in right after it


def test_tritons_trailers_are_scrubbed_of_server_paths():
    wire = _opened()
    encoder = hpack.Encoder()
    wire.from_client(_headers(encoder, 1, "/inference.GRPCInferenceService/ServerLive"))
    triton = hpack.Encoder()
    block = triton.encode([(":status", "200"), ("content-type", "application/grpc"), ("grpc-status", "3")])
    for name, value in [(b"grpc-message", b"failed to load '/opt/models/secret/model.onnx'")]:
        block += b"\0" + bytes([len(name)]) + name + bytes([len(value)]) + value  # as Triton sends it: not indexed
    wire.from_triton(frame(HEADERS, END_HEADERS | END_STREAM, 1, block))
    (headers,) = [f for f in frames_of(wire.client.data) if f[0] == HEADERS]
    message = _trailers(headers[3])["grpc-message"]
    assert "/opt/models" not in message and "<path>" in message


def test_client_resets_reach_triton_only_for_open_streams():
    wire = _opened()
    encoder = hpack.Encoder()
    wire.from_client(frame(RST_STREAM, 0, 101, U32.pack(8)))  # never opened
    wire.from_client(
        _headers(encoder, 1, "/inference.GRPCInferenceService/ServerLive") + frame(RST_STREAM, 0, 1, U32.pack(8))
    )
    wire.from_client(frame(RST_STREAM, 0, 1, U32.pack(8)))  # closed already
    resets = [sid for k, _, sid, _ in frames_of(wire.triton.data[len(PREFACE) :]) if k == RST_STREAM]
    assert resets == [1]


def test_rapid_reset_is_calmed_and_the_close_waits_for_tritons_frame_in_progress():
    wire = _opened()
    encoder = hpack.Encoder()
    tritons = frame(DATA, 0, 1, bytes(100))
    wire.from_triton(tritons[:50])  # Triton mid-frame: our GOAWAY must wait for its end
    sid = 1
    while not wire.client.paused:
        wire.from_client(
            b"".join(
                _headers(encoder, s, INFER) + frame(RST_STREAM, 0, s, U32.pack(8)) for s in range(sid, sid + 100, 2)
            )
        )
        sid += 100
        assert sid < 4 * MAX_RESETS_PER_WINDOW * 2
    assert not wire.client.closed and wire.wake_s == pytest.approx(1.0)
    wire.from_triton(tritons[50:])  # the end of Triton's frame: then our GOAWAY
    goaway = [f for f in frames_of(wire.client.data) if f[0] == GOAWAY]
    assert len(goaway) == 1 and U32.unpack(goaway[0][3][4:8])[0] == ENHANCE_YOUR_CALM
    wire.tick(wire.now + 0.5)
    assert not wire.client.closed
    wire.tick(wire.now + 0.6)
    assert wire.client.closed and wire.triton.closed and wire.rules.calmed == 1


# -- the stall timeout -------------------------------------------------------------------------------------------
def test_a_message_that_stops_is_dropped_after_the_stall_timeout_and_one_that_moves_is_not():
    admission = Admission(max_inflight_per_model=10, max_inflight_bytes=1 << 30, body_stall_timeout_s=5)
    wire = _opened(admission=admission)
    encoder = hpack.Encoder()
    message = _infer_message(100_000)
    wire.from_client(_headers(encoder, 1, INFER) + frame(DATA, 0, 1, message[:16000]))
    wire.from_client(_headers(encoder, 3, INFER) + frame(DATA, 0, 3, message[:16000]))
    start = wire.now
    wire.tick(start + 4)
    wire.from_client(frame(DATA, 0, 3, message[16000:32000]))  # stream 3 moves, stream 1 does not
    wire.tick(start + 5.5)
    answered = {sid: _trailers(p) for k, _, sid, p in frames_of(wire.client.data) if k == HEADERS}
    assert list(answered) == [1] and answered[1]["grpc-status"] == "4"  # DEADLINE_EXCEEDED
    assert "no byte of it arrived for 5 s" in answered[1]["grpc-message"]
    assert (RST_STREAM, 0, 1, U32.pack(CANCEL)) in frames_of(wire.triton.data[len(PREFACE) :])
    assert admission.bytes == 32000 and admission.stalled == 1  # stream 1's bytes given back, stream 3's held
    wire.tick(start + 9.5)
    assert admission.stalled == 2 and admission.bytes == 0 and not wire.client.closed


def test_a_client_stopped_inside_a_frame_loses_its_connection_at_the_stall_timeout():
    admission = Admission(max_inflight_per_model=10, max_inflight_bytes=1 << 30, body_stall_timeout_s=5)
    wire = _opened(admission=admission)
    encoder = hpack.Encoder()
    wire.from_client(_headers(encoder, 1, INFER) + frame(DATA, 0, 1, _infer_message(100_000)[:16000])[:5000])
    wire.tick(wire.now + 6)
    assert wire.client.closed and wire.triton.closed and admission.bytes == 0


# -- Triton unreachable ------------------------------------------------------------------------------------------
def test_without_triton_every_call_is_answered_unavailable_and_the_connection_ends():
    wire = _opened(reachable=False)
    encoder = hpack.Encoder()
    wire.from_client(_headers(encoder, 1, INFER))
    kinds = [k for k, *_ in frames_of(wire.client.data)]
    assert kinds[0] == SETTINGS and GOAWAY in kinds and wire.client.closed
    (headers,) = [f for f in frames_of(wire.client.data) if f[0] == HEADERS]
    assert _trailers(headers[3])["grpc-status"] == "14" and not wire.triton.data


def test_a_staged_message_is_credited_back_to_the_client_less_what_triton_got_instead():
    from tritonclient.grpc import service_pb2 as pb

    from tests.support.relay_wire import FakeStaging

    staging = FakeStaging()
    wire = _opened(staging=staging)
    tensor = bytes(range(256)) * 2048  # 512 KiB of FP32: staged in a region of ours
    request = pb.ModelInferRequest(model_name="tiny", raw_input_contents=[tensor])
    request.inputs.add(name="x", datatype="FP32", shape=[len(tensor) // 16, 4])
    body = request.SerializeToString()
    message = b"\0" + U32.pack(len(body)) + body
    pieces = [message[i : i + 16384] for i in range(0, len(message), 16384)]
    encoder, triton = hpack.Encoder(), hpack.Encoder()
    for sid in (1, 3):  # one after the other: the second's window pays for what Triton got in the first's place
        wire.from_client(_headers(encoder, sid, INFER))
        for i, piece in enumerate(pieces):
            wire.from_client(frame(DATA, END_STREAM if i == len(pieces) - 1 else 0, sid, piece))
        region = staging.taken[-1]
        assert bytes(region.view[: len(tensor)]) == tensor  # the tensor went to shared memory ...
        answer = triton.encode([(":status", "200"), ("grpc-status", "0")])
        wire.from_triton(frame(HEADERS, END_HEADERS | END_STREAM, sid, answer))
    to_triton = {
        sid: sum(len(p) for k, _, s, p in frames_of(wire.triton.data[len(PREFACE) :]) if k == DATA and s == sid)
        for sid in (1, 3)
    }
    assert all(0 < n < 4096 for n in to_triton.values())  # ... and Triton got a small message naming the region
    updates = [(sid, U32.unpack(p)[0]) for k, _, sid, p in frames_of(wire.client.data) if k == WINDOW_UPDATE]
    # A stream's window: every byte held but the last frame's (which ends the stream). The connection's: every
    # byte held, less what Triton got in their place (Triton gives that back itself); the rest is owed still.
    for sid in (1, 3):
        assert sum(n for s, n in updates if s == sid) == len(message) - len(pieces[-1])
    connection = sum(n for sid, n in updates if sid == 0)
    window = wire.core.window
    assert connection + window.credit - window.debt == 2 * len(message) - sum(to_triton.values())
    assert window.debt == to_triton[3]  # the first one's debt was paid from the second one's credit; not its own yet
    assert staging.given_back == staging.taken and wire.core.inflight == 0 and wire.rules.admission.bytes == 0
