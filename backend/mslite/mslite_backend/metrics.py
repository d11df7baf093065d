"""Per-worker metrics, aggregated in the worker and flushed on a timer.

Every call to a Triton metric is an IPC round trip to the server, too slow for the request path. So
each execution only updates counters here (execution time and batch size histograms, errors by kind),
and a flusher sends the deltas once a second: one increment per changed series.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

EXEC_MS_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


@dataclass
class Histogram:
    """Cumulative Prometheus-style buckets (`le`), plus sum and count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf

    def observe(self, value: float) -> None:
        """Add one observation."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def series(self) -> dict[str, float]:
        """`le` label -> cumulative count, plus `sum` and `count`."""
        out: dict[str, float] = {}
        running = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts):
            running += n
            out["+Inf" if bound == float("inf") else f"{bound:g}"] = running
        out["sum"] = self.total
        out["count"] = self.count
        return out


class WorkerMetrics:
    """What one worker measured; thread-safe, cheap to update."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.exec_ms = Histogram(EXEC_MS_BUCKETS)
        self.batch = Histogram(tuple(float(b) for b in BATCH_BUCKETS))
        self.errors: dict[str, int] = {}
        self._sent: dict[tuple[str, str], float] = {}

    def record(self, exec_ms: float, batch: int) -> None:
        """One execution: its duration and the number of samples it ran."""
        with self._lock:
            self.exec_ms.observe(exec_ms)
            self.batch.observe(float(batch))

    def error(self, kind: str) -> None:
        """One failed request, by kind (e.g. `invalid_input`, `inference`, `internal`)."""
        with self._lock:
            self.errors[kind] = self.errors.get(kind, 0) + 1

    def deltas(self) -> dict[tuple[str, str], float]:
        """(metric, label) -> increase since the previous call; only the series that changed."""
        with self._lock:
            current: dict[tuple[str, str], float] = {}
            for metric, hist in (("exec_ms", self.exec_ms), ("batch", self.batch)):
                current.update({(metric, label): value for label, value in hist.series().items()})
            current.update({("errors", kind): float(n) for kind, n in self.errors.items()})
            changed = {k: v - self._sent.get(k, 0.0) for k, v in current.items() if v != self._sent.get(k, 0.0)}
            self._sent.update(current)
        return changed
