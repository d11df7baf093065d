"""Weights on the client side (no server): name-list files, config sections, update requests."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mslite_triton as mslite
from mslite_backend.errors import UpdateDenied
from mslite_backend.update_auth import UpdateGuard
from mslite_contract.protocol import (
    FILE_PARAMETER,
    FILE_REFUSED,
    PROOF_PARAMETER,
    UPDATE_PARAMETER,
    UPLOAD_PREFIX,
    WEIGHTS_INPUT,
)
from mslite_triton import _weights
from mslite_triton._model_config import WorkerPlan, build_model_config
from mslite_triton._remote import RemoteModel
from mslite_triton._transport import ModelInfo, TensorInfo
from mslite_triton._weights import declared_weights, read_weight_names, update_weights, weight_sections
from mslite_triton.context import Context
from mslite_triton.errors import InvalidInputError, PermissionDeniedError

WHO = "build_from_file failed"


# --- name-list files and sections -----------------------------------------------------------------


def test_name_list_files_as_the_spec_writes_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "names.txt").write_text("w0\n\nlora_a,w1\nw0\n")
    config = tmp_path / "config.ini"
    monkeypatch.chdir("/")  # a relative path is also looked up beside the config file
    names, aliases = read_weight_names('"names.txt"', str(config), WHO)
    assert names == ["w0", "w1"] and aliases == {"lora_a": "w1"}
    assert read_weight_names(f"'{tmp_path / 'names.txt'}'", "", WHO)[0] == ["w0", "w1"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("a,b,c\n", "line 1: only support 1 or 2 row name list, current row num: 3"),
        ("w0\n,w1\n", "line 2 has an empty name"),
    ],
)
def test_bad_name_list_lines(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "names.txt").write_text(content)
    with pytest.raises(RuntimeError, match=f"build_from_file failed! Error is variable weight name list {message}"):
        read_weight_names(str(tmp_path / "names.txt"), "", WHO)


def test_a_missing_name_list_names_only_the_file(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="variable weight name list 'nope.txt' does not exist") as exc:
        read_weight_names(str(tmp_path / "nope.txt"), "", WHO)
    assert str(tmp_path) not in str(exc.value)


def test_weight_sections_become_lists_and_sharing_keys_are_dropped(tmp_path: Path) -> None:
    (tmp_path / "names.txt").write_text("w0\nw1\n")
    sections = {
        "ascend_context": {
            "variable_weights_file": str(tmp_path / "names.txt"),
            "shareable_weight_pid_list": "1,2",
            "precision_mode": "x",
        },
        "weights": {"updatable_file": str(tmp_path / "names.txt"), "share": "true"},
        "common_context": {"a": "b"},
    }
    out, aliases = weight_sections(sections, "", WHO)
    assert out == {
        "ascend_context": {"variable_weights_list": "w0,w1", "precision_mode": "x"},
        "weights": {"updatable": "w0,w1", "share": "true"},
        "common_context": {"a": "b"},
    }
    assert aliases == {} and "variable_weights_file" in sections["ascend_context"]  # the input is not changed
    assert weight_sections({"ascend_context": {"shareable_weight_mem_handle": "7"}}, "", WHO)[0] == {}
    params = build_model_config("m", Context(), WorkerPlan(1, 1, 1), sections=out)["parameters"]
    assert params["ascend_context.variable_weights_list"] == {"string_value": "w0,w1"}


def test_both_sharing_keys_are_mutually_exclusive() -> None:
    both = {"ascend_context": {"shareable_weight_pid_list": "1", "shareable_weight_mem_handle": "2"}}
    with pytest.raises(RuntimeError, match="kLiteError: shareable_weight_pid_list and .* mutually exclusive"):
        weight_sections(both, "", WHO)


# --- update requests ----------------------------------------------------------------------------


class FakeTransport:
    """Records what an update would send; `refuse_files` plays a server on another host."""

    def __init__(
        self, *, use_shm: bool = False, refuse_files: bool = False, error: Exception | None = None, key: str = ""
    ) -> None:
        self.use_shm = use_shm
        self.key = key
        self.refuse_files = refuse_files
        self.error = error
        self.calls: list[dict[str, Any]] = []

    def infer(self, model: str, inputs: list, outputs: list, *, parameters: dict[str, str] | None = None) -> dict:
        call: dict[str, Any] = {"model": model, "inputs": dict(inputs), "outputs": outputs, "parameters": parameters}
        if parameters and FILE_PARAMETER in parameters:
            call["file"] = Path(_weights.UPLOAD_DIR, parameters[FILE_PARAMETER]).read_bytes()
        self.calls.append(call)
        if self.refuse_files and parameters and FILE_PARAMETER in parameters:
            raise InvalidInputError(f"model '{model}': {FILE_REFUSED} (missing)")
        if self.error is not None:
            raise self.error
        return {}


W0 = TensorInfo("w0", "FP32", (2, 3))
X = TensorInfo("x", "FP32", (-1, 4))


def _remote_model(transport: FakeTransport, declared: str = "w0,b0", *, update_input: bool = True) -> RemoteModel:
    inputs = (X, TensorInfo(WEIGHTS_INPUT, "UINT8", (-1, -1))) if update_input else (X,)
    info = ModelInfo("m", inputs, (TensorInfo("y", "FP32", (-1, 4)),), 8, {"variable_weights_list": declared})
    return RemoteModel(transport, info)  # type: ignore[arg-type]


def _tensor(array: np.ndarray, name: str = "") -> mslite.Tensor:
    t = mslite.Tensor(array)
    if name:
        t.name = name
    return t


W0_VALUE = np.arange(6, dtype=np.float32).reshape(2, 3)
B0_VALUE = np.array([7, 8, 9], np.int64)


def test_the_update_input_is_hidden_and_the_declared_list_read() -> None:
    remote = _remote_model(FakeTransport())
    assert [t.name for t in remote.info.inputs] == ["x"] and remote.weights_input is not None
    assert declared_weights(remote.info) == ("w0", "b0")
    assert [t.name for t in remote.input_tensors()] == ["x"]
    assert int(remote.shareable_handle) > 0


def test_a_partial_update_is_sent_inline_matched_by_name() -> None:
    transport = FakeTransport(use_shm=True)
    update_weights(_remote_model(transport), [_tensor(B0_VALUE, "b0")], {})
    (call,) = transport.calls
    assert call["outputs"] == [] and FILE_PARAMETER not in call["parameters"]
    assert json.loads(call["parameters"][UPDATE_PARAMETER]) == [{"name": "b0", "dtype": "<i8", "shape": [3]}]
    np.testing.assert_array_equal(call["inputs"][WEIGHTS_INPUT], B0_VALUE.view(np.uint8).reshape(1, -1))
    np.testing.assert_array_equal(call["inputs"]["x"], np.zeros((1, 4), np.float32))  # placeholder


def test_unnamed_tensors_follow_the_declared_order_and_aliases_are_resolved() -> None:
    transport = FakeTransport()
    remote = _remote_model(transport)
    update_weights(remote, [_tensor(W0_VALUE), _tensor(B0_VALUE)], {})
    update_weights(remote, [_tensor(B0_VALUE, "lora_b"), _tensor(W0_VALUE, "w0")], {"lora_b": "b0"})
    names = [[e["name"] for e in json.loads(c["parameters"][UPDATE_PARAMETER])] for c in transport.calls]
    assert names == [["w0", "b0"], ["b0", "w0"]]


def test_a_full_update_on_the_servers_host_goes_through_a_file_in_the_store_layout() -> None:
    transport = FakeTransport(use_shm=True)
    update_weights(_remote_model(transport), [_tensor(B0_VALUE, "b0"), _tensor(W0_VALUE, "w0")], {})
    (call,) = transport.calls
    assert WEIGHTS_INPUT not in call["inputs"]
    manifest = json.loads(call["parameters"][UPDATE_PARAMETER])
    assert [e["name"] for e in manifest] == ["w0", "b0"]  # declared order, as the layout
    data = call["file"]
    assert len(data) == 64 + 64  # each weight 64-byte aligned
    assert data[:24] == W0_VALUE.tobytes() and data[64:88] == B0_VALUE.tobytes()
    assert not Path(_weights.UPLOAD_DIR, call["parameters"][FILE_PARAMETER]).exists()  # removed after the call


@pytest.mark.parametrize("use_shm", [False, True])
def test_with_the_admin_key_every_update_carries_a_proof_the_worker_accepts(use_shm: bool) -> None:
    transport = FakeTransport(use_shm=use_shm, key="admin")
    update_weights(_remote_model(transport), [_tensor(W0_VALUE, "w0"), _tensor(B0_VALUE, "b0")], {})
    (call,) = transport.calls
    params = call["parameters"]
    assert (FILE_PARAMETER in params) == use_shm
    values = call["inputs"].get(WEIGHTS_INPUT)  # what the worker receives inline (None with a file)
    assert (values is None) == use_shm
    UpdateGuard("admin").check(
        "m", params[UPDATE_PARAMETER], params.get(FILE_PARAMETER, ""), params[PROOF_PARAMETER], values
    )
    with pytest.raises(UpdateDenied, match="does not match"):
        UpdateGuard("other").check(
            "m", params[UPDATE_PARAMETER], params.get(FILE_PARAMETER, ""), params[PROOF_PARAMETER], values
        )
    if values is not None:  # the proof is good for these bytes only
        with pytest.raises(UpdateDenied, match="not those it was made for"):
            UpdateGuard("admin").check("m", params[UPDATE_PARAMETER], "", params[PROOF_PARAMETER], values ^ 1)


def test_without_the_key_no_proof_is_sent_and_a_refusal_says_so() -> None:
    refusal = PermissionDeniedError("model 'm': weights update refused: it must prove the server's admin key")
    transport = FakeTransport(error=refusal)
    with pytest.raises(PermissionDeniedError, match="update weight failed! Error is kLiteError: model 'm': weights"):
        update_weights(_remote_model(transport), [_tensor(B0_VALUE, "b0")], {})
    assert PROOF_PARAMETER not in transport.calls[0]["parameters"]


def test_a_server_that_cannot_see_the_file_gets_the_values_inline() -> None:
    transport = FakeTransport(use_shm=True, refuse_files=True)
    update_weights(_remote_model(transport), [_tensor(W0_VALUE, "w0"), _tensor(B0_VALUE, "b0")], {})
    assert [FILE_PARAMETER in c["parameters"] for c in transport.calls] == [True, False]
    assert transport.calls[1]["inputs"][WEIGHTS_INPUT].nbytes == 24 + 24
    assert not [n for n in os.listdir(_weights.UPLOAD_DIR) if n.startswith(f"{UPLOAD_PREFIX}{os.getpid()}_")]


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ([_tensor(W0_VALUE, "w9")], r"tensor\(s\) \['w9'\] are not updatable weights of this model"),
        ([_tensor(W0_VALUE, "w0"), _tensor(W0_VALUE, "w0")], r"tensor\(s\) \['w0'\] are given more than once"),
        ([_tensor(W0_VALUE), _tensor(B0_VALUE), _tensor(B0_VALUE)], "tensor 2 has no name and only 2 updatable"),
    ],
)
def test_bad_updates_are_refused_before_anything_is_sent(tensors: list, message: str) -> None:
    transport = FakeTransport()
    with pytest.raises(InvalidInputError, match=f"update weight failed! Error is model 'm'.*{message}"):
        update_weights(_remote_model(transport), tensors, {})
    assert transport.calls == []


def test_a_model_without_updatable_weights_says_how_to_declare_them() -> None:
    for remote in (_remote_model(FakeTransport(), ""), _remote_model(FakeTransport(), update_input=False)):
        with pytest.raises(InvalidInputError, match=r"declares no updatable weights; .*variable_weights_file"):
            update_weights(remote, [_tensor(W0_VALUE, "w0")], {})


def test_the_servers_rejection_reaches_the_caller_as_a_value_error() -> None:
    transport = FakeTransport(error=InvalidInputError("model 'm', weight 'w0': shape expected [2, 3], got [3, 2]"))
    with pytest.raises(ValueError, match=r"update weight failed! Error is model 'm', weight 'w0': shape expected"):
        update_weights(_remote_model(transport), [_tensor(W0_VALUE.T.copy(), "w0")], {})


# --- Model / ModelParallelRunner ------------------------------------------------------------------


@pytest.mark.parametrize("owner", [mslite.Model, mslite.ModelParallelRunner])
def test_update_weights_checks_types_and_the_build(owner: Any) -> None:
    obj = owner()
    with pytest.raises(TypeError, match="weights must be"):
        obj.update_weights((_tensor(W0_VALUE),))
    with pytest.raises(TypeError, match="weights element must be list, but got"):
        obj.update_weights([_tensor(W0_VALUE)])
    with pytest.raises(TypeError, match="weights element's element must be Tensor, but got .* at 0,1"):
        obj.update_weights([[_tensor(W0_VALUE), W0_VALUE]])
    with pytest.raises(RuntimeError, match="update weight failed! Error is kLiteError") as not_built:
        obj.update_weights([[_tensor(W0_VALUE)]])  # not built (a built one: tests/integration/test_parity.py)
    if owner is mslite.Model:  # MindSpore Lite's own text, which its unit tests look for
        assert "Session is null, please build model first!" in str(not_built.value)


def test_model_info_keys_for_sharing() -> None:
    model = mslite.Model()
    assert model.get_model_info("current_pid") == str(os.getpid())
    assert model.get_model_info("shareable_weight_mem_handle") == ""  # built: tests/integration/test_parity.py


def test_update_files_of_dead_clients_are_swept() -> None:
    stale = Path(_weights.UPLOAD_DIR, f"{UPLOAD_PREFIX}999999999_dead")
    stale.write_bytes(b"x")
    transport = FakeTransport(use_shm=True)
    update_weights(_remote_model(transport), [_tensor(W0_VALUE, "w0"), _tensor(B0_VALUE, "b0")], {})
    assert not stale.exists() and len(transport.calls) == 1


def test_a_large_partial_update_on_the_servers_host_goes_through_a_file() -> None:
    """No request carries its values, so it passes whatever the gateway's request size limit."""
    transport = FakeTransport(use_shm=True, key="admin")
    big = np.arange(_weights.FILE_MIN_BYTES // 8, dtype=np.int64)
    remote = _remote_model(transport, "w0,b0")
    update_weights(remote, [_tensor(big, "b0")], {})
    (call,) = transport.calls
    assert WEIGHTS_INPUT not in call["inputs"] and call["file"][: big.nbytes] == big.tobytes()
    assert json.loads(call["parameters"][UPDATE_PARAMETER]) == [{"name": "b0", "dtype": "<i8", "shape": [big.size]}]
    params = call["parameters"]
    UpdateGuard("admin").check("m", params[UPDATE_PARAMETER], params[FILE_PARAMETER], params[PROOF_PARAMETER])
