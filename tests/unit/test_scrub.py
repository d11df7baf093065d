"""Server messages as clients see them: no traceback, server path or worker's shared-memory region."""

from __future__ import annotations

import json

from mslite_contract.scrub import scrub, scrub_json_error
from mslite_triton._error_table import clean_message

POOL = (
    "Failed to increase the shared memory pool size for key 'mslite2215_7b0611ce_bacb2f94-1b6a-4c13' to 4194304 "
    "bytes. If you are running Triton inside docker, use '--shm-size' flag to control the shared memory region "
    "size. Error: No space left on device"
)
LOAD = (
    "load failed for model 'bad': version 1 is at UNAVAILABLE state: Internal: TritonModelException: model 'bad': "
    "model file 'model.onnx' is not a valid ONNX model (DecodeError)\n\nAt:\n"
    "  /tmp/mslite-triton-9q2esiqg/backends/mslite/model.py(116): auto_complete_config\n;\n"
)


def test_the_pool_error_loses_the_region_name() -> None:
    text = scrub(POOL)
    assert text.startswith("Failed to increase the shared memory pool size to 4194304 bytes.")
    assert "mslite2215" not in text and "No space left on device" in text


def test_other_internal_region_names_are_hidden() -> None:
    text = scrub("unable to map 'triton_python_backend_shm_region_3f2a' or 'mslite12_ab12cd34_x'")
    assert text == "unable to map '<internal region>' or '<internal region>'"
    assert scrub("no region 'mslite_gateway_81_3'") == "no region '<internal region>'"  # the gateway's staging
    assert scrub("region 'mslite_client_77_0' not found") == "region 'mslite_client_77_0' not found"  # the client's


def test_a_load_error_loses_its_traceback_and_paths() -> None:
    assert scrub(LOAD).endswith("is not a valid ONNX model (DecodeError)")
    assert clean_message("[request id: 7] cannot open /opt/models/m/1/model.onnx") == "cannot open <path>"


def test_json_error_answers_are_rewritten_and_other_bodies_kept() -> None:
    body = json.dumps({"error": POOL}).encode()
    assert "mslite2215" not in json.loads(scrub_json_error(body))["error"]
    clean = json.dumps({"error": "model 'm' is not found"}).encode()
    assert scrub_json_error(clean) is clean
    for other in (b"not json", b'{"outputs": []}', b"[1, 2]"):
        assert scrub_json_error(other) is other
