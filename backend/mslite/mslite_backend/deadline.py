"""A worker's execute deadline: a thread that ends the worker once one `execute` runs past it.

Triton 2.51 bounds no `execute`: a request that never finishes (a model looping for ever, a native
call that hangs) holds its worker, at full CPU, for as long as the server runs, and its client waits
as long. The worker's main thread is the one stuck, so only another thread of the worker can act: past
the deadline it calls `expire`, which the adapter (`model.py`) makes answer the requests in flight with
an error naming the deadline and end the process. The launcher's supervisor then finds a dead worker
and loads its model again, as after any dead worker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class ExecuteWatch:
    """Calls `expire(elapsed_s)` from its own thread when one `running()` block lasts over `deadline_s`.

    `expire` is called at most once (it is expected to end the process); the watch looks a few times per
    deadline, so it fires between `deadline_s` and about 1.1 x `deadline_s` (at most 1 s) later.
    """

    def __init__(
        self, deadline_s: float, expire: Callable[[float], None], *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if deadline_s <= 0:
            raise ValueError(f"deadline_s must be > 0, got {deadline_s}")
        self.deadline_s = deadline_s
        self._expire = expire
        self._clock = clock
        self._since: float | None = None  # when the `execute` in progress began; None between them
        self._step_s = min(1.0, deadline_s / 10)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="mslite-deadline", daemon=True)

    def start(self) -> ExecuteWatch:
        """Start watching; returns self."""
        self._thread.start()
        return self

    @contextmanager
    def running(self) -> Iterator[None]:
        """Around one `execute`: the deadline counts from here until the block ends."""
        self._since = self._clock()
        try:
            yield
        finally:
            self._since = None

    def close(self) -> None:
        """Stop watching (safe to call twice)."""
        self._closed.set()

    def _watch(self) -> None:
        while not self._closed.wait(self._step_s):
            since = self._since
            if since is None:
                continue
            elapsed = self._clock() - since
            if elapsed > self.deadline_s:
                self._closed.set()
                self._expire(elapsed)
                return
