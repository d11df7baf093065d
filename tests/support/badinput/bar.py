"""The reliability bar: judging an answer, the known gaps of Triton 2.51, and the `Tally` of a run.

Every malformed request gets a 4xx-class answer (HTTP 4xx; gRPC INVALID_ARGUMENT, NOT_FOUND, OUT_OF_RANGE,
RESOURCE_EXHAUSTED or UNIMPLEMENTED) whose message names the problem and carries no path or traceback.
A connection may close without an answer only where HTTP allows nothing else: the client sent an incomplete
request (a body shorter than its Content-Length, unterminated headers) and then EOF. NaN and Inf are valid
floats and must be served. `KNOWN_GAPS` lists what Triton 2.51 does instead, found by this campaign, with
where a fix could live.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from tests.support.badinput.cases import Case

OK_STATUSES = ("200", "OK")
GRPC_CLIENT_ERRORS = frozenset({"INVALID_ARGUMENT", "NOT_FOUND", "OUT_OF_RANGE", "RESOURCE_EXHAUSTED", "UNIMPLEMENTED"})
_LEAK = re.compile(r"Traceback|File \"|\.py\b|site-packages|(?<![\w.:])/(?:[\w.@+-]+/)+[\w.@+-]+")


@dataclass
class Outcome:
    """A case and the answer it got (what `sending.Sender.send` returns)."""

    case: Case
    status: str  # HTTP "400"...; gRPC "OK", "INVALID_ARGUMENT"...; "NO_ANSWER"; "TIMEOUT"
    message: str
    seconds: float
    problem: str | None = None  # a valid case whose outputs were wrong


def violation(o: Outcome) -> str | None:
    """Why this answer misses the reliability bar, or None."""
    c = o.case
    if c.valid:
        if o.status not in OK_STATUSES:
            return f"valid request refused ({o.status})"
        return o.problem
    if o.status in OK_STATUSES:
        return "malformed request served"
    if o.status == "NO_ANSWER":
        return None if c.no_answer_ok else "connection closed without an answer"
    if o.status == "TIMEOUT":
        return "no answer before the timeout"
    if c.protocol == "http" and not (o.status.isdigit() and 400 <= int(o.status) < 500):
        return f"HTTP {o.status}, not 4xx"
    if c.protocol == "grpc" and o.status not in GRPC_CLIENT_ERRORS:
        return f"gRPC {o.status}, not a client error"
    if not o.message.strip():
        return "empty message"
    if _LEAK.search(o.message):
        return "message carries a path or a traceback"
    if c.pattern and not re.search(c.pattern, o.message, re.I):
        return f"message does not name the problem (/{c.pattern}/)"
    return None


@dataclass(frozen=True)
class Gap:
    """A way Triton 2.51 (or our backend) misses the bar that this campaign found, and where a fix could live."""

    key: str
    summary: str
    fix: str
    matches: Callable[[Outcome], bool]


def _http_500_parse(o: Outcome) -> bool:
    parse = re.match(
        r"(Unable to parse|failed to parse the request JSON buffer|failed to get request params)", o.message
    )
    return o.case.protocol == "http" and o.status == "500" and parse is not None


def _served(o: Outcome) -> bool:
    return o.status in OK_STATUSES


KNOWN_GAPS = (
    Gap(
        "http-parse-500",
        "HTTP 500 for a body Triton cannot parse: broken JSON, wrong JSON types, negative or >= 2^64 dims (JSON or "
        "binary header), JSON data not matching the shape or out of range for the datatype, bad parameters, an "
        "Inference-Header-Content-Length that cuts the JSON header",
        "Triton 2.51 http_server.cc reports TritonJson errors as TRITONSERVER_ERROR_INTERNAL (upstream "
        "server#8762, PR #8773 open); ours: an HTTP front (proxy) that validates before Triton, or HTTP served by us",
        _http_500_parse,
    ),
    Gap(
        "http-framing-closed",
        "HTTP framing errors (bad request line, bad Content-Length, bad chunk size, header line without colon, "
        "200 KB header line, 100 KB URL, HTTP/0.9, HTTP/2 preface, chunked + Content-Length) get no answer at all",
        "libevhtp inside Triton 2.51 drops the connection; only an HTTP front of ours could answer 400/414/431",
        lambda o: o.case.category == "http_framing" and o.status == "NO_ANSWER",
    ),
    Gap(
        "http-framing-lenient",
        "HTTP/9.9 requests are served (answered 'HTTP/9.9 200 OK'), so are NUL bytes inside a header value",
        "libevhtp inside Triton 2.51; an HTTP front of ours",
        lambda o: o.case.category == "http_framing" and _served(o),
    ),
    Gap(
        "grpc-unparsable-internal",
        "gRPC INTERNAL 'Unable to parse request' for bytes that are not a ModelInferRequest (truncated, bad wire "
        "type, invalid UTF-8 in a string field, over-long varint, length past the end)",
        "grpc++'s status for a failed deserialization in Triton 2.51's gRPC frontend; out of the backend's reach",
        lambda o: o.case.protocol == "grpc" and o.status == "INTERNAL" and o.message == "Unable to parse request",
    ),
    Gap(
        "batch-dim-wraps",
        "a batch dim outside [0, 2^32) (b + 2^32*k, b + 2^62*k, or negative over gRPC) is served as batch "
        "(dim mod 2^32): Triton keeps the batch size as uint32 and checks the byte size against that",
        "Triton core (inference_request.cc); the backend only sees the wrapped shape. Ours: an HTTP/gRPC front "
        "that refuses dims outside [0, 2^31), or a Triton newer than 2.51",
        lambda o: "batch dim" in o.case.what and _served(o),
    ),
    Gap(
        "grpc-version-lenient",
        "gRPC model_version '1.0', '1abc', '+1', ' 1', '1e3' are read as version 1 and served (HTTP answers 404)",
        "Triton 2.51's gRPC frontend parses the version with std::stol and ignores what follows",
        lambda o: o.case.category == "unknown_version" and o.case.protocol == "grpc" and _served(o),
    ),
    Gap(
        "json-ragged-served",
        "JSON data nested raggedly ([[a], [b, c]] for shape [1, 3]) is flattened and served",
        "Triton 2.51 http_server.cc flattens any nesting and only counts elements",
        lambda o: o.case.what == "JSON body: ragged" and _served(o),
    ),
    Gap(
        "http-raw-fallback",
        "an empty body, or an empty or non-numeric Inference-Header-Content-Length, makes Triton take the whole "
        "body as the model's one raw input: an empty body is served to variable_seq as shape [1, 0], and the "
        "other answers (400) talk about 'raw_input' or 'Raw request' instead of the header",
        "Triton 2.51 http_server.cc (raw binary request extension); an HTTP front could refuse them",
        lambda o: (
            (o.case.category == "truncated" and re.search(r"raw_input|Raw request", o.message) is not None)
            or (o.case.what == "JSON body: top_level b''" and _served(o))
        ),
    ),
)


def known_gap(o: Outcome) -> Gap | None:
    return next((g for g in KNOWN_GAPS if g.matches(o)), None)


class Tally:
    """Counts per protocol x category x status, and a few examples of every kind of violation."""

    def __init__(self, examples: int = 3) -> None:
        self.lock = threading.Lock()
        self.examples = examples
        self.counts: Counter[tuple[str, str, str]] = Counter()
        self.violations: Counter[tuple[str, str, str, str, str]] = Counter()  # gap, protocol, category, status, why
        self.samples: dict[tuple[str, str, str, str, str], list[Outcome]] = {}
        # answers carrying a path or a traceback, whatever their status (a 500 that leaks counts too)
        self.leaks: Counter[tuple[str, str, str]] = Counter()  # protocol, category, status
        self.leak_samples: list[Outcome] = []
        self.seconds = 0.0

    def add(self, o: Outcome) -> None:
        why = violation(o)
        with self.lock:
            self.counts[(o.case.protocol, o.case.category, o.status)] += 1
            if _LEAK.search(o.message):
                self.leaks[(o.case.protocol, o.case.category, o.status)] += 1
                if len(self.leak_samples) < self.examples:
                    self.leak_samples.append(o)
            if why is not None:
                gap = known_gap(o)
                key = (gap.key if gap else "NEW", o.case.protocol, o.case.category, o.status, why)
                self.violations[key] += 1
                kept = self.samples.setdefault(key, [])
                if len(kept) < self.examples:
                    kept.append(o)

    def malformed(self, protocol: str | None = None) -> int:
        return sum(n for (p, c, _), n in self.counts.items() if not c.startswith("valid") and protocol in (None, p))

    def count(self, protocol: str | None = None, category: str | None = None) -> int:
        return sum(n for (p, c, _), n in self.counts.items() if protocol in (None, p) and category in (None, c))

    def new_violations(self) -> dict[tuple[str, ...], int]:
        return {k: n for k, n in self.violations.items() if k[0] == "NEW"}

    def report(self, *, only_new: bool = False) -> str:
        lines = []
        for key, n in sorted(self.violations.items()):
            if only_new and key[0] != "NEW":
                continue
            gap, protocol, category, status, why = key
            lines.append(f"[{gap}] {protocol} {category}: {n} x {status}: {why}")
            for o in self.samples[key]:
                lines.append(f"    case {o.case.index} ({o.case.what}): {o.case.describe(300)}")
                lines.append(f"      -> {o.status} {o.message[:300]!r}")
        return "\n".join(lines)

    def table(self) -> str:
        rows: dict[tuple[str, str], Counter[str]] = {}
        for (p, c, s), n in self.counts.items():
            rows.setdefault((c, p), Counter())[s] += n
        out = [f"{'category':20s} {'proto':5s} {'n':>6s}  statuses"]
        for (c, p), statuses in sorted(rows.items()):
            text = ", ".join(f"{s}:{n}" for s, n in statuses.most_common())
            out.append(f"{c:20s} {p:5s} {sum(statuses.values()):6d}  {text}")
        return "\n".join(out)
