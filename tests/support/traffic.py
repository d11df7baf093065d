"""Client threads calling a server in a loop until stopped, for tests that break things under load."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Self


class Loops:
    """One thread per target, started on entering the context; on leaving, `_stop` is set and each is joined.

    Each target loops until `_stop` is set. Use as a context manager.
    """

    def __init__(self, targets: list[Callable[[], None]], *, join_s: float = 120.0) -> None:
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=target, daemon=True) for target in targets]
        self._join_s = join_s

    def __enter__(self) -> Self:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=self._join_s)


class Traffic(Loops):
    """`threads` threads each running `call()` in a loop; successes are counted, failures recorded.

    Subclasses define `call`, which raises on a failed or wrong answer. Use as a context manager.
    """

    def __init__(self, threads: int, *, pause_after_failure_s: float = 0.0) -> None:
        self.ok = 0
        self.failures: list[str] = []
        self._pause_s = pause_after_failure_s
        self._lock = threading.Lock()
        super().__init__([self._loop] * threads)

    def call(self) -> None:
        """One call and the check of its answer."""
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.call()
                with self._lock:
                    self.ok += 1
            except Exception as e:  # recorded: the test asserts on the counts
                with self._lock:
                    self.failures.append(repr(e)[:300])
                time.sleep(self._pause_s)

    def wait_for(self, count: int, timeout_s: float = 60) -> None:
        """Until `count` more calls have succeeded."""
        target, deadline = self.ok + count, time.monotonic() + timeout_s
        while self.ok < target and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.ok >= target, f"only {self.ok} calls done (wanted {target}); failures: {self.failures[:3]}"
