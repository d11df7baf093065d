"""The HTTP front's timeouts (`deadlines.within`): each await's own deadline, kept by one timer per task."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from mslite_gateway import deadlines
from mslite_gateway.deadlines import within

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.wait_for serves on Python 3.10")


async def _timed_out_after(timeout_s: float) -> float:
    start = time.monotonic()
    with pytest.raises(asyncio.TimeoutError):
        await within(asyncio.sleep(5), timeout_s)
    return time.monotonic() - start


def test_each_await_gets_its_own_deadline_on_one_timer():
    async def scenario() -> None:
        assert await within(asyncio.sleep(0, "ok"), 10) == "ok"
        # a timer armed for 10 s must not make a 0.2 s deadline late
        assert 0.15 < await _timed_out_after(0.2) < 1.0
        # a timer armed for 0.1 s that fires early must not cut a later, longer await short
        await within(asyncio.sleep(0.01), 0.1)
        assert await within(asyncio.sleep(0.3, "late but within"), 1.0) == "late but within"
        # after a timeout the task carries on, and its next awaits are timed as before
        assert await within(asyncio.sleep(0, "again"), 1.0) == "again"

    asyncio.run(scenario())


def test_a_cancel_from_outside_stays_a_cancel_and_no_clock_outlives_its_task():
    async def scenario() -> None:
        task = asyncio.create_task(within(asyncio.sleep(5), 10))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task not in deadlines._clocks

    asyncio.run(scenario())
