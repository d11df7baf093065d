"""Triton's answers read without sockets (`http.responses.ResponseReader`): the same answer however TCP cuts it.

Each answer is fed whole, split at every byte boundary, and one byte at a time; the recorded answers are
Triton's own (perf_analyzer's HTTP traffic on the tiny model, as `test_http_connection` replays its requests).
"""

from __future__ import annotations

import asyncio

import pytest

from mslite_gateway.http.messages import HttpError, Response
from mslite_gateway.http.responses import ResponseReader
from tests.support import relay_traffic

RECORDING = relay_traffic.HERE / "perf_analyzer_tiny_http.reads"
JSON = b'{"model_name":"tiny","outputs":[]}'

ANSWERS = {  # the bytes Triton sends -> (status line, body, reusable)
    "Content-Length": (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(JSON), JSON),
        (b"HTTP/1.1 200 OK", JSON, True),
    ),
    "chunked, with a trailer": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n"
        + JSON[:5]
        + b"\r\n"
        + b"%x\r\n%s\r\n0\r\nX-T: 1\r\n\r\n" % (len(JSON) - 5, JSON[5:]),
        (b"HTTP/1.1 200 OK", JSON, True),
    ),
    "a 100 Continue first": (
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 400 Bad Request\r\nContent-Length: 2\r\n\r\n{}",
        (b"HTTP/1.1 400 Bad Request", b"{}", True),
    ),
    "no body: 204": (b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n", (b"HTTP/1.1 204 No Content", b"", True)),
    "Connection: close": (
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}",
        (b"HTTP/1.1 200 OK", b"{}", False),
    ),
    "HTTP/1.0, framed by the connection's end": (b"HTTP/1.0 200 OK\r\n\r\n" + JSON, (b"HTTP/1.0 200 OK", JSON, False)),
}


def _read(pieces: list[bytes]) -> Response:
    reader = ResponseReader()
    for piece in [*pieces, b""]:
        resp = reader.feed(piece)
        if resp is not None:
            return resp
    raise AssertionError("no answer")


@pytest.mark.parametrize("name", list(ANSWERS))
def test_an_answer_reads_the_same_however_it_is_split(name: str) -> None:
    data, (status, body, reusable) = ANSWERS[name]
    whole = _read([data])
    assert (whole.status_line, whole.body, whole.reusable) == (status, body, reusable)
    for at in range(1, len(data)):
        got = _read([data[:at], data[at:]])
        assert (got.status_line, got.headers, got.body, got.reusable) == (status, whole.headers, body, reusable), at
    got = _read([data[i : i + 1] for i in range(len(data))])
    assert (got.status_line, got.body, got.reusable) == (status, body, reusable)


def test_tritons_recorded_answers_read_whole() -> None:
    answers = [data for side, data in relay_traffic.load(RECORDING) if side == "server"]
    assert len(answers) > 20
    for data in answers:
        resp = ResponseReader().feed(data)
        assert resp is not None and resp.status_line == b"HTTP/1.1 200 OK" and resp.reusable
        head_length = int(dict(resp.headers)[b"inference-header-content-length"].split(b":")[1])
        assert resp.body[:head_length].startswith(b'{"model_name":"tiny"') and len(resp.body) == head_length + 16


def test_a_connection_that_ends_early_says_what_came() -> None:
    reader = ResponseReader()
    with pytest.raises(asyncio.IncompleteReadError) as nothing:
        reader.feed(b"")
    assert nothing.value.partial == b""  # a pooled connection Triton had closed: safe to send again
    reader = ResponseReader()
    assert reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab") is None
    with pytest.raises(asyncio.IncompleteReadError) as partial:
        reader.feed(b"")
    assert partial.value.partial  # some of the answer came: Triton had the request


@pytest.mark.parametrize(
    "data",
    [
        b"garbage\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
def test_an_answer_that_cannot_be_read_is_a_502(data: bytes) -> None:
    with pytest.raises(HttpError) as e:
        ResponseReader().feed(data)
    assert e.value.status == 502 and "could not be read" in e.value.message
