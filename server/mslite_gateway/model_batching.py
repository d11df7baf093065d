"""Whether a model batches (its max_batch_size), read from Triton only when a request of batch size 0 asks.

A request whose first dim is 0 is one Triton 2.51 never answers when the model batches (`rules.check_batches`),
and one it serves when the model does not. Which is which only the model's configuration says, so for such a
request (and only then: every other request costs nothing here) the gateway reads the configuration with its
own key over its HTTP upstream, keeps the answer a few seconds, and refuses or forwards. HTTP waits for the
reading; the gRPC relay asks `known` first and sets the call aside for the reading only when it must.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from mslite_gateway.rules import check_batches

log = logging.getLogger(__name__)

CONFIG_TTL_S = 5.0  # a reload that changes max_batch_size shows within this long
CONFIG_READ_TIMEOUT_S = 5.0  # a request of batch size 0 waits no longer for the model's configuration


class ModelBatching:
    """Each asked model's max_batch_size as Triton last said (None: unreadable, e.g. the model is not loaded)."""

    def __init__(self, read_config: Callable[[str], Awaitable[bytes | None]], ttl_s: float = CONFIG_TTL_S) -> None:
        self._read_config = read_config  # a model's configuration JSON, None when Triton did not give it
        self.ttl_s = ttl_s
        self.reads = 0
        self._known: dict[str, tuple[float, int | None]] = {}  # model: (read at, max_batch_size)
        self._reading: dict[str, asyncio.Task[int | None]] = {}

    def known(self, model: str) -> tuple[bool, int | None]:
        """(fresh, max_batch_size): whether a reading younger than `ttl_s` exists, and what it said."""
        read_at, size = self._known.get(model, (-float("inf"), None))
        return time.monotonic() - read_at <= self.ttl_s, size

    async def max_batch_size(self, model: str) -> int | None:
        """The model's max_batch_size, read now unless known (concurrent askers share one reading)."""
        fresh, size = self.known(model)
        if fresh:
            return size
        task = self._reading.get(model)
        if task is None or task.done():
            task = self._reading[model] = asyncio.get_running_loop().create_task(self._read(model))
        return await asyncio.shield(task)

    async def check(self, model: str, empty: Sequence[tuple[str, Sequence[int]]]) -> None:
        """Refuse a request with inputs of batch size 0 (`empty`) when `model` batches (`rules.check_batches`).

        A model whose configuration cannot be read is left to Triton (which then answers for itself: not loaded).
        """
        if empty:
            size = await self.max_batch_size(model)
            if size is not None:
                check_batches(model, empty, size)

    async def _read(self, model: str) -> int | None:
        self.reads += 1
        try:
            body = await asyncio.wait_for(self._read_config(model), CONFIG_READ_TIMEOUT_S)
        except Exception as e:  # Triton away or slow: the request goes on as it came, bounded by the upstream timeout
            log.warning("model %r: configuration not read for a request of batch size 0: %s", model[:80], e)
            body = None
        size = max_batch_size_of(body)
        self._known[model] = (time.monotonic(), size)
        if len(self._known) > 4096:  # names clients made up: forget the oldest
            del self._known[next(iter(self._known))]
        self._reading.pop(model, None)
        return size


def max_batch_size_of(config: bytes | None) -> int | None:
    """max_batch_size from a model configuration answer (JSON), None when there is none."""
    try:
        doc: Any = json.loads(config) if config else None
    except ValueError:
        return None
    value = doc.get("max_batch_size", 0) if isinstance(doc, dict) else None
    return value if type(value) is int else None


def config_request(model: str, key_header: bytes, admin_key: str | None) -> bytes:
    """The HTTP request the gateway sends Triton for `model`'s configuration, with its key where it has one."""
    lines = [f"GET /v2/models/{urllib.parse.quote(model, safe='')}/config HTTP/1.1".encode(), b"Host: triton"]
    if admin_key:
        lines.append(key_header + b": " + admin_key.encode())
    return b"\r\n".join(lines) + b"\r\n\r\n"


def http_config_reader(
    exchange: Callable[..., Awaitable[Any]], key_header: bytes, admin_key: str | None
) -> Callable[[str], Awaitable[bytes | None]]:
    """`read_config` over the gateway's HTTP upstream (`Upstream.exchange`): the body of a 200, else None."""

    async def read(model: str) -> bytes | None:
        resp = await exchange(config_request(model, key_header, admin_key), b"", idempotent=True)
        return resp.body if resp.status_line[9:12] == b"200" else None

    return read
