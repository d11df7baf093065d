"""Weights stores the launcher owns: they outlive every worker and tritonserver within one launcher."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from mslite_backend import store_files
from mslite_backend.errors import ModelLoadError
from mslite_backend.weight_store import WeightStore
from mslite_backend.weights import WeightSpec
from mslite_contract.settings import WEIGHTS_OWNER_ENV

SPECS = (WeightSpec("w", "<f4", (4, 4)),)


def _values(scale: float) -> list[np.ndarray]:
    return [scale * np.eye(4, dtype=np.float32)]


def _update(store: WeightStore, scale: float) -> int:
    manifest = '[{"name": "w", "dtype": "<f4", "shape": [4, 4]}]'
    return store.update(manifest, _values(scale)[0].reshape(-1).view(np.uint8))


def test_a_launchers_store_is_named_after_it_and_outlives_its_workers(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(WEIGHTS_OWNER_ENV, f"{os.getpid()}_0123abcd")
    directory = store_files.store_directory("k", root=str(tmp_path))
    assert os.path.basename(directory) == f"{store_files.PREFIX}{os.getpid()}_0123abcd_k"
    first = WeightStore.open(directory, "m", SPECS, lambda: _values(1), persistent=True)
    second = WeightStore.open(directory, "m", SPECS, lambda: _values(1), persistent=True)
    assert _update(first, 10) == 2
    first.close()
    second.close()  # the last worker out: a launcher's store stays
    assert os.path.isdir(directory)
    healed = WeightStore.open(directory, "m", SPECS, lambda: _values(1), persistent=True)
    assert healed.version == 2
    np.testing.assert_array_equal(healed.snapshot().arrays["w"], _values(10)[0])
    healed.close()
    assert store_files.sweep_stale(str(tmp_path)) == []  # its launcher (this process) is alive


def test_a_store_without_a_launcher_starts_from_the_model_file_again(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(WEIGHTS_OWNER_ENV, raising=False)
    monkeypatch.setenv(WEIGHTS_OWNER_ENV + "_unused", "x")
    assert store_files.launcher_owner() is None
    directory = store_files.store_directory("k", root=str(tmp_path))
    assert os.path.basename(directory) == f"{store_files.PREFIX}{os.getppid()}_k"
    store = WeightStore.open(directory, "m", SPECS, lambda: _values(1))
    _update(store, 10)
    store.close()
    assert not os.path.exists(directory)


@pytest.mark.parametrize("owner", ["", "12_", "../x", "1_ZZZZZZZZ", "1_abcdef0"])
def test_a_malformed_owner_is_ignored(owner: str, monkeypatch) -> None:
    monkeypatch.setenv(WEIGHTS_OWNER_ENV, owner)
    assert store_files.launcher_owner() is None


def test_a_store_of_another_layout_or_without_a_version_is_not_adopted(tmp_path: Path) -> None:
    directory = str(tmp_path / "store")
    store = WeightStore.open(directory, "m", SPECS, lambda: _values(1), persistent=True)
    _update(store, 10)
    store.close()
    os.unlink(os.path.join(directory, "v2.bin"))  # damaged: the published version is gone
    again = WeightStore.open(directory, "m", SPECS, lambda: _values(3), persistent=True)
    assert again.version == 1
    np.testing.assert_array_equal(again.snapshot().arrays["w"], _values(3)[0])
    again.close()


def test_a_store_open_to_other_users_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "store"
    directory.mkdir(mode=0o700)
    directory.chmod(0o777)  # e.g. planted in /dev/shm by someone else
    with pytest.raises(ModelLoadError, match="not this user's alone"):
        WeightStore.open(str(directory), "m", SPECS, lambda: _values(1), persistent=True)
    directory.chmod(0o700)
    WeightStore.open(str(directory), "m", SPECS, lambda: _values(1), persistent=True).close()
    modes = {p.name: p.stat().st_mode & 0o777 for p in directory.iterdir()}
    assert set(modes.values()) <= {0o600}, modes
