"""The gateway's socket-free HTTP/1.1 core (`http.connection.HttpConnection`): byte streams replayed at every split.

Each stream below is a client's whole side of one connection. Fed in one piece, the core must hand out the
requests and write the answers listed; fed split at every byte boundary (two pieces), and one byte at a
time, it must do exactly the same: framing may never depend on how TCP cut the bytes. Deadlines are driven
with an explicit clock, so bodies that stall, idle connections and lingering closes are tested without
sockets or sleeps.
"""

from __future__ import annotations

import json

import pytest

from mslite_gateway.admission import CHUNK_OVERHEAD_BYTES, Account, Admission
from mslite_gateway.http.connection import (
    BODY,
    CLIENT_MOVES,
    CLOSED,
    DONE,
    IDLE,
    LINGER,
    LINGER_S,
    OUR_MOVES,
    Client,
    HttpConnection,
    HttpEvent,
    Ours,
    Step,
)
from mslite_gateway.state_machine import IllegalTransition
from tests.support import relay_traffic

CAP = 1 << 12
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
INFER_JSON = b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'
# perf_analyzer's HTTP traffic on the tiny model through a pass-through relay (benchmarks/relay_replay.py
# --protocol http): binary tensor data after a JSON header (Inference-Header-Content-Length).
RECORDING = relay_traffic.HERE / "perf_analyzer_tiny_http.reads"


def _post(target: bytes, body: bytes, *extra: bytes) -> bytes:
    head = b"POST " + target + b" HTTP/1.1\r\nHost: x\r\n" + b"".join(h + b"\r\n" for h in extra)
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def _chunked(*chunks: bytes, trailer: bytes = b"") -> bytes:
    head = b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + b"".join(b"%x;ext=1\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n" + trailer + b"\r\n"


def _error(status: int, message: str) -> tuple[str, int, str]:
    return ("write", status, message)


# name -> (the client's bytes, what the core must do)
STREAMS = {
    "keep-alive GET, Content-Length, chunked (pipelined), then a clean close": (
        b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
        + _post(b"/v2/models/m/infer", INFER_JSON)
        + _chunked(INFER_JSON[:10], INFER_JSON[10:], trailer=b"X-Trailer: dropped\r\n"),
        [
            ("request", b"GET", b"/v2/health/ready", b""),
            ("answer",),
            ("request", b"POST", b"/v2/models/m/infer", INFER_JSON),
            ("answer",),
            ("request", b"POST", b"/v2/models/m/infer", INFER_JSON),
            ("answer",),
            ("close",),
        ],
    ),
    "an empty line ends an empty head: refused": (
        b"\r\n\r\nGET / HTTP/1.1\r\n\r\n",
        [_error(400, "malformed request line: expected 'METHOD /target HTTP/1.1'"), ("close",)],
    ),
    "one CRLF before a request line is skipped": (
        b"\r\nGET / HTTP/1.1\r\n\r\n",
        [("request", b"GET", b"/", b""), ("answer",), ("close",)],
    ),
    "Expect: 100-continue": (
        _post(b"/v2/models/m/infer", INFER_JSON, b"Expect: 100-continue"),
        [("write", 100, ""), ("request", b"POST", b"/v2/models/m/infer", INFER_JSON), ("answer",), ("close",)],
    ),
    "a Content-Length body over the cap: 413 before it is read, then lingering": (
        _post(b"/v2/models/m/infer", b"x" * (CAP + 1)),
        [_error(413, f"request body of {CAP + 1} bytes is over this server's limit"), ("half_close",), ("close",)],
    ),
    "a chunked body over the cap, its chunks' overhead counted": (
        _chunked(b"x" * (CAP - CHUNK_OVERHEAD_BYTES), b"y"),
        [_error(413, "request body over this server's limit"), ("half_close",), ("close",)],
    ),
    "both Transfer-Encoding and Content-Length": (
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc",
        [_error(400, "a request may not have both Transfer-Encoding and Content-Length"), ("close",)],
    ),
    "a bad chunk size": (
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        [_error(400, "malformed chunked body: bad chunk size"), ("close",)],
    ),
    "a chunk without its CRLF": (
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY",
        [_error(400, "malformed chunked body: a chunk does not end with CRLF"), ("close",)],
    ),
    "a chunked body cut inside a chunk": (
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        [_error(400, "the body ended after 2 of its 5 bytes"), ("close",)],
    ),
    "a chunked body cut before its last chunk": (
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n",
        [_error(400, "the body ended before its last chunk"), ("close",)],
    ),
    "a Content-Length body cut short": (
        b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc",
        [_error(400, "the body ended after 3 of its 10 bytes"), ("close",)],
    ),
    "a head cut short": (
        b"GET / HTTP/1.1\r\nHost:",
        [_error(400, "the request ended before its headers did"), ("close",)],
    ),
    "HTTP/9.9": (
        b"GET / HTTP/9.9\r\n\r\n",
        [_error(400, "unsupported HTTP version 'HTTP/9.9': this server speaks HTTP/1.1"), ("close",)],
    ),
    "headers over 64 KiB": (
        b"GET / HTTP/1.1\r\n" + b"X-A: " + b"a" * (70 << 10) + b"\r\n\r\n",
        [_error(431, "request headers longer than 65536 bytes"), ("half_close",), ("close",)],
    ),
    "a request line over 8 KiB, headers over 64 KiB": (
        b"GET /" + b"a" * (70 << 10) + b" HTTP/1.1\r\n\r\n",
        [_error(414, "request line longer than 8192 bytes"), ("half_close",), ("close",)],
    ),
    "a Content-Length that is no byte count": (
        b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        [_error(400, "Content-Length '-1' is not a byte count"), ("close",)],
    ),
    "a header given twice with different values": (
        b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        [_error(400, "header content-length is given more than once with different values"), ("close",)],
    ),
    "a chunk-size line over 64 KiB": (
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1" + b" " * (70 << 10) + b"\r\n",
        [_error(400, "malformed chunked body: a chunk-size line is too long"), ("close",)],
    ),
}


def _admission() -> Admission:
    return Admission(max_inflight_per_model=10, max_inflight_bytes=1 << 30)


def _connection(admission: Admission | None = None, now: float = 0.0) -> HttpConnection:
    admission = admission or _admission()
    return HttpConnection(cap=CAP, admission=admission, idle_timeout_s=75.0, body_timeout_s=60.0, now=now)


def _record(conn: HttpConnection, step: Step, events: list) -> None:
    """`step`'s effects as events; each request handed out is answered at once (keep-alive)."""
    ours = 0  # writes at the front of `step.writes` that are our own answer
    while True:
        for data in step.writes[ours:]:
            head, _, body = data.partition(b"\r\n\r\n")
            status = int(head.split(b" ")[1])
            events.append(("write", status, json.loads(body)["error"] if body else ""))
        if step.half_close:
            events.append(("half_close",))
        if step.close:
            events.append(("close",))
        if step.request is None:
            return
        req = step.request
        events += [("request", req.method, req.target, req.body), ("answer",)]
        step, ours = conn.answer((ANSWER,), False, 0.0), 1


def _replay(pieces: list[bytes]) -> list:
    """The events of feeding `pieces`, then the client's end; every byte counted in flight is given back."""
    admission = _admission()
    conn, events = _connection(admission), []
    for piece in [*pieces, b""]:
        if conn.client is CLOSED:
            break
        _record(conn, conn.feed(piece, 0.0), events)
    assert conn.client is CLOSED and admission.bytes == 0
    return events


def _matches(events: list, expected: list) -> bool:
    if len(events) != len(expected):
        return False
    for got, want in zip(events, expected, strict=True):
        if got[0] == "write" and want[0] == "write":
            if got[1] != want[1] or not got[2].startswith(want[2]):
                return False
        elif got != want:
            return False
    return True


@pytest.mark.parametrize("name", list(STREAMS))
def test_a_stream_gives_the_same_requests_and_writes_however_it_is_split(name: str) -> None:
    data, expected = STREAMS[name]
    whole = _replay([data])
    assert _matches(whole, expected), whole
    step = max(1, len(data) // 300)  # the long streams at 300 split points, the others at every byte
    for cut in range(1, len(data), step):
        assert _replay([data[:cut], data[cut:]]) == whole, cut
    if len(data) < 4096:
        assert _replay([data[i : i + 1] for i in range(len(data))]) == whole


def test_the_recorded_traffic_gives_the_same_requests_however_it_is_split() -> None:
    reads = [data for side, data in relay_traffic.load(RECORDING) if side == "client"]
    stream = b"".join(reads)
    whole = _replay([stream])
    requests = [e for e in whole if e[0] == "request"]
    assert len(requests) > 20 and all(r[1] == b"POST" and r[2].endswith(b"/infer") for r in requests)
    assert _replay(reads) == whole  # as the reads came
    for size in (1, 7, 1000):
        assert _replay([stream[i : i + size] for i in range(0, len(stream), size)]) == whole


def test_body_bytes_are_counted_as_they_arrive_and_given_back_once_answered() -> None:
    admission = _admission()
    conn = _connection(admission)
    body = b"x" * 100
    data = _post(b"/v2/models/m/infer", body)
    step = conn.feed(data[:-40], 0.0)
    assert step.request is None and conn.client is BODY and admission.bytes == conn.charged == 60
    step = conn.feed(data[-40:], 0.0)
    assert step.request is not None and step.request.body == body and conn.client is DONE
    assert admission.bytes == 100
    conn.answer((ANSWER,), False, 0.0)
    assert admission.bytes == 0 and conn.client is IDLE


def test_a_body_over_the_in_flight_bound_is_refused_as_a_service_deny() -> None:
    admission = Admission(max_inflight_per_model=10, max_inflight_bytes=50)
    admission.take_bytes(40, Account())  # another connection's request
    conn = _connection(admission)
    step = conn.feed(_post(b"/", b"x" * 100), 0.0)
    assert b"503 Service Unavailable" in step.writes[0] and b"kLiteServiceDeny" in step.writes[0]
    assert step.half_close and conn.client is LINGER and admission.bytes == 40


def test_a_stalled_body_is_dropped_with_408_and_counted() -> None:
    admission = _admission()
    conn = _connection(admission)
    conn.feed(_post(b"/", b"x" * 100)[:-50], 10.0)
    assert conn.deadline() == 10.0 + admission.stall_s
    assert not conn.tick(10.0 + admission.stall_s - 0.1).writes  # not yet
    step = conn.tick(10.0 + admission.stall_s)
    assert b"408 Request Timeout" in step.writes[0] and b"no byte of it arrived" in step.writes[0]
    assert step.close and admission.stalled == 1 and admission.bytes == 0


def test_a_body_that_keeps_dribbling_meets_its_whole_deadline() -> None:
    admission = _admission()
    conn = _connection(admission)
    data = _post(b"/", b"x" * 1000)
    conn.feed(data[:-1000], 0.0)
    now = 0.0
    while conn.deadline() > now + 1.0:  # a byte every second: never a stall, but the body's 60 s run out
        now += 1.0
        conn.feed(b"x", now)
    step = conn.tick(conn.deadline())
    assert b"did not arrive within 60 s" in step.writes[0] and admission.stalled == 0


def test_an_idle_connection_closes_quietly_and_a_slow_head_counts_from_the_last_answer() -> None:
    conn = _connection(now=5.0)
    conn.feed(b"GET / HTTP/1.1\r\n", 70.0)  # bytes of a head do not move the deadline
    assert conn.deadline() == 80.0
    step = conn.tick(80.0)
    assert step.close and not step.writes and conn.client is CLOSED and conn.ours is Ours.CLOSED


def test_lingering_drops_what_comes_then_closes_on_time_or_at_the_client_end() -> None:
    conn = _connection()
    step = conn.feed(_post(b"/", b"x" * (CAP + 1))[: CAP // 2], 1.0)
    assert step.half_close and conn.client is LINGER and conn.deadline() == 1.0 + LINGER_S
    assert not conn.feed(b"y" * 100, 2.0).writes  # dropped
    assert conn.tick(1.0 + LINGER_S).close
    other = _connection()
    other.feed(_post(b"/", b"x" * (CAP + 1))[:100], 1.0)
    assert other.feed(b"", 2.0).close


def test_a_pipelined_request_waits_for_the_answer_and_keeps_the_client_counted_as_there() -> None:
    conn = _connection()
    step = conn.feed(b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n", 0.0)
    assert step.request is not None and step.request.target == b"/a" and conn.holds_bytes()
    assert conn.feed(b"GET /c HTTP/1.1\r\n\r\n", 0.0).request is None  # not read before /a is answered
    step = conn.answer((b"a",), False, 1.0)
    assert step.writes == [b"a"] and step.request is not None and step.request.target == b"/b"
    step = conn.answer((b"b",), True, 2.0)  # answered with close: what else came is never read
    assert step.close and step.request is None and conn.client is CLOSED


def test_an_answer_out_of_turn_is_a_bug_the_tables_name_and_moves_neither_side() -> None:
    conn = _connection()
    with pytest.raises(IllegalTransition, match="ANSWERED is not a move from IDLE"):
        conn.answer((b"x",), False, 0.0)
    assert conn.client is IDLE and conn.ours is Ours.IDLE


# Where our side must be for each of the client's states: a request is answered exactly while it is handed
# out, and nothing goes to the client once it lingers or is closed.
OURS_BESIDE = {
    Client.IDLE: Ours.IDLE,
    Client.BODY: Ours.IDLE,
    Client.DONE: Ours.ANSWERING,
    Client.LINGER: Ours.CLOSED,
    Client.CLOSED: Ours.CLOSED,
}


def test_our_moves_keep_our_side_where_the_clients_state_puts_it() -> None:
    """Every pair of states both tables reach together from (IDLE, IDLE) is one `OURS_BESIDE` allows, and
    from each of them every event the client's table takes, ours takes too (else a real move would raise)."""
    reached, frontier = {(Client.IDLE, Ours.IDLE)}, [(Client.IDLE, Ours.IDLE)]
    while frontier:
        client, ours = frontier.pop()
        assert OURS_BESIDE[client] is ours, (client, ours)
        for event in HttpEvent:
            if (client, event) not in CLIENT_MOVES:
                continue
            assert (ours, event) in OUR_MOVES, (client, ours, event)
            after = (CLIENT_MOVES[client, event], OUR_MOVES[ours, event])
            if after not in reached:
                reached.add(after)
                frontier.append(after)
    assert {client for client, _ in reached} == set(Client)
    assert {ours for _, ours in reached} == set(Ours)


def test_every_move_of_our_table_is_one_a_real_connection_takes() -> None:
    """No move of `OUR_MOVES` is dead: each (our state, event) pair sits beside a client state that takes it."""
    for (ours, event), after in OUR_MOVES.items():
        beside = [c for c, o in OURS_BESIDE.items() if o is ours and (c, event) in CLIENT_MOVES]
        assert beside, (ours, event)
        assert all(OURS_BESIDE[CLIENT_MOVES[c, event]] is after for c in beside), (ours, event, after)


def test_gone_closes_both_sides_from_anywhere_and_gives_back_what_the_request_held() -> None:
    admission = _admission()
    conn = _connection(admission)
    conn.feed(_post(b"/", b"x" * 100)[:80], 0.0)
    assert conn.client is BODY and admission.bytes > 0
    conn.close()
    assert conn.client is CLOSED and conn.ours is Ours.CLOSED and admission.bytes == 0
    conn.close()  # twice: still closed
    assert conn.client is CLOSED
