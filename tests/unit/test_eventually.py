"""tests/support/eventually.py: returns what the condition found, fails naming what it waited for; `throughout`
fails at the first moment its condition does not hold."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.support import virtual_time
from tests.support.eventually import eventually, eventually_async, throughout


def test_returns_the_first_true_value_once_another_thread_makes_it() -> None:
    box: list[int] = []
    threading.Timer(0.05, box.append, (7,)).start()
    assert eventually(lambda: box[:1], "the value", timeout_s=30, pause_s=0.01) == [7]


def test_a_falsy_value_times_out_naming_what_and_the_last_value() -> None:
    with pytest.raises(AssertionError, match=r"waiting for the queue to fill; last seen: \[\]"):
        eventually(list, "the queue to fill", timeout_s=0.05, pause_s=0.01)


def test_an_asserting_condition_fails_with_its_own_message() -> None:
    def exact() -> bool:
        assert 1 + 1 == 3, "workers ['a'], expected ['a', 'b']"
        return True

    with pytest.raises(AssertionError, match=r"waiting for the workers; last seen: workers \['a'\]"):
        eventually(exact, "the workers", timeout_s=0.05, pause_s=0.01)


def test_other_errors_are_not_swallowed() -> None:
    with pytest.raises(ZeroDivisionError):
        eventually(lambda: 1 / 0, "a division", timeout_s=30)


def test_the_async_form_lets_the_loop_run_while_it_waits_and_times_out_on_the_loops_clock() -> None:
    async def scenario() -> tuple[object, float]:
        box: list[int] = []
        asyncio.get_running_loop().call_later(3.0, box.append, 7)
        found = await eventually_async(lambda: box[:1], "the value", timeout_s=10, pause_s=0.5)
        with pytest.raises(AssertionError, match=r"timed out after 2 s waiting for nothing; last seen: \[\]"):
            await eventually_async(list, "nothing", timeout_s=2, pause_s=0.1)  # 0: no virtual time would pass
        return found, asyncio.get_running_loop().time()

    found, now = virtual_time.run(scenario())
    assert found == [7] and now >= 5.0  # 3 s for the value, then 2 s for the time-out (virtual)


def test_throughout_fails_at_the_first_false_value_and_names_it() -> None:
    calls: list[int] = []

    def holds_twice() -> bool:
        calls.append(1)
        return len(calls) <= 2

    with pytest.raises(AssertionError, match=r"the server running stopped holding after .* s; seen: False"):
        throughout(holds_twice, "the server running", window_s=30, pause_s=0.01)
    assert len(calls) == 3  # it did not wait out the window


def test_throughout_returns_once_the_window_has_passed_with_the_condition_true() -> None:
    calls: list[int] = []
    throughout(lambda: calls.append(1) or True, "always", window_s=0.05, pause_s=0.01)
    assert len(calls) >= 2
