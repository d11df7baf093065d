"""The gateway's worker process for long checks (`offload.Offload`): verdicts come back, waiting is bounded."""

from __future__ import annotations

import asyncio
import time

import pytest

from mslite_gateway.admission import Overloaded
from mslite_gateway.http_framing import Request, check_json_body
from mslite_gateway.offload import Offload
from mslite_gateway.rules import Refusal


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


def test_checks_beyond_the_pending_bound_are_refused_at_once():
    async def scenario() -> list[object]:
        offload = Offload(max_pending=2)
        try:
            started = time.monotonic()
            results = await asyncio.gather(*(offload.check(time.sleep, 0.5) for _ in range(6)), return_exceptions=True)
            assert time.monotonic() - started < 60
            assert offload.pending == 0
            return results
        finally:
            offload.close()

    results = asyncio.run(scenario())
    refused = [r for r in results if isinstance(r, Overloaded)]
    assert len(refused) == 4 and results.count(None) == 2, results
    assert "kLiteServiceDeny" in refused[0].message
