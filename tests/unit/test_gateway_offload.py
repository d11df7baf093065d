"""The gateway's worker process for long checks (`offload.Offload`): verdicts come back, waiting is bounded."""

from __future__ import annotations

import asyncio
import time

import pytest

from mslite_gateway.admission import Overloaded
from mslite_gateway.http.checks import check_json_body
from mslite_gateway.http.messages import Request
from mslite_gateway.offload import SMALL_LANE_BYTES, Offload
from mslite_gateway.rules import Refusal
from tests.support.eventually import eventually_async


def test_a_refusal_comes_back_with_its_status_and_words():
    deep = Request(b"POST", b"/v2/models/m/generate", b"HTTP/1.1", [], b"[" * 5000 + b"]" * 5000)
    fine = Request(b"POST", b"/v2/models/m/generate", b"HTTP/1.1", [], b'{"x": [1]}')

    async def scenario() -> None:
        offload = Offload()
        try:
            await offload.check(check_json_body, fine, None, 1 << 20)  # passes: no exception
            with pytest.raises(Refusal) as caught:
                await offload.check(check_json_body, deep, b"abc", 1 << 20)
            assert (caught.value.status, caught.value.message) == (404, "Not Found")  # the version first
            with pytest.raises(Refusal) as caught:
                await offload.check(check_json_body, deep, None, 1 << 20)
            assert (caught.value.status, caught.value.message) == (400, "request JSON is nested too deeply")
        finally:
            offload.close()

    asyncio.run(scenario())


def test_checks_beyond_a_lanes_pending_bound_are_refused_at_once_and_the_other_lane_still_checks():
    large = SMALL_LANE_BYTES + 1

    async def scenario() -> tuple[list[object], list[object]]:
        offload = Offload(max_pending=2, small_max_pending=2)
        try:
            started = time.monotonic()
            floods = [offload.check(time.sleep, 0.5, work_bytes=large) for _ in range(6)]
            smalls = [offload.check(time.sleep, 0.1, work_bytes=1000) for _ in range(2)]
            results = await asyncio.gather(*floods, *smalls, return_exceptions=True)
            assert time.monotonic() - started < 60
            assert offload.pending == 0
            return results[:6], results[6:]
        finally:
            offload.close()

    flooded, small = asyncio.run(scenario())
    refused = [r for r in flooded if isinstance(r, Overloaded)]
    assert len(refused) == 4 and flooded.count(None) == 2, flooded
    assert "kLiteServiceDeny" in refused[0].message and "over 4 MiB" in refused[0].message
    assert small == [None, None]  # the large lane's flood did not refuse them


def test_what_a_check_returns_comes_back():
    async def scenario() -> object:
        offload = Offload()
        try:
            return await offload.check(sorted, [3, 1, 2])
        finally:
            offload.close()

    assert asyncio.run(scenario()) == [1, 2, 3]


def test_within_a_lane_the_smallest_body_goes_first_and_pushes_the_largest_waiting_one_out_when_full():
    async def scenario() -> tuple[list[str], object]:
        offload = Offload(small_max_pending=3)
        done: list[str] = []

        async def check(tag: str, work: int, seconds: float = 0.0) -> None:
            await offload.check(time.sleep, seconds, work_bytes=work)
            done.append(tag)

        try:
            running = asyncio.create_task(check("running", 1000, 0.5))
            await eventually_async(lambda: offload.pending == 1, "the first check to have the worker")
            later = [asyncio.create_task(check(tag, work)) for tag, work in (("3000", 3000), ("2000", 2000))]
            await eventually_async(lambda: offload.pending == 3, "both to wait: the lane full (3)")
            assert not running.done()  # still on the worker (half a second): what comes next must wait
            pushed_in = asyncio.create_task(check("100", 100))
            results = await asyncio.gather(running, *later, pushed_in, return_exceptions=True)
            same = [offload.check(time.sleep, 0.1, work_bytes=5000) for _ in range(4)]
            outcomes = await asyncio.gather(*same, return_exceptions=True)
            # no smaller than any check in the full lane: the fourth is refused, it pushes none out
            assert outcomes.count(None) == 3 and isinstance(outcomes[3], Overloaded), outcomes
            assert offload.pending == 0
            return done, results[1]
        finally:
            offload.close()

    done, largest = asyncio.run(scenario())
    assert done == ["running", "100", "2000"]
    assert isinstance(largest, Overloaded) and "kLiteServiceDeny" in largest.message
