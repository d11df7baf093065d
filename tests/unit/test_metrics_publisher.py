"""The worker's metrics publisher: what it sends to Triton's metric families, and nothing after close."""

from __future__ import annotations

from mslite_backend.metrics import PENDING_LIMIT, WorkerMetrics, worker_labels
from mslite_backend.metrics_publisher import MetricsPublisher


class _Family:
    """Records what the publisher sends, as Triton's MetricFamily would receive it."""

    def __init__(self, sent: dict[tuple[str, str], float], name: str) -> None:
        self.sent, self.name = sent, name

    def Metric(self, labels: dict[str, str]) -> _Family._Series:  # noqa: N802 - Triton's spelling
        return _Family._Series(self.sent, (self.name, str(sorted(labels.items()))))

    class _Series:
        def __init__(self, sent: dict[tuple[str, str], float], key: tuple[str, str]) -> None:
            self.sent, self.key = sent, key

        def increment(self, value: float) -> None:
            self.sent[self.key] = self.sent.get(self.key, 0.0) + value


def test_flush_sends_the_deltas_and_close_stops_sending():
    sent: dict[tuple[str, str], float] = {}
    warnings: list[str] = []
    metrics = WorkerMetrics()
    publisher = MetricsPublisher(
        worker_labels("m", "m_0", 123),
        metrics,
        counter_family=lambda name, text: _Family(sent, name),
        warn=warnings.append,
        interval_s=3600,
    )
    metrics.record(2.0, 3)
    metrics.error("invalid_input")
    publisher.flush()
    first = dict(sent)
    assert first and not warnings
    assert any("pid" in key[1] and "123" in key[1] for key in first)  # every series carries the worker's pid
    publisher.flush()
    assert sent == first  # nothing new recorded: nothing sent again
    publisher.close()
    publisher.close()  # safe twice
    metrics.record(1.0, 1)
    publisher.flush()
    assert sent == first  # after close, nothing reaches Triton (its families may be gone)


def test_a_failing_family_is_a_warning_not_a_crash():
    metrics = WorkerMetrics()
    warnings: list[str] = []

    def broken(name: str, text: str) -> _Family:
        raise RuntimeError("no metrics here")

    publisher = MetricsPublisher(worker_labels("m", "m_0", 1), metrics, counter_family=broken,
                                 warn=warnings.append, interval_s=3600)  # fmt: skip
    metrics.record(1.0, 1)
    publisher.flush()
    publisher.close()
    assert warnings and "metrics flush failed" in warnings[0]


def test_records_nobody_collects_are_folded_not_kept():
    metrics = WorkerMetrics()
    for _ in range(PENDING_LIMIT + 1):
        metrics.record(1.0, 2)
    assert not metrics._pending  # the recording thread folded them itself
    assert metrics.deltas()[("exec_ms", "count")] == PENDING_LIMIT + 1
