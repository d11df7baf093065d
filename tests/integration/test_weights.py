"""Weights on the real server: workers share one copy; live updates reach every worker, all or nothing."""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from onnx import numpy_helper

import mslite_triton as mslite
from mslite_triton.errors import InvalidInputError
from tests.support import model_zoo as zoo
from tests.support.eventually import eventually
from tests.support.processes import worker_pids
from tests.support.repository import unload

pytestmark = pytest.mark.integration

UPDATABLE = ("w0", "w1", "w2", "w3")  # big_weights(16): four 4 MiB layers (b1 and b3 stay constant)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("weights")
    zoo.save_with_external_data(zoo.big_weights(64), root / "big64.onnx")
    zoo.save_with_external_data(zoo.big_weights(16), root / "big16.onnx")
    (root / "names.txt").write_text("\n".join(UPDATABLE) + "\n")
    (root / "config.ini").write_text('[ascend_context]\nvariable_weights_file="names.txt"\n')
    return {"big64": root / "big64.onnx", "big16": root / "big16.onnx", "config": root / "config.ini"}


@pytest.fixture(scope="module")
def values() -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in zoo.big_weights(16).graph.initializer}


def _build(server, path: Path, workers: int, config: Path | None = None) -> mslite.ModelParallelRunner:
    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    ctx.cpu.thread_num = 1
    ctx.parallel.workers_num = workers
    if config is not None:
        ctx.parallel.config_path = str(config)
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(str(path), ctx)
    return runner


def _unload(server, *runners: mslite.ModelParallelRunner) -> None:
    for runner in runners:
        name = runner.served_name
        unload(server, name)
        eventually(lambda n=name: not worker_pids(server, n), f"the workers of {name} to end", 30, pause_s=0.1)


def _pss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no Pss for {pid}")


def _versions(server, model: str) -> dict[str, int]:
    """Each worker's `mslite_weights_version` gauge, by instance."""
    text = urllib.request.urlopen(server.metrics_url, timeout=5).read().decode()
    line = re.compile(
        r'^mslite_weights_version\{instance="([^"]+)",model="' + re.escape(model) + r'",pid="\d+"\} (\S+)$'
    )
    return {m.group(1): int(float(m.group(2))) for m in map(line.match, text.splitlines()) if m}


def _predict(runner: mslite.ModelParallelRunner, x: np.ndarray) -> np.ndarray:
    return runner.predict([mslite.Tensor(x)])[0].get_data_to_numpy()


def _tensor(value: np.ndarray, name: str = "") -> mslite.Tensor:
    t = mslite.Tensor(np.ascontiguousarray(value))
    if name:
        t.name = name
    return t


def _close(y: np.ndarray, ref: np.ndarray) -> bool:
    # relative to the output's scale; old, new and any old/new mix differ by powers of two
    return bool(np.allclose(y, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max())))


X = np.random.default_rng(7).standard_normal((1, zoo.BIG_DIM), dtype=np.float32)


def test_the_workers_of_a_model_share_one_copy_of_its_weights(server, files) -> None:
    one = _build(server, files["big64"], 1)
    four = _build(server, files["big64"], 4)
    try:
        x8 = np.ones((8, zoo.BIG_DIM), np.float32)
        for runner in (one, four):
            for _ in range(8):
                _predict(runner, x8)
        single = [_pss_mib(p) for p in worker_pids(server, one.served_name)]
        shared = [_pss_mib(p) for p in worker_pids(server, four.served_name)]
        assert len(single) == 1 and len(shared) == 4
        # unshared, each worker would hold its own 64 MiB (about 4 x); shared, the copy is paid once
        assert sum(shared) <= 2.5 * single[0], f"4 workers {shared} MiB vs 1 worker {single} MiB"
        # each of the four workers says so on its own ready line (another model's line proves nothing)
        name = four.served_name
        ready = re.compile(rf"mslite: instance '({re.escape(name)}_\d+_\d+)' ready: .* weights=(\S+)")
        found = {m.group(1): m.group(2) for m in map(ready.search, server.log_path.read_text().splitlines()) if m}
        assert len(found) == 4 and set(found.values()) == {"shared"}, found
    finally:
        _unload(server, one, four)


def test_a_bad_update_changes_nothing_and_one_model_never_disturbs_another(server, files, values) -> None:
    a = _build(server, files["big16"], 2, files["config"])
    b = _build(server, files["big16"], 1, files["config"])
    name, shown = a.served_name, Path(files["big16"]).name  # errors name the user's file, not the served name
    try:
        old, other = _predict(a, X), _predict(b, X)
        half = {n: values[n] * np.float32(0.5) for n in UPDATABLE}
        bad = [
            # inline (a partial update): w0 is fine, w1 is not, so neither is applied
            ([_tensor(half["w0"], "w0"), _tensor(half["w1"][:, :512], "w1")], r"weight 'w1': shape expected"),
            # through a file (every weight): w3's dtype is wrong
            (
                [_tensor(half[n], n) for n in UPDATABLE[:3]] + [_tensor(half["w3"].astype(np.float16), "w3")],
                "weight 'w3': data type expected FP32, got FP16",
            ),
            ([_tensor(values["b1"], "b1")], r"tensor\(s\) \['b1'\] are not updatable weights"),
            ([_tensor(half["w0"], "nope")], r"tensor\(s\) \['nope'\] are not updatable weights"),
        ]
        for tensors, message in bad:
            with pytest.raises(
                InvalidInputError, match=f"update weight failed! Error is model '{shown}'.*{message}"
            ) as e:
                a.update_weights([tensors])
            assert name not in str(e.value)
        for _ in range(8):  # both workers, most likely; their gauges say so for certain
            np.testing.assert_array_equal(_predict(a, X), old)
        assert set(_versions(server, name).values()) == {1}

        a.update_weights([[_tensor(half[n]) for n in UPDATABLE]])  # unnamed: matched by file order
        new = _predict(a, X)
        assert _close(new, old * np.float32(0.5**4)) and not _close(new, old)
        np.testing.assert_array_equal(_predict(b, X), other)  # same file, another model: untouched
        assert set(_versions(server, b.served_name).values()) == {1}
    finally:
        _unload(server, a, b)


def test_under_load_every_worker_switches_and_no_request_fails_or_mixes(server, files, values) -> None:
    runner = _build(server, files["big16"], 4, files["config"])
    name = runner.served_name
    try:
        old = _predict(runner, X)
        new = old * np.float32(0.5**4)
        update = [[_tensor(values[n] * np.float32(0.5), n) for n in UPDATABLE]]
        stop = threading.Event()
        records: list[tuple[float, str]] = []
        errors: list[Exception] = []

        def load() -> None:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    y = _predict(runner, X)
                except Exception as e:  # the assertion below reports it
                    errors.append(e)
                    continue
                records.append((started, "old" if _close(y, old) else "new" if _close(y, new) else "mixed"))

        threads = [threading.Thread(target=load) for _ in range(8)]
        for t in threads:
            t.start()
        try:
            eventually(lambda: len(records) >= 8, "predicts before the update")
            runner.update_weights(update)
            returned = time.monotonic()
            eventually(
                lambda: _versions(server, name) == {f"{name}_{i}_0": 2 for i in range(4)}, "every worker switched"
            )
            eventually(lambda: [s for s, _ in records if s > returned][8:], "predicts begun after the update")
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
        assert errors == []
        assert _versions(server, name) == {f"{name}_{i}_0": 2 for i in range(4)}  # every worker switched
        kinds = [k for _, k in records]
        assert "mixed" not in kinds and "old" in kinds and "new" in kinds
        assert [k for s, k in records if s > returned and k != "new"] == []  # after the update: new only
        assert len(worker_pids(server, name)) == 4  # no worker was restarted along the way
    finally:
        _unload(server, runner)
