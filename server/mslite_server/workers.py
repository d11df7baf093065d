"""The worker processes of a tritonserver, read from /proc, and the upload copies they run from.

Triton's load API writes the files of an uploaded model to a fresh `/tmp/folderXXXXXX` and removes it
when the model is unloaded or the server stops cleanly; a killed server, or a model uploaded over HTTP,
leaves the copy behind. The worker processes name their model's directory on their command line, which
is how a `LocalServer` learns which copies are its own.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mslite_contract.protocol import DEADLINE_EXIT_CODE

_UPLOAD_COPY = re.compile(r"/tmp/folder[A-Za-z0-9]{6}")  # libtritonserver's mkdtemp template (not $TMPDIR)

_STUB = "triton_python_backend_stub"
# Triton names the instances of an unnamed instance group `<model>_<group index>_<instance index>`
_DEFAULT_INSTANCE = re.compile(r"(?P<model>.+)_[0-9]+_[0-9]+")


@dataclass(frozen=True)
class Worker:
    """One worker process of the server."""

    pid: int
    state: str
    instance: str  # empty for a zombie: its command line is gone
    model_dir: str
    exit_status: int | None = None  # a zombie's wait status (what its parent will reap): see `describe_exit`
    started: int = 0  # when it started, in clock ticks since boot: of two workers, the greater is the younger

    @property
    def model(self) -> str:
        """The name of the model it serves (`model_of`); empty for a zombie."""
        return model_of(self.model_dir, self.instance)


@dataclass(frozen=True)
class _Process:
    pid: int
    comm: str
    state: str
    parent: int
    args: list[bytes]
    exit_status: int | None = None
    started: int = 0


def proc_stats() -> Iterator[tuple[Path, str, list[str]]]:
    """Each process's /proc folder, `stat` line and fields after its name (one that exits meanwhile is skipped)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        yield entry, stat, _after_name(stat)


def _children(parent: int) -> list[_Process]:
    """The processes whose parent is `parent`, read from /proc (one that exits meanwhile is skipped)."""
    found = []
    for entry, stat, rest in proc_stats():
        try:
            if int(rest[1]) != parent:
                continue
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        # /proc/<pid>/stat field 52 (Linux >= 3.5): the wait status of a zombie, which says how it died
        status = int(rest[49]) if rest[0] == "Z" and len(rest) > 49 else None
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        # field 22: the start time (clock ticks after boot)
        found.append(_Process(int(entry.name), comm, rest[0], parent, args, status, int(rest[19])))
    return found


def state_of(pid: int) -> str:
    """The state letter of a process (`R`, `S`, `T` for stopped, `Z`, ...); empty once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return _after_name(stat)[0]


def _after_name(stat: str) -> list[str]:
    """The fields of a `/proc/<pid>/stat` line after the command name (which may hold spaces and parentheses)."""
    return stat[stat.rindex(")") + 2 :].split()


def workers_of(server_pid: int) -> list[Worker]:
    """The python-backend stub processes whose parent is `server_pid`."""
    found = []
    for p in _children(server_pid):
        if not _STUB.startswith(p.comm):
            continue
        # argv: stub, <model dir>/<version>/model.py, shm region, ..., instance name (8), runtime dir
        instance = p.args[8].decode() if len(p.args) > 8 else ""
        model_dir = os.path.dirname(os.path.dirname(p.args[1].decode())) if len(p.args) > 1 else ""
        found.append(Worker(p.pid, p.state, instance, model_dir, p.exit_status, p.started))
    return found


def model_of(model_dir: str, instance: str) -> str:
    """The name of the model a worker serves, read from its command line.

    Exact, where a name prefix is not: `tiny_naive_0_0` is an instance of `tiny_naive`, not of `tiny`. In a
    model repository it is the model directory's name (Triton requires the two to match). Triton's copy of an
    uploaded model has a random name, so there it is read from the instance name Triton gives an unnamed
    instance group, `<model>_<group>_<n>` (every config this project writes leaves its groups unnamed); a copy
    whose instance name is not of that form gives an empty name.
    """
    if not model_dir:
        return ""
    if not _UPLOAD_COPY.fullmatch(model_dir):
        return os.path.basename(model_dir)
    named = _DEFAULT_INSTANCE.fullmatch(instance)
    return named["model"] if named else ""


def describe_exit(status: int | None) -> str:
    """A wait status in words: `killed by SIGKILL` (e.g. the kernel's OOM killer), `exited with code 1`."""
    if status is None:
        return "exit status unknown"
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return f"killed by {name}" + (
            " (the kernel's OOM killer sends it, as does kill -9)" if name == "SIGKILL" else ""
        )
    code = os.WEXITSTATUS(status)
    if code == DEADLINE_EXIT_CODE:
        return f"exited with code {code} (its execute ran past the model's execute_deadline_s)"
    return f"exited with code {code}"


def upload_copies(model_dirs: Iterable[str]) -> set[str]:
    """The directories among `model_dirs` that are Triton's copies of uploaded models."""
    return {d for d in model_dirs if _UPLOAD_COPY.fullmatch(d)}


def remove_upload_copies(dirs: Iterable[str]) -> list[str]:
    """Delete the given upload copies (call only once the server that used them has exited)."""
    removed = []
    for d in sorted(upload_copies(dirs)):
        if os.path.isdir(d):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed
