"""backend/mslite/model.py driven as Triton's stub drives it, against a stand-in `pb_utils` (no server).

Real ONNX Runtime sessions on tiny models: which executor `initialize` chooses, one response per request,
a bad request failing alone, outputs in name order, strings, weights updates seen by the rest of the batch.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from mslite_backend.errors import InferenceFailure
from mslite_backend.graph import plan_auto_complete, read_graph_io
from mslite_backend.update_auth import UpdateGuard
from mslite_contract.protocol import DEADLINE_EXIT_CODE, DEADLINE_PASSED, UPDATE_PARAMETER, WEIGHTS_INPUT
from tests.support import fake_pb_utils as pb
from tests.support import model_zoo as zoo
from tests.support.updatable import linear_model

MODEL = pb.install()


@pytest.fixture
def load(tmp_path: Path) -> Iterator[Any]:
    """`load(model, **params)`: a `TritonPythonModel` initialized on `model` as `<tmp>/<n>/1/model.onnx`."""
    loaded: list[Any] = []
    pb.Logger.lines.clear()

    def _load(model: onnx.ModelProto | bytes, **params: str) -> Any:
        repo = tmp_path / f"m{len(loaded)}"
        (repo / "1").mkdir(parents=True)
        path = repo / "1" / "model.onnx"
        path.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
        plan = plan_auto_complete({"name": "m"}, read_graph_io(str(path)))
        inputs = list(plan.inputs)
        if "variable_weights_list" in params:  # what auto-complete adds for a model with updatable weights
            inputs.append({"name": WEIGHTS_INPUT, "data_type": "TYPE_UINT8", "dims": [-1], "optional": True})
        config = {
            "name": "m",
            "max_batch_size": plan.max_batch_size or 0,
            "input": inputs,
            "output": list(plan.outputs),
            "instance_group": [{"name": "m_0", "count": 1, "kind": "KIND_CPU"}],
            "parameters": {k: {"string_value": v} for k, v in {"thread_num": "1", **params}.items()},
        }
        worker = MODEL.TritonPythonModel()
        worker.update_guard = UpdateGuard.from_environment({})  # no admin key: updates need no proof
        loaded.append(worker)
        worker.initialize(
            {
                "model_config": json.dumps(config),
                "model_instance_name": "m_0_0",
                "model_instance_kind": "CPU",
                "model_instance_device_id": "0",
                "model_repository": str(repo),
                "model_version": "1",
            }
        )
        return worker

    yield _load
    for worker in reversed(loaded):
        worker.finalize()  # the weights store in /dev/shm goes with the last worker


def _request(parameters: dict[str, Any] | None = None, requested: tuple[str, ...] = (), **inputs: Any) -> Any:
    return pb.InferenceRequest(inputs, json.dumps(parameters or {}), requested)


def _error(response: Any) -> tuple[int, str]:
    assert response.has_error(), pb.outputs(response)
    return response.error().code(), response.error().message()


@pytest.mark.parametrize(
    ("model", "params", "kind"),
    [
        (zoo.multi_io(), {}, "plain"),  # CPU, one session, nothing to convert: a request is one ORT run
        (zoo.multi_io(), {"merge_requests": "true"}, "general"),  # a batch's requests concatenated
        (zoo.mixed_dtypes(), {}, "general"),  # a BOOL input: its values checked on every request
        (zoo.string_identity(), {}, "general"),  # strings run as bytes through the C API session
        (linear_model(), {"variable_weights_list": "w"}, "updatable"),
    ],
    ids=["multi_io", "multi_io-merged", "bool_input", "strings", "updatable_weights"],
)
def test_initialize_chooses_the_executor_from_the_model(load: Any, model: Any, params: Any, kind: str) -> None:
    worker = load(model, **params)
    assert worker.executor.kind == kind
    assert any(f"executor={kind} " in line for level, line in pb.Logger.lines if level == "info")


@pytest.mark.parametrize("params", [{}, {"merge_requests": "true"}])
def test_one_response_per_request_in_order_and_a_bad_one_fails_alone(load: Any, params: Any) -> None:
    worker = load(zoo.multi_io(), **params)
    rng = np.random.default_rng(0)
    good = [{"a": rng.standard_normal((n, 3), dtype=np.float32), "b": np.ones((n, 3), np.float32)} for n in (1, 2)]
    bad = {"a": np.ones((1, 3), np.float64), "b": np.ones((1, 3), np.float32)}
    responses = worker.execute([_request(**good[0]), _request(**bad), _request(**good[1]), _request(**good[0])])
    assert len(responses) == 4
    for response, feeds in zip([responses[0], responses[2], responses[3]], [good[0], good[1], good[0]]):
        out = pb.outputs(response)
        np.testing.assert_array_equal(out["sum"], feeds["a"] + feeds["b"])
        np.testing.assert_array_equal(out["prod"], feeds["a"] * feeds["b"])
    code, message = _error(responses[1])
    assert code == pb.TritonError.INVALID_ARG
    assert message == "model 'm', input 'a': data type expected FP32, got FP64"
    assert worker.metrics.errors == {"invalid_input": 1}


def _ragged_add() -> onnx.ModelProto:
    """out = a + b with free lengths: the config lets a (1, 2) and a (1, 3) through, ONNX Runtime refuses them."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["out"])],
        "ragged_add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", n.upper()]) for n in ("a", "b")],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", "T"])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", zoo.OPSET)], ir_version=zoo.IR_VERSION)


@pytest.mark.parametrize("params", [{}, {"merge_requests": "true"}])
def test_an_error_of_onnx_runtime_fails_its_request_alone(load: Any, params: Any) -> None:
    worker = load(_ragged_add(), **params)
    a = np.ones((1, 2), np.float32)
    ok, failed, also_ok = worker.execute(
        [_request(a=a, b=a), _request(a=a, b=np.ones((1, 3), np.float32)), _request(a=a, b=2 * a)]
    )
    np.testing.assert_array_equal(pb.outputs(ok)["out"], a + a)
    np.testing.assert_array_equal(pb.outputs(also_ok)["out"], 3 * a)
    code, message = _error(failed)
    assert code == pb.TritonError.INTERNAL and message.startswith("inference failed: "), message
    assert "broadcast" in message and "onnxruntime_src" not in message and "Traceback" not in message
    assert worker.metrics.errors == {"inference": 1}


@pytest.mark.parametrize("requested", [(), ("alpha", "OUTPUT10", "Zeta"), ("out_b",)])
def test_outputs_come_in_name_order_whatever_was_requested(load: Any, requested: tuple[str, ...]) -> None:
    worker = load(zoo.six_outputs())
    x = np.zeros((1, 4), np.float32)
    (response,) = worker.execute([_request(requested=requested, INPUT0=x)])
    out = pb.outputs(response)
    assert list(out) == sorted(requested or zoo.SIX_OUTPUTS)
    for name, value in out.items():
        np.testing.assert_array_equal(value, x + zoo.SIX_OUTPUTS.index(name))


def test_strings_come_back_byte_for_byte(load: Any) -> None:
    worker = load(zoo.string_identity())
    text = np.array([[b"caf\xc3\xa9", b""], [b"a b\xff\x00", b"\xe2\x82\xac"]], dtype=np.object_)  # \xff: not UTF-8
    (response,) = worker.execute([_request(INPUT0=text)])
    out = pb.outputs(response)["OUTPUT0"]
    assert out.dtype == np.object_ and out.tolist() == text.tolist()


def test_an_update_in_a_batch_is_seen_by_every_request_of_it(load: Any) -> None:
    worker = load(linear_model(), variable_weights_list="w")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    manifest = json.dumps([{"name": "w", "dtype": "<f4", "shape": [4, 4]}])
    data = (3 * np.eye(4, dtype=np.float32)).reshape(1, -1).view(np.uint8)
    update = pb.InferenceRequest({WEIGHTS_INPUT: data}, json.dumps({UPDATE_PARAMETER: manifest}))
    before, updated, after = worker.execute([_request(x=x), update, _request(x=x)])
    assert not updated.has_error() and updated.output_tensors() == []
    np.testing.assert_array_equal(pb.outputs(before)["y"], 3 * x)  # updates go first
    np.testing.assert_array_equal(pb.outputs(after)["y"], 3 * x)
    (missing,) = worker.execute([pb.InferenceRequest({}, json.dumps({UPDATE_PARAMETER: manifest}))])
    needs_data = f"a weights update needs its data in input '{WEIGHTS_INPUT}'"
    assert _error(missing) == (pb.TritonError.INVALID_ARG, needs_data)


def test_an_update_of_a_model_without_updatable_weights_is_refused(load: Any) -> None:
    worker = load(zoo.multi_io())
    manifest = json.dumps([{"name": "w", "dtype": "<f4", "shape": [1]}])
    update = pb.InferenceRequest({WEIGHTS_INPUT: np.zeros((1, 4), np.uint8)}, json.dumps({UPDATE_PARAMETER: manifest}))
    a = np.ones((1, 3), np.float32)
    refused, ran = worker.execute([update, _request(a=a, b=a)])
    assert _error(refused) == (
        pb.TritonError.INVALID_ARG,
        "model 'm' declares no updatable weights (variable_weights_list is empty)",
    )
    np.testing.assert_array_equal(pb.outputs(ran)["sum"], a + a)


def test_a_bug_of_ours_answers_every_request_without_internals(load: Any) -> None:
    worker = load(zoo.multi_io())

    def broken(requests: list[Any]) -> list[Any]:
        raise KeyError("/opt/secret/path")

    worker.executor = broken
    a = np.ones((1, 3), np.float32)
    responses = worker.execute([_request(a=a, b=a), _request(a=a, b=a)])
    assert [_error(r) for r in responses] == [(pb.TritonError.INTERNAL, "internal error in the mslite backend")] * 2
    assert any(level == "error" and "/opt/secret/path" in line for level, line in pb.Logger.lines)


def test_a_request_past_the_execute_deadline_is_answered_through_its_sender_then_the_worker_ends(
    load: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = load(zoo.multi_io(), execute_deadline_s="0.2")
    ended, codes = threading.Event(), []

    def _exit(code: int) -> None:  # the real one ends the process, which this test runs in
        codes.append(code)
        ended.set()

    monkeypatch.setattr(os, "_exit", _exit)
    worker.executor = lambda feeds: [InferenceFailure("unused")] * len(feeds) if ended.wait(60) else []  # stuck
    feeds = {"a": np.ones((1, 3), np.float32), "b": np.ones((1, 3), np.float32)}
    requests = [_request(**feeds), _request(**feeds)]
    worker.execute(requests)
    assert codes == [DEADLINE_EXIT_CODE]
    for request in requests:
        [(response, flags)] = request.sender.sent
        assert flags == pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        code, message = _error(response)
        assert code == pb.TritonError.INTERNAL
        assert message.startswith(f"model 'm': the request {DEADLINE_PASSED} (execute_deadline_s 0.2 s)")


def test_a_run_past_the_execute_deadline_is_stopped_and_the_worker_serves_on(
    load: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Loop of 2**40 iterations is stopped inside the worker (RunOptions.terminate): no exit, the next run works."""
    worker = load(zoo.spin(), execute_deadline_s="0.3")
    codes: list[int] = []
    monkeypatch.setattr(os, "_exit", codes.append)  # the real one would end this test's process
    assert worker.executor.kind == "plain"
    forever, short = _request(n=np.array([2**40], np.int64)), _request(n=np.array([5], np.int64))
    responses = worker.execute([forever, short])  # the second of the execute fails too: it is past the deadline
    assert [_error(r)[1] for r in responses] == [
        f"model 'm': the request {DEADLINE_PASSED} (execute_deadline_s 0.3 s); its run was stopped"
    ] * 2
    assert not forever.sender.sent and codes == []
    [answer] = worker.execute([_request(n=np.array([5], np.int64))])
    assert pb.outputs(answer)["count"].tolist() == [5.0]
    assert any("its run was stopped" in line for _, line in pb.Logger.lines)


def test_without_a_deadline_nothing_watches_execute(load: Any) -> None:
    worker = load(zoo.multi_io())
    assert worker._watch is None
    feeds = {"a": np.ones((1, 3), np.float32), "b": np.ones((1, 3), np.float32)}
    assert not worker.execute([_request(**feeds)])[0].has_error()
