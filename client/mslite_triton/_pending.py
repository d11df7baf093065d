"""MindSpore Lite's task-queue bound, kept where MindSpore Lite keeps it: in the caller's runner.

A MindSpore Lite runner refuses a predict with `kLiteServiceDeny` when 1000 tasks already wait
(`kNumMaxTaskQueueSize`). Here each `Model` / `ModelParallelRunner` counts its predicts in flight and
refuses the next one at once, before anything is sent, so an overloaded caller learns it without a round
trip and the server's queue is not where the bound lives. The bound is set with the config section
`[runner] max_pending_predicts=N` (`config_path` / `config_dict` of a Model, `context.parallel.config_info`
/ `config_path` of a runner); 0 lifts it.

The same client-side section carries `workers_num` and `thread_num`, which `mslite-triton tune` writes
into the `config.ini` it leaves beside the tuned `config.pbtxt`: a build uses them where its Context
leaves `parallel.workers_num` / `cpu.thread_num` at 0, so settings made in code still win.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from mslite_contract.protocol import (
    DEFAULT_MAX_PENDING,
    MAX_PENDING_KEY,
    RUNNER_KEYS,
    RUNNER_SECTION,
    THREADS_KEY,
    WORKERS_KEY,
)

from .errors import ServiceDenyError


class PendingLimit:
    """Counts one object's predicts in flight and refuses those beyond `bound` (0: no bound).

    Args:
        bound: the most predicts in flight at once.
    """

    def __init__(self, bound: int = DEFAULT_MAX_PENDING) -> None:
        self.bound = bound
        self._in_flight = 0
        self._lock = threading.Lock()

    @property
    def in_flight(self) -> int:
        """Predicts now in flight."""
        return self._in_flight

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one place for the duration of a predict.

        Raises:
            ServiceDenyError: `bound` predicts are already in flight (nothing was sent).
        """
        with self._lock:
            if self.bound and self._in_flight >= self.bound:
                raise ServiceDenyError(
                    f"The number of waiting tasks in the queue exceeds the limit: {self._in_flight} predicts of "
                    f"this object are in flight ([{RUNNER_SECTION}] {MAX_PENDING_KEY}={self.bound})"
                )
            self._in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1


def take_runner_section(
    sections: dict[str, dict[str, str]], who: str
) -> tuple[dict[str, dict[str, str]], PendingLimit]:
    """Split the client-side `[runner]` section off the config sections (it never goes to the server).

    Args:
        sections: the merged config sections.
        who: the message prefix of the caller's build errors.

    Returns:
        The other sections, and the pending-predict limit the section sets (default 1000).

    Raises:
        RuntimeError: an unknown key in `[runner]`, or a value that is not a non-negative int.
    """
    rest = {name: entries for name, entries in sections.items() if name != RUNNER_SECTION}
    runner = sections.get(RUNNER_SECTION, {})
    unknown = sorted(set(runner) - set(RUNNER_KEYS))
    if unknown:
        raise RuntimeError(f"{who}! Error is [{RUNNER_SECTION}] has unknown keys {unknown}; known: {list(RUNNER_KEYS)}")
    runner_sizes(sections, who)
    return rest, PendingLimit(_count(runner, MAX_PENDING_KEY, DEFAULT_MAX_PENDING, who))


def runner_sizes(sections: dict[str, dict[str, str]], who: str) -> tuple[int, int]:
    """`workers_num` and `thread_num` of the `[runner]` section (0 where absent: the Context decides).

    Raises:
        RuntimeError: a value that is not a non-negative int.
    """
    runner = sections.get(RUNNER_SECTION, {})
    return _count(runner, WORKERS_KEY, 0, who), _count(runner, THREADS_KEY, 0, who)


def _count(runner: dict[str, str], key: str, default: int, who: str) -> int:
    value = runner.get(key, str(default)).strip()
    if not value.isascii() or not value.isdigit():
        raise RuntimeError(f"{who}! Error is [{RUNNER_SECTION}] {key} must be a non-negative int, got '{value}'")
    return int(value)
