"""Client threads calling a server in a loop until stopped, for tests that break things under load."""

from __future__ import annotations

import threading
import time


class Traffic:
    """`threads` threads each running `call()` in a loop; successes are counted, failures recorded.

    Subclasses define `call`, which raises on a failed or wrong answer. Use as a context manager.
    """

    def __init__(self, threads: int, *, pause_after_failure_s: float = 0.0) -> None:
        self.ok = 0
        self.failures: list[str] = []
        self._pause_s = pause_after_failure_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(threads)]

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

    def __enter__(self) -> Traffic:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=120)
