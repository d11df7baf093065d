"""The gateway's HTTP proxy: an asyncio adapter per client connection, pooled keep-alive connections to Triton.

Framing, admission of the body's bytes and the connection's deadlines live in the socket-free core
(`http.connection.HttpConnection`): `HttpFront.handle` only reads, feeds it, writes what it returns and
answers the requests it hands out. What an answer is (the body checks of `http.checks`, Triton's answer
through `Upstream`, errors scrubbed) is decided here. Requests on one connection are served in order
(pipelining works, one at a time).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from mslite_contract.protocol import ADMIN_KEY_HEADER
from mslite_contract.scrub import json_error, scrub_json_error
from mslite_contract.settings import GATEWAY_MAX_STRING_ELEMENTS
from mslite_gateway.access import http_refusal, open_http
from mslite_gateway.admission import Admission, Overloaded
from mslite_gateway.connections import Connections
from mslite_gateway.deadlines import within
from mslite_gateway.http.checks import (
    GENERATE_ROUTE,
    INFER_ROUTE,
    check_infer,
    check_infer_elsewhere,
    check_json_body,
    check_region_call,
    infer_empty_batches,
    needs_offload,
    remap_parse_500,
    stage_body,
    work_bytes,
)
from mslite_gateway.http.connection import HttpConnection
from mslite_gateway.http.messages import HttpError, Request, Response, client_head, error_response, upstream_head
from mslite_gateway.http.upstream import READ_BYTES, Upstream
from mslite_gateway.load_failures import LoadFailures
from mslite_gateway.model_batching import ModelBatching
from mslite_gateway.model_control import LOAD_ROUTE, check_http_load, check_http_name, http_load_body
from mslite_gateway.offload import OFFLOAD_BYTES, SMALL_LANE_BYTES, Offload
from mslite_gateway.rules import KEY_REQUIRED, Refusal, holds_key
from mslite_gateway.server_metadata import HTTP_PATH, served_json
from mslite_gateway.staging import Staging

log = logging.getLogger(__name__)

_INFER_PREFIX = b"/v2/models/"
_MODEL_ROUTE = re.compile(rb"/v2/models/([^/?]+)")  # any call naming a model: ready, metadata, infer, ...
_KEY_HEADER = ADMIN_KEY_HEADER.encode()
# While requests wait for Triton, their clients' connections are looked at this often: one that hung up has its
# request's upstream connection closed (all HTTP allows to cancel it) and its admission slot given back.
CLIENT_WATCH_S = 1.0


class _Entry:
    """One client connection as the gateway's `connections.Connections` sees it."""

    __slots__ = ("writer", "last_active", "serving")

    def __init__(self, writer: asyncio.StreamWriter, now: float) -> None:
        self.writer = writer
        self.last_active = now  # the latest byte read or answer written
        self.serving = False  # a request is being answered

    def busy(self) -> bool:
        return self.serving

    def drop(self) -> None:
        self.writer.close()  # its reader sees the end: `handle` returns


class HttpFront:
    """Serves client connections: `handle` is the asyncio.start_server callback."""

    def __init__(
        self,
        upstream: Upstream,
        *,
        max_request_bytes: int,
        admission: Admission,
        staging: Staging | None = None,
        idle_timeout_s: float = 75.0,
        admin_key: str | None = None,
        offload: Offload | None = None,
        failures: LoadFailures | None = None,
        batching: ModelBatching | None = None,
        max_strings: int = GATEWAY_MAX_STRING_ELEMENTS,
        connections: Connections | None = None,
        key_on_every_request: bool = False,
    ) -> None:
        self.upstream = upstream
        self.key_on_every_request = key_on_every_request  # a private server: nothing without the key
        self.connections = connections or Connections(idle_timeout_s=idle_timeout_s)  # the cap, idle time-out
        self.batching = batching
        self.max_strings = max_strings
        self.gone = 0  # requests whose client hung up while Triton had them
        # requests waiting for Triton (their tasks) and their clients' connections, looked at by `_sweep`
        self.waiting: dict[asyncio.Task[Any], tuple[asyncio.StreamReader, HttpConnection]] = {}
        self.sweeper: asyncio.TimerHandle | None = None
        self.failures = failures
        self.staging = staging
        self.admin_key = admin_key
        self.offload = offload
        self.cap = max_request_bytes
        self.admission = admission
        self.idle_timeout_s = idle_timeout_s
        self.body_timeout_s = 60.0
        self.inflight = 0
        self.closing = False
        self.refused = 0
        self._writers: set[asyncio.StreamWriter] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one client connection until it closes, errs, idles out, or the gateway stops."""
        loop = asyncio.get_running_loop()
        entry = _Entry(writer, loop.time())
        if not self.connections.admit(entry):  # at the cap, and no connection idle to make room
            self.refused += 1
            writer.write(error_response(503, "too many client connections; try again later", close=True))
            writer.close()
            return
        conn = HttpConnection(
            cap=self.cap,
            admission=self.admission,
            idle_timeout_s=self.idle_timeout_s,
            body_timeout_s=self.body_timeout_s,
            now=loop.time(),
        )
        self._writers.add(writer)
        step = conn.step
        try:
            while True:
                if step.writes:
                    writer.writelines(step.writes)
                    await self._drained(writer)
                if step.refused:
                    self.refused += 1
                if step.half_close:
                    writer.write_eof()
                if step.close:
                    return
                if step.request is not None:  # served even once the gateway stops: it was read whole
                    self.inflight += 1
                    entry.serving = True
                    try:
                        parts, close = await self._serve(step.request, reader, conn)
                    finally:
                        self.inflight -= 1
                    step = conn.answer(parts, close, loop.time())
                    if step.writes:
                        writer.writelines(step.writes)
                        step.writes = []
                        await self._drained(writer)
                    entry.serving = False
                    entry.last_active = loop.time()
                    continue
                if self.closing:  # stopping: nothing more is read
                    return
                try:
                    data = await within(reader.read(READ_BYTES), conn.deadline() - loop.time())
                except asyncio.TimeoutError:  # TimeoutError itself from Python 3.11 on
                    step = conn.tick(loop.time())
                else:
                    now = entry.last_active = loop.time()
                    step = conn.feed(data, now)
        except (ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # The gateway stops and what the grace period left is cancelled (a request waiting for Triton in
            # the upstream's retry sleep), or the client hung up while Triton had its request (`_sweep`): ended
            # quietly. Left cancelled, the stream server's done-callback (Python 3.11) asks the task for its
            # exception, which raises and is logged as an ERROR with a traceback.
            if not (self.closing or reader.at_eof()):
                raise
        finally:
            conn.close()  # what its request held in flight is given back
            self.connections.left(entry)
            self._writers.discard(writer)
            writer.close()

    async def _drained(self, writer: asyncio.StreamWriter) -> None:
        """Wait until what was written fits asyncio's buffer (a client that reads nothing: the upstream timeout).

        Raises:
            asyncio.TimeoutError: the client did not read it within the upstream timeout (its connection closes).
        """
        if writer.transport.get_write_buffer_size():  # usually all written at once: no timer then
            await within(writer.drain(), self.upstream.timeout_s)
        else:
            await writer.drain()

    def _watch(self, reader: asyncio.StreamReader, conn: HttpConnection) -> asyncio.Task[Any]:
        """Have `_sweep` look at this request's client while Triton has the request; returns the request's task.

        One timer for all requests (a timer each cost 5 us a request, a tenth of a small one's whole cost).
        """
        task = asyncio.current_task()
        assert task is not None
        self.waiting[task] = (reader, conn)
        if self.sweeper is None:
            self.sweeper = asyncio.get_running_loop().call_later(CLIENT_WATCH_S, self._sweep)
        return task

    def _sweep(self) -> None:
        """Cancel each waiting request whose client hung up (FIN or reset; pipelined bytes unread keep it: rare).

        A cancelled request's upstream connection is closed (`Upstream`), its slot given back (`_serve`).
        """
        self.sweeper = None
        for task, (reader, conn) in list(self.waiting.items()):
            if reader.at_eof() and not conn.holds_bytes():
                self.gone += 1
                task.cancel()
        if self.waiting:
            self.sweeper = asyncio.get_running_loop().call_later(CLIENT_WATCH_S, self._sweep)

    async def _serve(
        self, req: Request, reader: asyncio.StreamReader, conn: HttpConnection
    ) -> tuple[tuple[bytes, ...], bool]:
        """Check and forward one request: the answer's parts, and whether the connection closes after them."""
        try:
            if self.key_on_every_request and not holds_key(req.header(_KEY_HEADER), self.admin_key):
                raise HttpError(403, KEY_REQUIRED)
            connection = (req.header(b"connection") or b"").lower()
            close = connection == b"close" or (req.version == b"HTTP/1.0" and connection != b"keep-alive")
            if req.method == b"HEAD":
                raise HttpError(405, "method HEAD is not served; use GET")
            if self.admin_key and not open_http(req.method, req.target):  # default-deny: the rest needs the key
                refusal = http_refusal(req.method, req.target, req.header(_KEY_HEADER), self.admin_key)
                if refusal is not None:
                    raise refusal
            match = infer = None
            empty: list[tuple[str, list[int]]] = []  # inputs of batch size 0
            doc: dict[str, Any] | None = None
            payload: memoryview | None = None
            if req.method == b"POST" and req.target.startswith(_INFER_PREFIX):
                path = req.target.split(b"?", 1)[0]
                match = infer = INFER_ROUTE.fullmatch(path)
                if infer:
                    keyed = holds_key(req.header(_KEY_HEADER), self.admin_key)
                    args = (req, infer.group(1), infer.group(2), self.cap, keyed, self.max_strings)
                    if self._offloaded(req):  # checked elsewhere; sent to Triton as it came
                        empty = await self._check_off_loop(req, check_infer_elsewhere, *args)
                    else:
                        doc, payload = check_infer(*args)
                        empty = infer_empty_batches(doc)
                else:
                    match = GENERATE_ROUTE.fullmatch(path)
            if infer is None and (match is not None or req.body):  # every other body Triton parses
                version = match.group(2) if match else None
                if self._offloaded(req, infer=False):
                    await self._check_off_loop(req, check_json_body, req, version, self.cap, infer=False)
                else:
                    check_json_body(req, version, self.cap)
            if match is None:
                resp = await self._relay(req)
            else:
                model = urllib.parse.unquote(match.group(1).decode("latin-1"))
                self.admission.enter(model)
                task = self._watch(reader, conn)
                try:
                    if empty and self.batching is not None:
                        await self.batching.check(model, empty)
                    if doc is None:  # generate, or checked off the loop
                        resp = await self.upstream.exchange(upstream_head(req), req.body, idempotent=True)
                    else:
                        resp = await self._infer(req, doc, payload)
                finally:
                    del self.waiting[task]
                    self.admission.leave(model)
        except Overloaded as e:
            self.refused += 1
            return (error_response(503, e.message, close=False),), False
        except Refusal as e:
            self.refused += 1
            return (error_response(e.status, e.message, close=False),), False
        except HttpError as e:
            self.refused += 1
            return (error_response(e.status, e.message, close=e.close),), e.close
        status_line = remap_parse_500(resp.status_line, resp.body) if match else resp.status_line
        # an error answer loses what only the server should know (paths, tracebacks, internal region names)
        body, is_json = resp.body, False
        if status_line[9:10] in (b"4", b"5"):
            body = scrub_json_error(body)
            if self.failures is not None and (named := _MODEL_ROUTE.match(req.target)):  # why it did not load
                body = await self.failures.explain_json(urllib.parse.unquote(named.group(1).decode("latin-1")), body)
            is_json = json_error(body) is not None
        elif req.method == b"GET" and req.target.split(b"?", 1)[0] == HTTP_PATH:
            body = served_json(body)  # the extensions this server serves
        return (client_head(status_line, resp.headers, len(body), close, json_body=is_json), body), close

    def _offloaded(self, req: Request, *, infer: bool = True) -> bool:
        return self.offload is not None and needs_offload(req, OFFLOAD_BYTES, infer=infer)

    async def _check_off_loop(self, req: Request, check: Callable[..., Any], *args: Any, infer: bool = True) -> Any:
        """`check(*args)` in the offload lane for `req`'s JSON (a compressed body measured in a thread first)."""
        assert self.offload is not None
        if req.header(b"content-encoding"):  # inflated to count it: in a thread
            work = await asyncio.to_thread(work_bytes, req, SMALL_LANE_BYTES, infer=infer)
        else:
            work = work_bytes(req, SMALL_LANE_BYTES, infer=infer)
        return await self.offload.check(check, *args, work_bytes=work)

    async def _relay(self, req: Request) -> Response:
        """Any request but inference: relayed as it is, but for shared-memory calls and load overrides.

        A load override that names no backend gets ours, and a load naming a file path Triton cannot create is
        refused (`model_control`).

        After a keyed unregister call (without a name: every region, the gateway's too) staging checks its
        registrations again before it next uses one; a call that changes state is never sent twice.
        """
        unregister = check_region_call(req) and holds_key(req.header(_KEY_HEADER), self.admin_key)
        if unregister and self.staging is not None:
            self.staging.recheck()
        head, body = upstream_head(req), req.body
        check_http_name(req.target)  # a load or unload of a model whose name the file system must not see
        if req.method == b"POST" and LOAD_ROUTE.fullmatch(req.target.split(b"?", 1)[0]):
            # a file path Triton cannot create aborts it: refused here (`model_control`), a large body off the loop
            if self.offload is not None and (len(req.body) > OFFLOAD_BYTES or req.header(b"content-encoding")):
                await self._check_off_loop(req, check_http_load, req, self.cap, infer=False)
            else:
                check_http_load(req, self.cap)
            rewritten = http_load_body(req.body)  # an override that names no backend keeps ours
            if rewritten is not None:
                head, body = upstream_head(req, rewritten), rewritten
        try:
            return await self.upstream.exchange(head, body, idempotent=req.method == b"GET")
        finally:
            if unregister and self.staging is not None:
                self.staging.recheck()  # again: a staged request may have checked them in between

    async def _infer(self, req: Request, doc: dict[str, Any], payload: memoryview | None) -> Response:
        """Forward a checked inference request: its tensor data through shared memory when large (`staging`)."""
        staging = self.staging
        if staging is None or payload is None or not staging.wants(len(payload)):
            return await self.upstream.exchange(upstream_head(req), req.body, idempotent=True)
        region = await staging.lend(len(payload))
        if region is None:
            return await self.upstream.exchange(upstream_head(req), req.body, idempotent=True)
        region.view[: len(payload)] = payload
        body = stage_body(doc, region.name, 0)
        try:
            resp = await self.upstream.exchange(
                upstream_head(req, body), body, idempotent=True, prepare=lambda: staging.ready(region)
            )
        except BaseException:
            staging.abandon(region)  # no answer: Triton may still read the region
            raise
        staging.give_back(region)
        return resp

    async def drain_and_close(self, grace_s: float) -> None:
        """Stop taking requests, wait up to `grace_s` for those in progress, then close every connection."""
        self.closing = True
        deadline = time.monotonic() + grace_s
        while self.inflight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for writer in list(self._writers):
            writer.close()
        self.upstream.close()
