"""The gRPC relay's frame splitting and its own answers, without a server (the relay end to end: test_gateway.py)."""

from __future__ import annotations

import random

import hpack
import pytest

from mslite_triton.server.gateway.admission import Admission, Overloaded
from mslite_triton.server.gateway.grpc_relay import (
    COLLECT,
    DATA,
    DROP,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    PASS,
    _Frames,
    frame,
    trailers_only,
)


def _frames() -> list[bytes]:
    return [
        frame(HEADERS, END_HEADERS, 1, b"h" * 30),
        frame(DATA, 0, 1, bytes(range(256)) * 70),  # larger than one read below
        frame(DATA, END_STREAM, 1, b""),
        frame(DATA, 0, 3, b"dropped"),
        frame(DATA, END_STREAM, 5, b"kept whole" * 3),
    ]


@pytest.mark.parametrize("seed", range(5))
def test_frames_are_split_the_same_whatever_the_reads(seed):
    """Passed frames come out byte for byte, collected ones whole, dropped ones not at all, in any read sizes."""
    wire = b"".join(_frames())
    rng = random.Random(seed)
    modes = {1: PASS, 3: DROP, 5: COLLECT}
    splitter = _Frames()
    collected: list[tuple[int, int, bytes]] = []
    pos = 0
    while pos < len(wire):
        n = rng.choice([1, 2, 7, 9, 100, 5000])
        splitter.feed(
            wire[pos : pos + n],
            lambda length, kind, flags, sid, raw: modes[sid],
            lambda kind, flags, sid, raw, payload: collected.append((sid, flags, bytes(raw) + bytes(payload))),
        )
        pos += n
    assert splitter.at_boundary
    frames = _frames()
    assert b"".join(bytes(p) for p in splitter.out) == b"".join(frames[:3])
    assert collected == [(5, END_STREAM, frames[4])]


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
