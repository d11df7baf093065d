"""The HTTP inference check with remembered headers: what follows a known header is still checked each time."""

from __future__ import annotations

import json

import pytest

from mslite_triton.server.gateway.http_framing import stage_body
from mslite_triton.server.gateway.kserve_json import check_infer_request
from mslite_triton.server.gateway.rules import Refusal

CAP = 1 << 20


def _header(**extra: object) -> bytes:
    doc = {
        "inputs": [
            {"name": "x", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}},
            {"name": "m", "datatype": "BOOL", "shape": [3], "parameters": {"binary_data_size": 3}},
        ],
        **extra,
    }
    return json.dumps(doc).encode()


def test_a_known_header_still_has_its_binary_data_checked():
    header = _header(id="same")
    good = memoryview(bytes(16) + b"\x01\x00\x01")
    assert check_infer_request(header, "m", payload=good, cap=CAP)["id"] == "same"
    assert check_infer_request(header, "m", payload=good, cap=CAP)["id"] == "same"  # remembered
    with pytest.raises(Refusal, match="holds 20 bytes of binary data"):
        check_infer_request(header, "m", payload=memoryview(bytes(20)), cap=CAP)
    with pytest.raises(Refusal, match="BOOL data holds bytes other than 0 and 1"):
        check_infer_request(header, "m", payload=memoryview(bytes(16) + b"\x01\x02\x01"), cap=CAP)
    with pytest.raises(Refusal, match="Inference-Header-Content-Length"):
        check_infer_request(header, "m", payload=None, cap=CAP)  # the same bytes, without binary data


def test_a_refused_header_stays_refused_and_the_cap_is_part_of_what_passed():
    bad = _header(id=7)
    for _ in range(2):
        with pytest.raises(Refusal, match="request 'id' must be a string"):
            check_infer_request(bad, "m", payload=memoryview(bytes(19)), cap=CAP)
    header = _header(id="cap")
    check_infer_request(header, "m", payload=memoryview(bytes(16) + b"\x00\x00\x00"), cap=CAP)
    with pytest.raises(Refusal):
        check_infer_request(header, "m", payload=memoryview(bytes(16) + b"\x00\x00\x00"), cap=8)


def test_staging_leaves_the_shared_header_as_it_was():
    header = _header(id="staged")
    doc = check_infer_request(header, "m", payload=memoryview(bytes(19)), cap=CAP)
    staged = json.loads(stage_body(doc, "region", 0))
    assert [i["parameters"]["shared_memory_offset"] for i in staged["inputs"]] == [0, 16]
    assert "binary_data_size" not in staged["inputs"][0]["parameters"]
    again = check_infer_request(header, "m", payload=memoryview(bytes(19)), cap=CAP)
    assert again["inputs"][0]["parameters"] == {"binary_data_size": 16}
