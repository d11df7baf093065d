"""Every restricted endpoint group (model control, shared memory, logging, trace) on both protocols:
refused without the admin key, answered with it. Inference, health and metadata stay open."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from mslite_contract.protocol import ADMIN_KEY_GRPC_HEADER, ADMIN_KEY_HEADER

pytestmark = pytest.mark.integration

HTTP_GROUPS = {  # group -> (method, path, body)
    "model control": ("POST", "/v2/repository/index", b"{}"),
    "shared memory": ("GET", "/v2/systemsharedmemory/status", None),
    "logging": ("GET", "/v2/logging", None),
    "trace": ("GET", "/v2/trace/setting", None),
}
GRPC_GROUPS: dict[str, Callable[[grpcclient.InferenceServerClient, dict[str, str]], Any]] = {
    "model control": lambda c, h: c.get_model_repository_index(headers=h),
    "shared memory": lambda c, h: c.get_system_shared_memory_status(headers=h),
    "logging": lambda c, h: c.get_log_settings(headers=h),
    "trace": lambda c, h: c.get_trace_settings(headers=h),
}


def _http_status(url: str, method: str, body: bytes | None, headers: dict[str, str]) -> int:
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.parametrize("group", sorted(HTTP_GROUPS))
def test_http_group_needs_the_key(server, group):
    method, path, body = HTTP_GROUPS[group]
    url = server.http_url + path
    assert server.admin_key, "the session server runs with the admin key"
    assert _http_status(url, method, body, {}) == 403
    assert _http_status(url, method, body, {ADMIN_KEY_HEADER: "not-the-key"}) == 403
    assert _http_status(url, method, body, {ADMIN_KEY_HEADER: server.admin_key}) == 200


@pytest.mark.parametrize("group", sorted(GRPC_GROUPS))
def test_grpc_group_needs_the_key(server, group):
    call = GRPC_GROUPS[group]
    client = grpcclient.InferenceServerClient(server.grpc_url.removeprefix("grpc://"))
    try:
        for headers in ({}, {ADMIN_KEY_GRPC_HEADER: "not-the-key"}):
            with pytest.raises(InferenceServerException, match="restricted"):
                call(client, headers)
        call(client, {ADMIN_KEY_GRPC_HEADER: server.admin_key})  # answered
    finally:
        client.close()


def test_inference_health_and_metadata_stay_open(server):
    for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/tiny", "/v2/models/tiny/stats"):
        assert _http_status(server.http_url + path, "GET", None, {}) == 200, path
    body = b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}'
    assert _http_status(server.http_url + "/v2/models/tiny/infer", "POST", body, {}) == 200
