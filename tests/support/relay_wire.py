"""The gRPC relay's core between two fake transports: what a test feeds either side, and what reached each."""

from __future__ import annotations

import mmap
from typing import Any

from mslite_contract.protocol import GATEWAY_REGION_PREFIX
from mslite_gateway.admission import Admission
from mslite_gateway.grpc.core import CLIENT, TRITON, RelayCore, RelayRules, Writes
from mslite_gateway.staging import Region


def frames_of(data: bytes | bytearray) -> list[tuple[int, int, int, bytes]]:
    """(type, flags, stream, payload) of each frame in `data`."""
    out, i = [], 0
    while i + 9 <= len(data):
        n = int.from_bytes(data[i : i + 3], "big")
        out.append(
            (data[i + 3], data[i + 4], int.from_bytes(data[i + 5 : i + 9], "big"), bytes(data[i + 9 : i + 9 + n]))
        )
        i += 9 + n
    return out


class End:
    """One side's connection as the relay writes to it: the bytes, whether reading paused, whether it closed."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.paused = False
        self.closed = False


class Wire:
    """A `RelayCore` with its writes applied as the asyncio adapter applies them (to `client` and `triton`)."""

    def __init__(
        self,
        *,
        admission: Admission | None = None,
        max_request_bytes: int = 64 << 20,
        reachable: bool = True,
        now: float = 1000.0,
        staging: Any = None,
        **rules: Any,
    ) -> None:
        admission = admission or Admission(max_inflight_per_model=1000, max_inflight_bytes=256 << 20)
        self.rules = RelayRules(max_request_bytes=max_request_bytes, admission=admission, staging=staging, **rules)
        self.later: list[tuple[int, Any]] = []  # work the core set aside (`grpc.relay_rules.Later`), not yet run
        self.core = RelayCore(self.rules)
        self.client, self.triton = End(), End()
        self.now = now
        self.wake_s = 0.0  # the latest timer the core asked for
        self.apply(self.core.opened(reachable, now))

    def apply(self, writes: Writes) -> Writes:
        """Do what the adapter does with `writes` (but for sockets)."""
        for end, pieces in ((self.client, writes.to_client), (self.triton, writes.to_triton)):
            if not end.closed:
                for piece in pieces:
                    end.data += piece
        self.client.paused |= writes.pause_client
        if writes.wake_s:
            self.wake_s = writes.wake_s
        if writes.close:
            self.client.closed = self.triton.closed = True
        self.later += writes.later
        return writes

    def run_later(self, outcome: Any = None) -> None:
        """Run the work set aside, here and now (a thread's work called, a reading's outcome given as `outcome`)."""
        later, self.later = self.later, []
        for sid, job in later:
            value, error = outcome, None
            if job.in_thread:
                try:
                    value = job.run()
                except Exception as e:  # the core decides what it means
                    error = e
            self.apply(self.core.resolved(sid, job, value, error, self.now))

    def from_client(self, data: bytes) -> Writes:
        """The client sent `data`."""
        return self.apply(self.core.feed(CLIENT, data, self.now))

    def from_triton(self, data: bytes) -> Writes:
        """Triton sent `data`."""
        return self.apply(self.core.feed(TRITON, data, self.now))

    def tick(self, now: float) -> Writes:
        """Time passes."""
        self.now = now
        return self.apply(self.core.tick(now))


class FakeStaging:
    """The gateway's staging pool without Triton: anonymous memory for regions, and a log of what was done."""

    def __init__(self, min_bytes: int = 64 << 10) -> None:
        self.min_bytes = min_bytes
        self.taken: list[Region] = []
        self.given_back: list[Region] = []
        self.abandoned: list[Region] = []
        self.rechecks = 0

    def wants(self, nbytes: int) -> bool:
        return nbytes >= self.min_bytes

    def take(self, nbytes: int) -> Region:
        region = Region(f"{GATEWAY_REGION_PREFIX}0_{len(self.taken)}", nbytes, mmap.mmap(-1, nbytes))
        self.taken.append(region)
        return region

    def give_back(self, region: Region) -> None:
        self.given_back.append(region)

    def abandon(self, region: Region) -> None:
        self.abandoned.append(region)

    def recheck(self) -> None:
        self.rechecks += 1
