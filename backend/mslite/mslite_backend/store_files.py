"""A model's weights store as files: where it lives, its version files' layout, and the steps under its lock.

The store itself (`weight_store.WeightStore`) joins, reads, updates and leaves; what it does to the files of
its directory is here: the directory's name (after the launcher that owns it, or the tritonserver), the
offsets of each weight in a version file, holding the directory's `lock`, writing version 1 from the model
file, adopting a version published earlier, and removing temporary files and retired versions.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterable

import numpy as np

from mslite_contract.owned_files import sweep_dead_owners
from mslite_contract.protocol import UPDATE_ALIGN, WEIGHTS_STORE_PREFIX
from mslite_contract.settings import weights_owner

from .weights import WeightSpec

ALIGN = UPDATE_ALIGN
PREFIX = WEIGHTS_STORE_PREFIX
_VERSION_FILE = re.compile(r"^v(\d+)\.bin$")
_OWNER = re.compile(r"[0-9]{1,10}_[0-9a-f]{8,32}")  # `<launcher pid>_<hex>`, see settings.WEIGHTS_OWNER_ENV


def layout(specs: tuple[WeightSpec, ...]) -> tuple[tuple[int, ...], int]:
    """Offset of each weight in a version file, and the file's size."""
    offsets, end = [], 0
    for spec in specs:
        offsets.append(end)
        end = -(-(end + spec.nbytes) // ALIGN) * ALIGN
    return tuple(offsets), max(end, ALIGN)


def store_root() -> str:
    """`/dev/shm` where it exists and is writable, else the temporary directory."""
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def launcher_owner() -> str | None:
    """The launcher that owns this worker's stores (`settings.WEIGHTS_OWNER_ENV`), or None when there is none."""
    owner = weights_owner()
    return owner if _OWNER.fullmatch(owner) else None


def store_directory(key: str, *, root: str | None = None, server_pid: int | None = None) -> str:
    """The store of one loaded model.

    Named after the launcher that owns it when there is one, else after the tritonserver process; the
    pid leading either name lets a later load sweep the store of one that is gone.
    """
    owner = launcher_owner() if server_pid is None else None
    if owner is None:
        owner = str(os.getppid() if server_pid is None else server_pid)
    return os.path.join(root or store_root(), f"{PREFIX}{owner}_{key}")


def sweep_stale(root: str) -> list[str]:
    """Remove stores left by servers that are gone (killed before their workers could clean up)."""
    return sweep_dead_owners(PREFIX, root=root)


def open_locked(directory: str) -> int:
    """Create the directory if needed and hold its `lock`.

    Retried when the last worker of a previous load removed the directory between our open and our lock.

    Raises:
        OSError: the directory is not ours alone (another user's, or open to others): /dev/shm is shared
            by every user of the host, and a store planted there must not feed a model its weights.
    """
    path = os.path.join(directory, "lock")
    for _ in range(100):
        os.makedirs(directory, mode=0o700, exist_ok=True)
        st = os.lstat(directory)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise OSError(errno.EPERM, "the store directory is not this user's alone")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:
            continue
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
    raise OSError(0, "the store directory keeps disappearing")


def adoptable(directory: str, version_fd: int, described: str, size: int) -> bool:
    """True when the store holds a published version of this layout (left by an earlier load or server)."""
    if read_text(os.path.join(directory, "layout.json")) != described or os.fstat(version_fd).st_size != 8:
        return False
    version = int(np.frombuffer(os.pread(version_fd, 8, 0), dtype=np.uint64)[0])
    try:
        st = os.stat(os.path.join(directory, f"v{version}.bin"))
    except OSError:
        return False
    return version >= 1 and stat.S_ISREG(st.st_mode) and st.st_size == size


def write_first_version(
    directory: str, version_fd: int, described: str, specs: tuple[WeightSpec, ...], initial: Callable[[], Iterable]
) -> None:
    """Version 1 from the model file (the first worker of a load; earlier contents are discarded)."""
    for name in os.listdir(directory):
        if _VERSION_FILE.match(name):
            os.unlink(os.path.join(directory, name))
    offsets, size = layout(specs)
    tmp = os.path.join(directory, f".v1.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.ftruncate(fd, size)
        for spec, offset, value in zip(specs, offsets, initial()):
            pwrite_all(fd, np.ascontiguousarray(value, dtype=np.dtype(spec.dtype)).reshape(-1).data.cast("B"), offset)
    finally:
        os.close(fd)
    os.rename(tmp, os.path.join(directory, "v1.bin"))
    fd = os.open(os.path.join(directory, "layout.json"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "w", encoding="utf-8") as f:
        f.write(described)
    os.ftruncate(version_fd, 8)
    os.pwrite(version_fd, np.array([1], dtype=np.uint64).tobytes(), 0)


def remove_orphans(directory: str) -> None:
    """Remove the temporary files of writers killed mid-write (call under the writers' lock).

    Every temporary file is written under that lock, so one found while holding it has no live writer:
    without this, a worker killed during an update would leave a file of the weights' full size for as
    long as the store lives.
    """
    for name in os.listdir(directory):
        if name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))


def retire(directory: str, keep_from: int) -> None:
    """Unlink versions older than `keep_from`; workers still mapping one keep it until they remap."""
    for name in os.listdir(directory):
        m = _VERSION_FILE.match(name)
        if m and int(m.group(1)) < keep_from:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))


def pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    """Write all of `data` at `offset` (`os.pwrite` may write less than asked)."""
    while data.nbytes:
        n = os.pwrite(fd, data, offset)
        data, offset = data[n:], offset + n


def read_text(path: str) -> str:
    """A small file's text ("" where it cannot be read)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""
