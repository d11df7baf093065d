"""Who owns a client's shared-memory region, and whether that owner still runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from mslite_triton._transport import region_owner
from mslite_triton.server.shm_sweep import process_alive


def test_the_owner_pid_is_read_from_the_region_name() -> None:
    assert region_owner("mslite_client_1234_7") == 1234
    for other in ("mslite1234_ab_uuid", "mslite_client_x_1", "gw_test_grpc", "mslite_weights_upload_12_ab"):
        assert region_owner(other) is None


def test_a_dead_process_is_gone_even_before_it_is_reaped() -> None:
    assert process_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while process_alive(child.pid) and time.monotonic() < deadline:  # exited, not yet waited for: a zombie
        time.sleep(0.05)
    assert not process_alive(child.pid) and os.path.exists(f"/proc/{child.pid}")
    child.wait()
    assert not process_alive(child.pid)
