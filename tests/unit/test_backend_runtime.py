"""batching.py, runtime.py, session.py and errors.py with real ONNX Runtime CPU sessions (no server)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mslite_backend.batching import run_batched, signature
from mslite_backend.config import BackendConfig, InstanceInfo
from mslite_backend.errors import BackendError, InferenceFailure, ModelLoadError, RequestError
from mslite_backend.graph import plan_auto_complete, read_graph_io
from mslite_backend.loading import load_runtime
from mslite_backend.runtime import ModelRuntime
from mslite_contract.scrub import client_message
from tests.support import model_zoo as zoo

CPU = InstanceInfo(name="t_0", kind="CPU", device_id=0)
RNG = np.random.default_rng(0)


def _load(
    tmp_path: Path,
    model: onnx.ModelProto,
    *,
    max_batch_size: int | None = None,
    instance: InstanceInfo = CPU,
    **params: str,
) -> ModelRuntime:
    """Save `model` as `<tmp>/1/model.onnx` and load it with the config auto-complete would write."""
    version_dir = tmp_path / "1"
    version_dir.mkdir(exist_ok=True)
    onnx.save(model, str(version_dir / "model.onnx"))
    io = read_graph_io(str(version_dir / "model.onnx"))
    plan = plan_auto_complete({"name": "m"}, io)
    mbs = (plan.max_batch_size or 0) if max_batch_size is None else max_batch_size
    config = {
        "name": "m",
        "max_batch_size": mbs,
        "input": list(plan.inputs),
        "output": list(plan.outputs),
        "parameters": {k: {"string_value": v} for k, v in {"thread_num": "1", **params}.items()},
    }
    return load_runtime(str(version_dir), BackendConfig.from_model_config(config, cores=2), instance)


def _count_runs(runtime: ModelRuntime) -> list[dict[str, np.ndarray]]:
    """Record every session run of `runtime` (to see which requests were merged)."""
    calls: list[dict[str, np.ndarray]] = []
    session: Any = runtime.string_session or runtime.session  # a string model runs on its C API session
    real = session.run

    def run(names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        calls.append(feeds)
        return real(names, feeds)

    session.run = run
    return calls


def _feeds(model: str, n: int) -> dict[str, np.ndarray]:
    if model == "multi_io":
        return {"a": RNG.standard_normal((n, 3), dtype=np.float32), "b": RNG.standard_normal((n, 3), dtype=np.float32)}
    if model == "mixed_dtypes":
        return {
            "ids": RNG.integers(-(2**40), 2**40, (n, 5), dtype=np.int64),
            "mask": RNG.integers(0, 2, (n, 5)).astype(np.bool_),
            "h": RNG.standard_normal((n, 5)).astype(np.float16),
        }
    if model == "odd_names":
        return {"input:0/x": RNG.standard_normal((n, 2), dtype=np.float32)}
    if model == "variable_seq":
        return {"tokens": RNG.standard_normal((n, 4), dtype=np.float32)}
    raise AssertionError(model)


# ONNX Runtime's float ReduceSum sums in an order that depends on the input buffer's alignment (an
# element at another offset inside a merged batch, or just another allocation), so it can differ from a
# separate run in the last bit. Every other zoo output is element-wise or sequential and must match exactly.
REDUCED = {"total"}


def _assert_same(outputs: dict[str, np.ndarray], expected: list[np.ndarray], names: list[str]) -> None:
    assert list(outputs) == names
    for name, want in zip(names, expected):
        assert outputs[name].dtype == want.dtype, name
        assert outputs[name].shape == want.shape, name
        if name in REDUCED:
            np.testing.assert_allclose(outputs[name], want, rtol=1e-6, atol=1e-6, err_msg=name)
        else:
            assert np.array_equal(outputs[name], want), name


def _ok(result: Any) -> dict[str, np.ndarray]:
    assert not isinstance(result, BackendError), result
    return result


# --- loading and running each zoo model -------------------------------------------------------


@pytest.mark.parametrize("name", ["multi_io", "mixed_dtypes", "odd_names", "variable_seq"])
def test_batched_zoo_model_matches_reference(tmp_path: Path, name: str) -> None:
    model = getattr(zoo, name)()
    runtime = _load(tmp_path, model)
    assert runtime.cfg.max_batch_size == 64
    names = [o.name for o in model.graph.output]
    requests = [_feeds(name, n) for n in (1, 3, 2)]
    results = runtime.execute(requests)
    assert len(results) == 3
    for feeds, result in zip(requests, results):
        _assert_same(_ok(result), zoo.run_reference(model, feeds), names)


def test_mixed_dtypes_values(tmp_path: Path) -> None:
    runtime = _load(tmp_path, zoo.mixed_dtypes())
    feeds = {
        "ids": np.array([[2**40, -1, 0, 1, 7]], dtype=np.int64),
        "mask": np.array([[True, False, True, False, False]]),
        "h": np.array([[0.5, -1.0, 1000.0, 0.0, 3.0]], dtype=np.float16),
    }
    (out,) = runtime.execute([feeds])
    out = _ok(out)
    assert out["ids_out"].dtype == np.int64 and out["ids_out"].tolist() == [[2**40 + 1, 0, 1, 2, 8]]
    assert out["mask_out"].dtype == np.bool_ and out["mask_out"].tolist() == [[False, True, False, True, True]]
    assert out["h_out"].dtype == np.float16 and out["h_out"].tolist() == [[1.0, -2.0, 2000.0, 0.0, 6.0]]


def test_no_batch_model(tmp_path: Path) -> None:
    model = zoo.no_batch()
    runtime = _load(tmp_path, model)
    assert runtime.cfg.max_batch_size == 0
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    calls = _count_runs(runtime)
    results = runtime.execute([{"x": x}, {"x": x + 1}])
    assert len(calls) == 2  # never merged: there is no batch dimension
    assert np.array_equal(_ok(results[0])["y"], x.T)
    assert np.array_equal(_ok(results[1])["y"], (x + 1).T)


def test_no_batch_model_rejects_a_batch_dimension(tmp_path: Path) -> None:
    runtime = _load(tmp_path, zoo.no_batch())
    (result,) = runtime.execute([{"x": np.zeros((1, 3, 4), dtype=np.float32)}])
    assert isinstance(result, RequestError)
    assert "'x'" in str(result) and "[3, 4]" in str(result) and "[1, 3, 4]" in str(result)


# --- batching ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["multi_io", "mixed_dtypes", "variable_seq"])
def test_merged_requests_equal_single_runs_exactly(tmp_path: Path, name: str) -> None:
    model = getattr(zoo, name)()
    runtime = _load(tmp_path, model, merge_requests="true")
    requests = [_feeds(name, n) for n in (2, 1, 4, 1)]
    calls = _count_runs(runtime)
    merged = runtime.execute(requests)
    assert len(calls) == 1 and next(iter(calls[0].values())).shape[0] == 8
    singles = [runtime.execute([r])[0] for r in requests]
    names = [o.name for o in model.graph.output]
    for feeds, got, single in zip(requests, merged, singles):
        got, single = _ok(got), _ok(single)
        _assert_same(got, [single[out] for out in names], names)
        assert got[names[0]].shape[0] == next(iter(feeds.values())).shape[0]
        _assert_same(got, zoo.run_reference(model, feeds), names)


@pytest.mark.parametrize("name", ["multi_io", "mixed_dtypes", "variable_seq"])
def test_cpu_workers_run_each_request_alone_by_default(tmp_path: Path, name: str) -> None:
    model = getattr(zoo, name)()
    runtime = _load(tmp_path, model)
    requests = [_feeds(name, n) for n in (2, 1, 4)]
    calls = _count_runs(runtime)
    results = runtime.execute(requests)
    assert [next(iter(c.values())).shape[0] for c in calls] == [2, 1, 4]
    names = [o.name for o in model.graph.output]
    for feeds, result in zip(requests, results):
        _assert_same(_ok(result), zoo.run_reference(model, feeds), names)


def test_different_sequence_lengths_in_one_call(tmp_path: Path) -> None:
    model = zoo.variable_seq()
    runtime = _load(tmp_path, model, merge_requests="true")
    lengths = [3, 5, 3, 1, 5]
    requests = [{"tokens": RNG.standard_normal((2, t), dtype=np.float32)} for t in lengths]
    calls = _count_runs(runtime)
    results = runtime.execute(requests)
    # One run per distinct length: requests of equal shape are merged, the others are not.
    assert sorted(c["tokens"].shape for c in calls) == [(2, 1), (4, 3), (4, 5)]
    for feeds, t, result in zip(requests, lengths, results):
        out = _ok(result)
        assert out["cumsum"].shape == (2, t) and out["total"].shape == (2, 1)
        _assert_same(out, zoo.run_reference(model, feeds), ["cumsum", "total"])


def _bad_requests() -> dict[str, tuple[dict[str, np.ndarray], list[str]]]:
    a = np.ones((2, 3), dtype=np.float32)
    return {
        "wrong dtype": ({"a": a.astype(np.float64), "b": a}, ["'a'", "FP32", "FP64"]),
        "wrong rank": ({"a": a, "b": np.ones((2, 3, 1), dtype=np.float32)}, ["'b'", "[-1, 3]", "[2, 3, 1]"]),
        "wrong fixed dim": ({"a": np.ones((2, 4), dtype=np.float32), "b": a}, ["'a'", "[-1, 3]", "[2, 4]"]),
        "missing input": ({"a": a}, ["['b']", "missing"]),
        "unexpected input": ({"a": a, "b": a, "c": a}, ["['c']", "unexpected"]),
        "batch 0": ({"a": np.ones((0, 3), dtype=np.float32), "b": a[:0]}, ["'a'", "batch size", "[0, 3]"]),
        "batch over max": (
            {"a": np.ones((5, 3), dtype=np.float32), "b": np.ones((5, 3), np.float32)},
            ["'a'", "5", "4"],
        ),
        "scalar": ({"a": np.float32(1.0) * np.ones((), np.float32), "b": a}, ["'a'", "[-1, 3]", "[]"]),
        "batch disagrees": ({"a": a, "b": np.ones((1, 3), dtype=np.float32)}, ["2", "1", "batch size"]),
    }


@pytest.mark.parametrize("case", list(_bad_requests()))
def test_a_bad_request_fails_alone(tmp_path: Path, case: str) -> None:
    model = zoo.multi_io()
    runtime = _load(tmp_path, model, max_batch_size=4, merge_requests="true")
    bad, words = _bad_requests()[case]
    good = [_feeds("multi_io", 1), _feeds("multi_io", 2)]
    calls = _count_runs(runtime)
    results = runtime.execute([good[0], bad, good[1]])
    assert len(results) == 3
    assert isinstance(results[1], RequestError)
    message = str(results[1])
    assert "model 'm'" in message
    for word in words:
        assert word in message, (word, message)
    for feeds, result in zip(good, (results[0], results[2])):
        _assert_same(_ok(result), zoo.run_reference(model, feeds), ["sum", "prod"])
    assert len(calls) == 1  # the two good requests still share one run


def _gather_model() -> onnx.ModelProto:
    """`y = data[idx]` with data = [0, 10, 20, 30, 40]: an out-of-range index fails inside ONNX Runtime."""
    data = numpy_helper.from_array(np.arange(5, dtype=np.float32) * 10, name="data")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["data", "idx"], ["y"], axis=0)],
        "gather",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, ["N", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])],
        initializer=[data],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_request_failing_inside_ort_does_not_fail_its_merged_neighbours(tmp_path: Path) -> None:
    runtime = _load(tmp_path, _gather_model(), merge_requests="true")
    requests = [{"idx": np.array([[1], [4]])}, {"idx": np.array([[7]])}, {"idx": np.array([[0]])}]
    calls = _count_runs(runtime)
    results = runtime.execute(requests)
    assert len(calls) == 4  # one merged try, then each request alone
    assert _ok(results[0])["y"].tolist() == [[10.0], [40.0]]
    assert _ok(results[2])["y"].tolist() == [[0.0]]
    assert isinstance(results[1], RequestError)
    message = str(results[1])
    assert "out of data bounds" in message
    assert "[ONNXRuntimeError]" not in message and "INVALID_ARGUMENT" not in message


def test_unmerged_requests_run_one_by_one_and_fail_alone(tmp_path: Path) -> None:
    runtime = _load(tmp_path, _gather_model(), merge_requests="false")
    requests = [{"idx": np.array([[1], [4]])}, {"idx": np.array([[7]])}, {"idx": np.array([[0]])}]
    calls = _count_runs(runtime)
    results = runtime.execute(requests)
    assert len(calls) == 3  # no merged try: each request once
    assert _ok(results[0])["y"].tolist() == [[10.0], [40.0]]
    assert _ok(results[2])["y"].tolist() == [[0.0]]
    assert isinstance(results[1], RequestError) and "out of data bounds" in str(results[1])


def test_run_batched_with_fake_runs() -> None:
    def double(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if (feeds["x"] < 0).any():
            raise InferenceFailure("negative")
        return {"y": feeds["x"] * 2}

    requests = [{"x": np.array([[1.0]])}, {"x": np.array([[-1.0]])}, {"x": np.array([[2.0], [3.0]])}]
    results = run_batched(requests, double, merge=True)
    assert results[0]["y"].tolist() == [[2.0]]
    assert isinstance(results[1], InferenceFailure)
    assert results[2]["y"].tolist() == [[4.0], [6.0]]


def test_run_batched_does_not_split_outputs_without_a_batch_dimension() -> None:
    runs: list[int] = []

    def total(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        runs.append(len(feeds["x"]))
        return {"s": np.array(feeds["x"].sum())}

    results = run_batched([{"x": np.ones((2, 1))}, {"x": np.ones((3, 1))}], total, merge=True)
    assert runs == [5, 2, 3]  # the merged output cannot be split, so each request runs alone
    assert [float(r["s"]) for r in results] == [2.0, 3.0]


def test_signature_ignores_the_batch_size() -> None:
    a = {"x": np.ones((2, 3), np.float32)}
    assert signature(a) == signature({"x": np.ones((5, 3), np.float32)})
    assert signature(a) != signature({"x": np.ones((2, 4), np.float32)})
    assert signature(a) != signature({"x": np.ones((2, 3), np.float64)})


# --- load failures ----------------------------------------------------------------------------


def test_gpu_instance_on_cpu_only_ort_fails_the_load(tmp_path: Path) -> None:
    gpu = InstanceInfo(name="t_0", kind="GPU", device_id=0)
    with pytest.raises(ModelLoadError) as exc:
        _load(tmp_path, zoo.multi_io(), instance=gpu)
    message = str(exc.value)
    assert "CUDAExecutionProvider" in message and "model 'm'" in message and "'t_0'" in message
    assert "onnxruntime-gpu" in message


def test_corrupt_model_fails_the_load_without_paths(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.onnx").write_bytes(zoo.broken_bytes())
    cfg = BackendConfig.from_model_config({"name": "m"}, cores=2)
    with pytest.raises(ModelLoadError) as exc:
        load_runtime(str(tmp_path / "1"), cfg, CPU)
    assert str(tmp_path) not in str(exc.value)


def test_config_mismatch_fails_the_load(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    onnx.save(zoo.no_batch(), str(tmp_path / "1" / "model.onnx"))
    config = {"name": "m", "input": [{"name": "x", "data_type": "TYPE_FP16", "dims": [3, 4]}]}
    with pytest.raises(ModelLoadError, match="input 'x'.*TYPE_FP32.*TYPE_FP16"):
        load_runtime(str(tmp_path / "1"), BackendConfig.from_model_config(config, cores=2), CPU)


# --- client_message ---------------------------------------------------------------------------


def test_client_message_strips_the_ort_prefix() -> None:
    text = (
        "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for input: a for the following indices\n"
        " index: 1 Got: 4 Expected: 3\n Please fix either the inputs/outputs or the model."
    )
    assert client_message(text) == (
        "Got invalid dimensions for input: a for the following indices index: 1 Got: 4 Expected: 3 "
        "Please fix either the inputs/outputs or the model."
    )


def test_client_message_strips_absolute_paths() -> None:
    text = "Load model from /home/user/repo/m/1/model.onnx failed: bad file C:/models/x/y.onnx"
    assert client_message(text) == "Load model from <path> failed: bad file <path>"


@pytest.mark.parametrize(
    "text",
    [
        "bad input\n\nAt:\n  /opt/tritonserver/backends/mslite/model.py(40): initialize\n",
        'bad input\nTraceback (most recent call last):\n  File "/opt/x/model.py", line 3, in run\nValueError: /a/b',
    ],
)
def test_client_message_strips_tracebacks(text: str) -> None:
    assert client_message(text) == "bad input"


def test_client_message_truncates_long_text() -> None:
    short = "x" * 400
    assert client_message(short) == short
    long = client_message("word " * 200)
    assert len(long) == 400 and long.endswith("...")
    assert len(client_message("y" * 100, limit=20)) == 20


def test_client_message_keeps_tensor_names_with_slashes() -> None:
    text = "model 'm', input 'encoder/layer_0/dense:0': data type expected FP32, got INT32"
    assert client_message(text) == text


# --- buckets, BOOL values, request size ---------------------------------------------------------


def test_buckets_pad_and_give_the_unpadded_results(tmp_path: Path) -> None:
    model = zoo.multi_io()
    rt = _load(tmp_path, model, batch_buckets="4,8")
    assert rt.buckets == (4, 8, 64)
    a = np.arange(30, dtype=np.float32).reshape(10, 3)
    b = np.ones((10, 3), dtype=np.float32)
    (result,) = rt.execute([{"a": a, "b": b}])
    expected = zoo.run_reference(model, {"a": a, "b": b})
    np.testing.assert_array_equal(result["sum"], expected[0])
    np.testing.assert_array_equal(result["prod"], expected[1])
    assert result["sum"].shape == (10, 3)


def test_gpu_workers_run_each_bucket_on_its_own_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # ONNX Runtime's CUDA provider re-plans whenever a session's input shape changes, even back to a warmed
    # one: a GPU worker keeps one session per bucket, so no session ever sees two batch sizes. Run here with
    # the CPU provider standing in for CUDA.
    import mslite_backend.session as session_module
    from mslite_backend.providers import ProviderChoice

    monkeypatch.setattr(session_module, "choose", lambda *a, **k: ProviderChoice("CPUExecutionProvider"))
    model = zoo.multi_io()
    gpu = InstanceInfo(name="t_0", kind="GPU", device_id=0)
    rt = _load(tmp_path, model, max_batch_size=8, instance=gpu, batch_buckets="1,2,4")
    assert rt.buckets == (1, 2, 4, 8)
    assert sorted(rt.bucket_sessions) == [1, 2, 4, 8]
    assert len({id(s) for s in rt.bucket_sessions.values()}) == 4 and rt.session is rt.bucket_sessions[1]
    seen: dict[int, set[int]] = {}
    for size, sess in rt.bucket_sessions.items():
        real = sess.run

        def run(names: list[str], feeds: dict[str, np.ndarray], size: int = size, real: Any = real) -> list[np.ndarray]:
            seen.setdefault(size, set()).add(next(iter(feeds.values())).shape[0])
            return real(names, feeds)

        sess.run = run  # type: ignore[method-assign]
    for sizes in ([1], [3], [2], [2, 1], [1], [5, 2], [8]):
        requests = [_feeds("multi_io", n) for n in sizes]
        for req, result in zip(requests, rt.execute(requests)):
            expected = zoo.run_reference(model, req)
            np.testing.assert_array_equal(result["sum"], expected[0])
            np.testing.assert_array_equal(result["prod"], expected[1])
    assert seen == {1: {1}, 2: {2}, 4: {4}, 8: {8}}  # every session only ever ran its own batch size


def test_cpu_workers_keep_one_session_with_buckets(tmp_path: Path) -> None:
    rt = _load(tmp_path, zoo.multi_io(), batch_buckets="4,8")
    assert rt.bucket_sessions == {}


def test_bool_inputs_must_be_zero_or_one(tmp_path: Path) -> None:
    rt = _load(tmp_path, zoo.mixed_dtypes())
    ids = np.zeros((1, 5), np.int64)
    h = np.zeros((1, 5), np.float16)
    bad = np.array([[7, 255, 2, 0, 1]], dtype=np.uint8).view(np.bool_)
    good = np.array([[True, False, True, False, True]])
    results = rt.execute([{"ids": ids, "mask": bad, "h": h}, {"ids": ids, "mask": good, "h": h}])
    assert isinstance(results[0], RequestError) and "'mask'" in str(results[0]) and "0 or 1" in str(results[0])
    np.testing.assert_array_equal(results[1]["mask_out"], ~good)


def test_a_remembered_layout_still_checks_bool_values(tmp_path: Path) -> None:
    rt = _load(tmp_path, zoo.mixed_dtypes())
    ids, h = np.zeros((1, 5), np.int64), np.zeros((1, 5), np.float16)
    good = np.array([[True, False, True, False, True]])
    bad = np.array([[0, 1, 9, 0, 1]], dtype=np.uint8).view(np.bool_)
    for _ in range(2):  # the second time, the layout (names, dtypes, shapes) is already known to be valid
        (ok,) = rt.execute([{"ids": ids, "mask": good, "h": h}])
        np.testing.assert_array_equal(ok["mask_out"], ~good)
        (refused,) = rt.execute([{"ids": ids, "mask": bad, "h": h}])
        assert isinstance(refused, RequestError) and "'mask'" in str(refused)


@pytest.mark.parametrize("case", list(_bad_requests()))
def test_a_bad_single_request_after_good_ones_is_still_refused(tmp_path: Path, case: str) -> None:
    runtime = _load(tmp_path, zoo.multi_io(), max_batch_size=4)
    for n in (1, 2):
        (good,) = runtime.execute([_feeds("multi_io", n)])
        assert not isinstance(good, RequestError)
    bad, words = _bad_requests()[case]
    for _ in range(2):
        (result,) = runtime.execute([bad])
        assert isinstance(result, RequestError) and all(w in str(result) for w in words), str(result)


def test_merged_outputs_are_split_in_request_order(tmp_path: Path) -> None:
    model = zoo.multi_io()
    runtime = _load(tmp_path, model, max_batch_size=8)
    requests = [_feeds("multi_io", n) for n in (3, 1, 2)]
    results = runtime.execute(requests)
    for feeds, result in zip(requests, results):
        _assert_same(_ok(result), zoo.run_reference(model, feeds), ["sum", "prod"])
        assert _ok(result)["sum"].shape[0] == next(iter(feeds.values())).shape[0]


def test_request_size_cap(tmp_path: Path) -> None:
    rt = _load(tmp_path, zoo.variable_seq(), max_request_bytes="4096")
    (small,) = rt.execute([{"tokens": np.ones((1, 1024), np.float32)}])
    assert not isinstance(small, RequestError)
    (big,) = rt.execute([{"tokens": np.ones((1, 1025), np.float32)}])
    assert isinstance(big, RequestError) and "4100 bytes exceeds max_request_bytes 4096" in str(big)


# --- string (BYTES) tensors --------------------------------------------------------------------

# Bytes of every kind: embedded and trailing NULs, empty strings, multi-byte UTF-8, and bytes that are not
# UTF-8 at all (ORT's C API takes and gives each string with its length: nothing is decoded)
TEXTS = [b"hello", b"he\x00llo", b"", "\u00e9\u20ac\U0001f600".encode(), b"\x00", b"end\x00"]
NOT_UTF8 = [b"\xff\xfe", b"\x80", b"a\xc3", b"\x00\xff\x00", b"\xed\xa0\x80", bytes(range(256))]


def _strings(rows: list[list[bytes]]) -> np.ndarray:
    array = np.empty((len(rows), len(rows[0])), dtype=object)
    array[:] = rows
    return array


@pytest.mark.parametrize("texts", [TEXTS, NOT_UTF8], ids=["utf8", "not_utf8"])
def test_strings_round_trip_byte_for_byte(tmp_path: Path, texts: list[bytes]) -> None:
    runtime = _load(tmp_path, zoo.string_identity())
    assert runtime.string_session is not None and not runtime.notes
    assert runtime.direct_run() is None  # strings take their own path on every run
    sent = _strings([texts[:3], texts[3:]])
    got = _ok(runtime.execute([{"INPUT0": sent}])[0])["OUTPUT0"]
    assert got.dtype == object and got.shape == (2, 3)
    assert [type(v) for v in got.flat] == [bytes] * 6
    assert got.tolist() == sent.tolist()


def test_many_strings_of_every_kind_round_trip(tmp_path: Path) -> None:
    """A large request goes into ORT in bulk: the few elements holding a NUL still come back whole."""
    runtime = _load(tmp_path, zoo.string_identity())
    rng = np.random.default_rng(7)
    kinds = TEXTS + NOT_UTF8 + [bytes(rng.integers(1, 256, n, dtype=np.uint8)) for n in (1, 2, 17, 300)]
    rows = [[kinds[i] for i in rng.integers(0, len(kinds), 400)] for _ in range(50)]
    sent = _strings(rows)
    assert sum(b"\x00" in v for v in sent.flat) > 100
    got = _ok(runtime.execute([{"INPUT0": sent}])[0])["OUTPUT0"]
    assert got.shape == sent.shape and got.tolist() == sent.tolist()


def test_a_strided_string_input_is_read_in_c_order(tmp_path: Path) -> None:
    runtime = _load(tmp_path, zoo.string_identity())
    whole = _strings([[bytes([r, c]) for c in range(6)] for r in range(4)])
    for view in (whole[:, ::-2], whole.T, whole[1:3, 1:]):
        got = _ok(runtime.execute([{"INPUT0": view}])[0])["OUTPUT0"]
        assert got.tolist() == view.tolist()


def test_merged_string_requests_are_split_back(tmp_path: Path) -> None:
    runtime = _load(tmp_path, zoo.string_identity(), merge_requests="true")
    texts = TEXTS[:2] + NOT_UTF8[:2]
    requests = [{"INPUT0": _strings([[t, t + b"\xff"]] * n)} for t, n in zip(texts, (2, 1, 3, 1))]
    calls = _count_runs(runtime)
    results = runtime.execute(requests)
    assert len(calls) == 1 and calls[0]["INPUT0"].shape == (7, 2)
    for feeds, result in zip(requests, results):
        assert _ok(result)["OUTPUT0"].tolist() == feeds["INPUT0"].tolist()


def test_an_element_that_is_not_bytes_fails_alone_naming_it(tmp_path: Path) -> None:
    runtime = _load(tmp_path, zoo.string_identity(), merge_requests="true")
    good = {"INPUT0": _strings([[b"a", b"\xff"]])}
    bad = {"INPUT0": _strings([[b"ok", b"ok"], [b"ok", 7]])}  # type: ignore[list-item]
    results = runtime.execute([good, bad, good])
    assert _ok(results[0])["OUTPUT0"].tolist() == [[b"a", b"\xff"]]
    assert _ok(results[2])["OUTPUT0"].tolist() == [[b"a", b"\xff"]]
    assert isinstance(results[1], RequestError)
    message = str(results[1])
    assert "model 'm', input 'INPUT0'" in message and "element 3 is int, not bytes" in message


def test_strings_cast_to_numbers(tmp_path: Path) -> None:
    runtime = _load(tmp_path, zoo.string_to_int())
    sent = _strings([[b"1", b"-20", b"300", b"0"], [b"7", b"8", b"9", b"2147483647"]])
    got = _ok(runtime.execute([{"INPUT0": sent}])[0])["OUTPUT0"]
    assert got.dtype == np.int32 and got.tolist() == [[1, -20, 300, 0], [7, 8, 9, 2147483647]]


def test_strings_that_are_not_numbers_fail_the_cast_in_ort_words(tmp_path: Path) -> None:
    runtime = _load(tmp_path, zoo.string_to_int())
    result = runtime.execute([{"INPUT0": _strings([[b"1", b"\xff", b"3", b"4"]])}])[0]
    assert isinstance(result, InferenceFailure)
    assert str(result).startswith("inference failed: ") and "Cast" in str(result)


def _strings_beside_numbers() -> onnx.ModelProto:
    """TEXT [N, 2] string and X [N, 2] float in; TEXT twice over (StringConcat), TEXT as is and X + 1 out."""
    graph = helper.make_graph(
        [
            helper.make_node("StringConcat", ["TEXT", "TEXT"], ["TWICE"]),
            helper.make_node("Identity", ["TEXT"], ["SAME"]),
            helper.make_node("Add", ["X", "one"], ["Y"]),
        ],
        "strings_beside_numbers",
        [
            helper.make_tensor_value_info("TEXT", TensorProto.STRING, ["N", 2]),
            helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 2]),
        ],
        [
            helper.make_tensor_value_info("TWICE", TensorProto.STRING, ["N", 2]),
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 2]),
            helper.make_tensor_value_info("SAME", TensorProto.STRING, ["N", 2]),
        ],
        initializer=[numpy_helper.from_array(np.ones(1, np.float32), "one")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def test_string_and_numeric_outputs_side_by_side_merged(tmp_path: Path) -> None:
    runtime = _load(tmp_path, _strings_beside_numbers(), merge_requests="true")
    requests = [
        {"TEXT": _strings([[t, b"\x00" + t]] * n), "X": np.full((n, 2), i, np.float32)}
        for i, (t, n) in enumerate(zip([b"\xff\xfe", b"", b"ab\x00", b"\xc3"], (1, 3, 2, 1)))
    ]
    results = runtime.execute(requests)
    for i, (feeds, result) in enumerate(zip(requests, results)):
        out = _ok(result)
        assert list(out) == ["TWICE", "Y", "SAME"]
        assert out["SAME"].tolist() == feeds["TEXT"].tolist()
        assert out["TWICE"].tolist() == [[v + v for v in row] for row in feeds["TEXT"].tolist()]
        assert out["Y"].dtype == np.float32 and out["Y"].tolist() == (feeds["X"] + 1).tolist(), i


def test_a_string_output_that_is_not_utf8_comes_back_as_it_is(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Expand", ["c", "shape"], ["OUTPUT0"]), helper.make_node("Shape", ["x"], ["shape"])],
        "bad_text",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.STRING, ["N"])],
        initializer=[helper.make_tensor("c", TensorProto.STRING, [1], [b"\xff\xfe"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    runtime = _load(tmp_path, model)
    out = _ok(runtime.execute([{"x": np.zeros(2, np.float32)}])[0])
    assert out["OUTPUT0"].tolist() == [b"\xff\xfe", b"\xff\xfe"]


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def test_string_runs_leave_no_native_objects_behind(tmp_path: Path) -> None:
    """Every OrtValue of a run is released: 2,000 runs of 128 KiB of strings each keep the RSS where it was."""
    runtime = _load(tmp_path, zoo.string_identity())
    sent = _strings([[bytes([i % 256]) * 1024 for i in range(64)]] * 2)
    for _ in range(200):  # the arena and allocator caches settle first
        _ok(runtime.execute([{"INPUT0": sent}])[0])
    before = _rss_kib()
    for _ in range(2000):
        got = _ok(runtime.execute([{"INPUT0": sent}])[0])["OUTPUT0"]
    grown = _rss_kib() - before
    assert got.tolist() == sent.tolist()
    # a leaked input or output tensor per run would add 2,000 x 128 KiB = 250 MiB
    assert grown < 16 * 1024, f"RSS grew by {grown} KiB over 2,000 runs"


def test_without_the_c_api_strings_must_be_utf8(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ONNX Runtime without the C API version asked for: one note, and today's UTF-8 path."""
    from mslite_backend import ort_c_api

    monkeypatch.setattr(ort_c_api, "_api", None)
    monkeypatch.setattr(ort_c_api, "API_VERSION", 10_000)  # no ORT offers it: GetApi answers NULL
    runtime = _load(tmp_path, zoo.string_identity())
    assert runtime.string_session is None
    assert len(runtime.notes) == 1 and "C API could not be loaded" in runtime.notes[0]
    good = _strings([TEXTS[:3]])
    assert _ok(runtime.execute([{"INPUT0": good}])[0])["OUTPUT0"].tolist() == good.tolist()
    result = runtime.execute([{"INPUT0": _strings([[b"ok", b"x\xff"]])}])[0]
    assert isinstance(result, RequestError) and "element 1 is not valid UTF-8" in str(result)
