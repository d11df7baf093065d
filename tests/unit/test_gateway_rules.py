"""The gateway's shared rules, without a server: versions in Triton's words, regions and the key, nesting."""

from __future__ import annotations

import gzip

import pytest

from mslite_gateway.http.checks import check_json_body, check_region_call, needs_offload
from mslite_gateway.http.messages import Request
from mslite_gateway.rules import (
    Refusal,
    check_grpc_version,
    check_http_version,
    check_region_name,
    holds_key,
)

STOL = "(details: stol), version should be an integral value > 0"


@pytest.mark.parametrize(
    ("version", "words", "status"),
    [
        ("abc", f"failed to get model version from specified version string 'abc' {STOL}", 400),
        (" ", f"failed to get model version from specified version string ' ' {STOL}", 400),
        (
            "99999999999999999999",
            f"failed to get model version from specified version string '99999999999999999999' {STOL}",
            400,
        ),
        ("-1", "invalid model version specified '-1' , version should be an integral value > 0", 400),
        ("1abc", "the server would read it as version 1", 400),  # Triton serves it: our words
        ("+1", "the server would read it as version 1", 400),
        ("1000000000000000000", "at most 18", 400),  # 19 digits within int64: Triton would look it up
    ],
)
def test_grpc_versions_refused_in_tritons_words_where_triton_refuses(version, words, status):
    with pytest.raises(Refusal) as caught:
        check_grpc_version(version)
    assert words in caught.value.message and caught.value.status == status


def test_versions_that_pass():
    for version in ("", "0", "1", "123456789012345678"):
        check_grpc_version(version)
    check_http_version("7")


@pytest.mark.parametrize("version", ["abc", "-1", "1.0", "", "\u0661"])  # Arabic-Indic one: not [0-9]
def test_http_versions_triton_routes_do_not_match_are_its_404(version):
    with pytest.raises(Refusal) as caught:
        check_http_version(version)
    assert (caught.value.status, caught.value.message) == (404, "Not Found")


def test_naming_a_region_needs_the_key_and_the_gateways_never():
    check_region_name("input 'x'", "mslite_client_1_0", keyed=True)
    with pytest.raises(Refusal) as caught:
        check_region_name("input 'x'", "mslite_client_1_0", keyed=False)
    assert caught.value.status == 403 and "needs the admin key" in caught.value.message
    for keyed in (True, False):
        with pytest.raises(Refusal, match="are the server's own") as caught:
            check_region_name("output 'y'", "mslite_gateway_1_0", keyed=keyed)
        assert caught.value.status == 400


def test_holds_key():
    assert holds_key(b"k", "k") and holds_key(None, None) and holds_key(b"x", "")
    assert not holds_key(None, "k") and not holds_key(b"kk", "k") and not holds_key(b"", "k")


def _post(target: bytes, body: bytes, *headers: tuple[bytes, bytes]) -> Request:
    return Request(b"POST", target, b"HTTP/1.1", [(n, v, n + b": " + v) for n, v in headers], body)


def test_nesting_is_refused_on_any_body_plain_or_gzip():
    deep = b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}"
    for req in (
        _post(b"/v2/models/m/generate", deep),
        _post(b"/x", gzip.compress(deep), (b"content-encoding", b"gzip")),
    ):
        with pytest.raises(Refusal, match="nested too deeply"):
            check_json_body(req, None, 1 << 20)
    check_json_body(_post(b"/x", b'{"a": [[1]]}'), None, 1 << 20)
    check_json_body(_post(b"/x", b'{"a": not json'), None, 1 << 20)  # left to Triton, in its words
    broken_deep = b"\xff{" + b"[" * 5000  # invalid, and may nest deeply for another reader
    with pytest.raises(Refusal, match="could not be parsed"):
        check_json_body(_post(b"/x", broken_deep), None, 1 << 20)


def test_region_calls_on_the_gateways_names_are_refused():
    assert check_region_call(_post(b"/v2/systemsharedmemory/unregister", b""))
    assert check_region_call(_post(b"/v2/systemsharedmemory/region/mine/unregister", b""))
    assert not check_region_call(_post(b"/v2/systemsharedmemory/region/mine/register", b"{}"))
    for action in (b"register", b"unregister"):
        with pytest.raises(Refusal, match="is the server's own"):
            check_region_call(_post(b"/v2/systemsharedmemory/region/mslite%5Fgateway_1_0/" + action, b""))


def test_what_is_checked_off_the_loop():
    assert needs_offload(_post(b"/x", b"{}", (b"content-encoding", b"gzip")), 1 << 10)
    assert needs_offload(_post(b"/x", b" " * 2000), 1 << 10)
    small_header = _post(b"/x", b"{}" + bytes(1 << 20), (b"inference-header-content-length", b"2"))
    assert not needs_offload(small_header, 1 << 10)  # the binary part is not parsed
    upload = _post(b"/v2/repository/models/m/load", b'{"parameters":{"file:1/model.onnx":"' + b"A" * 4096 + b'"}}')
    assert not needs_offload(upload, 1 << 10, infer=False)  # it cannot nest deeply: not parsed at all
    assert needs_offload(_post(b"/x", b"[1]," * 1000), 1 << 10, infer=False)


def test_a_refusal_with_a_huge_name_still_fits_a_clients_metadata_limit():
    from mslite_gateway.grpc.frames import trailers_only

    for char in ("x", "\u00e9", "\U0001f600"):
        answer = trailers_only(1, 3, f"input '{char * 100_000}': needs the admin key")
        assert len(answer) < 16 << 10
