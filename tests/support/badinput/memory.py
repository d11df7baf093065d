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


def tree_rss_kb(pid: int) -> dict[int, int]:
    """VmRSS in KiB of `pid` and of each descendant (the server and its python-backend workers)."""
    rss = {}
    for p in process_tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss[p] = int(line.split()[1])
        except OSError:
            pass
    return rss
