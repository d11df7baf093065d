"""The server's process tree and its RSS (the server and its python-backend workers), read from /proc."""

from __future__ import annotations

from pathlib import Path


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants (from /proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo.extend(int(c) for c in task.read_text().split())
            except OSError:
                pass
    return out


def rss_kib(pid: int) -> int | None:
    """VmRSS of `pid` in KiB; None when it has gone (or, a zombie, has none)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def tree_rss_kb(pid: int) -> dict[int, int]:
    """VmRSS in KiB of `pid` and of each descendant (the server and its python-backend workers)."""
    rss = {p: rss_kib(p) for p in process_tree(pid)}
    return {p: kib for p, kib in rss.items() if kib is not None}
