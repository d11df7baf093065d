"""Timeouts for the gateway's awaits: one timer per task, re-armed only when it would fire too late.

Every HTTP request waits at least twice (a read of its bytes, Triton's answer), each with a timeout. An
`asyncio.timeout` scope costs 3.6 us on uvloop (an object, a timer scheduled and cancelled); here a task keeps
one timer (`_Clock`), each await only writes its deadline, and the timer, when it fires early, sets itself
again for the deadline now current. It is scheduled anew only where a deadline comes sooner than the timer.
`within` raises asyncio.TimeoutError as `asyncio.wait_for` does, and unlike Python 3.11's `wait_for` it never drops
a cancel from outside that comes in the instant its await completes (a loop that waits in `wait_for`, like the
staging pool's watch of Triton, then runs on after its task was cancelled).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class _Clock:
    """The deadline of one task's current await, and the one timer that enforces it."""

    __slots__ = ("loop", "task", "deadline", "timer", "expired")

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        self.loop = loop
        self.task = task
        self.deadline: float | None = None  # None: the task is not waiting within a timeout
        self.timer: asyncio.TimerHandle | None = None
        self.expired = False

    def arm(self, deadline: float) -> None:
        self.deadline = deadline
        timer = self.timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            self.timer = self.loop.call_at(deadline, self._fire)

    def _fire(self) -> None:
        self.timer = None
        if self.deadline is None:
            return
        if self.loop.time() >= self.deadline:
            self.expired = True
            self.task.cancel()
        else:
            self.timer = self.loop.call_at(self.deadline, self._fire)

    def stop(self, task: object = None) -> None:
        """The task ended: its timer goes, and so does the clock."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        _clocks.pop(self.task, None)


_clocks: dict[asyncio.Task[Any], _Clock] = {}  # each task's clock, while the task runs


async def _within(awaitable: Awaitable[T], timeout_s: float) -> T:
    task = asyncio.current_task()
    if task is None:
        return await asyncio.wait_for(awaitable, timeout_s)
    clock = _clocks.get(task)
    if clock is None:
        clock = _clocks[task] = _Clock(asyncio.get_running_loop(), task)
        task.add_done_callback(clock.stop)
    clock.arm(clock.loop.time() + timeout_s)
    try:
        return await awaitable
    except asyncio.CancelledError:
        if not clock.expired:
            raise
        task.uncancel()  # type: ignore[attr-defined]  # Python 3.11+ (the only place this runs)
        raise asyncio.TimeoutError from None
    finally:
        clock.deadline = None
        clock.expired = False


# Task.uncancel, which a timeout that cancels its own task needs, is Python 3.11's.
within: Callable[[Awaitable[T], float], Awaitable[T]] = (
    _within if sys.version_info >= (3, 11) else asyncio.wait_for  # type: ignore[assignment]
)
