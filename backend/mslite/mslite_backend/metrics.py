"""Per-worker metrics, aggregated in the worker and flushed on a timer.

Every call to a Triton metric is an IPC round trip to the server, too slow for the request path. So
each execution only updates counters here (execution time and batch size histograms, errors by kind),
and a flusher sends the deltas once a second: one increment per changed series.

Every series of a worker carries its process id (`pid`) beside `model` and `instance`. Triton keeps one
Prometheus series per name and labels, shared by every MetricFamily that adds it, yet each MetricFamily
counts only its own references and frees the series when it drops its last one. When a model is reloaded,
Triton starts the new workers (named `tiny_0_0` again) before it finalizes the old ones: without the
`pid` the new worker's counter is the old worker's, the old worker's finalize frees it, and the new
worker's next increment writes into freed memory (tritonserver then aborts in malloc). With the `pid`,
no two live workers ever share a series, so each one frees only its own.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from dataclasses import dataclass, field

# aggregator metric -> Prometheus family name; histograms in Prometheus' bucket/sum/count shape
FAMILIES = {"exec_ms": "mslite_execution_ms", "batch": "mslite_batch_size", "errors": "mslite_request_errors_total"}
FAMILY_HELP = {
    "mslite_execution_ms": "Time an mslite worker spent per execute (ms)",
    "mslite_batch_size": "Samples an mslite worker ran per execute",
    "mslite_request_errors_total": "Requests an mslite worker failed, by kind",
}
WEIGHTS_VERSION_FAMILY = "mslite_weights_version"
WEIGHTS_VERSION_HELP = "Version of the updatable weights each mslite worker serves (1 = the model file's)"

PENDING_LIMIT = 4096  # executions queued by `record` before the recording thread folds them itself
EXEC_MS_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


def worker_labels(model: str, instance: str, pid: int) -> dict[str, str]:
    """The labels of every series of one worker process; unique among live workers (see the module doc)."""
    return {"model": model, "instance": instance, "pid": str(pid)}


def series_of(metric: str, series: str, labels: dict[str, str]) -> tuple[str, dict[str, str]]:
    """Family name and labels of one `WorkerMetrics.deltas` key (`metric`, `series`) of a worker.

    Raises:
        KeyError: an unknown metric.
    """
    family = FAMILIES[metric]
    if metric == "errors":
        return family, {**labels, "kind": series}
    if series in ("sum", "count"):
        return f"{family}_{series}", dict(labels)
    return f"{family}_bucket", {**labels, "le": series}


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
        self._pending: deque[tuple[float, int]] = deque()  # recorded, not yet in the histograms

    def record(self, exec_ms: float, batch: int) -> None:
        """One execution: its duration and the number of samples it ran.

        Runs once per request on CPU, so it only queues the figures (a deque's append is atomic, no lock):
        the histograms take them in `deltas`, on the publisher's thread.
        """
        self._pending.append((exec_ms, batch))
        if len(self._pending) > PENDING_LIMIT:  # nobody collects: keep the queue bounded
            with self._lock:
                self._fold()

    def _fold(self) -> None:
        """Move the queued executions into the histograms (the caller holds the lock)."""
        pending = self._pending
        while pending:
            exec_ms, batch = pending.popleft()
            self.exec_ms.observe(exec_ms)
            self.batch.observe(float(batch))

    def error(self, kind: str) -> None:
        """One failed request, by kind (e.g. `invalid_input`, `inference`, `internal`)."""
        with self._lock:
            self.errors[kind] = self.errors.get(kind, 0) + 1

    def deltas(self) -> dict[tuple[str, str], float]:
        """(metric, label) -> increase since the previous call; only the series that changed."""
        with self._lock:
            self._fold()
            current: dict[tuple[str, str], float] = {}
            for metric, hist in (("exec_ms", self.exec_ms), ("batch", self.batch)):
                current.update({(metric, label): value for label, value in hist.series().items()})
            current.update({("errors", kind): float(n) for kind, n in self.errors.items()})
            changed = {k: v - self._sent.get(k, 0.0) for k, v in current.items() if v != self._sent.get(k, 0.0)}
            self._sent.update(current)
        return changed
