"""One client connection's HTTP/1.1, without sockets: fed the client's bytes, it says what to write.

As h11 does, this core does no I/O and keeps no clock. `HttpConnection.feed(data, now)` takes what the client
sent (b"": it closed its side) and returns a `Step`: the bytes to write, at most one whole `Request` to answer,
and whether to half-close or close afterwards. `answer(parts, close, now)` writes the answer to that request
(and reads on: a pipelined request waiting in the buffer comes out then), `tick(now)` applies the deadlines
and `deadline()` says when the next one falls. `http.front` adapts it to asyncio.

Framing is strict: a request line and headers within `MAX_HEAD_BYTES` (414 / 431 past it), a body framed by
Content-Length or chunked (`http.bodies`), at most the size cap (413 before a byte of it is read), its bytes
counted by admission control as they arrive (503 kLiteServiceDeny past the in-flight bound; given back once
the request is answered), `Expect: 100-continue` answered. Deadlines: the next request's head must come
whole within `idle_timeout_s` of the last answer (else the connection closes quietly); a body within
`body_timeout_s` of its head, with no gap of `admission.stall_s` between its bytes (408). A refused body is
read and dropped for `LINGER_S` after the answer ("lingering close"), so a client still sending it sees the
answer instead of a reset.

Each side has one state (h11's way), an Enum changed only by `state_machine.transition` on an `HttpEvent`,
through its table: `CLIENT_MOVES`, the client IDLE (a head to come) -> BODY -> DONE (handed out) -> IDLE once
answered, or LINGER / CLOSED; `OUR_MOVES`, ours IDLE -> ANSWERING -> IDLE, or CLOSED. An event either side's
table lacks raises `IllegalTransition` and moves neither.
"""

from __future__ import annotations

from mslite_gateway.admission import Account, Admission, Overloaded
from mslite_gateway.http.bodies import ChunkedBody, SizedBody, Source, cut
from mslite_gateway.http.messages import (
    MAX_HEAD_BYTES,
    MAX_TARGET_BYTES,
    HttpError,
    Request,
    error_response,
    parse_head,
)
from mslite_gateway.state_machine import FastState, transition

LINGER_S = 5.0  # after refusing a body, how long its bytes are read and dropped so the client sees the answer
LINGER_BYTES = 1 << 30
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Client(FastState):
    """The client's side of the connection."""

    IDLE = "idle"  # the next request's head is to come
    BODY = "body"  # a head came that announces a body: its bytes are arriving
    DONE = "done"  # a whole request was handed out: nothing more is read until it is answered
    LINGER = "linger"  # a body was refused: what else the client sends is read and dropped for a while
    CLOSED = "closed"


class Ours(FastState):
    """Our side of the connection."""

    IDLE = "idle"  # no request to answer
    ANSWERING = "answering"  # a request was handed out; its answer is due
    CLOSED = "closed"  # nothing more goes to the client


class HttpEvent(FastState):
    """What moves the connection on (each side by its own table)."""

    HEAD = "head"  # a head that announces a body
    REQUEST = "request"  # a whole request: a head without a body, or a body's last byte
    ANSWERED = "answered"  # the request was answered; the connection carries the next one
    ANSWERED_CLOSE = "answered, close"  # the request was answered with the connection's end
    REFUSED = "refused"  # a framing error was answered, the connection closes
    REFUSED_LINGER = "refused, linger"  # a framing error was answered, the client's bytes dropped for a while
    ENDED = "ended"  # closed by the client, idled out, lingered out, or the gateway's end
    GONE = "gone"  # the connection is gone (or the gateway stops), from wherever it was


# The client's states and the events as module names, read on every request (see `grpc.call_states`).
IDLE, BODY, DONE, LINGER, CLOSED = Client.IDLE, Client.BODY, Client.DONE, Client.LINGER, Client.CLOSED
HEAD, REQUEST, ANSWERED, ANSWERED_CLOSE = (
    HttpEvent.HEAD,
    HttpEvent.REQUEST,
    HttpEvent.ANSWERED,
    HttpEvent.ANSWERED_CLOSE,
)
REFUSED, REFUSED_LINGER, ENDED, GONE = HttpEvent.REFUSED, HttpEvent.REFUSED_LINGER, HttpEvent.ENDED, HttpEvent.GONE

CLIENT_MOVES: dict[tuple[Client, HttpEvent], Client] = {
    (IDLE, HEAD): BODY,
    (IDLE, REQUEST): DONE,
    (BODY, REQUEST): DONE,
    (DONE, ANSWERED): IDLE,
    (DONE, ANSWERED_CLOSE): CLOSED,
    (IDLE, REFUSED): CLOSED,
    (BODY, REFUSED): CLOSED,
    (IDLE, REFUSED_LINGER): LINGER,
    (BODY, REFUSED_LINGER): LINGER,
    (IDLE, ENDED): CLOSED,
    (DONE, ENDED): CLOSED,
    (LINGER, ENDED): CLOSED,
    **{(state, GONE): CLOSED for state in Client},
}
OUR_MOVES: dict[tuple[Ours, HttpEvent], Ours] = {
    (Ours.IDLE, HEAD): Ours.IDLE,
    (Ours.IDLE, REQUEST): Ours.ANSWERING,
    (Ours.ANSWERING, ANSWERED): Ours.IDLE,
    (Ours.ANSWERING, ANSWERED_CLOSE): Ours.CLOSED,
    (Ours.IDLE, REFUSED): Ours.CLOSED,
    (Ours.IDLE, REFUSED_LINGER): Ours.CLOSED,
    (Ours.IDLE, ENDED): Ours.CLOSED,
    (Ours.ANSWERING, ENDED): Ours.CLOSED,
    (Ours.CLOSED, ENDED): Ours.CLOSED,  # the end of lingering after a refusal
    **{(state, GONE): Ours.CLOSED for state in Ours},
}
_NEVER = float("inf")
_CRLF = b"\r\n"


class Step:
    """What one call of the core asks its adapter to do, in this order: write, then half-close or close.

    Each connection returns the same object every call; it holds what the latest call asked.
    """

    __slots__ = ("writes", "request", "refused", "half_close", "close")

    def __init__(self) -> None:
        self.writes: list[bytes] = []  # to the client, in order
        self.request: Request | None = None  # a whole request: answer it (`answer`) before feeding more
        self.refused = False  # a framing error was answered (the front counts refusals)
        self.half_close = False  # end our side of the connection, keep reading (lingering close)
        self.close = False  # close the connection once the writes are out


class HttpConnection:
    """The HTTP/1.1 state of one client connection (see the module's docstring)."""

    __slots__ = (
        *("cap", "admission", "account", "idle_s", "body_s", "client", "ours", "step", "charged", "_buf"),
        *("_scanned", "_eof", "_head", "_body", "_until", "_body_until", "_last", "_dropped"),
    )

    def __init__(
        self, *, cap: int, admission: Admission, idle_timeout_s: float, body_timeout_s: float, now: float
    ) -> None:
        self.cap = cap
        self.admission = admission
        self.account = Account()  # the bytes this connection's request holds (one at a time: HTTP/1.1)
        self.idle_s = idle_timeout_s
        self.body_s = body_timeout_s
        self.client = IDLE
        self.ours = Ours.IDLE
        self.step = Step()
        self.charged = 0  # bytes of the current request counted in flight by admission control
        self._buf = bytearray()  # bytes read and not yet parsed
        self._scanned = 0  # bytes of a head in `_buf` already searched for its end
        self._eof = False  # the client closed its side (seen while a request was answered)
        self._head: Request | None = None  # the request whose body is being read
        self._body: SizedBody | ChunkedBody | None = None
        self._until = now + idle_timeout_s  # IDLE: the next head's deadline; LINGER: the end of dropping
        self._body_until = _NEVER
        self._last = now  # when the body last brought bytes
        self._dropped = 0  # bytes dropped while lingering

    # -- what the adapter calls ------------------------------------------------------------------------------

    def feed(self, data: bytes, now: float) -> Step:
        """What the client sent (b"": it closed its side), and what to do about it."""
        step = self._fresh()
        if self.client is LINGER:
            self._dropped += len(data)
            if not data or self._dropped >= LINGER_BYTES:
                self._end()
            return step
        if not data:
            self._eof = True
        elif self.client is DONE:  # pipelined: read once this request is answered
            self._buf += data
            return step
        elif self.client is CLOSED:
            return step
        else:
            self._last = now
            self._parse(data, now)
        if self._eof and self.step.request is None and self.client is not DONE:
            self._ended(now)
        return step

    def answer(self, parts: tuple[bytes, ...] | list[bytes], close: bool, now: float) -> Step:
        """Our answer to the request handed out (`parts` written in order); then the next request, if here."""
        step = self._fresh()
        step.writes.extend(parts)
        self._release()
        self._move(ANSWERED_CLOSE if close else ANSWERED)
        if close:
            step.close = True
            return step
        self._until = now + self.idle_s
        if self._buf:
            self._last = now
            self._parse(b"", now)
        if self._eof and step.request is None:
            self._ended(now)
        return step

    def tick(self, now: float) -> Step:
        """Apply the deadline that has passed, if one has."""
        step = self._fresh()
        if now < self.deadline():
            return step
        if self.client is BODY:
            stall_s = self.admission.stall_s
            if self._body_until <= self._last + stall_s:
                message = f"the request body did not arrive within {self.body_s:.0f} s"
            else:
                self.admission.stalled += 1
                message = f"the request body stopped: no byte of it arrived for {stall_s:g} s"
            self._refuse(HttpError(408, message, close=True), now)
        elif self.client is IDLE or self.client is LINGER:
            self._end()  # idled out between requests, or done lingering: closed without a word
        return step

    def deadline(self) -> float:
        """When `tick` is next due (inf: not before something else happens)."""
        if self.client is BODY:
            return min(self._body_until, self._last + self.admission.stall_s)
        if self.client is IDLE or self.client is LINGER:
            return self._until
        return _NEVER

    def holds_bytes(self) -> bool:
        """Whether bytes read from the client wait here (a pipelined request: the client is not gone)."""
        return bool(self._buf)

    def close(self) -> None:
        """The connection is gone (or the gateway stops): what the request held is given back."""
        self._release()
        self._move(GONE)

    # -- the states ------------------------------------------------------------------------------------------

    def _fresh(self) -> Step:
        step = self.step
        step.writes = []
        step.request = None
        step.refused = step.half_close = step.close = False
        return step

    def _move(self, event: HttpEvent) -> None:
        """Both sides move on by `event`, or neither (`IllegalTransition`: a move out of turn, a bug)."""
        self.client, self.ours = transition(CLIENT_MOVES, self.client, event), transition(OUR_MOVES, self.ours, event)

    def _parse(self, data: bytes, now: float) -> None:
        """Read a head and its body from `_buf` + `data` until the request is whole, or the bytes run out."""
        buf = self._buf
        if buf:
            buf += data
            src: Source = buf
        else:
            src = data  # the usual case: nothing left over, the bytes are read where they lie
        try:
            pos = self._read_head(src, now) if self.client is IDLE else 0
            body = self._body
            if body is not None:
                pos = body.take(src, pos)
                if body.done:
                    assert self._head is not None
                    self._head.body = body.result()
                    self._hand_out(self._head)
        except HttpError as e:
            self._refuse(e, now)
            return
        if src is buf:
            del buf[:pos]
        elif pos < len(src):
            buf += memoryview(src)[pos:]

    def _read_head(self, src: Source, now: float) -> int:
        end = len(src)
        at = src.find(b"\r\n\r\n", max(0, self._scanned - 3))
        if at < 0 or at > MAX_HEAD_BYTES:
            if at < 0 and end <= MAX_HEAD_BYTES + 3:
                self._scanned = end
                return 0
            if src.find(b"\r\n", 0, MAX_TARGET_BYTES + 64) < 0:
                raise HttpError(414, f"request line longer than {MAX_TARGET_BYTES} bytes", linger=True)
            raise HttpError(431, f"request headers longer than {MAX_HEAD_BYTES} bytes", linger=True)
        self._scanned = 0
        # blank lines before a request line are skipped (RFC 9112 2.2), as far as the first empty line
        req = parse_head(cut(src, 0, at) if src[0] not in _CRLF else cut(src, 0, at + 4).lstrip(b"\r\n")[:-4])
        length, coding = req.header(b"content-length"), req.header(b"transfer-encoding")
        if coding is not None and length is not None:
            raise HttpError(400, "a request may not have both Transfer-Encoding and Content-Length", close=True)
        if coding is not None and coding.lower() != b"chunked":
            raise HttpError(400, f"unsupported Transfer-Encoding '{coding.decode('latin-1')[:40]}'", close=True)
        if length is not None and not (length.isdigit() and len(length) <= 19):
            raise HttpError(400, f"Content-Length '{length.decode('latin-1')[:40]}' is not a byte count", close=True)
        size = int(length) if length is not None else 0
        if size > self.cap:
            message = f"request body of {size} bytes is over this server's limit of {self.cap} bytes"
            raise HttpError(413, message, linger=True)
        start = at + 4
        if coding is None and not size:
            self._hand_out(req)
            return start
        if (req.header(b"expect") or b"").lower() == b"100-continue":
            self.step.writes.append(CONTINUE)
        if coding is None and len(src) - start >= size:  # the whole body came with its head: the usual case
            self._charge(size)
            req.body = cut(src, start, start + size)
            self._hand_out(req)
            return start + size
        self._head = req
        self._body = ChunkedBody(self.cap, self._charge) if coding is not None else SizedBody(size, self._charge)
        self._body_until = now + self.body_s
        self._move(HEAD)
        return start

    def _charge(self, n: int) -> None:
        """Count `n` bytes of body that arrived (503 kLiteServiceDeny beyond a bound)."""
        try:
            self.admission.take_bytes(n, self.account, own=self.charged)
        except Overloaded as e:
            raise HttpError(503, e.message, linger=True) from None
        self.charged += n

    def _hand_out(self, req: Request) -> None:
        self._head = self._body = None
        self._body_until = _NEVER
        self._move(REQUEST)
        self.step.request = req

    def _release(self) -> None:
        if self.charged:
            self.admission.give_bytes(self.charged, self.account)
            self.charged = 0

    def _ended(self, now: float) -> None:
        """The client closed its side: mid-request a 400, between requests quietly."""
        if self.client is BODY:
            assert self._body is not None
            self._refuse(self._body.ended(), now)
        elif self.client is IDLE and self._buf.strip():
            self._refuse(HttpError(400, "the request ended before its headers did", close=True), now)
        elif self.client is not CLOSED:
            self._end()

    def _refuse(self, e: HttpError, now: float) -> None:
        """Answer a framing error: the connection closes, after lingering when the client may still send."""
        self._release()  # before lingering: the dropped rest of the body is not held
        self._head = self._body = None
        step = self.step
        step.writes.append(error_response(e.status, e.message, close=True))
        step.refused = True
        linger = e.linger and not self._eof
        self._move(REFUSED_LINGER if linger else REFUSED)
        if linger:
            self._dropped = len(self._buf)
            self._until = now + LINGER_S
            step.half_close = True
        else:
            step.close = True
        self._buf.clear()

    def _end(self) -> None:
        self._release()
        self._move(ENDED)
        self.step.close = True
