"""The gateway's admission control: how much it lets in at once, on both protocols together.

Two bounds, one mechanism: inference requests in flight per model (sent to Triton, answer not yet back)
and request bytes in flight across all connections (bodies being read, checked or forwarded; a chunked
HTTP body's every chunk also counts `CHUNK_OVERHEAD_BYTES`, so many tiny chunks cost what they cost the
gateway). Beyond either bound a request is refused at once, with gRPC UNAVAILABLE / HTTP 503 and a message
that starts with `kLiteServiceDeny` (what MindSpore Lite answers when its task queue is full; the Python
client raises `ServiceDenyError` for it). One request over the size cap is not an overload: it stays a
413 / RESOURCE_EXHAUSTED.

Without the gateway nothing here applies: Triton queues without a bound unless a model sets
`max_queue_size`, and the client's runner bounds its own in-flight predicts.
"""

from __future__ import annotations

import threading

from mslite_triton.errors import ServiceDenyError

SERVICE_DENY = ServiceDenyError.status  # the word clients match on

# What one chunk of a chunked HTTP body costs beyond its data (its size line, a read, a copy): counted
# against both the request's size cap and the in-flight bytes, so a body of 2-byte chunks is refused after
# ~130 k chunks instead of costing the gateway gigabytes and seconds of CPU.
CHUNK_OVERHEAD_BYTES = 512


class Overloaded(Exception):
    """A request refused by admission control; `message` starts with kLiteServiceDeny."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Admission:
    """Counts what is in flight through the gateway and refuses what would pass a bound (thread-safe)."""

    def __init__(self, *, max_inflight_per_model: int, max_inflight_bytes: int) -> None:
        if max_inflight_per_model < 1 or max_inflight_bytes < 1:
            raise ValueError("admission bounds must be >= 1")
        self.max_per_model = max_inflight_per_model
        self.max_bytes = max_inflight_bytes
        self.bytes = 0
        self.models: dict[str, int] = {}
        self.denied = 0
        self._lock = threading.Lock()

    def take_bytes(self, n: int) -> None:
        """Count `n` more request bytes in flight.

        Raises:
            Overloaded: they would pass the bound (nothing is counted then).
        """
        with self._lock:
            if self.bytes + n > self.max_bytes and self.bytes:  # one request alone always fits (the size cap bounds it)
                self.denied += 1
                raise Overloaded(
                    f"{SERVICE_DENY}: the server is busy: requests in flight hold {self.bytes >> 20} MiB, and this "
                    f"one would pass its limit of {self.max_bytes >> 20} MiB; retry later"
                )
            self.bytes += n

    def give_bytes(self, n: int) -> None:
        """Stop counting `n` request bytes (the request was answered or dropped)."""
        with self._lock:
            self.bytes -= n

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
