"""The HTTP front's timeouts (`deadlines.within`): each await's own deadline, kept by one timer per task.

The scenarios run on a loop with a clock of its own (`tests.support.virtual_time`): a timeout must fire at
its deadline exactly, neither early nor late, whatever the machine's load.
"""

from __future__ import annotations

import asyncio
import sys

import pytest

from mslite_gateway import deadlines
from mslite_gateway.deadlines import within
from tests.support import virtual_time

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.wait_for serves on Python 3.10")


async def _timed_out_after(timeout_s: float) -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(asyncio.TimeoutError):
        await within(asyncio.sleep(5), timeout_s)
    return loop.time() - start


def test_each_await_gets_its_own_deadline_on_one_timer():
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        assert await within(asyncio.sleep(0, "ok"), 10) == "ok"
        # a timer armed for 10 s must not make a 0.2 s deadline late
        assert await _timed_out_after(0.2) == pytest.approx(0.2)
        # a timer armed for 0.1 s that fires early must not cut a later, longer await short
        await within(asyncio.sleep(0.01), 0.1)
        start = loop.time()
        assert await within(asyncio.sleep(0.3, "late but within"), 1.0) == "late but within"
        assert loop.time() - start == pytest.approx(0.3)
        # after a timeout the task carries on, and its next awaits are timed as before
        assert await within(asyncio.sleep(0, "again"), 1.0) == "again"
        assert await _timed_out_after(2.5) == pytest.approx(2.5)

    virtual_time.run(scenario())


def test_the_virtual_clock_moves_only_when_the_loop_waits():
    async def scenario() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        before = loop.time()
        await asyncio.sleep(0)  # nothing to wait for: no time passes
        after = loop.time()
        await asyncio.sleep(7)
        return after - before, loop.time() - after

    assert virtual_time.run(scenario()) == (0.0, pytest.approx(7.0))


def test_a_cancel_from_outside_stays_a_cancel_and_no_clock_outlives_its_task():
    async def scenario() -> None:
        started = asyncio.Event()

        async def waits() -> None:
            started.set()
            await asyncio.sleep(5)

        task = asyncio.create_task(within(waits(), 10))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task not in deadlines._clocks
        assert asyncio.get_running_loop().time() < 5  # cancelled, not run out

    virtual_time.run(scenario())
