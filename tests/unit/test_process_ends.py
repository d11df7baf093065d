"""Helper processes of ours end with the process that started them (no server)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from mslite_contract.mindir import REASON_PREFIX
from mslite_server.parent_death import end_group, group_members


def test_a_converter_whose_parent_is_gone_exits_at_once() -> None:
    """The MindIR converter checks its parent's pid as it sets its parent-death signal: a wrong one ends it
    before it converts anything (with the right one, it goes on and names why the conversion failed)."""

    def run(parent: str) -> subprocess.CompletedProcess[bytes]:
        args = [sys.executable, "-m", "mslite_contract.mindir", "/nonexistent.mindir", "/nonexistent.onnx", parent]
        return subprocess.run(args, capture_output=True, timeout=120, check=False)

    orphan, child = run("1"), run(str(os.getpid()))
    assert orphan.returncode == 1 and REASON_PREFIX.encode() not in orphan.stderr, orphan.stderr[-300:]
    assert child.returncode == 1 and REASON_PREFIX.encode() in child.stderr, child.stderr[-300:]


def test_end_group_kills_what_is_left_of_a_process_group() -> None:
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 300 & sleep 300 & wait"], start_new_session=True, stdout=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while len(group_members(leader.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(group_members(leader.pid)) == 3
        leader.kill()
        leader.wait()
        assert len(group_members(leader.pid)) == 2  # the sleeps, handed to init, still in the group
        assert end_group(leader.pid, timeout_s=30) == []
        assert group_members(leader.pid) == []
    finally:
        leader.kill()
        leader.wait()
