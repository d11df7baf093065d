"""The gRPC relay's frame splitting and its own answers, without a server (the relay end to end: test_gateway.py)."""

from __future__ import annotations

import random

import hpack
import pytest

from mslite_gateway.admission import Admission, Overloaded
from mslite_gateway.grpc.checks import Pieces, check_model_infer
from mslite_gateway.grpc.frames import (
    COLLECT,
    DATA,
    DROP,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    PASS,
    TAP,
    Frames,
    frame,
    trailers_only,
)
from mslite_gateway.rules import Refusal


def _frames() -> list[bytes]:
    return [
        frame(HEADERS, END_HEADERS, 1, b"h" * 30),
        frame(DATA, 0, 1, bytes(range(256)) * 70),  # larger than one read below
        frame(DATA, END_STREAM, 1, b""),
        frame(DATA, 0, 3, b"dropped"),
        frame(DATA, END_STREAM, 5, b"kept whole" * 3),
        frame(DATA, 0, 7, b"passed and kept" * 2000),
    ]


@pytest.mark.parametrize("seed", range(5))
def test_frames_are_split_the_same_whatever_the_reads(seed):
    """Passed frames come out byte for byte, collected ones whole, dropped ones not at all, in any read sizes.

    A tapped frame comes out byte for byte too, its payload's pieces also kept aside.
    """
    wire = b"".join(_frames())
    rng = random.Random(seed)
    modes = {1: PASS, 3: DROP, 5: COLLECT, 7: TAP}
    splitter = Frames()
    tapped: list[bytes] = []

    def on_header(length, kind, flags, sid):
        splitter.tap = tapped
        return modes[sid]

    collected: list[tuple[int, int, bytes]] = []
    pos = 0
    while pos < len(wire):
        n = rng.choice([1, 2, 7, 9, 100, 5000])
        splitter.feed(
            wire[pos : pos + n],
            on_header,
            lambda kind, flags, sid, raw, parts: collected.append((sid, flags, bytes(raw) + b"".join(parts))),
        )
        pos += n
    assert splitter.at_boundary
    frames = _frames()
    assert b"".join(bytes(p) for p in splitter.out) == b"".join(frames[:3]) + frames[5]
    assert collected == [(5, END_STREAM, frames[4])]
    assert b"".join(tapped) == frames[5][9:]


@pytest.mark.parametrize("seed", range(5))
def test_frames_of_our_own_go_in_before_the_frame_whatever_the_reads(seed):
    """What on_header injects comes out just before that frame; frames passed together come out as one piece."""
    frames = _frames()
    wire = b"".join(frames)
    rng = random.Random(seed)
    splitter = Frames()
    ours = frame(HEADERS, END_HEADERS, 9, b"ours")

    def on_header(length, kind, flags, sid):
        if sid == 7:
            splitter.inject([ours])
        return DROP if sid == 3 else PASS

    pos = 0
    while pos < len(wire):
        n = rng.choice([1, 2, 7, 9, 100, 5000])
        splitter.feed(wire[pos : pos + n], on_header, lambda *frame: None)
        pos += n
    assert b"".join(bytes(p) for p in splitter.out) == b"".join(frames[:3]) + frames[4] + ours + frames[5]
    splitter.out.clear()
    splitter.feed(b"".join(frames[:3]), on_header, lambda *frame: None)
    assert len(splitter.out) == 1


def test_trailers_only_decode_as_a_grpc_status_and_leave_the_table_alone():
    decoder = hpack.Decoder()
    answer = trailers_only(7, 14, "kLiteServiceDeny: busy; 100% full")
    assert answer[3] == HEADERS and answer[4] == END_STREAM | END_HEADERS
    assert int.from_bytes(answer[5:9], "big") == 7
    headers = dict(decoder.decode(answer[9:], raw=True))
    assert headers[b"grpc-status"] == b"14" and headers[b":status"] == b"200"
    assert headers[b"grpc-message"] == b"kLiteServiceDeny: busy; 100%25 full"  # percent-encoded, as gRPC wants
    assert len(decoder.header_table.dynamic_entries) == 0


def test_admission_bounds_and_gives_back():
    admission = Admission(max_inflight_per_model=2, max_inflight_bytes=100)
    admission.take_bytes(500)  # one request alone always fits
    with pytest.raises(Overloaded, match="kLiteServiceDeny"):
        admission.take_bytes(1)
    admission.give_bytes(500)
    admission.enter("m")
    admission.enter("m")
    with pytest.raises(Overloaded, match="model 'm' has 2 requests in flight"):
        admission.enter("m")
    admission.enter("other")  # per model
    admission.leave("m")
    admission.enter("m")
    assert admission.denied == 2 and admission.bytes == 0


@pytest.mark.parametrize("seed", range(3))
def test_a_message_in_pieces_is_checked_as_if_whole(seed):
    """The check reads a request where it lies, over however many pieces, and decides as on the joined bytes."""
    from tritonclient.grpc import service_pb2 as pb

    request = pb.ModelInferRequest(model_name="tiny", model_version="1", id="x" * 40)
    request.inputs.add(name="x", datatype="FP32", shape=[64, 4])
    request.inputs.add(name="m", datatype="BOOL", shape=[300])
    request.raw_input_contents.extend([bytes(1024), b"\x01\x00" * 150])
    good = request.SerializeToString()
    bad_bool = good[:-1] + b"\x02"
    rng = random.Random(seed)
    for data, refused in ((good, None), (bad_bool, "BOOL data holds bytes other than 0 and 1")):
        prefixed = b"\x00" + len(data).to_bytes(4, "big") + data
        cuts = sorted(rng.sample(range(1, len(prefixed)), 40))
        parts = [prefixed[a:b] for a, b in zip([0, *cuts], [*cuts, len(prefixed)])]
        pieces = Pieces(parts, 5)
        assert len(pieces) == len(data) and pieces.join() == data
        assert [pieces[i] for i in range(0, len(data), 37)] == list(data[::37])
        assert b"".join(pieces.views(100, 900)) == data[100:900]
        if refused is None:
            assert check_model_infer(pieces, 1 << 20) == "tiny"
        else:
            with pytest.raises(Refusal, match=refused):
                check_model_infer(pieces, 1 << 20)


@pytest.mark.parametrize("seed", range(3))
def test_request_headers_read_as_a_fresh_decoder_would(seed):
    """Blocks remembered by their bytes decode as the decoder reads them, however the table changed between."""
    from mslite_gateway.grpc.request_headers import RequestHeaders, only_indexed

    rng = random.Random(seed)
    encoder, reference, headers = hpack.Encoder(), hpack.Decoder(), RequestHeaders()
    paths = [b"/inference.GRPCInferenceService/ModelInfer", b"/inference.GRPCInferenceService/ModelReady", b"/x"]
    remembered = 0
    for _ in range(300):
        call = [(b":method", b"POST"), (b":path", rng.choice(paths)), (b"te", b"trailers")]
        if rng.random() < 0.3:
            call.append((b"grpc-encoding", rng.choice([b"gzip", b"identity"])))
        if rng.random() < 0.1:
            call.append((b"x-request-id", str(rng.random()).encode()))  # a new entry: the table shifts
        block = encoder.encode(call)
        remembered += block in headers.known
        want = dict(reference.decode(block, raw=True))
        assert headers.read_call(block)[:2] == (want[b":path"], want.get(b"grpc-encoding", b""))
    assert remembered > 100  # the same calls again are read without the decoder
    assert only_indexed(b"\xbe\xc3\x83") and not only_indexed(b"\xbe\x40") and not only_indexed(b"\xff")
    assert only_indexed(b"\xff\x81\x01") and not only_indexed(b"\x80")
