"""What the gateway checks in an HTTP request's body before Triton reads it, and what it rewrites there.

Inference requests (`/v2/models/<m>[/versions/<v>]/infer`) are checked whole (`check_infer`, `kserve_json`):
what Triton would mis-serve, answer 500 to, or die of is refused with a clear message. Every other body Triton
parses is read only for what its JSON reader would die of (`check_json_body`: nesting), a shared-memory call
may not name the gateway's regions (`check_region_call`), and a compressed body is inflated within the size
cap first (`decoded_body`). `needs_offload` and `work_bytes` say which checks may take long enough to run
off the event loop (`offload`); `stage_body` points Triton at tensor data copied to shared memory, and
`remap_parse_500` turns Triton's 500 for JSON it could not parse into the 400 it is.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import zlib
from typing import Any

from mslite_contract.settings import GATEWAY_MAX_STRING_ELEMENTS
from mslite_gateway.http.kserve_json import check_infer_request
from mslite_gateway.http.messages import HttpError, Request
from mslite_gateway.rules import Refusal, check_http_version, check_own_region, empty_batches, inflate_bounded

INFER_ROUTE = re.compile(rb"/v2/models/([^/]+)(?:/versions/([^/]*))?/infer")
# Inference by other names: a JSON body Triton turns into an inference request.
GENERATE_ROUTE = re.compile(rb"/v2/models/([^/]+)(?:/versions/([^/]*))?/generate(?:_stream)?")
# Shared-memory calls that name one region; and the one that unregisters them all.
REGION_ROUTE = re.compile(rb"/v2/systemsharedmemory/region/([^/]+)/(register|unregister)")
UNREGISTER_ALL = b"/v2/systemsharedmemory/unregister"
# Python's JSON reader stops at its recursion limit (1000 levels); Triton 2.51's recurses until it crashes.
_NESTING_LIMIT = 900
# Triton 2.51 reports its JSON reader's errors as 500; a request that slipped past the checks is still a 400.
_PARSE_500 = re.compile(rb'"error":"(Unable to parse|failed to parse the request JSON|failed to get request params)')


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


def remap_parse_500(status_line: bytes, body: bytes) -> bytes:
    """HTTP 500 from Triton's JSON reader becomes 400: the request, not the server, was at fault."""
    if status_line.split(b" ", 2)[1:2] == [b"500"] and _PARSE_500.search(body[:200]):
        return b"HTTP/1.1 400 Bad Request"
    return status_line
