"""`gateway.model_control`: a load's config override that names no backend keeps this server's (no server)."""

from __future__ import annotations

import json

import pytest
from tritonclient.grpc import service_pb2 as pb

from mslite_gateway.http.messages import Request
from mslite_gateway.model_control import (
    LOAD_ROUTE,
    check_file_path,
    check_http_load,
    grpc_load_message,
    http_load_body,
    keep_backend,
)
from mslite_gateway.rules import Refusal


def test_an_override_without_backend_or_platform_gets_mslite() -> None:
    assert json.loads(keep_backend('{"max_batch_size": 16}') or "") == {"max_batch_size": 16, "backend": "mslite"}


@pytest.mark.parametrize(
    "override",
    ['{"backend": "onnxruntime"}', '{"platform": "onnxruntime_onnx"}', '"parameters": {{"x": 1}}', "[1, 2]", "7"],
)
def test_other_overrides_go_as_they_are(override: str) -> None:
    assert keep_backend(override) is None


def test_the_http_body_keeps_its_other_parameters() -> None:
    body = json.dumps({"parameters": {"config": '{"max_batch_size": 4}', "file:1/model.onnx": "AAAA"}}).encode()
    doc = json.loads(http_load_body(body) or b"")
    assert doc["parameters"]["file:1/model.onnx"] == "AAAA"
    assert json.loads(doc["parameters"]["config"]) == {"max_batch_size": 4, "backend": "mslite"}


@pytest.mark.parametrize("body", [b"", b"{}", b"not json", b'{"parameters": {"config": 3}}', b'{"parameters": []}'])
def test_http_bodies_without_an_override_to_change(body: bytes) -> None:
    assert http_load_body(body) is None


def test_the_grpc_message_keeps_its_other_fields() -> None:
    req = pb.RepositoryModelLoadRequest(model_name="simple")
    req.parameters["config"].string_param = '{"max_batch_size": 4}'
    req.parameters["file:1/model.onnx"].bytes_param = b"\x00\x01"
    out = pb.RepositoryModelLoadRequest()
    out.ParseFromString(grpc_load_message(req.SerializeToString()) or b"")
    assert out.model_name == "simple" and out.parameters["file:1/model.onnx"].bytes_param == b"\x00\x01"
    assert json.loads(out.parameters["config"].string_param) == {"max_batch_size": 4, "backend": "mslite"}


def test_grpc_messages_without_an_override_to_change() -> None:
    assert grpc_load_message(pb.RepositoryModelLoadRequest(model_name="simple").SerializeToString()) is None
    assert grpc_load_message(b"\xff\xff\xff") is None
    named = pb.RepositoryModelLoadRequest(model_name="simple")
    named.parameters["config"].string_param = '{"backend": "mslite"}'
    assert grpc_load_message(named.SerializeToString()) is None


def test_the_load_route() -> None:
    assert LOAD_ROUTE.fullmatch(b"/v2/repository/models/simple/load")
    assert not LOAD_ROUTE.fullmatch(b"/v2/repository/models/simple/unload")
    assert not LOAD_ROUTE.fullmatch(b"/v2/repository/models/a/b/load")


@pytest.mark.parametrize(
    "key", ["file:1/" + "é" * 128, "file:" + "/".join(["a" * 200] * 21), "file:" + "b" * 256 + "/model.onnx"]
)
def test_a_file_path_triton_cannot_create_is_refused(key: str) -> None:
    with pytest.raises(Refusal, match="^Invalid file path"):
        check_file_path(key)
    req = pb.RepositoryModelLoadRequest(model_name="simple")
    req.parameters[key].bytes_param = b"a"
    with pytest.raises(Refusal, match="^Invalid file path"):
        grpc_load_message(req.SerializeToString())
    body = json.dumps({"parameters": {"config": "{}", key: "YQ=="}}).encode()
    with pytest.raises(Refusal, match="^Invalid file path"):
        check_http_load(Request(b"POST", b"/v2/repository/models/simple/load", b"HTTP/1.1", [], body), 1 << 20)


@pytest.mark.parametrize("key", ["file:1/" + "a" * 255, "file:" + "/".join(["a" * 200] * 20), "file:../x", "config"])
def test_paths_triton_can_create_or_refuses_itself_go_on(key: str) -> None:
    check_file_path(key)
