"""A directory of built models (prepacked weights, MindIR conversions) shared by the workers of one user.

The launcher keeps one more kind of entry there: its `shm_private` library (`mslite_server.shm_private`).

Each entry is `<root>/<key>/` (its files, `model.onnx` among them), with a lock file `<root>/<key>.lock`:

- the builder holds the lock exclusively and builds into a temporary directory renamed into place, so a
  reader never sees a partial build and workers starting together build once;
- a worker that uses an entry holds the lock shared for as long as it lives (its session maps the files),
  so the eviction, which needs the lock exclusively, never removes an entry in use.

The default root is under the temporary directory, which every local user can write to: another user may
have made the directory, or planted an entry whose model would then be served. So nothing is used unless
it is this user's and nobody else can write to it: a root that is another user's is refused, an entry that
is not ours alone is set aside and built again.

The cache is bounded (`settings.CACHE_MAX_BYTES_ENV`, default `settings.DEFAULT_CACHE_MAX_BYTES`): after a
build, the least recently used entries that no worker holds are removed until the rest fit.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Callable

from .settings import WEIGHTS_CACHE_ENV, cache_max_bytes

BUILD_TIMEOUT_S = 600.0
MODEL_FILENAME = "model.onnx"
_FOREIGN_WRITE = stat.S_IWGRP | stat.S_IWOTH

# entry directory -> the descriptor of its lock, held shared until this process exits
_held: dict[str, int] = {}


def ensure_built(
    root: str,
    key: str,
    build: Callable[[str], None],
    *,
    timeout_s: float = BUILD_TIMEOUT_S,
    filename: str = MODEL_FILENAME,
) -> str:
    """Path of `<root>/<key>/<filename>`, built by `build(directory)` unless a trusted entry exists.

    The entry stays in the cache while this process lives. Safe when many workers (processes) call it at once.

    Raises:
        OSError: the cache cannot be written, or its root belongs to another user (PermissionError);
            TimeoutError: the lock was held for longer than `timeout_s`; ValueError: a bad
            `settings.CACHE_MAX_BYTES_ENV`; anything `build` raises.
    """
    bound = cache_max_bytes()
    _private_root(root)
    final = os.path.join(root, key)
    model = os.path.join(final, filename)
    trusted = functools.partial(_trusted, final, filename)
    if final in _held and trusted():
        return model
    deadline = time.monotonic() + timeout_s
    fd = os.open(os.path.join(root, f"{key}.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        _lock(fd, fcntl.LOCK_SH, deadline)  # waits for a builder or an eviction
        if not trusted():
            fcntl.flock(fd, fcntl.LOCK_UN)  # released first: two readers upgrading together would wait forever
            # Workers that start together all get here; the first builds, then holds the lock shared for as long
            # as it lives, so the others stop waiting for it exclusively once the entry is there (renamed into
            # place whole). Waiting on, they waited the whole time-out, and the model's load hung for as long.
            if _lock(fd, fcntl.LOCK_EX, deadline, unless=trusted) and not trusted():
                _build(root, key, final, build)
            _lock(fd, fcntl.LOCK_SH, deadline)
            if not trusted():  # removed in the instant between the two locks: rare, and not worth a retry
                raise OSError(errno.EAGAIN, "the cache entry went away while it was being built")
            evict(root, bound)
    except BaseException:
        os.close(fd)
        raise
    os.utime(final)  # its time of last use, for the eviction
    old = _held.pop(final, None)
    _held[final] = fd
    if old is not None:
        os.close(old)
    return model


def evict(root: str, max_bytes: int) -> list[str]:
    """Remove the least recently used entries no process holds until the others fit in `max_bytes`.

    Returns the keys removed. Entries that are not this user's are left alone (and never used).
    """
    if max_bytes <= 0:
        return []
    entries = []
    for name in _names(root):
        path = os.path.join(root, name)
        with contextlib.suppress(OSError):
            st = os.lstat(path)
            if name.startswith(".") or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            entries.append((st.st_mtime, name, _size(path)))
    total = sum(size for _, _, size in entries)
    removed = []
    for _, name, size in sorted(entries):
        if total <= max_bytes:
            break
        if _remove_unheld(root, name):
            total -= size
            removed.append(name)
    return removed


def _private_root(root: str) -> None:
    """Create the root (0700) or check that it is a directory of this user; others' write access is taken away.

    Raises:
        PermissionError: it is another user's, or not a directory.
    """
    os.makedirs(root, mode=0o700, exist_ok=True)
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise PermissionError(
            f"the model cache directory belongs to another user (set {WEIGHTS_CACHE_ENV} to a directory of yours)"
        )
    if st.st_mode & 0o077:
        os.chmod(root, 0o700)  # ours: entries others planted meanwhile fail `_trusted`


def _trusted(entry: str, filename: str = MODEL_FILENAME) -> bool:
    """True when the entry holds `filename` and it and everything in it are this user's and nobody else's to write."""
    try:
        if not _ours(os.lstat(entry), stat.S_ISDIR) or not os.path.isfile(os.path.join(entry, filename)):
            return False
        return all(_ours(os.lstat(os.path.join(entry, name)), stat.S_ISREG) for name in os.listdir(entry))
    except OSError:
        return False


def _ours(st: os.stat_result, kind: Callable[[int], bool]) -> bool:
    return kind(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & _FOREIGN_WRITE


def _build(root: str, key: str, final: str, build: Callable[[str], None]) -> None:
    """Build into a fresh private directory and rename it into place; an untrusted entry is set aside first."""
    if os.path.lexists(final):
        aside = os.path.join(root, f".untrusted.{key}.{secrets.token_hex(4)}")
        os.rename(final, aside)  # our root: renaming works even when the entry is another user's
        shutil.rmtree(aside, ignore_errors=True)
    tmp = tempfile.mkdtemp(prefix=f".{key}.", dir=root)
    try:
        build(tmp)
        for name in os.listdir(tmp):  # a umask that lets the group write would make the entry untrusted
            path = os.path.join(tmp, name)
            os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) & ~_FOREIGN_WRITE)
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _remove_unheld(root: str, name: str) -> bool:
    """Remove one entry unless a process holds it (its lock taken shared); True when it went."""
    try:
        fd = os.open(os.path.join(root, f"{name}.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    try:
        aside = os.path.join(root, f".evicted.{name}.{secrets.token_hex(4)}")
        os.rename(os.path.join(root, name), aside)  # gone at once for readers; the files go next
        shutil.rmtree(aside, ignore_errors=True)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # the lock file stays: removing it would let two builders lock different files


def _lock(fd: int, kind: int, deadline: float, *, unless: Callable[[], bool] | None = None) -> bool:
    """Take the lock (`kind`) by `deadline`; False, without it, as soon as `unless()` holds while waiting.

    Raises:
        TimeoutError: not taken by `deadline`.
    """
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if unless is not None and unless():
                return False
            if time.monotonic() > deadline:
                raise TimeoutError("another worker held the model cache's lock for too long") from None
            time.sleep(0.05)


def _size(path: str) -> int:
    total = 0
    for base, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(base, name)).st_blocks * 512
    return total


def _names(root: str) -> list[str]:
    try:
        return os.listdir(root)
    except OSError:
        return []
