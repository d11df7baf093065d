"""What a server message may show a client: no traceback, server path or internal shared-memory region.

The gateway applies `scrub` to Triton's error answers, the client library to every message it raises; both
import it from here, so one set of rules decides what leaks (`load_reason` too: how a model's load failure
reads once Triton's wrapping is gone). Standard library only.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .protocol import GATEWAY_REGION_PREFIX

_TRACEBACK = re.compile(r"\n\s*At:\n.*", re.S)
# Advice Triton appends for model authors (about the model config), not for the caller of predict.
_AUTHOR_ADVICE = re.compile(r"\s*NOTE: Setting a non-zero max_batch_size.*", re.S)
# an absolute path (a drive letter allowed), not inside names like "enc/layer_0/w:0"
_PATH = re.compile(r"(?<![\w.\-:])(?:[A-Za-z]:)?(?:/[\w.\-+@]+){2,}/?")
_ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*")
# The python backend's own shared-memory regions (the launcher's prefix, or Triton's default one): with a
# region's name, Triton 2.51's shared-memory API gives access to a worker's memory. The gateway's staging
# regions too: the client never named them.
_POOL_KEY = re.compile(r"(shared memory pool size) for key '[^']*'")
_INTERNAL_REGION = re.compile(
    r"'(?:mslite\d+_[0-9a-f]+_|" + GATEWAY_REGION_PREFIX + r"|triton_python_backend_shm_region_)[^']*'"
)
# What Triton wraps around a backend's load error: the reason that matters to the user comes after it.
_LOAD_WRAPPING = re.compile(
    r"^(?:load failed for model '[^']*': |version \d+ is at UNAVAILABLE state: |Internal: |TritonModelException: "
    r"|model '[^']*': )+"
)


def scrub(text: str) -> str:
    """A server message as any client may see it: no traceback, server path or worker's shared-memory region.

    Nor Triton's advice to model authors: whoever sends a request did not write the model's config.
    """
    text = _AUTHOR_ADVICE.sub("", _TRACEBACK.sub("", text or ""))
    text = _POOL_KEY.sub(r"\1", text)  # the wording of later Triton releases
    text = _INTERNAL_REGION.sub("'<internal region>'", text)
    return _PATH.sub("<path>", text)


def client_message(text: str, limit: int = 400) -> str:
    """A worker's message made safe for a client: no file paths, no traceback, one line, bounded length."""
    text = text.split("\n\nAt:", 1)[0].split("Traceback (most recent call last)", 1)[0]
    text = _ORT_PREFIX.sub("", text.strip())
    text = _PATH.sub("<path>", text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_reason(text: str) -> str:
    """A load failure's reason without Triton's wrapping (`load failed for model 'm': ... Internal: ...`).

    Scrub it first: the client library and the gateway both tell this reason to callers without the key.
    """
    return _LOAD_WRAPPING.sub("", text)


def json_error(body: bytes) -> dict[str, Any] | None:
    """The document of a Triton JSON error answer (`{"error": "..."}`, a str), or None for any other body."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("error"), str) else None


def with_error(body: bytes, doc: dict[str, Any], message: str) -> bytes:
    """The error answer `body` (parsed as `doc`) telling `message` instead: the same bytes when it is unchanged."""
    return body if message == doc["error"] else json.dumps({**doc, "error": message}).encode()


def scrub_json_error(body: bytes) -> bytes:
    """A Triton JSON error answer (`{"error": "..."}`) with its message scrubbed; any other body unchanged."""
    doc = json_error(body)
    return body if doc is None else with_error(body, doc, scrub(doc["error"]))


_GPU_REFUSED = re.compile(r"invalid or unsupported gpu id (\d+).*?\bare:\s*([0-9][0-9, ]*)?", re.I | re.S)


def device_missing(message: str) -> str | None:
    """The clients' one wording for a device the server lacks, naming it; None for other messages.

    The C++ and Java clients word it the same (their tests compare the text).
    """
    found = _GPU_REFUSED.search(message)
    if found is None:
        return None
    usable = ", ".join(d for d in re.split(r"[,\s]+", found.group(2) or "") if d) or "none"
    return f"GPU {found.group(1)} is not available on the server (the GPUs it can use: {usable})"
