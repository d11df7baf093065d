"""The gateway's keep-alive connections to Triton's HTTP endpoint: a request sent, its answer read whole.

`Upstream.exchange` reuses a pooled connection where it may, waits out a Triton that restarts, and sends a
request again only where that is safe (`exchange`'s docstring); the answer is read by the socket-free
`http.responses.ResponseReader`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from mslite_contract.settings import GATEWAY_UPSTREAM_RETRY_S
from mslite_gateway.deadlines import within
from mslite_gateway.http.messages import HttpError, Response
from mslite_gateway.http.responses import ResponseReader
from mslite_gateway.rules import no_answer
from mslite_gateway.upstream_address import UpstreamAddress

READ_BYTES = 1 << 20  # the most one read of a connection takes (what its stream buffered)


async def read_response(reader: asyncio.StreamReader) -> Response:
    """One HTTP/1.1 answer from Triton (`http.responses.ResponseReader` on what `reader` brings)."""
    answer = ResponseReader()
    while (resp := answer.feed(await reader.read(READ_BYTES))) is None:
        pass
    return resp


class _Unanswered(Exception):
    """Triton gave no answer: `sent` when the request may have reached it."""

    def __init__(self, status: int, message: str, sent: bool) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.sent = sent


class Upstream:
    """Keep-alive connections to Triton's HTTP endpoint, reused by whichever request comes next."""

    def __init__(
        self,
        address: UpstreamAddress,
        *,
        timeout_s: float,
        retry_s: float = GATEWAY_UPSTREAM_RETRY_S,
        max_idle: int = 64,
    ) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self.max_idle = max_idle
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def exchange(
        self, head: bytes, body: bytes, *, idempotent: bool, prepare: Callable[[], Awaitable[bool]] | None = None
    ) -> Response:
        """Send one request and read its answer.

        While Triton is away (the supervisor restarts it in a few seconds), the request waits and is sent
        again for up to `retry_s`: always when it could not be delivered, and when Triton dropped it
        unanswered only if it is `idempotent` (GET, inference), which is what a direct client would retry.
        A request that is not goes on a new connection of its own: on a pooled one, a connection the server
        dropped while idle and a server that died of the request look the same, and only the first may be
        sent again. On a new connection `prepare` runs first (a staged request's region registered with this
        Triton).

        Raises:
            HttpError: 503 when Triton cannot be reached, 502 when it breaks off, 504 past the timeout.
        """
        deadline, delay = time.monotonic() + self.retry_s, 0.05
        while True:
            try:
                return await self._attempt(head, body, prepare, idempotent)
            except _Unanswered as e:
                if (e.sent and not idempotent) or time.monotonic() + delay > deadline:
                    raise HttpError(e.status, e.message) from None
            await asyncio.sleep(delay)
            delay = min(1.0, delay * 2)

    async def _attempt(
        self, head: bytes, body: bytes, prepare: Callable[[], Awaitable[bool]] | None, idempotent: bool
    ) -> Response:
        for _ in range(2):
            fresh = not self._idle or not idempotent
            if fresh:
                try:
                    conn = await asyncio.wait_for(self.address.open_connection(limit=1 << 20), 10)
                except (OSError, asyncio.TimeoutError) as e:
                    raise _Unanswered(503, f"the inference server is not reachable (restarting?): {e}", False) from None
                if prepare is not None and not await prepare():
                    conn[1].close()
                    raise _Unanswered(503, "the inference server is not ready for this request (restarting?)", False)
            else:
                conn = self._idle.pop()
            reader, writer = conn
            try:
                writer.writelines((head, body))  # one writev: no copy of the body, one segment for a small one
                await writer.drain()
                resp = await within(read_response(reader), self.timeout_s)
            except (ConnectionError, asyncio.IncompleteReadError) as e:
                writer.close()
                if fresh or (isinstance(e, asyncio.IncompleteReadError) and e.partial):
                    raise _Unanswered(
                        502, "the inference server closed the connection without an answer", True
                    ) from None
                continue  # an idle keep-alive connection the server had closed: once more on a fresh one
            except asyncio.TimeoutError:  # TimeoutError itself from Python 3.11 on
                writer.close()
                raise HttpError(504, no_answer(self.timeout_s)) from None
            except HttpError:  # an answer that could not be read: the connection is in no known state
                writer.close()
                raise
            except asyncio.CancelledError:  # the client hung up: its answer must never reach the next request
                writer.close()
                raise
            if resp.reusable and len(self._idle) < self.max_idle:
                self._idle.append(conn)
            else:
                writer.close()
            return resp
        raise _Unanswered(502, "the inference server closed the connection without an answer", True)

    def close(self) -> None:
        """Close every pooled connection."""
        while self._idle:
            self._idle.pop()[1].close()
