"""`eventually()`: wait for a condition the system reaches on its own, with a deadline and a clear failure.

`eventually_async()` is the same inside a coroutine: the event loop runs on (the other tasks take their steps)
while it waits. `throughout()` is the other side: a condition that must hold for a whole window (nothing
happened that would show late, e.g. a crash that came seconds after its cause), checked all along.
"""

from __future__ import annotations

import asyncio
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
        value, seen = _look(condition)
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}; last seen: {seen}")
        time.sleep(pause_s)


async def eventually_async(condition: Callable[[], T], what: str, timeout_s: float = 60.0, pause_s: float = 0.0) -> T:
    """`eventually`, awaited: `condition()` is called after every `pause_s` (0: every pass of the event loop;
    on a `virtual_time` loop give a pause, or its clock never reaches the time-out).

    Raises:
        AssertionError: as `eventually`'s.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value, seen = _look(condition)
        if value:
            return value
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}; last seen: {seen}")
        await asyncio.sleep(pause_s)


def _look(condition: Callable[[], T]) -> tuple[T | None, str]:
    """`condition()` once: its value, and what a failure would say it saw (its assertion's message, or the value)."""
    try:
        value = condition()
    except AssertionError as e:
        return None, str(e) or "an assertion without a message"
    return value, repr(value)


def throughout(condition: Callable[[], object], what: str, window_s: float, pause_s: float = 0.05) -> None:
    """Check `condition()` again and again for `window_s` seconds; fail at the first time it does not hold.

    Raises:
        AssertionError: `condition()` returned a false value or asserted; the message names `what` and when.
    """
    start = time.monotonic()
    while True:
        elapsed = time.monotonic() - start
        try:
            value = condition()
        except AssertionError as e:
            raise AssertionError(f"{what} stopped holding after {elapsed:.2f} s: {e}") from None
        if not value:
            raise AssertionError(f"{what} stopped holding after {elapsed:.2f} s; seen: {value!r}")
        if elapsed >= window_s:
            return
        time.sleep(pause_s)
