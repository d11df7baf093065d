"""The execute deadline's watch (`deadline.ExecuteWatch`) on a clock the test moves (no server, no waiting on it)."""

from __future__ import annotations

import threading
import time

import pytest

from mslite_backend.deadline import ExecuteWatch


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _watch(deadline_s: float = 0.5) -> tuple[ExecuteWatch, Clock, list[float], threading.Event]:
    clock, expired, fired = Clock(), [], threading.Event()

    def expire(elapsed: float) -> None:
        expired.append(elapsed)
        fired.set()

    return ExecuteWatch(deadline_s, expire, clock=clock).start(), clock, expired, fired


def test_an_execute_past_the_deadline_expires_once_with_its_elapsed_time() -> None:
    watch, clock, expired, fired = _watch()
    with watch.running():
        clock.t = 0.4
        assert not fired.wait(0.3)  # within the deadline: nothing
        clock.t = 0.7
        assert fired.wait(30)
        time.sleep(0.2)  # it would fire again by now if it could
    assert expired == [pytest.approx(0.7)]


def test_time_between_executes_does_not_count() -> None:
    watch, clock, expired, fired = _watch()
    for _ in range(3):
        with watch.running():
            clock.t += 0.4
        clock.t += 10  # idle: no execute in progress
    assert not fired.wait(0.3)
    assert expired == []
    watch.close()


def test_a_closed_watch_never_fires() -> None:
    watch, clock, expired, fired = _watch()
    watch.close()
    with watch.running():
        clock.t = 100
        assert not fired.wait(0.3)
    watch.close()  # twice is fine


def test_a_deadline_must_be_positive() -> None:
    with pytest.raises(ValueError, match="deadline_s must be > 0"):
        ExecuteWatch(0, lambda _: None)


def test_a_run_that_can_be_stopped_is_stopped_at_the_deadline_and_resumed_after_its_block() -> None:
    clock, calls, expired = Clock(), [], []
    stopped = threading.Event()

    def stop() -> None:
        calls.append("stop")
        stopped.set()

    watch = ExecuteWatch(
        0.5, expired.append, stop=stop, resume=lambda: calls.append("resume"), grace_s=5, clock=clock
    ).start()
    with watch.running() as run:
        clock.t = 0.7
        assert stopped.wait(30)
        time.sleep(0.2)  # it would stop again by now if it could
        assert calls == ["stop"] and run.stopped
    assert calls == ["stop", "resume"] and expired == []
    with watch.running() as run:  # the next execute starts afresh
        clock.t = 1.0
        time.sleep(0.2)
    assert not run.stopped and calls == ["stop", "resume"]
    watch.close()


def test_a_run_that_does_not_stop_expires_after_the_grace() -> None:
    clock, expired, fired = Clock(), [], threading.Event()
    stopped = threading.Event()

    def expire(elapsed: float) -> None:
        expired.append(elapsed)
        fired.set()

    watch = ExecuteWatch(0.5, expire, stop=stopped.set, resume=lambda: None, grace_s=2, clock=clock).start()
    with watch.running():
        clock.t = 1.0
        assert stopped.wait(30)
        clock.t = 2.4  # within deadline + grace
        assert not fired.wait(0.3)
        clock.t = 2.6
        assert fired.wait(30)
    assert expired == [pytest.approx(2.6)]


def test_the_grace_is_at_least_two_seconds_or_the_deadline() -> None:
    assert ExecuteWatch(0.5, print, stop=print).grace_s == 2.0
    assert ExecuteWatch(30, print, stop=print).grace_s == 30
    assert ExecuteWatch(30, print).grace_s == 0  # nothing to stop a run with: the deadline ends the worker
