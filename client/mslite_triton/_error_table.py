"""The one table that turns a server error (status code + message) into the library's exception.

Duck-typed on tritonclient's `InferenceServerException` (`status()`, `message()`), so this module
needs no tritonclient import; `_transport` is the only caller.
"""

from __future__ import annotations

import json
import re
from typing import Any

from mslite_backend.protocol import GATEWAY_REGION_PREFIX

from .errors import (
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
_TRACEBACK = re.compile(r"\n\s*At:\n.*", re.S)
# Advice Triton appends for model authors (about the model config), not for the caller of predict.
_AUTHOR_ADVICE = re.compile(r"\s*NOTE: Setting a non-zero max_batch_size.*", re.S)
_PATH = re.compile(r"(?<![\w.\-:])(?:/[\w.\-+@]+){2,}/?")  # not inside names like "enc/layer_0/w:0"
# The python backend's own shared-memory regions (the launcher's prefix, or Triton's default one): with a
# region's name, Triton 2.51's shared-memory API gives access to a worker's memory. The gateway's staging
# regions too: the client never named them.
_POOL_KEY = re.compile(r"(shared memory pool size) for key '[^']*'")
_INTERNAL_REGION = re.compile(
    r"'(?:mslite\d+_[0-9a-f]+_|" + GATEWAY_REGION_PREFIX + r"|triton_python_backend_shm_region_)[^']*'"
)


def scrub(text: str) -> str:
    """A server message as any client may see it: no traceback, server path or worker's shared-memory region.

    Nor Triton's advice to model authors: whoever sends a request did not write the model's config.
    The gateway applies it to Triton's error answers; the client library to every message it raises.
    """
    text = _AUTHOR_ADVICE.sub("", _TRACEBACK.sub("", text or ""))
    text = _POOL_KEY.sub(r"\1", text)  # the wording of later Triton releases
    text = _INTERNAL_REGION.sub("'<internal region>'", text)
    return _PATH.sub("<path>", text)


def scrub_json_error(body: bytes) -> bytes:
    """A Triton JSON error answer (`{"error": "..."}`) with its message scrubbed; any other body unchanged."""
    try:
        doc = json.loads(body)
    except ValueError:
        return body
    if not isinstance(doc, dict) or not isinstance(doc.get("error"), str):
        return body
    cleaned = scrub(doc["error"])
    return body if cleaned == doc["error"] else json.dumps({**doc, "error": cleaned}).encode()


# What Triton wraps around a backend's load error: the reason that matters to the user comes after it.
_LOAD_WRAPPING = re.compile(
    r"^(?:load failed for model '[^']*': |version \d+ is at UNAVAILABLE state: |Internal: |TritonModelException: "
    r"|model '[^']*': )+"
)


def load_reason(text: str) -> str:
    """A load failure's reason without Triton's wrapping (`load failed for model 'm': ... Internal: ...`)."""
    return _LOAD_WRAPPING.sub("", text)


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
