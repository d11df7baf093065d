"""The gateway's HTTP/1.1 front: strict framing, inference requests checked, the rest relayed to Triton as is.

Triton 2.51's HTTP server (libevhtp) drops the connection on many framing errors, serves HTTP/9.9, has no
body-size limit and answers 500 for bodies it cannot parse. This front reads each request itself (request
line, headers within 64 KiB, Content-Length or chunked body within the cap: 413 before the body is read),
checks `/v2/models/<m>[/versions/<v>]/infer` bodies (`kserve_json`), and forwards the same bytes over a
pooled keep-alive connection. Every other endpoint (generate, health, metadata, config, statistics,
repository, shared memory, logging, trace) goes through as it came, headers included, so the admin key
reaches Triton; only its body is read first for what Triton's JSON reader would die of (`check_json_body`),
and a shared-memory call may not name the gateway's regions (`check_region_call`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import urllib.parse
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mslite_contract.settings import GATEWAY_MAX_STRING_ELEMENTS
from mslite_gateway.admission import CHUNK_OVERHEAD_BYTES, Account, Admission, Overloaded
from mslite_gateway.deadlines import within
from mslite_gateway.kserve_json import check_infer_request
from mslite_gateway.rules import Refusal, check_http_version, check_own_region, empty_batches, inflate_bounded

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_HEAD_BYTES = 64 << 10
MAX_TARGET_BYTES = 8 << 10
MAX_HEADERS = 100
LINGER_S = 5.0  # after refusing a body, how long its bytes are read and dropped so the client sees the answer
LINGER_BYTES = 1 << 30
_TOKEN_CHARS = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_TOKEN = re.compile(_TOKEN_CHARS)
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
# Header lines that pass both checks above (a token, a colon, a value without control bytes), one after another.
_GOOD_LINE = _TOKEN_CHARS + rb":[\x09\x20-\x7e\x80-\xff]*"
_GOOD_LINES = re.compile(rb"(?:%s(?:\r\n%s)*)?" % (_GOOD_LINE, _GOOD_LINE))
_BAD_TARGET = re.compile(rb"[\x00-\x20\x7f]")
INFER_ROUTE = re.compile(rb"/v2/models/([^/]+)(?:/versions/([^/]*))?/infer")
# Inference by other names: a JSON body Triton turns into an inference request.
GENERATE_ROUTE = re.compile(rb"/v2/models/([^/]+)(?:/versions/([^/]*))?/generate(?:_stream)?")
# Shared-memory calls that name one region; and the one that unregisters them all.
REGION_ROUTE = re.compile(rb"/v2/systemsharedmemory/region/([^/]+)/(register|unregister)")
UNREGISTER_ALL = b"/v2/systemsharedmemory/unregister"
# Python's JSON reader stops at its recursion limit (1000 levels); Triton 2.51's recurses until it crashes.
_NESTING_LIMIT = 900
_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"upgrade", b"proxy-connection", b"expect"}
    | {b"content-length", b"trailer"}
)
_STAGED_DROP = _HOP_BY_HOP | {b"inference-header-content-length"}
# Triton 2.51 reports its JSON reader's errors as 500; a request that slipped past the checks is still a 400.
_PARSE_500 = re.compile(rb'"error":"(Unable to parse|failed to parse the request JSON|failed to get request params)')
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
    charged: int = 0  # bytes counted in flight by admission control, given back once answered
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


def error_response(status: int, message: str, *, close: bool) -> bytes:
    """A Triton-style JSON error answer."""
    body = json.dumps({"error": message}, separators=(",", ":")).encode()  # as Triton writes it
    head = f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
    return head.encode() + body


async def read_head(reader: asyncio.StreamReader, timeout_s: float) -> bytes | None:
    """The request line and headers, without the blank line; None on a clean end of the connection."""
    try:
        head = await within(reader.readuntil(b"\r\n\r\n"), timeout_s)
    except asyncio.IncompleteReadError as e:
        if not e.partial.strip():
            return None
        raise HttpError(400, "the request ended before its headers did", close=True) from None
    except asyncio.LimitOverrunError:
        first = await reader.read(MAX_HEAD_BYTES)
        if b"\r\n" not in first[: MAX_TARGET_BYTES + 64]:
            raise HttpError(414, f"request line longer than {MAX_TARGET_BYTES} bytes", linger=True) from None
        raise HttpError(431, f"request headers longer than {MAX_HEAD_BYTES} bytes", linger=True) from None
    return head.lstrip(b"\r\n")[:-4]


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


async def read_body(
    req: Request,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    cap: int,
    t: float,
    admission: Admission,
    account: Account | None = None,
) -> None:
    """Read the body into `req.body`: Content-Length or chunked, at most `cap` bytes (413 before reading more).

    The bytes are counted by `admission` as they arrive (`req.charged`, on `account`, the connection's; the
    caller gives them back once the request is answered), a chunked body's every chunk CHUNK_OVERHEAD_BYTES
    more: a body announced and not sent holds nothing.

    Raises:
        HttpError: a framing error (400), a body over the cap (413), the in-flight bytes full (503
            kLiteServiceDeny), a body that does not arrive in `t` seconds, or that brings no new byte for
            `admission.stall_s` (408).
    """
    length, coding = req.header(b"content-length"), req.header(b"transfer-encoding")
    if coding is not None and length is not None:
        raise HttpError(400, "a request may not have both Transfer-Encoding and Content-Length", close=True)
    if coding is not None and coding.lower() != b"chunked":
        raise HttpError(400, f"unsupported Transfer-Encoding '{coding.decode('latin-1')[:40]}'", close=True)
    if length is not None and not (length.isdigit() and len(length) <= 19):
        raise HttpError(400, f"Content-Length '{length.decode('latin-1')[:40]}' is not a byte count", close=True)
    size = int(length) if length is not None else 0
    if size > cap:
        raise HttpError(413, f"request body of {size} bytes is over this server's limit of {cap} bytes", linger=True)
    if coding is None and not size:
        return
    if (req.header(b"expect") or b"").lower() == b"100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    body = _Body(req, reader, admission, account, t)
    try:
        req.body = await (body.chunked(cap) if coding is not None else body.exactly(size))
    except asyncio.IncompleteReadError:  # within a chunked body's framing
        raise HttpError(400, "the body ended before its last chunk", close=True) from None
    except asyncio.LimitOverrunError:
        raise HttpError(400, "malformed chunked body: a chunk-size line is too long", close=True) from None


class _Body:
    """One request body being read: each wait bounded by the body's deadline and by the stall timeout."""

    def __init__(
        self, req: Request, reader: asyncio.StreamReader, admission: Admission, account: Account | None, t: float
    ) -> None:
        self.req = req
        self.reader = reader
        self.admission = admission
        self.account = account
        self.t = t
        self.deadline = time.monotonic() + t

    async def wait(self, awaitable: Awaitable[T]) -> T:
        """The next bytes of the body; HttpError 408 when they do not come in time."""
        left = self.deadline - time.monotonic()
        stall_s = self.admission.stall_s
        try:
            return await within(awaitable, min(left, stall_s))
        except asyncio.TimeoutError:  # TimeoutError itself from Python 3.11 on
            if left <= stall_s:
                raise HttpError(408, f"the request body did not arrive within {self.t:.0f} s", close=True) from None
            self.admission.stalled += 1
            raise HttpError(
                408, f"the request body stopped: no byte of it arrived for {stall_s:g} s", close=True
            ) from None

    def charge(self, n: int) -> None:
        """Count `n` bytes that arrived (503 kLiteServiceDeny beyond a bound)."""
        try:
            self.admission.take_bytes(n, self.account, own=self.req.charged)
        except Overloaded as e:
            raise HttpError(503, e.message, linger=True) from None
        self.req.charged += n

    async def exactly(self, n: int) -> bytes:
        """`n` bytes of body, each piece counted as it arrives."""
        first = await self.wait(self.reader.read(n))
        self.charge(len(first))
        if len(first) == n:  # a small body comes in one piece
            return first
        if not first:
            raise HttpError(400, f"the body ended after 0 of its {n} bytes", close=True)
        parts = [first]
        await self.take(n - len(first), parts.append, before=len(first))
        return b"".join(parts)

    async def take(self, n: int, sink: Callable[[bytes], object], *, before: int = 0) -> None:
        """`n` bytes of body handed to `sink` as they arrive, each piece counted first."""
        got = 0
        while got < n:
            piece = await self.wait(self.reader.read(n - got))
            if not piece:
                raise HttpError(400, f"the body ended after {before + got} of its {before + n} bytes", close=True)
            self.charge(len(piece))
            sink(piece)
            got += len(piece)

    async def chunked(self, cap: int) -> bytes:
        """A chunked body, decoded."""
        # One growing buffer: a list of chunks would cost ~40 bytes of object per chunk (2.3 GB for 32 MiB
        # sent as 2-byte chunks).
        body = bytearray()
        cost = 0
        reader = self.reader
        while True:
            line = await self.wait(reader.readuntil(b"\r\n"))
            size_text = line[:-2].split(b";", 1)[0].strip()
            if not size_text or len(size_text) > 16 or not all(c in b"0123456789abcdefABCDEF" for c in size_text):
                raise HttpError(400, "malformed chunked body: bad chunk size", close=True)
            size = int(size_text, 16)
            if size == 0:
                while (await self.wait(reader.readuntil(b"\r\n"))) != b"\r\n":  # trailers: read and dropped
                    pass
                return bytes(body)
            cost += size + CHUNK_OVERHEAD_BYTES
            if cost > cap:
                raise HttpError(
                    413,
                    f"request body over this server's limit of {cap} bytes (a chunked body's every chunk counts "
                    f"{CHUNK_OVERHEAD_BYTES} bytes more: send fewer, larger chunks)",
                    linger=True,
                )
            self.charge(CHUNK_OVERHEAD_BYTES)
            await self.take(size, body.extend)
            if await self.wait(reader.readexactly(2)) != b"\r\n":
                raise HttpError(400, "malformed chunked body: a chunk does not end with CRLF", close=True)


def check_infer(
    req: Request,
    model: bytes,
    version: bytes | None,
    cap: int,
    keyed: bool = False,
    max_strings: int = GATEWAY_MAX_STRING_ELEMENTS,
) -> tuple[dict[str, Any], memoryview | None]:
    """Refuse an inference request Triton would mis-serve, answer 500 to, or die of (Refusal).

    `keyed`: the request came with the admin key (it may name shared-memory regions); `max_strings`: the most
    string (BYTES) elements it may declare.

    Returns:
        The JSON header, and the binary tensor data as it lies in `req.body` (None when there is none, or
        when the body is compressed).
    """
    if version is not None:
        check_http_version(urllib.parse.unquote(version.decode("latin-1")))
    body = decoded_body(req, cap)
    length = req.header(b"inference-header-content-length")
    if length is None:
        if not body:
            raise Refusal("the request body is empty: an inference request needs a JSON body")
        header, payload = body, None
    else:
        text = length.decode("latin-1")[:24]
        if not length.isdigit() or len(length) > 19:  # int() refuses numbers of over 4300 digits
            raise Refusal(f"Inference-Header-Content-Length '{text}' is not a byte count")
        n = int(length)
        if not 0 < n <= len(body):
            raise Refusal(
                f"Inference-Header-Content-Length {text} is not within the body's {len(body)} bytes (0 excluded)"
            )
        header, payload = body[:n], memoryview(body)[n:]
    model_name = urllib.parse.unquote(model.decode("latin-1"))
    doc = check_infer_request(header, model_name, payload=payload, cap=cap, keyed=keyed, max_strings=max_strings)
    return doc, payload if body is req.body else None


def check_infer_elsewhere(
    req: Request, model: bytes, version: bytes | None, cap: int, keyed: bool, max_strings: int
) -> list[tuple[str, list[int]]]:
    """`check_infer` in another process: what comes back is only the inputs of batch size 0 (`empty_batches`)."""
    doc, _ = check_infer(req, model, version, cap, keyed, max_strings)
    return infer_empty_batches(doc)


def infer_empty_batches(doc: dict[str, Any]) -> list[tuple[str, list[int]]]:
    """The inputs of a checked JSON inference request whose first dim is 0 (`rules.empty_batches`)."""
    return empty_batches((item["name"], item["shape"]) for item in doc["inputs"])


def decoded_body(req: Request, cap: int) -> bytes:
    """The body, inflated (at most `cap` bytes) when its Content-Encoding is gzip or deflate.

    Raises:
        Refusal: invalid compressed data, or over `cap` inflated.
        HttpError: 415 for another Content-Encoding.
    """
    encoding = (req.header(b"content-encoding") or b"identity").lower()
    if encoding in (b"gzip", b"deflate"):
        # zlib or gzip header, told apart by zlib
        return inflate_bounded(req.body, cap, wbits=zlib.MAX_WBITS | 32, what="body", form="gzip/deflate")
    if encoding not in (b"identity", b""):
        raise HttpError(415, f"Content-Encoding '{encoding.decode('latin-1')[:20]}': use gzip, deflate or identity")
    return req.body


def needs_offload(req: Request, limit: int, *, infer: bool = True) -> bool:
    """Whether checking `req`'s body may take long: compressed (it may inflate ~1000-fold), or JSON over `limit`.

    Only its JSON counts: an inference request's header part, and for other routes (`infer` False) only a
    body that may nest deeply (`few_brackets`), since nothing else of theirs is parsed.
    """
    if (req.header(b"content-encoding") or b"identity").lower() not in (b"identity", b""):
        return True
    return _json_bytes(req, infer) > limit and (infer or not few_brackets(req.body))


def _json_bytes(req: Request, infer: bool) -> int:
    length = req.header(b"inference-header-content-length") if infer else None
    return int(length) if length is not None and length.isdigit() and len(length) <= 19 else len(req.body)


def work_bytes(req: Request, limit: int, *, infer: bool = True) -> int:
    """How much JSON checking `req` reads, counted up to `limit` + 1 (`offload` chooses its lane by it).

    A compressed body is inflated that far (only counted; the check inflates it again): run this in a
    thread, as zlib lets go of the GIL. Invalid compressed data counts 0: its check refuses it at once.
    """
    if (req.header(b"content-encoding") or b"identity").lower() in (b"gzip", b"deflate"):
        inflater = zlib.decompressobj(wbits=zlib.MAX_WBITS | 32)
        try:
            return len(inflater.decompress(req.body, limit + 1))
        except zlib.error:
            return 0
    return min(_json_bytes(req, infer), limit + 1)


def check_json_body(req: Request, version: bytes | None, cap: int) -> None:
    """Refuse a JSON body nested deeper than Triton's reader survives (every route but /infer: `check_infer`).

    Anything else wrong with it is left to Triton, which names it in its own words.

    Raises:
        Refusal: nested too deeply; a generate route's version Triton's route would not take (404).
        HttpError: 415 for a Content-Encoding other than gzip and deflate.
    """
    if version is not None:
        check_http_version(urllib.parse.unquote(version.decode("latin-1")))
    body = decoded_body(req, cap)
    if few_brackets(body):  # it cannot nest deeply: a model upload's base64, most bodies
        return
    try:
        json.loads(body.decode("utf-8", "replace"))  # bytes that are not UTF-8 do not hide what follows them
    except RecursionError:
        raise Refusal("request JSON is nested too deeply") from None
    except ValueError as e:
        # Triton's reader (another parser) may read further than Python's did: it answers in its own words
        # only when the body cannot nest deeply at all
        raise Refusal(f"request JSON could not be parsed: {str(e)[:200]}") from None


def few_brackets(body: bytes) -> bool:
    """Whether `body` holds too few '[' and '{' to nest past the limit (memchr passes: ~0.4 ms a MiB)."""
    seen = 0
    for opener in (b"[", b"{"):
        at = body.find(opener)
        while at >= 0:
            seen += 1
            if seen > _NESTING_LIMIT:
                return False
            at = body.find(opener, at + 1)
    return True


def check_region_call(req: Request) -> bool:
    """A shared-memory call that names one of the gateway's regions is refused; True for an unregister call.

    Raises:
        Refusal: it registers or unregisters a region with the gateway's prefix.
    """
    path = req.target.split(b"?", 1)[0]
    if path == UNREGISTER_ALL:
        return True
    match = REGION_ROUTE.fullmatch(path)
    if match is None:
        return False
    check_own_region(urllib.parse.unquote(match.group(1).decode("latin-1")), match.group(2).decode() + "ed")
    return match.group(2) == b"unregister"


def stage_body(doc: dict[str, Any], region: str, offset: int) -> bytes:
    """The JSON body that points Triton at binary tensor data copied to `region` from `offset` on.

    Every input given as binary data (`binary_data_size`) becomes a shared-memory input, in order. `doc`
    itself is left as it is (the checks share it between requests).
    """
    inputs = []
    for item in doc["inputs"]:
        params = item.get("parameters")
        if params and "binary_data_size" in params:
            params = {k: v for k, v in params.items() if k != "binary_data_size"}
            params["shared_memory_region"] = region
            params["shared_memory_offset"] = offset
            params["shared_memory_byte_size"] = item["parameters"]["binary_data_size"]
            offset += params["shared_memory_byte_size"]
            item = {**item, "parameters": params}
        inputs.append(item)
    return json.dumps({**doc, "inputs": inputs}, separators=(",", ":")).encode()


def upstream_head(req: Request, body: bytes | None = None) -> bytes:
    """The request line and headers to send to Triton: hop-by-hop headers dropped, Content-Length set.

    With `body` (a staged request's JSON, `stage_body`) in place of the request's, the binary data's header
    goes too.
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


def remap_parse_500(status_line: bytes, body: bytes) -> bytes:
    """HTTP 500 from Triton's JSON reader becomes 400: the request, not the server, was at fault."""
    if status_line.split(b" ", 2)[1:2] == [b"500"] and _PARSE_500.search(body[:200]):
        return b"HTTP/1.1 400 Bad Request"
    return status_line
