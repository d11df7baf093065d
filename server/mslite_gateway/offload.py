"""Checks whose work grows with what a body inflates to, run in worker processes, off the event loop.

A 30 KB gzip body may inflate to 30 MiB of JSON, whose check takes seconds of CPU. On the event loop that
would stall every other client for as long; in a thread it would too, since Python's JSON reader holds the
GIL for the whole document. So a body that is compressed, or whose JSON is over OFFLOAD_BYTES, is checked
in a worker process (spawned on first use): only the body goes there, and only the verdict (and what the
check returns) comes back. The request then goes to Triton as it came.

Two lanes, each one worker process and its own bound on checks waiting or running: bodies whose JSON is at
most SMALL_LANE_BYTES (checked in well under a second) and larger ones. The front says how large a body's
JSON is (for a compressed body, after a capped inflate in a thread: `http.checks.work_bytes`), so bodies
that inflate to tens of MiB (gzip bombs) wait only behind each other, and a flood of them cannot keep a
client's ordinary large JSON from being checked. Within a lane the smallest body waiting goes first, and a
full lane makes room for a smaller body by refusing its largest waiting one; beyond a lane's bound, a request
is refused as overload (503 kLiteServiceDeny). Memory: two worker processes (about 100 MiB each at rest),
each holding one body at a time.

A worker ends with the gateway however the gateway ends (SIGKILL included: the kernel's parent-death
signal, `_die_with_parent`), and multiprocessing's resource tracker then reads the end of its pipe and
exits too; the launcher also ends the gateway's whole process group once the gateway is gone.
"""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import itertools
import logging
import multiprocessing
import os
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from mslite_contract.protocol import SERVICE_DENY
from mslite_gateway.admission import Overloaded
from mslite_gateway.http.messages import HttpError
from mslite_gateway.rules import Refusal

log = logging.getLogger(__name__)

# JSON (or any compressed body) beyond this is checked off the loop: checking 256 KiB of JSON takes ~30 ms.
OFFLOAD_BYTES = 256 << 10
# JSON up to this size is checked in the small lane (~0.4 s for 4 MiB); larger, in the large one.
SMALL_LANE_BYTES = 4 << 20
_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """A worker's initializer: SIGKILL when the gateway ends (PR_SET_PDEATHSIG), or exit if it already has."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # no prctl (not Linux): the launcher's group sweep still ends it
        pass
    if os.getppid() != parent:
        os._exit(0)


def _verdict(check: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
    """Run `check` (in the worker): (True, what it returned) when it passes, else (False, (status, message))."""
    try:
        return True, check(*args)
    except (Refusal, HttpError) as e:
        return False, (e.status, e.message)


class _Lane:
    """One worker process and the checks waiting for it, smallest first.

    The worker runs one check at a time, so the lane hands out turns itself: the smallest waiting body goes
    next, and when the lane is full a smaller body takes the place of the largest waiting one (which is
    refused as overload). Bombs sized to the lane's edge then cannot keep a smaller ordinary body waiting
    behind them, nor out.
    """

    def __init__(self, name: str, max_pending: int) -> None:
        self.name = name
        self.max_pending = max_pending
        self.busy = False  # a check runs
        self.waiting: list[tuple[int, int, asyncio.Future[None]]] = []  # heap: (work bytes, arrival, turn)
        self.arrivals = itertools.count()
        self.pool: ProcessPoolExecutor | None = None

    @property
    def pending(self) -> int:
        """Checks waiting or running."""
        return self.busy + sum(not turn.done() for _, _, turn in self.waiting)

    async def turn(self, work: int, busy_message: Callable[[int], str]) -> None:
        """Wait for this check's turn (the lane is `busy` for it on return; `next_turn` when it is done).

        Raises:
            Overloaded: the lane is full of checks no larger than `work` (or this one was pushed out since).
        """
        if not self.busy:
            self.busy = True
            return
        if self.pending >= self.max_pending:
            largest = max((w for w in self.waiting if not w[2].done()), default=None)
            if largest is None or largest[0] <= work:
                raise Overloaded(busy_message(self.pending))
            self.waiting.remove(largest)
            heapq.heapify(self.waiting)
            largest[2].set_exception(Overloaded(busy_message(self.pending)))
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self.waiting, (work, next(self.arrivals), turn))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled() and turn.exception() is None:
                self.next_turn()  # given the turn as it was cancelled: pass it on
            raise

    def next_turn(self) -> None:
        """The running check is done: the smallest waiting one runs next."""
        while self.waiting:
            _, _, turn = heapq.heappop(self.waiting)
            if not turn.done():
                turn.set_result(None)
                return
        self.busy = False

    def close(self) -> None:
        pool, self.pool = self.pool, None
        if pool is None:
            return
        # shutdown() lets a check in progress finish (seconds, for a bomb) and the interpreter's exit waits
        # for it; Python 3.14's terminate_workers() is what this does
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)


class Offload:
    """Worker processes for long checks, in two lanes by size; `close()` is safe to call twice."""

    def __init__(self, *, max_pending: int = 8, small_max_pending: int = 16) -> None:
        self.small = _Lane("small", small_max_pending)
        self.large = _Lane("large", max_pending)

    @property
    def pending(self) -> int:
        """Checks waiting or running, both lanes."""
        return self.small.pending + self.large.pending

    async def check(self, check: Callable[..., Any], *args: Any, work_bytes: int = 0) -> Any:
        """Run `check(*args)` in a worker process of the lane for `work_bytes` of JSON; what it returns.

        Raises:
            Refusal: the check refused the request (its status and message).
            Overloaded: the lane's `max_pending` checks, none larger than this one, are waiting or running
                already; or this one was waiting and a smaller one took its place.
            HttpError: 503 when the worker died (the lane's pool is made again for the next request).
        """
        lane = self.small if work_bytes <= SMALL_LANE_BYTES else self.large
        size = f"over {SMALL_LANE_BYTES >> 20} MiB" if lane is self.large else "large or compressed"
        await lane.turn(
            work_bytes,
            lambda n: f"{SERVICE_DENY}: the server is busy checking {n} {size} requests; retry later",
        )
        try:
            if lane.pool is None:
                # spawned, not forked: a fork of the running event loop and its sockets is not safe
                # (from the event loop's thread, which lives as long as the gateway: the parent-death signal
                # follows the thread that started the worker)
                lane.pool = ProcessPoolExecutor(
                    1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_die_with_parent,
                    initargs=(os.getpid(),),
                )
            passed, value = await asyncio.get_running_loop().run_in_executor(lane.pool, _verdict, check, *args)
        except BrokenProcessPool:
            log.warning("a check's worker process (%s lane) died; starting another for the next request", lane.name)
            lane.close()
            raise HttpError(503, "the server could not check this request (its checker restarted); retry") from None
        finally:
            lane.next_turn()
        if not passed:
            status, message = value
            raise Refusal(message, status=status, too_large=status == 413)
        return value

    def close(self) -> None:
        """Stop the workers (a check in progress is dropped)."""
        self.small.close()
        self.large.close()
