"""A worker's execute deadline: its run stopped inside the worker, and the worker ended only if that fails.

Triton 2.51 bounds no `execute`: a request that never finishes (a model looping for ever, a native call that
hangs) holds its worker, at full CPU, for as long as the server runs. The worker's main thread is the one
inside ONNX Runtime, so only another thread of the worker can act: past the deadline it sets `terminate` on
the `RunOptions` every run of the worker is made with (`stop_runs`); ONNX Runtime looks at it between
kernels (and between a Loop's iterations), so the run fails at once, `execute` answers its requests with an
error naming the deadline (`ExecuteWatch.running`'s `Run.stopped`), and the worker serves the next requests.

A run that does not stop (one kernel that runs on, a GPU bucket's CUDA graph, a native hang)
is still inside `execute` `grace_s` later: then `expire` answers the requests through their response
senders and ends the worker (`model.py`), which the launcher's supervisor replaces as a dead one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

MIN_GRACE_S = 2.0  # how long a stopped run gets to return before its worker is ended


class Run:
    """One watched `execute`: `stopped` once its run was told to stop at the deadline."""

    __slots__ = ("stopped",)

    def __init__(self) -> None:
        self.stopped = False


class RunStop:
    """The run options every ONNX Runtime run of one worker is made with; `stop` fails the run in progress.

    One ORT `RunOptions` for the Python API's sessions, and a `CRunOptions` for a string model's C API session.
    """

    def __init__(self, options: list[Any]) -> None:
        self.options = options

    def stop(self) -> None:
        """Tell the run in progress (and any later one, until `resume`) to stop at its next kernel."""
        for options in self.options:
            options.terminate = True

    def resume(self) -> None:
        """Let runs go on again (after the stopped `execute` returned)."""
        for options in self.options:
            options.terminate = False


def stop_runs(runtime: Any) -> RunStop:
    """Run options for every session of a loaded `ModelRuntime` (`use_run_options`), and the `RunStop` of them.

    Call it before the executor is chosen: a plain executor takes the session's run as it is then. A GPU
    bucket's own options (its CUDA graph id) are not covered: a run of one past the deadline ends the worker.
    """
    import onnxruntime as ort

    from .ort_c_api import CRunOptions

    python = ort.RunOptions()
    for session in (runtime.session, *runtime.bucket_sessions.values()):
        session.use_run_options(python)
    stop = RunStop([python])
    if runtime.string_session is not None:
        native = CRunOptions()
        runtime.string_session.use_run_options(native)
        stop.options.append(native)
    return stop


class ExecuteWatch:
    """Past `deadline_s` of one `running()` block, calls `stop()`; past `deadline_s + grace_s`, `expire(elapsed_s)`.

    Both from the watch's own thread, `stop` once per block and `expire` at most once (it is expected to end
    the process). The watch looks a few times per deadline, so each fires up to about 0.1 x `deadline_s`
    (at most 1 s) late.
    """

    def __init__(
        self,
        deadline_s: float,
        expire: Callable[[float], None],
        *,
        stop: Callable[[], None] | None = None,
        resume: Callable[[], None] | None = None,
        grace_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if deadline_s <= 0:
            raise ValueError(f"deadline_s must be > 0, got {deadline_s}")
        self.deadline_s = deadline_s
        # without a way to stop a run, the deadline ends the worker at once
        self.grace_s = 0.0 if stop is None else max(MIN_GRACE_S, deadline_s) if grace_s is None else grace_s
        self._expire = expire
        self._stop = stop
        self._resume = resume
        self._clock = clock
        self._lock = threading.Lock()  # the watch stops only the run of the block it looked at
        self._since: float | None = None  # when the `execute` in progress began; None between them
        self._run: Run | None = None
        self._step_s = min(1.0, deadline_s / 10)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="mslite-deadline", daemon=True)

    def start(self) -> ExecuteWatch:
        """Start watching; returns self."""
        self._thread.start()
        return self

    @contextmanager
    def running(self) -> Iterator[Run]:
        """Around one `execute`: the deadline counts from here until the block ends.

        The `Run` it gives says, once the block's work returned, whether its run was stopped at the deadline.
        """
        run = Run()
        with self._lock:
            self._run, self._since = run, self._clock()
        try:
            yield run
        finally:
            with self._lock:
                self._run, self._since = None, None
                if run.stopped and self._resume is not None:
                    self._resume()

    def close(self) -> None:
        """Stop watching (safe to call twice)."""
        self._closed.set()

    def _watch(self) -> None:
        while not self._closed.wait(self._step_s):
            with self._lock:
                since, run = self._since, self._run
                if since is None or run is None:
                    continue
                elapsed = self._clock() - since
                if elapsed > self.deadline_s and not run.stopped and self._stop is not None:
                    run.stopped = True
                    self._stop()
                    continue
                if elapsed > self.deadline_s + self.grace_s:  # held: this block's run, not the next one's
                    self._closed.set()
                    self._expire(elapsed)
                    return
