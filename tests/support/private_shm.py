"""Run a command with its own small /dev/shm: a tmpfs mounted in a private mount namespace (needs root)."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any


def unavailable() -> str | None:
    """Why a private /dev/shm cannot be made here, or None when it can."""
    if os.geteuid() != 0:
        return "a private /dev/shm needs root (mount namespace + tmpfs mount)"
    if shutil.which("unshare") is None:
        return "no unshare(1) on this machine"
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return f"cannot mount a tmpfs in a mount namespace here: {probe.stderr.strip()}"
    return None


def popen(size_kib: int, argv: list[str], **kwargs: Any) -> subprocess.Popen:
    """Start `argv` with /dev/shm a fresh tmpfs of `size_kib` KiB that only it (and its children) see."""
    script = f'mount -t tmpfs -o size={size_kib}k tmpfs /dev/shm && exec "$@"'
    return subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *argv], **kwargs)
