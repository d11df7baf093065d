"""Children started to die with their parent (no server): started without a fork, and still signalled.

A `preexec_fn` made `subprocess` fork() the launcher, whose gRPC fork handlers then restarted gRPC's
threads in the child; the child's close_fds closed their epoll descriptor and the child aborted before
exec (-6, "epoll_wait error: Bad file descriptor") or crashed (-11): about one start in ten on a busy
machine, one in four on this one, seen as a tritonserver dying at start-up.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from mslite_server import triton_process
from mslite_server.parent_death import dies_with_parent
from tests.support.eventually import eventually

STARTS = 150

# In a process of its own, so that its gRPC state is what a test with a client leaves: a channel with
# live event-engine threads, idle between calls.
_STARTS_BESIDE_GRPC = """
import socket, subprocess, sys
from collections import Counter
import grpc
from mslite_server import triton_process

listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen()
channel = grpc.insecure_channel("127.0.0.1:%d" % listener.getsockname()[1])
try:
    grpc.channel_ready_future(channel).result(timeout=0.5)
except grpc.FutureTimeoutError:
    pass
codes = Counter()
for _ in range(int(sys.argv[2])):
    proc = triton_process.spawn(["/bin/true"], {}, sys.argv[1], die_with_parent=True)
    codes[proc.wait()] += 1
print(dict(codes))
"""


def test_children_start_cleanly_beside_live_grpc_threads(tmp_path: Path):
    log = tmp_path / "child.log"
    out = subprocess.run(
        [sys.executable, "-c", _STARTS_BESIDE_GRPC, str(log), str(STARTS)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == str({0: STARTS}), log.read_text(errors="replace")[-2000:]


def test_a_child_keeps_its_pid_and_session_through_the_wrapper(tmp_path: Path):
    log = tmp_path / "child.log"
    proc = triton_process.spawn(["/bin/sh", "-c", "echo $$ $(ps -o sid= -p $$)"], {}, log, die_with_parent=True)
    assert proc.wait(timeout=30) == 0
    pid, sid = log.read_text().split()
    assert int(pid) == proc.pid  # the supervisor watches this pid and kills this session
    assert int(sid) == proc.pid


def test_a_child_gets_sigterm_when_the_thread_that_started_it_ends(tmp_path: Path):
    started: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        proc = subprocess.Popen(dies_with_parent(["sleep", "60"]))
        started.append(proc)
        # the signal is set before the exec: once the child is `sleep`, this thread may end
        eventually(lambda: Path(f"/proc/{proc.pid}/comm").read_text().strip() == "sleep", "the exec of sleep", 30)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    proc = started[0]
    try:
        assert proc.wait(timeout=30) == -15
    finally:
        proc.kill()
        proc.wait()
