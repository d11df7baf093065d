"""The HTTP front's checks on their own: header lines (one pattern for all, per line to name a bad one) and
inference bodies with remembered JSON headers (what follows a known header is still checked each time).
"""

from __future__ import annotations

import json

import pytest

from mslite_gateway.http.checks import stage_body
from mslite_gateway.http.kserve_json import check_infer_request
from mslite_gateway.http.messages import HttpError, parse_head
from mslite_gateway.rules import Refusal

CAP = 1 << 20


@pytest.mark.parametrize(
    ("lines", "refused"),
    [
        ([b"Host: x", b"Content-Length: 10", b"X-Empty:", b"X-Tab: a\tb \xff"], None),
        ([], None),
        ([b"Host: x", b"Bad Name: x"], "malformed header line"),
        ([b"Host: x", b"nocolon"], "malformed header line"),
        ([b"Host: x", b""], "malformed header line"),
        ([b"A: x\x00y"], "header A holds a control byte"),
        ([b"A: x\rB: y"], "header A holds a control byte"),
        ([b"Host: x", b"A: \x7f"], "header A holds a control byte"),
    ],
)
def test_header_lines_are_taken_or_refused_by_name(lines, refused):
    head = b"\r\n".join([b"POST /v2/models/m/infer HTTP/1.1", *lines])
    if refused is None:
        req = parse_head(head)
        assert [raw for _, _, raw in req.headers] == lines
        assert all(req.header(name) == value for name, value, _ in req.headers)
    else:
        with pytest.raises(HttpError, match=refused):
            parse_head(head)


def test_a_header_given_twice_differently_is_refused_when_read():
    req = parse_head(b"GET / HTTP/1.1\r\nA: 1\r\na: 1\r\nB: 1\r\nb: 2")
    assert req.header(b"a") == b"1" and req.header(b"missing") is None
    with pytest.raises(HttpError, match="header b is given more than once with different values"):
        req.header(b"b")


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
