"""How the gateway words a load failure for a caller without the key (`mslite_gateway.load_failures`)."""

from __future__ import annotations

import asyncio
import json
import urllib.parse

import hpack

from mslite_gateway.grpc.frames import END_HEADERS, END_STREAM, HEADERS, scrubbed_trailers
from mslite_gateway.grpc.trailers import literal_not_indexed
from mslite_gateway.load_failures import LoadFailures, failed_models, index_request, with_load_reason
from tests.support.eventually import eventually_async

# a repository index as Triton 2.51 answers it for a corrupt model: wrapped, with a traceback and a path
_REASON = (
    "load failed for model 'bad': version 1 is at UNAVAILABLE state: Internal: TritonModelException: "
    "model file 'model.onnx' is not a valid ONNX model (read from /srv/models/bad/1/model.onnx)\n\nAt:\n"
    "  /opt/venv/lib/python3.10/site-packages/mslite_backend/runtime.py(88): load\n"
)
INDEX = json.dumps(
    [
        {"name": "bad", "version": "1", "state": "UNAVAILABLE", "reason": _REASON},
        {"name": "good", "version": "1", "state": "READY", "reason": ""},
        {"name": "never", "state": "UNAVAILABLE", "reason": "unloaded"},
    ]
).encode()
TOLD = "model file 'model.onnx' is not a valid ONNX model (read from <path>)"


def test_the_reason_is_unwrapped_and_scrubbed():
    reasons = failed_models(INDEX)
    assert reasons == {"bad": TOLD}  # an unloaded model did not fail: nothing to tell
    assert failed_models(b"not json") == {} and failed_models(b'{"error": "forbidden"}') == {}


def test_the_message_keeps_tritons_words_and_appends_the_reason_once():
    told = with_load_reason("Model version not ready", TOLD)
    assert told == f"Model version not ready: the model failed to load: {TOLD}"
    assert with_load_reason(told, TOLD) == told
    assert with_load_reason("Model version not ready", "") == "Model version not ready"


def test_the_index_request_carries_the_gateways_key_only_when_it_has_one():
    assert b"mslite-key: k3y\r\n" in index_request(b"mslite-key", "k3y")
    assert b"mslite-key" not in index_request(b"mslite-key", None)
    assert index_request(b"mslite-key", None).startswith(b"POST /v2/repository/index HTTP/1.1\r\n")


def _counting() -> tuple[LoadFailures, list[int]]:
    reads: list[int] = []

    async def read_index() -> bytes:
        reads.append(1)
        await asyncio.sleep(0)  # a read yields to the loop as a real one does: callers arriving meanwhile share it
        return INDEX

    return LoadFailures(read_index, ttl_s=60), reads


def test_http_reads_the_index_only_for_a_not_ready_error_and_once_for_a_burst():
    async def scenario() -> None:
        failures, reads = _counting()
        other = "Request for unknown model: 'bad' is not found"
        assert await failures.explain("bad", other) == other and not reads  # any other error: no reading
        told = await asyncio.gather(*(failures.explain("bad", "Model version not ready") for _ in range(5)))
        assert set(told) == {f"Model version not ready: the model failed to load: {TOLD}"}
        assert len(reads) == 1  # concurrent failing calls share one reading; the next ones use it
        assert await failures.explain("good", "Model version not ready") == "Model version not ready"
        body = json.dumps({"error": "Request for unknown model: 'bad' has no available versions"}).encode()
        assert TOLD in json.loads(await failures.explain_json("bad", body))["error"]
        assert await failures.explain_json("bad", b"") == b"" and len(reads) == 1

    asyncio.run(scenario())


def test_grpc_tells_the_index_as_last_read_and_starts_a_reading_when_it_has_none():
    async def scenario() -> None:
        failures, reads = _counting()
        message = "Request for unknown model: 'bad' has no available versions"
        assert failures.explain_now(message) == message  # nothing read yet: Triton's words, a reading starts
        explained = with_load_reason(message, TOLD)
        # asked again and again while it reads: the one reading serves them all once it is done
        await eventually_async(lambda: failures.explain_now(message) == explained, "the index to be read")
        assert reads == [1]
        # in the trailers of a gRPC answer: only grpc-message changes, scrubbed and then explained
        block = hpack.Encoder().encode([(":status", "200"), ("grpc-status", "5")])
        block += literal_not_indexed(b"grpc-message", urllib.parse.quote(message).encode())
        (out,) = scrubbed_trailers(END_HEADERS | END_STREAM, 1, b"", [block], failures.explain_now)
        assert out[3] == HEADERS
        fields = dict(hpack.Decoder().decode(bytes(out[9:])))
        assert urllib.parse.unquote(fields["grpc-message"]) == with_load_reason(message, TOLD)
        assert len(reads) == 1

    asyncio.run(scenario())


def test_an_unreadable_index_leaves_tritons_message_as_it_was():
    async def refused() -> bytes | None:
        raise ConnectionRefusedError("Triton is restarting")

    async def scenario() -> None:
        for read_index in (refused, _none):
            failures = LoadFailures(read_index, ttl_s=60)
            assert await failures.explain("bad", "Model version not ready") == "Model version not ready"

    asyncio.run(scenario())


async def _none() -> bytes | None:
    return None  # what `http_reader` gives for a refused index call (no key, a 403)
