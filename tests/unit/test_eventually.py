"""tests/support/eventually.py: returns what the condition found, fails naming what it waited for."""

from __future__ import annotations

import threading

import pytest

from tests.support.eventually import eventually


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
