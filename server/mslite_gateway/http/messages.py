"""HTTP/1.1 messages as the gateway reads and writes them: a request's head parsed strictly, heads written back.

`parse_head` reads a request line and its header lines (RFC 9112, nothing lenient: Triton 2.51's HTTP server
serves HTTP/9.9 and takes header lines without a colon); `upstream_head` and `client_head` write the heads
that go on to Triton and back to the client, hop-by-hop headers dropped and Content-Length set;
`error_response` is an answer of the gateway's own, in Triton's JSON form.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

MAX_HEAD_BYTES = 64 << 10
MAX_TARGET_BYTES = 8 << 10
MAX_HEADERS = 100
_TOKEN_CHARS = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_TOKEN = re.compile(_TOKEN_CHARS)
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
# Header lines that pass both checks above (a token, a colon, a value without control bytes), one after another.
_GOOD_LINE = _TOKEN_CHARS + rb":[\x09\x20-\x7e\x80-\xff]*"
_GOOD_LINES = re.compile(rb"(?:%s(?:\r\n%s)*)?" % (_GOOD_LINE, _GOOD_LINE))
_BAD_TARGET = re.compile(rb"[\x00-\x20\x7f]")
_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"upgrade", b"proxy-connection", b"expect"}
    | {b"content-length", b"trailer"}
)
_STAGED_DROP = _HOP_BY_HOP | {b"inference-header-content-length"}
_REASONS = {400: "Bad Request", 408: "Request Timeout", 413: "Content Too Large", 414: "URI Too Long"}
_REASONS |= {415: "Unsupported Media Type", 431: "Request Header Fields Too Large", 503: "Service Unavailable"}
_REASONS |= {405: "Method Not Allowed", 502: "Bad Gateway", 504: "Gateway Timeout"}


class HttpError(Exception):
    """An answer the gateway gives itself; `close` when the connection cannot carry another request."""

    def __init__(self, status: int, message: str, *, close: bool = False, linger: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.close = close or linger
        self.linger = linger  # the client may still be sending a body we refused: read and drop it first


@dataclass
class Request:
    """One parsed request: `headers` keep their raw lines for forwarding."""

    method: bytes
    target: bytes
    version: bytes
    headers: list[tuple[bytes, bytes, bytes]]  # (lower-case name, value, raw line)
    body: bytes = b""
    values: dict[bytes, bytes | None] = field(init=False)  # by name; None: given twice with different values

    def __post_init__(self) -> None:
        self.values = {}
        for name, value, _ in self.headers:
            self.values[name] = value if self.values.get(name, value) == value else None

    def header(self, name: bytes) -> bytes | None:
        """The value of header `name` (lower case); HttpError when it is given twice with different values."""
        if name not in self.values:
            return None
        value = self.values[name]
        if value is None:
            raise HttpError(400, f"header {name.decode()} is given more than once with different values", close=True)
        return value


@dataclass
class Response:
    """Triton's answer, read whole."""

    status_line: bytes
    headers: list[tuple[bytes, bytes]]  # (lower-case name, raw line)
    body: bytes
    reusable: bool


def error_response(status: int, message: str, *, close: bool) -> bytes:
    """A Triton-style JSON error answer."""
    body = json.dumps({"error": message}, separators=(",", ":")).encode()  # as Triton writes it
    head = f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
    return head.encode() + body


def parse_head(head: bytes) -> Request:
    """Request line and header lines, strictly (RFC 9112), or HttpError 400/414."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[0].isupper():
        raise HttpError(400, "malformed request line: expected 'METHOD /target HTTP/1.1'", close=True)
    method, target, version = parts
    if version not in (b"HTTP/1.1", b"HTTP/1.0"):
        shown = version.decode("ascii", "replace")[:20]
        raise HttpError(400, f"unsupported HTTP version '{shown}': this server speaks HTTP/1.1", close=True)
    if len(target) > MAX_TARGET_BYTES:
        raise HttpError(414, f"request target longer than {MAX_TARGET_BYTES} bytes", close=True)
    if not target.startswith(b"/") or _BAD_TARGET.search(target):
        raise HttpError(400, "malformed request target: expected a path with no spaces or control bytes", close=True)
    if len(lines) - 1 > MAX_HEADERS:
        raise HttpError(431, f"more than {MAX_HEADERS} header lines", close=True)
    headers = []
    checked = _GOOD_LINES.fullmatch(head, len(lines[0]) + 2) is not None  # every line at once, the usual case
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not checked and (not sep or not _TOKEN.fullmatch(name)):
            raise HttpError(400, "malformed header line: expected 'Name: value'", close=True)
        value = value.strip(b" \t")
        if not checked and _BAD_VALUE.search(value):
            raise HttpError(400, f"header {name.decode()} holds a control byte (NUL, CR, LF...)", close=True)
        headers.append((name.lower(), value, line))
    return Request(method, target, version, headers)


def upstream_head(req: Request, body: bytes | None = None) -> bytes:
    """The request line and headers to send to Triton: hop-by-hop headers dropped, Content-Length set.

    With `body` (a staged request's JSON, `http.checks.stage_body`) in place of the request's, the binary
    data's header goes too.
    """
    drop = _HOP_BY_HOP if body is None else _STAGED_DROP
    body = req.body if body is None else body
    lines = [req.method + b" " + req.target + b" HTTP/1.1"]
    lines += [raw for name, _, raw in req.headers if name not in drop]
    if body or req.method in (b"POST", b"PUT"):
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n"


def client_head(
    status_line: bytes, headers: list[tuple[bytes, bytes]], body_len: int, close: bool, *, json_body: bool = False
) -> bytes:
    """Triton's answer head for the client: hop-by-hop headers dropped, Content-Length set.

    `json_body`: the body is JSON, and its Content-Type says so (Triton writes some JSON errors as text/plain).
    """
    dropped = _HOP_BY_HOP | {b"content-type"} if json_body else _HOP_BY_HOP
    lines = [status_line] + [raw for name, raw in headers if name not in dropped]
    if json_body:
        lines.append(b"Content-Type: application/json")
    lines.append(b"Content-Length: %d" % body_len)
    if close:
        lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"
