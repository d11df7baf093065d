"""The gateway's admission control: how much it lets in at once, on both protocols together.

Three bounds, one mechanism: inference requests in flight per model (sent to Triton, answer not yet back),
request bytes in flight across all connections, and the same bytes per connection (bodies being read,
checked or forwarded; a chunked HTTP body's every chunk also counts `CHUNK_OVERHEAD_BYTES`, so many tiny
chunks cost what they cost the gateway). Beyond any bound a request is refused at once, with gRPC
UNAVAILABLE / HTTP 503 and a message that starts with `kLiteServiceDeny` (what MindSpore Lite answers when
its task queue is full; the Python client raises `ServiceDenyError` for it). One request over the size cap
is not an overload: it stays a 413 / RESOURCE_EXHAUSTED.

Only bytes that have arrived are counted: a body announced and not sent holds nothing. A body that stops
arriving holds what it sent until `body_stall_timeout_s` passes with no new byte of it; then the fronts drop
it (HTTP 408, gRPC DEADLINE_EXCEEDED) and its bytes are given back. So clients that announce large bodies,
or stall them, cannot keep the budget from requests whose bytes do arrive.

Without the gateway nothing here applies: Triton queues without a bound unless a model sets
`max_queue_size`, and the client's runner bounds its own in-flight predicts.
"""

from __future__ import annotations

import threading

from mslite_contract.protocol import SERVICE_DENY
from mslite_contract.settings import GATEWAY_BODY_STALL_TIMEOUT_S, GATEWAY_MAX_INFLIGHT_BYTES_PER_CONNECTION

# What one chunk of a chunked HTTP body costs beyond its data (its size line, a read, a copy): counted
# against both the request's size cap and the in-flight bytes, so a body of 2-byte chunks is refused after
# ~130 k chunks instead of costing the gateway gigabytes and seconds of CPU.
CHUNK_OVERHEAD_BYTES = 512


def _mib(n: int) -> str:
    """`n` bytes in MiB for a message: one decimal below 10 MiB (a held 900 KiB is not "0 MiB")."""
    return f"{n / (1 << 20):.1f}" if n < 10 << 20 else str(n >> 20)


class Overloaded(Exception):
    """A request refused by admission control; `message` starts with kLiteServiceDeny."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Account:
    """The request bytes one client connection has in flight (its share of the budget)."""

    __slots__ = ("bytes",)

    def __init__(self) -> None:
        self.bytes = 0


class Admission:
    """Counts what is in flight through the gateway and refuses what would pass a bound (thread-safe)."""

    def __init__(
        self,
        *,
        max_inflight_per_model: int,
        max_inflight_bytes: int,
        max_inflight_bytes_per_connection: int = GATEWAY_MAX_INFLIGHT_BYTES_PER_CONNECTION,
        body_stall_timeout_s: float = GATEWAY_BODY_STALL_TIMEOUT_S,
    ) -> None:
        if min(max_inflight_per_model, max_inflight_bytes, max_inflight_bytes_per_connection) < 1:
            raise ValueError("admission bounds must be >= 1")
        if not body_stall_timeout_s > 0:
            raise ValueError(f"body_stall_timeout_s must be > 0, not {body_stall_timeout_s}")
        self.max_per_model = max_inflight_per_model
        self.max_bytes = max_inflight_bytes
        self.max_connection_bytes = max_inflight_bytes_per_connection
        self.stall_s = body_stall_timeout_s
        self.bytes = 0
        self.models: dict[str, int] = {}
        self.denied = 0
        self.stalled = 0  # bodies dropped for making no progress
        self._lock = threading.Lock()

    def take_bytes(self, n: int, account: Account | None = None, *, own: int = 0, admit: int | None = None) -> None:
        """Count `n` request bytes that arrived, for a request that already holds `own`.

        Refused if `admit` bytes (default `n`: a gRPC frame is admitted whole, and counted as it comes) would
        pass a bound; a request alone (nothing else in flight, on its connection or at all) always fits: the
        size cap bounds it.

        Raises:
            Overloaded: they would pass the bound of all connections, or of `account`'s (nothing is counted).
        """
        size = n if admit is None else admit
        with self._lock:
            if self.bytes + size > self.max_bytes and self.bytes > own:
                self.denied += 1
                raise Overloaded(
                    f"{SERVICE_DENY}: the server is busy: requests in flight hold {_mib(self.bytes)} MiB, and this "
                    f"one would pass its limit of {self.max_bytes >> 20} MiB; retry later"
                )
            if account is not None and account.bytes + size > self.max_connection_bytes and account.bytes > own:
                self.denied += 1
                raise Overloaded(
                    f"{SERVICE_DENY}: this connection's requests in flight hold {_mib(account.bytes)} MiB, and this "
                    f"one would pass the limit of {self.max_connection_bytes >> 20} MiB per connection; retry later"
                )
            self.bytes += n
            if account is not None:
                account.bytes += n

    def count_bytes(self, n: int, account: Account | None = None) -> None:
        """Count `n` more bytes of a frame `take_bytes` admitted whole, as they arrive."""
        with self._lock:
            self.bytes += n
            if account is not None:
                account.bytes += n

    def give_bytes(self, n: int, account: Account | None = None) -> None:
        """Stop counting `n` request bytes (the request was answered or dropped)."""
        with self._lock:
            self.bytes -= n
            if account is not None:
                account.bytes -= n

    def enter(self, model: str) -> None:
        """Count one more inference request in flight for `model`.

        Raises:
            Overloaded: the model already has `max_inflight_per_model` in flight.
        """
        with self._lock:
            n = self.models.get(model, 0)
            if n >= self.max_per_model:
                self.denied += 1
                raise Overloaded(
                    f"{SERVICE_DENY}: model '{model[:80]}' has {n} requests in flight, this server's limit per "
                    "model; retry later"
                )
            self.models[model] = n + 1

    def leave(self, model: str) -> None:
        """One inference request for `model` was answered."""
        with self._lock:
            n = self.models[model] - 1
            if n:
                self.models[model] = n
            else:
                del self.models[model]
