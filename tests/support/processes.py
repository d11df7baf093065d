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


def descendants_of(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every process below `pid` (children, theirs, ...), from /proc."""
    found, todo = [], [pid]
    while todo:
        for child, cmdline in children_of(todo.pop()):
            found.append((child, cmdline))
            todo.append(child)
    return found


def is_gone(pid: int) -> bool:
    """True once `pid` has exited (a zombie counts as gone)."""
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text() or False
    except FileNotFoundError:
        return True


def command_lines_holding(secret: str) -> list[int]:
    """The processes whose /proc/PID/cmdline (what every local account can read) holds `secret`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and secret.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def environ_value(pid: int, name: str) -> str | None:
    """The value of variable `name` in the environment of process `pid` (readable by its own account and root)."""
    try:
        for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            if entry.startswith(name.encode() + b"="):
                return entry.split(b"=", 1)[1].decode()
    except OSError:
        return None
    return None
