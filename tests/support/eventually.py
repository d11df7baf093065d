"""`eventually()`: wait for a condition the system reaches on its own, with a deadline and a clear failure."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(condition: Callable[[], T], what: str, timeout_s: float = 60.0, pause_s: float = 0.05) -> T:
    """Call `condition()` until it returns a true value, and return that value.

    `condition` may also `assert`: an AssertionError counts as "not yet", and its message is kept for the
    failure, so a condition that says what it saw (`assert got == want, f"{got}"`) fails with that.

    Raises:
        AssertionError: `timeout_s` passed first; the message names `what`, the time waited and the last
            thing seen (the falsy value or the condition's own assertion message).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = condition()
        except AssertionError as e:
            seen = str(e) or "an assertion without a message"
        else:
            if value:
                return value
            seen = repr(value)
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}; last seen: {seen}")
        time.sleep(pause_s)
