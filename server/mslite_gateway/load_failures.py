"""Why a model failed to load, told in the error a caller without the admin key gets for it.

Triton answers every call to a model that failed to load with `Model version not ready` or `... has no
available versions`; the reason is only in the repository index, an admin API. On such an error answer (and
only then: an answer that succeeds costs nothing) the gateway reads the index with its own key, keeps it for a
few seconds, and appends `: the model failed to load: <reason>`, the reason scrubbed like every message a
client sees (`mslite_contract.scrub`). The status Triton gave stays as it was.

HTTP waits for the index before it answers. gRPC cannot: the relay passes Triton's trailers on in order,
without waiting (`grpc.core`), so it appends what the index said when last read, and a call that finds
nothing fresh starts a reading for the calls after it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mslite_contract.scrub import json_error, load_reason, scrub, with_error

log = logging.getLogger(__name__)

INDEX_TTL_S = 5.0  # a load or unload shows within this long; a burst of failing calls reads the index once
INDEX_READ_TIMEOUT_S = 5.0  # an error answer waits no longer for its reason (Triton restarting, or hung)
_NOT_READY = re.compile(r"not ready|not at ready state|no available versions", re.I)
_QUOTED_MODEL = re.compile(r"model:? '([^']+)'")
_PREFIX = ": the model failed to load: "
_UNLOADED = "unloaded"  # Triton's reason for a model unloaded on purpose: it did not fail


def with_load_reason(message: str, reason: str) -> str:
    """`message` with the load failure's `reason` appended (unchanged without one, or when it has it)."""
    if not reason or _PREFIX in message:
        return message
    return f"{message}{_PREFIX}{reason}"


def not_ready(message: str) -> bool:
    """Whether Triton's error `message` is its answer for a model with no version ready."""
    return bool(_NOT_READY.search(message))


def failed_models(index: bytes) -> dict[str, str]:
    """{model: scrubbed reason} of the models a repository index answer (JSON) lists as failed to load."""
    try:
        rows = json.loads(index)
    except ValueError:
        return {}
    reasons = {}
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and row.get("state") == "UNAVAILABLE" and row.get("reason"):
            reason = load_reason(scrub(str(row["reason"])).strip())
            if reason and reason != _UNLOADED:
                reasons[str(row.get("name"))] = reason
    return reasons


class LoadFailures:
    """The repository index's load failures, read only when an error answer asks, kept `ttl_s`."""

    def __init__(self, read_index: Callable[[], Awaitable[bytes | None]], ttl_s: float = INDEX_TTL_S) -> None:
        self._read_index = read_index  # the index's JSON, None when it could not be read
        self.ttl_s = ttl_s
        self.reads = 0
        self._reasons: dict[str, str] = {}
        self._read_at = -float("inf")
        self._reading: asyncio.Task[None] | None = None

    async def explain(self, model: str, message: str) -> str:
        """Triton's error `message` for `model`, with why it failed to load when it did (HTTP: waits)."""
        if not not_ready(message):
            return message
        if self._stale():
            await asyncio.shield(self._start_reading())
        return with_load_reason(message, self._reasons.get(model, ""))

    async def explain_json(self, model: str, body: bytes) -> bytes:
        """A JSON error answer (`{"error": "..."}`) explained as `explain` does; any other body unchanged."""
        doc = json_error(body)
        if doc is None or not not_ready(doc["error"]):
            return body
        return with_error(body, doc, await self.explain(model, doc["error"]))

    def explain_now(self, message: str) -> str:
        """The same without waiting (gRPC), the model named in the message: from the index as last read."""
        if not not_ready(message):
            return message
        if self._stale():
            try:
                self._start_reading()
            except RuntimeError:  # no running loop (the relay core driven by a test): nothing to read with
                pass
        named = _QUOTED_MODEL.search(message)
        return with_load_reason(message, self._reasons.get(named.group(1), "")) if named else message

    def _stale(self) -> bool:
        return time.monotonic() - self._read_at > self.ttl_s

    def _start_reading(self) -> asyncio.Task[None]:
        """The reading in progress, or a new one: concurrent failing calls share one."""
        if self._reading is None or self._reading.done():
            self._reading = asyncio.get_running_loop().create_task(self._read())
        return self._reading

    async def _read(self) -> None:
        try:
            index = await asyncio.wait_for(self._read_index(), INDEX_READ_TIMEOUT_S)
        except Exception as e:  # Triton away or refusing: the caller gets Triton's message as it was
            log.warning("repository index not read for a load failure's reason: %s", e)
            index = None
        if index is not None:
            self._reasons = failed_models(index)
        self._read_at = time.monotonic()


def index_request(key_header: bytes, admin_key: str | None) -> bytes:
    """The HTTP request the gateway sends Triton for the repository index, with its key where it has one."""
    lines = [b"POST /v2/repository/index HTTP/1.1", b"Host: triton", b"Content-Length: 0"]
    if admin_key:
        lines.append(key_header + b": " + admin_key.encode())
    return b"\r\n".join(lines) + b"\r\n\r\n"


def http_reader(exchange: Callable[..., Awaitable[Any]], head: bytes) -> Callable[[], Awaitable[bytes | None]]:
    """`read_index` over the gateway's HTTP upstream (`Upstream.exchange`): the body of a 200, else None."""

    async def read() -> bytes | None:
        resp = await exchange(head, b"", idempotent=True)
        return resp.body if resp.status_line[9:12] == b"200" else None

    return read
