"""Checks whose work grows with what a body inflates to, run in a worker process, off the event loop.

A 30 KB gzip body may inflate to 30 MiB of JSON, whose check takes seconds of CPU. On the event loop that
would stall every other client for as long; in a thread it would too, since Python's JSON reader holds the
GIL for the whole document. So a body that is compressed, or whose JSON is over OFFLOAD_BYTES, is checked
in a worker process (spawned on first use, `workers` of them): only the body goes there, and only the
verdict comes back. The request then goes to Triton as it came. At most `max_pending` such checks wait
or run at once; beyond, a request is refused as overload (503 kLiteServiceDeny), so a flood of them
cannot keep the others waiting for minutes.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from mslite_backend.protocol import SERVICE_DENY
from mslite_gateway.admission import Overloaded
from mslite_gateway.http_framing import HttpError
from mslite_gateway.rules import Refusal

log = logging.getLogger(__name__)

# JSON (or any compressed body) beyond this is checked off the loop: checking 256 KiB of JSON takes ~30 ms.
OFFLOAD_BYTES = 256 << 10


def _verdict(check: Callable[..., Any], *args: Any) -> tuple[int, str] | None:
    """Run `check` (in the worker): None when it passes, else the refusal's HTTP status and message."""
    try:
        check(*args)
    except (Refusal, HttpError) as e:
        return e.status, e.message
    return None


class Offload:
    """A small pool of worker processes for long checks; `close()` is safe to call twice."""

    def __init__(self, workers: int = 1, *, max_pending: int = 8) -> None:
        self.workers = workers
        self.max_pending = max_pending
        self.pending = 0
        self._pool: ProcessPoolExecutor | None = None

    async def check(self, check: Callable[..., Any], *args: Any) -> None:
        """Run `check(*args)` in a worker process.

        Raises:
            Refusal: the check refused the request (its status and message).
            Overloaded: `max_pending` checks are waiting or running already.
            HttpError: 503 when the worker died (the pool is made again for the next request).
        """
        if self.pending >= self.max_pending:
            raise Overloaded(
                f"{SERVICE_DENY}: the server is busy checking {self.pending} large or compressed requests; retry later"
            )
        if self._pool is None:
            # spawned, not forked: a fork of the running event loop and its sockets is not safe
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        self.pending += 1
        try:
            verdict = await asyncio.get_running_loop().run_in_executor(self._pool, _verdict, check, *args)
        except BrokenProcessPool:
            log.warning("a check's worker process died; starting another for the next request")
            self.close()
            raise HttpError(503, "the server could not check this request (its checker restarted); retry") from None
        finally:
            self.pending -= 1
        if verdict is not None:
            status, message = verdict
            raise Refusal(message, status=status, too_large=status == 413)

    def close(self) -> None:
        """Stop the workers (a check in progress is dropped)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        # shutdown() lets a check in progress finish (seconds, for a bomb) and the interpreter's exit waits
        # for it; Python 3.14's terminate_workers() is what this does
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
