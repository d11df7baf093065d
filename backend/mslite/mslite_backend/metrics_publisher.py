"""A worker's metrics sent to Triton's metrics endpoint from a thread, so the request path only counts."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from typing import Any

from .metrics import FAMILIES, FAMILY_HELP, WorkerMetrics, series_of


class MetricsPublisher:
    """Sends a worker's aggregated metrics to Triton's metrics endpoint once a second, from a thread.

    Its series are labelled with this process' id (`metrics.worker_labels`): a reloaded model's new
    worker must never share a series with the old worker that Triton finalizes after it. Triton's API comes
    in as two callables, so this module stays free of the python backend's utilities: `counter_family(name,
    help)` makes a counter metric family, `warn(message)` logs a warning.
    """

    def __init__(
        self,
        labels: dict[str, str],
        metrics: WorkerMetrics,
        *,
        counter_family: Callable[[str, str], Any],
        warn: Callable[[str], None],
        interval_s: float = 1.0,
    ) -> None:
        self._labels = labels
        self._counter_family = counter_family
        self._warn = warn
        self._metrics = metrics
        self._families: dict[str, Any] = {}
        self._series: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()  # one flush at a time, none after close
        self._closed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(interval_s,), name="mslite-metrics", daemon=True)
        self._thread.start()

    def _loop(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self.flush()

    def flush(self) -> None:
        """Send what changed since the last flush."""
        with self._lock:
            if self._closed:
                return
            try:
                for key, delta in self._metrics.deltas().items():
                    self._metric(*key).increment(delta)
            except Exception:  # metrics must never take a worker down
                self._warn(f"mslite: metrics flush failed:\n{traceback.format_exc()}")

    def _metric(self, metric: str, series: str) -> Any:
        key = (metric, series)
        if key not in self._series:
            name, labels = series_of(metric, series, self._labels)
            if name not in self._families:
                help_text = FAMILY_HELP[FAMILIES[metric]]
                self._families[name] = self._counter_family(name, help_text)
            self._series[key] = self._families[name].Metric(labels=labels)
        return self._series[key]

    def close(self) -> None:
        """Flush once more and stop; the metrics go before their families (safe to call twice)."""
        self._stop.set()
        self._thread.join(timeout=5)
        self.flush()
        with self._lock:  # a flush still running in the thread finishes first
            self._closed = True
            self._series.clear()
            self._families.clear()
