"""The one table that turns a server error (status code + message) into the library's exception.

Duck-typed on tritonclient's `InferenceServerException` (`status()`, `message()`), so this module
needs no tritonclient import; `_transport` is the only caller.
"""

from __future__ import annotations

import re
from typing import Any

from mslite_contract.protocol import DEADLINE_PASSED
from mslite_contract.scrub import device_missing, scrub

from .errors import (
    DeviceNotAvailableError,
    ExecutionTimeoutError,
    InferenceError,
    InvalidInputError,
    MSLiteError,
    NotFoundError,
    PermissionDeniedError,
    ServerUnavailableError,
    ServiceDenyError,
    WorkerUnavailableError,
)

# (grpc status or http code, message pattern, exception class); first match wins.
_RULES: list[tuple[set[str], re.Pattern[str] | None, type[MSLiteError]]] = [
    (set(), re.compile(r"Stub process .* is not healthy|not healthy", re.I), WorkerUnavailableError),
    ({"StatusCode.DEADLINE_EXCEEDED"}, None, ExecutionTimeoutError),
    (set(), re.compile(re.escape(DEADLINE_PASSED)), ExecutionTimeoutError),  # a model's execute_deadline_s
    (
        {"StatusCode.UNAVAILABLE", "503"},
        re.compile(r"kLiteServiceDeny|maximum queue size|queue.*full", re.I),
        ServiceDenyError,
    ),
    ({"StatusCode.PERMISSION_DENIED", "403"}, None, PermissionDeniedError),
    (set(), re.compile(r"is restricted|expecting header|weights update refused", re.I), PermissionDeniedError),
    ({"StatusCode.NOT_FOUND", "404"}, None, NotFoundError),
    (set(), re.compile(r"unknown model|is not found|not ready", re.I), NotFoundError),
    ({"StatusCode.UNAVAILABLE", "502", "503"}, None, ServerUnavailableError),  # 502/503: the gateway's upstream is down
    ({"StatusCode.INVALID_ARGUMENT", "400"}, None, InvalidInputError),
]


# Triton's refusal of an instance group on a GPU it cannot use ("... specifies invalid or unsupported gpu id 0.
# GPUs with at least the minimum required CUDA compute compatibility of 6.0 are: 1, 2"), said as every client of
# this library says it (the C++ client's server_errors.cc and the Java client's KServeHttp word it the same).
def clean_message(text: str) -> str:
    """Strip what Triton appends to a message: a traceback with server paths, advice meant for model authors."""
    text = scrub(text).strip()
    return re.sub(r"^\[request id: [^\]]*\]\s*", "", text)


def classify(
    e: Any,
    url: str,
    *,
    default: type[MSLiteError] = InferenceError,
    invalid: type[MSLiteError] = InvalidInputError,
) -> MSLiteError:
    """Map a tritonclient exception to the library's exception (see `_RULES`).

    `invalid` replaces InvalidInputError for calls where INVALID_ARGUMENT does not mean a bad input
    (a failed model load answers 400 too).
    """
    status = str(e.status() or "")
    message = clean_message(str(e.message() or e))
    missing = device_missing(message)
    if missing is not None:
        return DeviceNotAvailableError(missing)
    for statuses, pattern, cls in _RULES:
        if statuses and status not in statuses:
            continue
        if pattern is not None and not pattern.search(message):
            continue
        return _make(invalid if cls is InvalidInputError else cls, url, message)
    if status in ("", "None") and re.search(r"connect|refused|unavailable|timed out", message, re.I):
        return ServerUnavailableError(url, message)
    return _make(default, url, message)


def _make(cls: type[MSLiteError], url: str, message: str) -> MSLiteError:
    if cls is ServerUnavailableError:
        return ServerUnavailableError(url, message)
    if cls is ServiceDenyError:
        return ServiceDenyError(message)
    return cls(message)
