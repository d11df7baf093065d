"""Who owns a file in /dev/shm (a client's region, an update file, a weights store); the sweep of dead owners' files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mslite_contract.owned_files import process_alive, region_owner, remove_prefixed, sweep_dead_owners
from tests.support.eventually import eventually


def test_the_owner_pid_is_read_from_the_region_name() -> None:
    assert region_owner("mslite_client_1234_7") == 1234
    for other in ("mslite1234_ab_uuid", "mslite_client_x_1", "gw_test_grpc", "mslite_weights_upload_12_ab"):
        assert region_owner(other) is None


def test_a_dead_process_is_gone_even_before_it_is_reaped() -> None:
    assert process_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    eventually(lambda: not process_alive(child.pid), "the child to end", 30)  # not yet waited for: a zombie
    assert os.path.exists(f"/proc/{child.pid}")
    child.wait()
    assert not process_alive(child.pid)


def test_only_the_files_of_dead_owners_with_the_prefix_are_swept(tmp_path: Path) -> None:
    names = {
        "mslite_weights_999999999_k": "dir",  # a dead server's store
        f"mslite_weights_{os.getpid()}_k": "dir",  # a live one's
        "mslite_weights_upload_999999999_x": "file",  # another prefix that starts alike
        "mslite_weights_999999998_f": "file",
        "other_999999999_x": "file",
    }
    for name, kind in names.items():
        if kind == "dir":
            (tmp_path / name).mkdir()
        else:
            (tmp_path / name).write_bytes(b"x")
    swept = sweep_dead_owners("mslite_weights_", root=str(tmp_path))
    assert swept == ["mslite_weights_999999998_f", "mslite_weights_999999999_k"]
    assert sorted(os.listdir(tmp_path)) == sorted(set(names) - set(swept))
    assert remove_prefixed("mslite_weights_upload_", root=str(tmp_path)) == ["mslite_weights_upload_999999999_x"]
    assert sweep_dead_owners("mslite_weights_", root=str(tmp_path / "missing")) == []
