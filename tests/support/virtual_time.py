"""An asyncio event loop on a clock of its own: time passes only when the loop would wait, and then at once.

For tests that assert *when* something happens (a timeout fired at its deadline, not before, not late):
on a real clock such a test needs a window wide enough for a busy machine, and then proves little. Here
`loop.time()` starts at 0 and moves only when nothing is ready to run: the loop jumps to its next timer
instead of sleeping, so a 5 s timeout takes no real time and fires at exactly 5.0. Sockets and pipes still
work (they are polled without waiting); a loop with no timer and nothing ready waits for real, as usual.
A task that only yields (`asyncio.sleep(0)` in a loop) never lets the clock move: poll with a pause.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _Jumping:
    """A selector that, asked to wait `timeout` seconds, polls instead and moves its loop's clock on."""

    def __init__(self, selector: selectors.BaseSelector, loop: VirtualTimeLoop) -> None:
        self._selector = selector
        self._loop = loop

    def select(self, timeout: float | None = None) -> list:
        if timeout is None:
            return self._selector.select(None)
        events = self._selector.select(0)
        if not events and timeout > 0:
            self._loop.now += timeout
        return events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._selector, name)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose `time()` is `now`, moved on only by its waits (see the module's docstring)."""

    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(selectors.DefaultSelector())
        self._selector = _Jumping(self._selector, self)  # type: ignore[has-type]

    def time(self) -> float:
        return self.now


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`, on a `VirtualTimeLoop`."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main)
