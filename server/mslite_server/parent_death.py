"""Children that get SIGTERM when the thread that started them ends, started without forking this process.

Linux's PR_SET_PDEATHSIG must be set by the child. A `preexec_fn` could set it, but then `subprocess`
fork()s this process instead of vfork()ing it, and fork runs the pthread_atfork handlers of every library
loaded here: gRPC's (tritonclient, grpcio) restart its event-engine threads in the child, and the child's
`close_fds` then closes their epoll descriptor under them. On a busy machine the child aborts before it
reaches exec ("epoll_wait error: Bad file descriptor", exit -6) or crashes (-11), which looked like a
tritonserver that died at start-up. So the child is a small interpreter that sets the signal itself and
execs the real command in the same process (same pid, same session).
"""

from __future__ import annotations

import os
import signal
import sys
import time

from mslite_server.workers import proc_stats

# Runs in `python -I -S` (no site, no environment): standard library only.
_SET_AND_EXEC = """
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit("the process that started this one has exited")
os.execvp(sys.argv[2], sys.argv[2:])
"""


def dies_with_parent(args: list[str]) -> list[str]:
    """`args` as a command whose process gets SIGTERM when the calling thread (or process) ends.

    Start it from a thread that lives as long as the child should: the kernel signals the child when
    the *thread* that started it exits. Unchanged where this process has no interpreter to run (an
    embedding application with no `sys.executable`): the child then outlives an abrupt end of its parent.
    """
    if not sys.executable:
        return list(args)
    return [sys.executable, "-I", "-S", "-c", _SET_AND_EXEC, str(os.getpid()), *args]


def group_members(pgid: int) -> list[int]:
    """The live processes (zombies left out) of process group `pgid`, from /proc."""
    return [
        int(entry.name)
        for entry, _, fields in proc_stats()  # fields: state, ppid, pgrp, ...
        if len(fields) > 2 and fields[0] != "Z" and fields[2] == str(pgid)
    ]


def end_group(pgid: int, timeout_s: float = 5.0) -> list[int]:
    """SIGKILL what is left of the process group a child led (its own session), and wait until it is gone.

    A child started with `start_new_session` leads a group that its helpers (multiprocessing's workers and
    resource tracker) join; they stay in it when the child dies and they are handed to init, and Linux reuses
    no pid that still names a group. Returns the pids still there after `timeout_s` (none, normally).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        left = group_members(pgid)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)
