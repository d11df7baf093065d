"""bound.py and the bound executor with real ONNX Runtime CPU sessions (the `io_binding` parameter on CPU)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from mslite_backend.bound import BoundBucket, PlainBucket, check_input, differs, run_rows
from mslite_backend.config import BackendConfig, InstanceInfo
from mslite_backend.errors import ConfigError
from mslite_backend.executors import BoundExecutor, choose_executor
from mslite_backend.providers import choose
from tests.support import model_zoo as zoo
from tests.unit.test_backend_runtime import _feeds, _load

# element-wise models: every output row depends on its input row alone, so bound and plain runs agree bit for bit
EXACT = ["multi_io", "mixed_dtypes", "odd_names"]


def _config(**params: str) -> BackendConfig:
    return BackendConfig.from_model_config(
        {"name": "m", "max_batch_size": 8, "parameters": {k: {"string_value": v} for k, v in params.items()}}, cores=2
    )


def _dir(tmp_path: Path, name: str) -> Path:
    (tmp_path / name).mkdir()
    return tmp_path / name


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert a[name].tobytes() == b[name].tobytes(), name


def test_the_parameters_choose_the_path() -> None:
    assert not _config().binds_for("CPU") and _config().binds_for("GPU")  # CPU defaults unchanged
    assert _config(io_binding="true").binds_for("CPU") and not _config(io_binding="false").binds_for("GPU")
    assert _config(io_binding="auto").io_binding is None
    assert _config(io_binding="1").buckets_for("CPU") == (1, 2, 4, 8)  # binding needs fixed shapes
    assert _config().buckets_for("CPU") == ()
    assert _config().cuda_graphs and not _config(cuda_graphs="false").cuda_graphs
    with pytest.raises(ConfigError, match="'cuda_graphs' has bad value 'maybe'"):
        _config(cuda_graphs="maybe")
    with pytest.raises(ConfigError, match="'io_binding'"):
        _config(io_binding="sometimes")
    no_batch = BackendConfig.from_model_config({"name": "m", "parameters": {"io_binding": "true"}}, cores=2)
    assert not no_batch.binds_for("CPU")


def test_a_gpu_session_asks_for_a_cuda_graph_only_when_bound() -> None:
    assert choose("GPU", 0, 0, {}, cuda_graph=True).options["enable_cuda_graph"] == "1"
    assert "enable_cuda_graph" not in choose("GPU", 0, 0, {}).options
    assert choose("CPU", 0, 0, {}, cuda_graph=True).options == {}


def test_cpu_workers_take_the_bound_path_only_when_asked(tmp_path: Path) -> None:
    plain = _load(_dir(tmp_path, "plain"), zoo.multi_io())
    assert plain.bound == {} and choose_executor(plain).kind == "merged"  # a light graph, not bound
    bound = _load(_dir(tmp_path, "bound"), zoo.multi_io(), max_batch_size=8, io_binding="true")
    assert sorted(bound.bound) == [1, 2, 4, 8]
    assert all(isinstance(b, BoundBucket) for b in bound.bound.values())
    assert isinstance(choose_executor(bound), BoundExecutor)
    assert bound.notes == ()  # nothing to say: every bucket passed the load-time check


@pytest.mark.parametrize("name", EXACT)
@pytest.mark.parametrize("merge", ["false", "true"])
def test_bound_outputs_equal_plain_ones_bit_for_bit(tmp_path: Path, name: str, merge: str) -> None:
    model = getattr(zoo, name)()
    plain = _load(_dir(tmp_path, "plain"), model, max_batch_size=8, merge_requests=merge)
    bound = _load(_dir(tmp_path, "bound"), model, max_batch_size=8, merge_requests=merge, io_binding="true")
    run_plain, run_bound = choose_executor(plain), choose_executor(bound)
    assert run_bound.kind == "bound"
    # one request at a time, then several per execute: sizes that fill a bucket, pad one, span two (8 + 3)
    for sizes in ([1], [3], [8], [2, 1], [5, 2, 1], [8, 3], [1], [4, 4, 4]):
        requests = [_feeds(name, n) for n in sizes]
        for got, want in zip(run_bound(requests), run_plain(requests)):
            assert isinstance(got, dict) and isinstance(want, dict)
            _same(got, want)


def test_merged_rows_share_runs_and_padding_is_zeroed(tmp_path: Path) -> None:
    rt = _load(tmp_path, zoo.multi_io(), max_batch_size=8, merge_requests="true", io_binding="true")
    runs: list[int] = []
    for size, bucket in rt.bound.items():
        real = bucket.run

        def run(size: int = size, real=real, bucket=bucket) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
            runs.append(size)
            # rows past the last real one are zeros, whatever an earlier, fuller run wrote there
            assert not bucket.inputs["a"][bucket.dirty :].any()
            return real()  # type: ignore[no-any-return]

        bucket.run = run  # type: ignore[method-assign]
    execute = choose_executor(rt)
    execute([_feeds("multi_io", 4)])
    execute([_feeds("multi_io", 2), _feeds("multi_io", 1)])  # 3 rows: one run of the 4-bucket, one row of padding
    execute([_feeds("multi_io", 6), _feeds("multi_io", 5)])  # 11 rows: the 8-bucket, then the 4-bucket
    assert runs == [4, 4, 8, 4]


def test_a_bad_request_fails_alone_on_the_bound_path(tmp_path: Path) -> None:
    rt = _load(tmp_path, zoo.multi_io(), max_batch_size=8, merge_requests="true", io_binding="true")
    good = _feeds("multi_io", 2)
    bad = {"a": np.zeros((2, 4), np.float32), "b": np.zeros((2, 4), np.float32)}
    first, second, third = choose_executor(rt)([good, bad, good])
    assert isinstance(first, dict) and isinstance(third, dict)
    assert "shape expected [-1, 3], got [2, 4]" in str(second)


@pytest.mark.parametrize(
    ("build", "why"),
    [
        (zoo.control_flow, "the graph has control flow (If)"),
        (zoo.variable_seq, "input 'tokens' has dynamic dims [-1] (dynamic shapes inside the graph)"),
    ],
)
def test_a_model_the_bound_path_cannot_run_falls_back_with_one_log_line(tmp_path: Path, build, why: str) -> None:  # type: ignore[no-untyped-def]
    rt = _load(tmp_path, build(), max_batch_size=8, io_binding="true")
    assert rt.bound == {} and choose_executor(rt).kind != "bound"
    assert [n for n in rt.notes if "bound" in n] == [f"model 'm': buckets run plain, not on bound buffers: {why}"]
    feeds = {"x": np.ones((3, 3), np.float32)} if build is zoo.control_flow else {"tokens": np.ones((3, 5), np.float32)}
    (result,) = choose_executor(rt)([feeds])
    assert isinstance(result, dict)  # and it still serves


def test_the_load_time_check_refuses_a_differing_bucket(tmp_path: Path) -> None:
    rt = _load(tmp_path, zoo.noisy(), max_batch_size=4, io_binding="true")
    assert sorted(rt.bound) == [1, 2, 4]
    assert all(isinstance(b, PlainBucket) for b in rt.bound.values())  # each serves plain runs
    (note,) = [n for n in rt.notes if "serve plain runs" in n]  # one line for the model, naming every bucket
    assert re.fullmatch(
        r"model 'm': bucket\(s\) 1 \(output 'y' differs .*\), 2 \(.*\), 4 \(.*\) serve plain runs.*", note
    )
    (result,) = choose_executor(rt)([{"x": np.zeros((3, 3), np.float32)}])
    assert isinstance(result, dict) and result["y"].shape == (3, 3)


def test_differs_names_the_output_and_leaves_the_buffers_zeroed(tmp_path: Path) -> None:
    rt = _load(tmp_path, zoo.multi_io(), max_batch_size=4, io_binding="true")
    bucket = rt.bound[4]
    feeds = check_input(rt.checks.expected, 4)
    assert all(a.all() for a in feeds.values())  # non-zero, and the same every time
    _same(feeds, check_input(rt.checks.expected, 4))
    session = rt.session

    def plain(f: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(rt.output_names, session.run(rt.output_names, f)))

    def off_by_one_bit(f: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = plain(f)
        out["prod"].view(np.uint32)[0, 0] ^= 1
        return out

    assert differs(bucket, plain, feeds) is None
    assert differs(bucket, off_by_one_bit, feeds) == "output 'prod' differs from a plain run in run 1"
    assert not any(buf.any() for buf in bucket.inputs.values()) and bucket.dirty == 0


def test_run_rows_splits_a_request_larger_than_the_largest_bucket(tmp_path: Path) -> None:
    rt = _load(tmp_path, zoo.multi_io(), max_batch_size=8, io_binding="true", batch_buckets="2")
    assert sorted(rt.bound) == [2, 8]
    big = _feeds("multi_io", 8)
    small = _feeds("multi_io", 1)
    out = run_rows({2: rt.bound[2]}, [big, small])  # 9 rows through a 2-bucket: 5 runs, the last padded
    np.testing.assert_array_equal(out[0]["sum"], big["a"] + big["b"])
    np.testing.assert_array_equal(out[1]["prod"], small["a"] * small["b"])


def test_gpu_workers_bind_by_default_and_cuda_graphs_false_turns_capture_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The CPU provider stands in for CUDA: what is checked is the plan, and that every bucket session binds.
    import mslite_backend.session as session_module
    from mslite_backend.providers import ProviderChoice

    asked: list[bool] = []

    def fake_choose(*args: object, cuda_graph: bool = False, **kwargs: object) -> ProviderChoice:
        asked.append(cuda_graph)
        return ProviderChoice("CPUExecutionProvider")

    monkeypatch.setattr(session_module, "choose", fake_choose)
    gpu = InstanceInfo(name="t_0", kind="GPU", device_id=0)
    rt = _load(_dir(tmp_path, "on"), zoo.multi_io(), max_batch_size=4, instance=gpu)
    assert sorted(rt.bound) == [1, 2, 4] and sorted(rt.bucket_sessions) == [1, 2, 4]
    # the device environment, then a graph session per bucket, then the plain session of the load-time check
    assert asked == [False, True, True, True, False]
    assert isinstance(choose_executor(rt), BoundExecutor)
    asked.clear()
    _load(_dir(tmp_path, "off"), zoo.multi_io(), max_batch_size=4, instance=gpu, cuda_graphs="false")
    assert not any(asked)


def test_one_session_for_every_bucket_gives_each_bucket_its_own_graph_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The CPU provider stands in for CUDA (it ignores `gpu_graph_id`): what is checked is one session, the ids, and
    # outputs equal to a plain session's.
    import mslite_backend.session as session_module
    from mslite_backend.providers import ProviderChoice

    monkeypatch.setattr(session_module, "choose", lambda *a, **k: ProviderChoice("CPUExecutionProvider"))
    gpu = InstanceInfo(name="t_0", kind="GPU", device_id=0)
    rt = _load(_dir(tmp_path, "one"), zoo.multi_io(), max_batch_size=4, instance=gpu, bucket_sessions="one")
    assert rt.bucket_sessions == {} and sorted(rt.bound) == [1, 2, 4]
    ids = [b._options.get_run_config_entry("gpu_graph_id") for b in rt.bound.values()]  # type: ignore[attr-defined]
    assert ids == ["0", "1", "2"]
    plain = _load(_dir(tmp_path, "plain"), zoo.multi_io(), max_batch_size=4, io_binding="false")
    requests = [_feeds("multi_io", n) for n in (1, 3, 2, 4)]
    for got, want in zip(choose_executor(rt)(requests), choose_executor(plain)(requests)):
        assert isinstance(got, dict) and isinstance(want, dict)
        _same(got, want)
    with pytest.raises(ConfigError, match="'bucket_sessions' has bad value 'two'"):
        _config(bucket_sessions="two")
