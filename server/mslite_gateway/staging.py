"""Large inputs handed to Triton through shared memory: the gateway's second loopback crossing, saved.

Relayed as they came, a request's tensor bytes cross loopback TCP twice: client -> gateway, gateway ->
Triton. For a large tensor (a 600 KB image) the second crossing is most of what the gateway costs the
machine: its send, the kernel's receive path for it, and Triton's own receive and parse. Instead, the
gateway copies the bytes it has read into a region of shared memory it registered with Triton, and sends
Triton a small request pointing there (the KServe shared-memory extension's `shared_memory_region`,
`shared_memory_offset`, `shared_memory_byte_size`). Both fronts do it, for requests whose tensor data is
STAGE_MIN_BYTES or more; smaller ones go as they are.

- Regions are files `/dev/shm/<GATEWAY_REGION_PREFIX><pid>_<n>` (mode 0600, space reserved up front so a
  full /dev/shm means "send inline", never SIGBUS), registered with Triton under the admin key. Sizes are
  powers of two; freed ones are kept for the next request up to `keep_free_bytes`.
- A region is lent to one request, from the copy until Triton's answer. A request that got no answer
  (timeout, broken connection, reset) leaves its region resting for _ABANDONED_REST_S: Triton may still
  read it. All regions together stay within `max_bytes` (the gateway's in-flight bytes).
- Registrations die with tritonserver. The pool holds an idle connection to Triton; when it breaks, the
  registrations are checked (one status call) before the next region is used, and a request sent on a
  new connection first makes sure its region is known (HTTP: `Upstream.exchange(prepare=...)`).
- Clients cannot name these regions: the request checks refuse the prefix (`rules.check_region_name`), and
  shared-memory calls that register or unregister one by name (`rules.check_own_region`). An unregister
  call without a name (all regions, ours too) passes: the registrations are checked again (`recheck`)
  before the next region is used.
- The gateway unregisters and removes its regions when it stops; the launcher's supervisor does it for a
  gateway that was killed (`shm_sweep`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import mmap
import os
import time
import urllib.parse
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from mslite_contract.protocol import ADMIN_KEY_HEADER, GATEWAY_REGION_PREFIX, SHM_DIR
from mslite_gateway.deadlines import within
from mslite_gateway.upstream_address import UpstreamAddress

log = logging.getLogger(__name__)

STAGE_MIN_BYTES = 64 << 10  # below this the second crossing costs less than the copy and the bookkeeping
_MIN_REGION_BYTES = 1 << 20
_CALL_TIMEOUT_S = 10.0
_PAUSE_S = 10.0
_ABANDONED_REST_S = 60.0
_WATCH_RETRY_S = 0.5


@dataclass(eq=False)
class Region:
    """One registered shared-memory region of the gateway's."""

    name: str
    capacity: int
    buffer: mmap.mmap
    view: memoryview = field(init=False)

    def __post_init__(self) -> None:
        self.view = memoryview(self.buffer)


class Staging:
    """The gateway's pool of staging regions, registered with the Triton whose HTTP endpoint is `address`."""

    def __init__(
        self,
        address: UpstreamAddress,
        admin_key: str | None,
        *,
        max_bytes: int,
        keep_free_bytes: int = 64 << 20,
        root: str = SHM_DIR,
    ) -> None:
        self.address = address
        self.admin_key = admin_key
        self.max_bytes = max_bytes  # all regions together, lent, free or held after an abandoned request
        self.keep_free_bytes = keep_free_bytes
        self.root = root
        self.prefix = f"{GATEWAY_REGION_PREFIX}{os.getpid()}_"
        self._ids = count()
        self._free: dict[int, list[Region]] = {}
        self._free_bytes = 0
        self._total_bytes = 0
        self._regions: dict[str, Region] = {}
        self._registered: set[str] = set()
        self._stale = False
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Future[None]] = set()
        self._preparing: set[int] = set()
        self.disabled = False  # /dev/shm cannot be used: every request goes inline
        self._paused_until = 0.0  # after a failed shared-memory call, requests go inline for _PAUSE_S
        self.staged = 0  # requests sent through a region, for logs and tests

    def wants(self, nbytes: int) -> bool:
        """Whether a request with `nbytes` of tensor data should be staged."""
        return nbytes >= STAGE_MIN_BYTES and not self.disabled and time.monotonic() >= self._paused_until

    def start(self) -> None:
        """Watch Triton from now on (`_watch`)."""
        self._spawn(self._watch())

    async def _watch(self) -> None:
        """Hold an idle connection to Triton: when it breaks, Triton may have been restarted without our regions.

        The registrations are then checked (one status call) before the next region is used. A restarted
        Triton takes seconds to listen again, and this connection breaks the moment the old one dies.
        """
        while True:
            try:  # `within`: on Python 3.11 `wait_for` drops a stop's cancel that comes as the connection is made
                reader, writer = await within(self.address.open_connection(), _CALL_TIMEOUT_S)
            except (OSError, asyncio.TimeoutError):
                self._stale = True
                await asyncio.sleep(_WATCH_RETRY_S)
                continue
            self._stale = True  # connected: perhaps to a Triton we have not checked yet
            try:
                while await reader.read(1 << 10):  # nothing comes: we send nothing; b"" when it breaks
                    pass
            except OSError:
                pass
            finally:
                writer.close()
            self._stale = True
            await asyncio.sleep(_WATCH_RETRY_S)

    def recheck(self) -> None:
        """A client unregistered shared memory (perhaps all of it, ours too): check ours before the next use."""
        self._stale = True

    def take(self, nbytes: int) -> Region | None:
        """A free region of at least `nbytes` that Triton knows, at once; else None, and one is made ready."""
        capacity = _capacity(nbytes)
        free = self._free.get(capacity)
        if free and not self._stale and free[-1].name in self._registered:
            self.staged += 1
            return self._pop_free(capacity)
        if capacity not in self._preparing:
            self._preparing.add(capacity)
            self._spawn(self._prepare(capacity))
        return None

    async def lend(self, nbytes: int) -> Region | None:
        """A region of at least `nbytes` that Triton knows, made if need be; None: send the request inline."""
        region = self._pop_free(_capacity(nbytes)) or self._create(_capacity(nbytes))
        if region is None:
            return None
        if not await self.ready(region):
            self.give_back(region)
            return None
        self.staged += 1
        return region

    async def _prepare(self, capacity: int) -> None:
        """A region of `capacity` registered and put in the pool, for `take` to find next time."""
        try:
            region = self._pop_free(capacity) or self._create(capacity)
            if region is not None:
                await self.ready(region)
                self.give_back(region)
        finally:
            self._preparing.discard(capacity)

    def _pop_free(self, capacity: int) -> Region | None:
        free = self._free.get(capacity)
        if not free:
            return None
        self._free_bytes -= capacity
        return free.pop()

    async def ready(self, region: Region) -> bool:
        """Make sure Triton knows `region` (after a new connection, checked once); False when it cannot."""
        if not self._stale and region.name in self._registered:
            return True
        async with self._lock:
            try:
                if self._stale:
                    self._stale = False
                    status = await self._call("GET", "/v2/systemsharedmemory/status")
                    known = {str(r.get("name")) for r in status} if isinstance(status, list) else set()
                    self._registered &= known
                if region.name not in self._registered:
                    key = {"key": "/" + region.name, "offset": 0, "byte_size": region.capacity}
                    await self._call("POST", f"/v2/systemsharedmemory/region/{region.name}/register", key)
                    self._registered.add(region.name)
            except (OSError, asyncio.TimeoutError, _Refused) as e:
                self._stale = True
                self._paused_until = time.monotonic() + _PAUSE_S
                log.warning("staging through shared memory unavailable, sending inputs inline: %s", e)
                return False
        return True

    def give_back(self, region: Region) -> None:
        """Triton is done with `region` (it answered, or never had the request): it may serve the next one."""
        if region.name not in self._regions:
            return  # removed meanwhile (close)
        if self._free_bytes + region.capacity > self.keep_free_bytes:
            self._spawn(self._remove(region.name))  # over the pool's size
            return
        self._free.setdefault(region.capacity, []).append(region)
        self._free_bytes += region.capacity

    def abandon(self, region: Region) -> None:
        """`region`'s request was sent but got no answer: Triton may still read it, so it rests a while first.

        Reusing it early could only change the inputs of that request, whose answer nobody waits for; the
        rest keeps a request Triton is still reading from seeing another one's bytes.
        """
        asyncio.get_running_loop().call_later(_ABANDONED_REST_S, self.give_back, region)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _create(self, capacity: int) -> Region | None:
        if self._total_bytes + capacity > self.max_bytes:
            return None  # as many as admission control lets be in flight: this one goes inline
        name = f"{self.prefix}{next(self._ids)}"
        path = os.path.join(self.root, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as e:
            log.warning("staging through shared memory unavailable, sending inputs inline: %s", e)
            self.disabled = True
            return None
        try:
            os.posix_fallocate(fd, 0, capacity)  # a full /dev/shm fails here, not with SIGBUS at the copy
            buffer = mmap.mmap(fd, capacity)
        except OSError as e:
            os.unlink(path)
            log.info("no room for a %d-byte staging region (%s): this request goes inline", capacity, e)
            return None
        finally:
            os.close(fd)
        region = Region(name, capacity, buffer)
        self._regions[name] = region
        self._total_bytes += capacity
        return region

    async def _call(self, method: str, path: str, doc: Any = None) -> Any:
        """One call to Triton's HTTP API on a connection of its own; the answer's JSON."""
        body = b"" if doc is None else json.dumps(doc).encode()
        host = self.address.host
        head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {len(body)}\r\n"
        if self.admin_key:
            head += f"{ADMIN_KEY_HEADER}: {self.admin_key}\r\n"
        reader, writer = await asyncio.wait_for(self.address.open_connection(), _CALL_TIMEOUT_S)
        try:
            writer.write(head.encode() + b"\r\n" + body)
            answer = await asyncio.wait_for(reader.read(), _CALL_TIMEOUT_S)
        finally:
            writer.close()
        status_line, _, rest = answer.partition(b"\r\n")
        payload = rest.partition(b"\r\n\r\n")[2]
        status = status_line.split(b" ", 2)[1:2]
        if status != [b"200"]:
            raise _Refused(f"{method} {path.split('/region/')[0]}: {status_line.decode('latin-1')[:40]}")
        return json.loads(payload) if payload.strip() else None

    async def close(self) -> None:
        """Unregister and remove every region (the gateway is stopping)."""
        for task in list(self._tasks):
            task.cancel()
        self._free.clear()
        for name in list(self._regions):
            await self._remove(name)

    async def _remove(self, name: str) -> None:
        if name not in self._regions:
            return
        if name in self._registered:
            self._registered.discard(name)
            with contextlib.suppress(OSError, asyncio.TimeoutError, _Refused):
                await self._call("POST", f"/v2/systemsharedmemory/region/{urllib.parse.quote(name)}/unregister")
        region = self._regions.pop(name, None)
        if region is None:
            return
        self._total_bytes -= region.capacity
        region.view.release()
        region.buffer.close()
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.root, name))


def _capacity(nbytes: int) -> int:
    return max(_MIN_REGION_BYTES, 1 << (nbytes - 1).bit_length())


class _Refused(Exception):
    """Triton did not answer a shared-memory call with 200."""
