"""Weights on the backend side (no server): config keys, the shared prepacked model, the versioned store."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from mslite_backend import store_files, weights
from mslite_backend.config import BackendConfig, InstanceInfo, declared_variable_weights
from mslite_backend.errors import ConfigError, InferenceFailure, ModelLoadError, RequestError
from mslite_backend.graph import plan_auto_complete, read_graph_io
from mslite_backend.loading import load_runtime
from mslite_backend.store_files import layout, sweep_stale
from mslite_backend.weight_store import WeightStore
from mslite_backend.weight_update import parse_update
from mslite_backend.weights import WeightSpec, prepare_model
from mslite_contract import settings
from mslite_contract.build_cache import ensure_built
from mslite_contract.protocol import WEIGHTS_INPUT
from tests.support import model_zoo as zoo
from tests.support.eventually import eventually

CPU = InstanceInfo(name="m_0", kind="CPU", device_id=0)
GPU = InstanceInfo(name="m_0", kind="GPU", device_id=0)
SPECS = (WeightSpec("a", "<f4", (2, 3)), WeightSpec("b", "<i8", (5,)), WeightSpec("c", "<f2", (3,)))
FORK = multiprocessing.get_context("fork")


def _cfg(params: dict[str, str] | None = None, **extra: Any) -> BackendConfig:
    config = {"name": "m", **extra, "parameters": {k: {"string_value": v} for k, v in (params or {}).items()}}
    return BackendConfig.from_model_config(config, cores=2)


def _served(
    tmp_path: Path, model: onnx.ModelProto, *, external: bool = True, **params: str
) -> tuple[str, BackendConfig]:
    """`<tmp>/1/model.onnx` and the config auto-complete would give it."""
    version_dir = tmp_path / "1"
    if external:
        zoo.save_with_external_data(model, version_dir / "model.onnx")
    else:
        version_dir.mkdir(parents=True)
        onnx.save(model, str(version_dir / "model.onnx"))
    plan = plan_auto_complete({"name": "m"}, read_graph_io(str(version_dir / "model.onnx")))
    config = {"max_batch_size": plan.max_batch_size or 0, "input": list(plan.inputs), "output": list(plan.outputs)}
    return str(version_dir), _cfg({"thread_num": "1", **params}, **config)


def _values(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal((2, 3)).astype(np.float32),
        rng.integers(0, 100, 5).astype(np.int64),
        rng.standard_normal(3).astype(np.float16),
    ]


def _manifest(specs: tuple[WeightSpec, ...] = SPECS, **override: Any) -> str:
    return json.dumps([{"name": s.name, "dtype": s.dtype, "shape": list(s.shape), **override} for s in specs])


def _blob(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([a.reshape(-1).view(np.uint8) for a in arrays])


@pytest.fixture
def store_dir(tmp_path: Path) -> str:
    return store_files.store_directory("k", root=str(tmp_path), server_pid=os.getpid())


# --- config -------------------------------------------------------------------------------------


def test_updatable_weights_are_read_from_any_of_their_keys() -> None:
    assert _cfg({"variable_weights_list": "w0, w1"}).variable_weights == ("w0", "w1")
    assert _cfg({"ascend_context.variable_weights_list": "w1,w0"}).variable_weights == ("w1", "w0")
    assert _cfg({"weights.updatable": "w0", "variable_weights_list": "w0"}).variable_weights == ("w0",)
    assert _cfg().variable_weights == () and _cfg().share_weights


def test_disagreeing_or_repeated_weight_lists_fail_the_load() -> None:
    with pytest.raises(ConfigError, match="'variable_weights_list'='w0' and 'weights.updatable'='w1'"):
        _cfg({"variable_weights_list": "w0", "weights.updatable": "w1"})
    with pytest.raises(ConfigError, match=r"updatable weights \['w0'\] are listed more than once"):
        _cfg({"variable_weights_list": "w0,w1,w0"})


def test_share_weights_parses_both_names_and_they_must_agree() -> None:
    assert not _cfg({"share_weights": "off"}).share_weights
    assert not _cfg({"weights.share": "false"}).share_weights
    with pytest.raises(ConfigError, match="'share_weights'=True and 'weights.share'=False"):
        _cfg({"share_weights": "1", "weights.share": "0"})
    with pytest.raises(ConfigError, match="'share_weights' has bad value 'maybe'"):
        _cfg({"share_weights": "maybe"})


def test_weight_keys_are_known_and_the_update_input_is_not_a_model_input() -> None:
    cfg = _cfg(
        {"share_weights": "1", "variable_weights_list": "w"},
        input=[{"name": "x", "data_type": "TYPE_FP32", "dims": [4]}, {"name": WEIGHTS_INPUT, "dims": [-1]}],
    )
    assert cfg.warnings == ()
    assert [s.name for s in cfg.inputs] == ["x"]
    assert "share_weights" in _cfg({"zeta": "1"}).warnings[0]  # listed among the known keys
    raw = {"name": "m", "parameters": {"ascend_context.variable_weights_list": {"string_value": "a,b"}}}
    assert declared_variable_weights(raw) == ("a", "b")


# --- the store: validation ----------------------------------------------------------------------


def test_layout_aligns_every_weight_to_64_bytes() -> None:
    offsets, size = layout(SPECS)
    assert offsets == (0, 64, 128) and size == 192
    assert layout((WeightSpec("x", "<f4", (0,)),)) == ((0,), 64)


def test_parse_update_gives_offsets_of_the_values_back_to_back() -> None:
    two = SPECS[1:]
    assert parse_update("m", _manifest(two), 40 + 6, SPECS) == {"b": (0, 40), "c": (40, 6)}


@pytest.mark.parametrize(
    ("manifest", "size", "message"),
    [
        (json.dumps([{"name": "zz", "dtype": "<f4", "shape": [1]}]), 4, r"tensor\(s\) \['zz'\] are not updatable"),
        (_manifest(SPECS[:1], dtype="<f8"), 48, "weight 'a': data type expected FP32, got FP64"),
        (_manifest(SPECS[:1], shape=[3, 2, 1]), 24, r"weight 'a': shape expected \[2, 3\], got \[3, 2, 1\]"),
        (_manifest(SPECS[:1] * 2), 48, "tensor 'a' appears twice"),
        (_manifest(SPECS[:1]), 23, "describes 24 bytes of weights but carries 23"),
        ("[]", 0, "at least one tensor"),
        ("{not json", 0, "malformed weights update"),
        (json.dumps([{"name": "a"}]), 0, r"malformed weights update \(KeyError\)"),
    ],
)
def test_parse_update_rejects_what_does_not_fit(manifest: str, size: int, message: str) -> None:
    with pytest.raises(RequestError, match=message) as exc:
        parse_update("m", manifest, size, SPECS)
    assert "model 'm'" in str(exc.value)


# --- the store: versions --------------------------------------------------------------------------


def test_first_worker_writes_version_1_and_the_others_join(store_dir: str) -> None:
    calls = []

    def initial() -> list[np.ndarray]:
        calls.append(1)
        return _values(0)

    first = WeightStore.open(store_dir, "m", SPECS, initial)
    second = WeightStore.open(store_dir, "m", SPECS, initial)
    assert calls == [1]
    for store in (first, second):
        snap = store.snapshot()
        assert snap.version == 1
        for spec, want in zip(SPECS, _values(0)):
            np.testing.assert_array_equal(snap.arrays[spec.name], want)
            assert snap.arrays[spec.name].dtype == np.dtype(spec.dtype) and not snap.arrays[spec.name].flags.writeable
    second.close()
    first.close()


@pytest.mark.parametrize("persistent", [False, True])
def test_a_store_whose_first_version_fails_is_removed(store_dir: str, persistent: bool) -> None:
    def failing() -> Any:
        yield _values(0)[0]
        raise OSError(28, "No space left on device")

    with pytest.raises(ModelLoadError, match="cannot create the shared weights store"):
        WeightStore.open(store_dir, "m", SPECS, failing, persistent=persistent)
    assert not os.path.exists(store_dir)
    WeightStore.open(store_dir, "m", SPECS, lambda: _values(0), persistent=persistent).close()  # loads again


def test_a_launchers_store_goes_with_a_failed_load_unless_it_holds_updates(store_dir: str) -> None:
    store = WeightStore.open(store_dir, "m", SPECS, lambda: _values(0), persistent=True)
    store.close(failed_load=True)  # only the model file's values, written by this load: nothing to keep
    assert not os.path.exists(store_dir)
    store = WeightStore.open(store_dir, "m", SPECS, lambda: _values(0), persistent=True)
    store.update(_manifest(SPECS[:1]), _blob([_values(1)[0]]))
    store.close(failed_load=True)  # an update is published: a heal or the next load adopts it
    assert os.path.exists(store_dir)
    adopted = WeightStore.open(store_dir, "m", SPECS, lambda: _values(0), persistent=True)
    assert adopted.version == 2 and not adopted.made
    adopted.close(failed_load=True)
    assert os.path.exists(store_dir)
    store.close()  # twice: nothing happens


def test_a_killed_writers_temporary_file_goes_with_the_next_writer_or_worker(store_dir: str) -> None:
    store = WeightStore.open(store_dir, "m", SPECS, lambda: _values(0))
    try:
        for orphan in (".v2.99999.tmp", ".proofs.99999.tmp"):  # what a worker killed mid-update leaves
            Path(store_dir, orphan).write_bytes(b"x" * store.size)
        WeightStore.open(store_dir, "m", SPECS, lambda: _values(0)).close()  # a worker joining (a heal)
        assert not [n for n in os.listdir(store_dir) if n.endswith(".tmp")]
        Path(store_dir, ".v2.99999.tmp").write_bytes(b"x" * store.size)
        assert store.update(_manifest(SPECS[:1]), _blob([_values(1)[0]])) == 2
        assert not [n for n in os.listdir(store_dir) if n.endswith(".tmp")]
    finally:
        store.close()


def test_a_proof_nonce_claimed_by_one_worker_is_used_for_all(store_dir: str) -> None:
    one = WeightStore.open(store_dir, "m", SPECS, lambda: _values(0))
    two = WeightStore.open(store_dir, "m", SPECS, lambda: _values(0))
    try:
        assert one.claim_nonce("n1", 1000, oldest=940) and not two.nonce_used("n2")
        assert two.nonce_used("n1") and not two.claim_nonce("n1", 1000, oldest=940)
        assert two.claim_nonce("n2", 1100, oldest=1040)  # n1 is out of the window now: dropped
        assert not one.nonce_used("n1") and one.nonce_used("n2")
        assert stat.S_IMODE(os.stat(os.path.join(store_dir, "proofs")).st_mode) == 0o600
    finally:
        one.close()
        two.close()


def test_an_update_reaches_every_handle_and_old_snapshots_keep_old_values(store_dir: str) -> None:
    one = WeightStore.open(store_dir, "m", SPECS, lambda: _values(0))
    two = WeightStore.open(store_dir, "m", SPECS, lambda: _values(0))
    switched: list[int] = []
    two.on_switch = switched.append
    before = two.snapshot()
    new = _values(1)
    assert one.update(_manifest(SPECS[::2]), _blob([new[0], new[2]])) == 2  # a and c only
    after = two.snapshot()
    assert after.version == 2 and switched == [1, 2]
    np.testing.assert_array_equal(after.arrays["a"], new[0])
    np.testing.assert_array_equal(after.arrays["b"], _values(0)[1])  # not in the update: kept
    np.testing.assert_array_equal(after.arrays["c"], new[2])
    np.testing.assert_array_equal(before.arrays["a"], _values(0)[0])  # an execute that began earlier: all old
    assert two.snapshot() is after  # no remap while the version stays
    one.close()
    two.close()


def test_a_rejected_or_failed_update_changes_nothing(store_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = WeightStore.open(store_dir, "m", SPECS, lambda: _values(0))
    files = sorted(os.listdir(store_dir))
    bad = _manifest(SPECS[:2], shape=[9])  # 'a' is fine only with its own shape
    with pytest.raises(RequestError, match="weight 'a': shape expected"):
        store.update(bad, np.zeros(24 + 40, np.uint8))

    def disk_full(*_: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store_files, "pwrite_all", disk_full)
    with pytest.raises(InferenceFailure, match="writing the new weights failed"):
        store.update(_manifest(), _blob(_values(1)))
    assert store.version == 1 and sorted(os.listdir(store_dir)) == files
    np.testing.assert_array_equal(store.snapshot().arrays["b"], _values(0)[1])
    store.close()


def test_old_versions_are_retired(store_dir: str) -> None:
    store = WeightStore.open(store_dir, "m", SPECS, lambda: _values(0))
    for seed in range(1, 5):
        store.update(_manifest(), _blob(_values(seed)))
    assert sorted(n for n in os.listdir(store_dir) if n.endswith(".bin")) == ["v4.bin", "v5.bin"]
    np.testing.assert_array_equal(store.snapshot().arrays["c"], _values(4)[2])
    store.close()


def test_a_file_of_some_weights_in_any_order_is_copied_in(store_dir: str) -> None:
    """A partial update by file: no request carries the values, so no request size cap applies to it."""
    store = WeightStore.open(store_dir, "m", SPECS, lambda: _values(0))
    listed = (SPECS[2], SPECS[0])  # c, then a
    offsets, size = layout(listed)
    data = bytearray(size)
    for value, offset in zip((_values(5)[2], _values(5)[0]), offsets):
        data[offset : offset + value.nbytes] = value.tobytes()
    path = Path(store_dir).parent / "mslite_weights_upload_1_cd"
    path.write_bytes(bytes(data))
    try:
        assert store.adopt(_manifest(listed), path.name) == 2
        arrays = store.snapshot().arrays
        np.testing.assert_array_equal(arrays["a"], _values(5)[0])
        np.testing.assert_array_equal(arrays["b"], _values(0)[1])  # not in the file: kept
        np.testing.assert_array_equal(arrays["c"], _values(5)[2])
        assert os.stat(path).st_nlink == 1  # copied: the version file holds every weight
        with pytest.raises(RequestError, match=f"regular file of this user of {layout(SPECS[:1])[1]} bytes"):
            store.adopt(_manifest(SPECS[:1]), path.name)  # a manifest the file does not match
        assert store.version == 2
    finally:
        store.close()


def test_a_file_in_the_version_layout_is_linked_in(store_dir: str) -> None:
    store = WeightStore.open(store_dir, "m", SPECS, lambda: _values(0))
    name = "mslite_weights_upload_1_ab"
    path = Path(store_dir).parent / name
    offsets, size = layout(SPECS)
    data = bytearray(size)
    for value, offset in zip(_values(3), offsets):
        data[offset : offset + value.nbytes] = value.tobytes()
    path.write_bytes(bytes(data))
    assert store.adopt(_manifest(), name) == 2
    np.testing.assert_array_equal(store.snapshot().arrays["a"], _values(3)[0])
    assert os.stat(path).st_nlink == 2  # linked, not copied; the client then removes its name
    with pytest.raises(RequestError, match=r"update file not usable on the server's host \(missing\)"):
        store.adopt(_manifest(), "mslite_weights_upload_9_missing")
    with pytest.raises(RequestError, match="is not the name of a weights update file"):
        store.adopt(_manifest(), "../../etc/passwd")
    path.unlink()
    path.write_bytes(b"short")
    with pytest.raises(
        RequestError, match=f"not usable on the server's host .*regular file of this user of {size} bytes"
    ):
        store.adopt(_manifest(), name)
    assert store.version == 2
    store.close()


def test_the_last_worker_out_removes_the_store_and_a_dead_servers_store_is_swept(tmp_path: Path) -> None:
    directory = store_files.store_directory("k", root=str(tmp_path), server_pid=os.getpid())
    one = WeightStore.open(directory, "m", SPECS, lambda: _values(0))
    two = WeightStore.open(directory, "m", SPECS, lambda: _values(0))
    one.close()
    one.close()  # twice is fine
    assert os.path.isdir(directory)
    two.close()
    assert not os.path.exists(directory)
    dead = tmp_path / f"{store_files.PREFIX}999999999_k"
    dead.mkdir()
    (tmp_path / "mslite_weights_upload_999999999_x").write_bytes(b"")
    assert sweep_stale(str(tmp_path)) == [dead.name]
    assert (tmp_path / "mslite_weights_upload_999999999_x").exists()


def test_a_new_load_after_the_last_worker_left_starts_from_the_model_file(store_dir: str) -> None:
    store = WeightStore.open(store_dir, "m", SPECS, lambda: _values(0))
    store.update(_manifest(), _blob(_values(1)))
    store.close()
    again = WeightStore.open(store_dir, "m", SPECS, lambda: _values(2))
    assert again.version == 1
    np.testing.assert_array_equal(again.snapshot().arrays["a"], _values(2)[0])
    with pytest.raises(ModelLoadError, match="holds another model's weights"):
        WeightStore.open(store_dir, "m", SPECS[:2], lambda: _values(0)[:2])
    again.close()


def _waiting_for_the_lock(path: str) -> int:
    """Processes blocked in flock on `path` (the kernel lists them as `->` lines in /proc/locks)."""
    inode = os.stat(path).st_ino
    return sum("->" in line and f":{inode} " in line for line in Path("/proc/locks").read_text().splitlines())


def _join(directory: str, marker: str, queue: Any, together: Any) -> None:
    def initial() -> list[np.ndarray]:
        with open(marker, "a") as f:
            f.write("x")
        # the others arrive while the first is still writing, however slow the machine: they wait for its lock
        eventually(lambda: _waiting_for_the_lock(os.path.join(directory, "lock")) == 3, "three workers waiting", 30)
        return _values(0)

    store = WeightStore.open(directory, "m", SPECS, initial)
    queue.put(store.snapshot().arrays["b"].tolist())
    together.wait(timeout=30)  # all four hold the store at once before any leaves
    store.close()


def test_workers_starting_together_initialize_the_store_once(tmp_path: Path, store_dir: str) -> None:
    queue = FORK.Queue()
    marker = str(tmp_path / "initialized")
    together = FORK.Barrier(4)
    procs = [FORK.Process(target=_join, args=(store_dir, marker, queue, together)) for _ in range(4)]
    for p in procs:
        p.start()
    seen = [queue.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert Path(marker).read_text() == "x"
    assert seen == [_values(0)[1].tolist()] * 4
    assert not os.path.exists(store_dir)  # the last one out removed it


# --- the shared prepacked model ---------------------------------------------------------------


def _processes_with_open(path: str) -> int:
    """Processes that hold `path` open (each worker opens the cache's lock file before it asks for the lock)."""
    count = 0
    for fds in Path("/proc").glob("[0-9]*/fd"):
        try:
            count += any(os.readlink(fd) == path for fd in fds.iterdir())
        except OSError:
            continue
    return count


def _build_once(root: str, counter: str, queue: Any) -> None:
    def build(out: str) -> None:
        with open(counter, "a") as f:
            f.write("b")
        # the others come while this one builds, however slow the machine: all four have the lock file open
        eventually(lambda: _processes_with_open(os.path.join(root, "key.lock")) == 4, "four workers at the lock", 30)
        Path(out, "model.onnx").write_text("built")

    queue.put(ensure_built(root, "key", build))


def test_workers_starting_together_build_the_model_once(tmp_path: Path) -> None:
    queue = FORK.Queue()
    counter = str(tmp_path / "builds")
    procs = [FORK.Process(target=_build_once, args=(str(tmp_path / "cache"), counter, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    paths = {queue.get(timeout=30) for _ in procs}
    for p in procs:
        p.join(timeout=30)
    assert Path(counter).read_text() == "b"
    assert paths == {str(tmp_path / "cache" / "key" / "model.onnx")}
    assert sorted(os.listdir(tmp_path / "cache")) == ["key", "key.lock"]  # no temporary directory left


def test_a_failed_build_leaves_nothing_and_the_next_one_builds(tmp_path: Path) -> None:
    def broken(out: str) -> None:
        Path(out, "partial").write_text("x")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        ensure_built(str(tmp_path), "k", broken)
    assert sorted(os.listdir(tmp_path)) == ["k.lock"]
    path = ensure_built(str(tmp_path), "k", lambda out: Path(out, "model.onnx").write_text("ok"))
    assert Path(path).read_text() == "ok"


def test_content_key_follows_the_files_and_the_settings(tmp_path: Path) -> None:
    version_dir, cfg = _served(tmp_path, zoo.big_weights(4))
    key = weights.content_key(version_dir, cfg)
    Path(version_dir, ".mslite-cache").mkdir()
    assert weights.content_key(version_dir, cfg) == key  # hidden entries (the cache) do not count
    assert weights.content_key(version_dir, _cfg({"graph_optimization_level": "basic"})) != key
    assert weights.content_key(version_dir, _cfg({"variable_weights_list": "w0"})) != key
    with open(Path(version_dir, "model.onnx.data"), "r+b") as f:
        f.seek(100)
        f.write(b"\x01\x02")
    assert weights.content_key(version_dir, cfg) != key


def test_a_large_cpu_model_is_built_once_prepacked_and_loaded_from_the_cache(tmp_path: Path) -> None:
    model = zoo.big_weights(8)
    version_dir, cfg = _served(tmp_path, model)
    prepared = prepare_model(version_dir, cfg, CPU)
    assert prepared.shared and prepared.source.preoptimized
    entry = Path(str(prepared.source.model)).parent
    assert entry.parent == Path(version_dir, ".mslite-cache")
    assert sorted(os.listdir(entry)) == ["meta.json", "model.onnx", "model.onnx.data"]
    assert prepared.io == read_graph_io(os.path.join(version_dir, "model.onnx"))
    runtime = load_runtime(version_dir, cfg, CPU)
    x = np.random.default_rng(0).standard_normal((4, zoo.BIG_DIM), dtype=np.float32)
    np.testing.assert_array_equal(runtime.execute([{"x": x}])[0]["y"], zoo.run_reference(model, {"x": x})[0])
    assert runtime.shared and runtime.notes == ()


@pytest.mark.parametrize(
    ("model", "instance", "params"),
    [
        (zoo.multi_io(), CPU, {}),  # nothing worth sharing
        (zoo.big_weights(4), GPU, {}),  # each GPU worker keeps its own device copy
        (zoo.big_weights(4), CPU, {"share_weights": "false"}),
    ],
)
def test_plain_model_when_sharing_does_not_apply(tmp_path: Path, model: Any, instance: Any, params: Any) -> None:
    version_dir, cfg = _served(tmp_path, model, **params)
    prepared = prepare_model(version_dir, cfg, instance)
    assert prepared.source.model == os.path.join(version_dir, "model.onnx") and not prepared.shared
    assert not os.path.exists(os.path.join(version_dir, ".mslite-cache"))


def test_an_unwritable_cache_falls_back_to_the_plain_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    version_dir, cfg = _served(tmp_path, zoo.big_weights(4))
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv(settings.WEIGHTS_CACHE_ENV, str(blocker / "cache"))
    prepared = prepare_model(version_dir, cfg, CPU)
    assert not prepared.shared and prepared.source.model == os.path.join(version_dir, "model.onnx")
    assert "weights not shared between workers" in prepared.notes[0]


def test_a_cached_model_that_does_not_load_falls_back(tmp_path: Path) -> None:
    version_dir, cfg = _served(tmp_path, zoo.big_weights(4))
    first = prepare_model(version_dir, cfg, CPU)
    Path(str(first.source.model)).write_bytes(zoo.broken_bytes())
    runtime = load_runtime(version_dir, cfg, CPU)
    assert not runtime.shared and "did not load" in runtime.notes[0]
    assert runtime.execute([{"x": np.ones((1, zoo.BIG_DIM), np.float32)}])[0]["y"].shape == (1, zoo.BIG_DIM)


# --- updatable weights in the runtime -----------------------------------------------------------


@pytest.mark.parametrize("external", [True, False])
def test_updatable_weights_become_inputs_fed_from_the_store(tmp_path: Path, external: bool) -> None:
    model = zoo.big_weights(8)  # w0 (MatMul), w1 and b1 (Gemm)
    version_dir, cfg = _served(tmp_path, model, external=external, variable_weights_list="w1,b1")
    prepared = prepare_model(version_dir, cfg, CPU)
    assert [s.name for s in prepared.updatable] == ["w1", "b1"]
    session = ort.InferenceSession(prepared.source.model, providers=["CPUExecutionProvider"])
    assert {i.name for i in session.get_inputs()} == {"x", "w1", "b1"}
    runtime = load_runtime(version_dir, cfg, CPU)
    x = np.random.default_rng(0).standard_normal((2, zoo.BIG_DIM), dtype=np.float32)
    before = runtime.execute([{"x": x}])[0]["y"]
    np.testing.assert_allclose(before, zoo.run_reference(model, {"x": x})[0], rtol=1e-4, atol=1e-5)
    w1 = runtime.weights.snapshot().arrays["w1"] * np.float32(0.5)
    manifest = json.dumps([{"name": "w1", "dtype": "<f4", "shape": [zoo.BIG_DIM, zoo.BIG_DIM]}])
    assert runtime.update_weights(manifest, w1.reshape(1, -1).view(np.uint8)) == 2
    np.testing.assert_array_equal(runtime.execute([{"x": x}])[0]["y"], before * np.float32(0.5))
    runtime.close()
    assert not os.path.exists(runtime.weights.directory)


def test_a_weight_that_is_not_an_initializer_fails_the_load(tmp_path: Path) -> None:
    version_dir, cfg = _served(tmp_path, zoo.big_weights(4), variable_weights_list="w0,x,nope")
    with pytest.raises(ModelLoadError, match=r"model 'm': updatable weight\(s\) \['x', 'nope'\] are not initializers"):
        load_runtime(version_dir, cfg, CPU)


def test_a_model_without_updatable_weights_rejects_updates(tmp_path: Path) -> None:
    version_dir, cfg = _served(tmp_path, zoo.multi_io())
    runtime = load_runtime(version_dir, cfg, CPU)
    with pytest.raises(RequestError, match="model 'm' declares no updatable weights"):
        runtime.update_weights("[]", np.zeros(0, np.uint8))


def test_every_request_of_one_execute_sees_the_same_version(tmp_path: Path) -> None:
    version_dir, _ = _served(tmp_path, zoo.big_weights(4))
    tensor = {"data_type": "TYPE_FP32", "dims": [-1, zoo.BIG_DIM]}
    cfg = _cfg(  # no batch dimension: the three requests run one by one
        {"thread_num": "1", "variable_weights_list": "w0"},
        input=[{"name": "x", **tensor}],
        output=[{"name": "y", **tensor}],
    )
    runtime = load_runtime(version_dir, cfg, CPU)
    seen = []
    real = runtime.session.run

    def run(names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        seen.append(feeds["w0"])
        if len(seen) == 1:  # another worker publishes while this execute is running
            w0 = np.zeros((zoo.BIG_DIM, zoo.BIG_DIM), np.float32)
            manifest = json.dumps([{"name": "w0", "dtype": "<f4", "shape": [zoo.BIG_DIM, zoo.BIG_DIM]}])
            runtime.weights.update(manifest, w0.view(np.uint8))
        return real(names, feeds)

    runtime.session.run = run  # type: ignore[method-assign]
    x = np.ones((1, zoo.BIG_DIM), np.float32)
    runtime.execute([{"x": x}, {"x": x}, {"x": x}])
    assert len(seen) == 3 and all(w is seen[0] for w in seen)
    runtime.execute([{"x": x}])
    assert not seen[-1].any()  # the next execute has the new version
    runtime.close()
