"""The gateway's open client connections, both ports together: a cap, room for a new client, an idle time-out.

Every accepted connection is admitted here first (`Connections.admit`). Below the cap it simply counts. At the
cap, the connection idle the longest (no call in flight: `Entry.busy`) is dropped to make room, so that a new
client is still served while a crowd of idle connections holds the descriptors; only when every connection has
a call in flight is the new one refused. A sweep closes connections that had no call in flight and no byte
either way for the idle time-out. A gRPC connection holds one of Triton's (the relay is one to one), so the cap
bounds Triton's descriptors and memory per connection too.

Each front keeps its own kind of entry (`http.front`, `grpc.relay`); what this part needs of one is `Entry`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from mslite_contract.settings import GATEWAY_IDLE_TIMEOUT_S, GATEWAY_MAX_CONNECTIONS

log = logging.getLogger(__name__)
_SWEEPS_PER_TIMEOUT = 4  # an idle connection goes within 1.25 times the time-out


class Entry(Protocol):
    """One open client connection, as the registry sees it."""

    last_active: float  # the loop's time of the latest byte either way (or of its start)

    def busy(self) -> bool:
        """Whether a call is in flight on it (then it is neither idle nor dropped for room)."""

    def drop(self) -> None:
        """Close it (a gRPC connection says GOAWAY first): it is idle, or its place is wanted."""


class Connections:
    """The open client connections of one gateway (both fronts), their cap and their idle time-out."""

    def __init__(
        self, *, max_connections: int = GATEWAY_MAX_CONNECTIONS, idle_timeout_s: float = GATEWAY_IDLE_TIMEOUT_S
    ) -> None:
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        self.open: set[Entry] = set()
        self.dropped_for_room = 0  # idle connections closed to make room for a new client
        self.refused = 0  # new connections refused: every open one had a call in flight
        self.idled_out = 0  # connections closed by the idle time-out
        self.sweeper: asyncio.TimerHandle | None = None

    def admit(self, entry: Entry) -> bool:
        """A new connection: counted (True), after the longest idle one is dropped where the cap is reached.

        False: the cap is reached and every open connection is busy; the caller refuses the new one.
        """
        if len(self.open) >= self.max_connections:
            idle = [e for e in self.open if not e.busy()]
            if not idle:
                self.refused += 1
                if self.refused == 1 or self.refused % 1000 == 0:
                    log.warning(
                        "%d client connections open, each with a call in flight: new ones refused", len(self.open)
                    )
                return False
            oldest = min(idle, key=_last_active)
            self.open.discard(oldest)
            self.dropped_for_room += 1
            oldest.drop()
        self.open.add(entry)
        if self.sweeper is None:
            self._schedule()
        return True

    def left(self, entry: Entry) -> None:
        """A connection closed (either side): its place is free."""
        self.open.discard(entry)

    def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        self.sweeper = loop.call_later(self.idle_timeout_s / _SWEEPS_PER_TIMEOUT, self.sweep)

    def sweep(self) -> None:
        """Close each connection that had no call in flight and no byte for the idle time-out."""
        self.sweeper = None
        now = asyncio.get_running_loop().time()
        for entry in [e for e in self.open if now - e.last_active > self.idle_timeout_s and not e.busy()]:
            self.open.discard(entry)
            self.idled_out += 1
            entry.drop()
        if self.open:
            self._schedule()

    def close(self) -> None:
        """The gateway stops: no more sweeps."""
        if self.sweeper is not None:
            self.sweeper.cancel()
            self.sweeper = None


def _last_active(entry: Entry) -> float:
    return entry.last_active
