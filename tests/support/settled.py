"""Reading Triton's statistics once they have settled."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def settled(read: Callable[[], T], within: float = 5.0, pause: float = 0.3) -> T:
    """`read()` once two reads `pause` apart agree (or after `within` seconds).

    Triton counts a request and its execution just after the answer has gone out, so a count read right after
    the last answer may still lack it (seen: 14 executions of 15, and 25 successes of 24 sent where an earlier
    test's last request was counted late).
    """
    value = read()
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        time.sleep(pause)
        again, value = value, read()
        if again == value:
            break
    return value
