"""Ports and worker processes, as the integration tests look at them."""

from __future__ import annotations

import socket
from pathlib import Path

from mslite_server import LocalServer
from mslite_server.workers import workers_of


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def worker_pids(server: LocalServer, model: str) -> list[int]:
    """The server's worker processes serving an instance of `model`, in worker (instance name) order."""
    assert server.process is not None
    return model_worker_pids(server.process.pid, model)


def model_worker_pids(server_pid: int, model: str) -> list[int]:
    """The worker processes of the tritonserver `server_pid` serving an instance of `model` (by `Worker.model`,
    exact: `tiny_naive`'s workers are not `tiny`'s)."""
    workers = [w for w in workers_of(server_pid) if w.model == model]
    return [w.pid for w in sorted(workers, key=lambda w: w.instance)]


def children_of(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the direct children of `pid`, from /proc (one that exits meanwhile is skipped)."""
    found = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            pids = [int(c) for c in children.read_text().split()]
        except OSError:
            continue
        for child in pids:
            try:
                found.append((child, Path(f"/proc/{child}/cmdline").read_bytes().decode(errors="replace")))
            except OSError:
                continue
    return found
