"""The live values of a model's updatable weights: one copy shared by all its workers, switched atomically.

One directory per loaded model (in `/dev/shm`, so the pages are shared memory that is never evicted):

- `lock`: flock'ed by a worker joining or leaving and by a writer, so those steps never interleave;
- `alive`: every worker holds a shared flock on it; the first one in writes version 1 from the model
  file, the last one out removes the directory (a crashed server's directory is swept at the next load);
  but a store the launcher owns (`settings.WEIGHTS_OWNER_ENV`) is the launcher's to remove: it outlives every
  worker and tritonserver, and the first worker of a new load adopts its last published version;
- `version`: 8 bytes, the published version, read by each worker at the start of each execute;
- `v<N>.bin`: every weight of version N at 64-byte aligned offsets, never modified once published;
- `proofs`: `<timestamp> <nonce>` of each update proof a worker accepted within the proofs' window, so
  that a proof is good once for all the workers of the model (`update_auth`).

Nothing half-made stays: a store whose first version could not be written is removed at once, a launcher's
store goes with a failed load when it holds no update, and the temporary file of a writer killed mid-write
is removed by the next writer or joining worker (all of them under `lock`).

An update is validated in full first (names, dtypes, shapes, sizes), then written to a new file that is
renamed into place, and only then is its number published: a worker maps either the old or the new
file for a whole execute, so a request sees all-old or all-new weights, and a rejected update changes
nothing. Which worker receives the update does not matter.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import mmap
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mslite_contract.dtypes import wire_name
from mslite_contract.owned_files import sweep_dead_owners
from mslite_contract.protocol import FILE_REFUSED, UPDATE_ALIGN, UPLOAD_PREFIX, WEIGHTS_STORE_PREFIX
from mslite_contract.settings import weights_owner

from .errors import InferenceFailure, ModelLoadError, RequestError
from .weights import WeightSpec

ALIGN = UPDATE_ALIGN
PREFIX = WEIGHTS_STORE_PREFIX
_UPLOAD_NAME = re.compile(UPLOAD_PREFIX + r"[A-Za-z0-9_]{1,64}")
_VERSION_FILE = re.compile(r"^v(\d+)\.bin$")
PROOFS_FILE = "proofs"
MAX_PROOFS = 10_000  # accepted proofs remembered per model; a window's worth of updates is far fewer
_OWNER = re.compile(r"[0-9]{1,10}_[0-9a-f]{8,32}")  # `<launcher pid>_<hex>`, see settings.WEIGHTS_OWNER_ENV


@dataclass(frozen=True)
class Snapshot:
    """The weights one execute uses: a version and a read-only array per weight."""

    version: int
    arrays: dict[str, np.ndarray]


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


def parse_update(model: str, manifest: str, size: int, specs: tuple[WeightSpec, ...]) -> dict[str, tuple[int, int]]:
    """Check an update's manifest against the updatable weights, all of it before anything is written.

    Args:
        model: the model's name, for messages.
        manifest: JSON list of `{"name", "dtype", "shape"}`, in the order of their bytes in the data.
        size: bytes of data that came with it.
        specs: the updatable weights.

    Returns:
        name -> (offset, size) of its new value in the data (values back to back, in manifest order).

    Raises:
        RequestError: naming the model, the tensor, what was expected and what arrived.
    """
    seen: dict[str, tuple[int, int]] = {}
    offset = 0
    for spec in _checked_entries(model, manifest, specs):
        seen[spec.name] = (offset, spec.nbytes)
        offset += spec.nbytes
    if offset != size:
        raise RequestError(f"model '{model}': the update describes {offset} bytes of weights but carries {size}")
    return seen


def _checked_entries(model: str, manifest: str, specs: tuple[WeightSpec, ...]) -> list[WeightSpec]:
    where = f"model '{model}'"
    try:
        items = json.loads(manifest)
        entries = [(str(i["name"]), np.dtype(str(i["dtype"])), tuple(int(d) for d in i["shape"])) for i in items]
    except (ValueError, TypeError, KeyError) as e:
        raise RequestError(f"{where}: malformed weights update ({type(e).__name__})") from None
    by_name = {s.name: s for s in specs}
    if not entries:
        raise RequestError(f"{where}: a weights update needs at least one tensor")
    unknown = [n for n, _, _ in entries if n not in by_name]
    if unknown:
        raise RequestError(
            f"{where}: tensor(s) {unknown} are not updatable weights of this model; updatable: {list(by_name)}"
        )
    checked: list[WeightSpec] = []
    for name, dtype, shape in entries:
        spec = by_name[name]
        if spec in checked:
            raise RequestError(f"{where}: tensor '{name}' appears twice in one update")
        if dtype != np.dtype(spec.dtype):
            raise RequestError(
                f"{where}, weight '{name}': data type expected {wire_name(np.dtype(spec.dtype))}, "
                f"got {wire_name(dtype)}"
            )
        if shape != spec.shape:
            raise RequestError(f"{where}, weight '{name}': shape expected {list(spec.shape)}, got {list(shape)}")
        checked.append(spec)
    return checked


def upload_path(name: str, root: str | None = None) -> str:
    """Where a client on this host wrote an update file, from its bare name (any other name is refused).

    Raises:
        RequestError: the name is not an update file's.
    """
    if not _UPLOAD_NAME.fullmatch(name):
        raise RequestError(f"'{name[:80]}' is not the name of a weights update file")
    return os.path.join(root or store_root(), name)


class WeightStore:
    """One worker's handle on the shared store of its model (see the module docstring)."""

    def __init__(self, directory: str, model: str, specs: tuple[WeightSpec, ...], fds: tuple[int, int, int]) -> None:
        """Use `open`; `fds` are the held `lock` and `alive` files and the `version` file to map."""
        self.directory = directory
        self.model = model
        self.specs = specs
        self.offsets, self.size = layout(specs)
        self._lock_fd, self._alive_fd, version_fd = fds
        self._version_map = mmap.mmap(version_fd, 8)
        self._version = np.frombuffer(self._version_map, dtype=np.uint64, count=1)
        self._current: Snapshot | None = None
        self.on_switch: Callable[[int], None] | None = None
        self.persistent = False  # the launcher's store: it outlives this load (see `open`)
        self.made = False  # this worker wrote version 1 (it adopted no earlier weights)

    @classmethod
    def open(
        cls,
        directory: str,
        model: str,
        specs: tuple[WeightSpec, ...],
        initial: Callable[[], Iterable[np.ndarray]],
        *,
        persistent: bool = False,
    ) -> WeightStore:
        """Join the model's store, creating version 1 from `initial()` when this worker is the first.

        Args:
            directory: the store (`store_directory`).
            model: the model's name, for messages.
            specs: the updatable weights.
            initial: their values in the model file.
            persistent: the launcher owns the store: the first worker in adopts the version published
                last (by workers of an earlier load or of a tritonserver that died) when its layout
                matches, and no worker removes the store.

        Raises:
            ModelLoadError: the store cannot be created, is not this user's alone, or holds weights of
                another layout.
        """
        try:
            sweep_stale(os.path.dirname(directory))
            lock_fd = _open_locked(directory)
        except OSError as e:
            raise ModelLoadError(f"model '{model}': cannot create the shared weights store ({e.strerror})") from e
        fds: list[int] = []
        store = None
        made = False  # this worker (re)wrote version 1: nothing published before it is in the store
        try:
            fds = [os.open(os.path.join(directory, n), os.O_RDWR | os.O_CREAT, 0o600) for n in ("alive", "version")]
            try:
                fcntl.flock(fds[0], fcntl.LOCK_EX | fcntl.LOCK_NB)
                first = True
            except BlockingIOError:
                first = False
            _remove_orphans(directory)
            described = json.dumps([[s.name, s.dtype, list(s.shape)] for s in specs])
            if first and not (persistent and _adoptable(directory, fds[1], described, layout(specs)[1])):
                made = True
                _reset(directory, fds[1], described, specs, initial)
            elif _read(os.path.join(directory, "layout.json")) != described:
                raise ModelLoadError(f"model '{model}': the shared weights store holds another model's weights")
            fcntl.flock(fds[0], fcntl.LOCK_SH)
            store = cls(directory, model, specs, (lock_fd, fds[0], fds[1]))
            store.persistent = persistent
            store.made = made
            os.close(fds[1])
            return store
        except OSError as e:
            raise ModelLoadError(f"model '{model}': cannot create the shared weights store ({e.strerror})") from e
        finally:
            if store is None and made:  # a half-made store (its first version unfinished) is nobody's
                shutil.rmtree(directory, ignore_errors=True)
            fcntl.flock(lock_fd, fcntl.LOCK_UN)
            if store is None:
                for fd in (*fds, lock_fd):
                    os.close(fd)

    @property
    def version(self) -> int:
        """The published version (what the next execute will use)."""
        return int(self._version[0])

    def snapshot(self) -> Snapshot:
        """The current weights; maps the newly published version when it changed since the last call.

        Raises:
            InferenceFailure: the published version's file is missing (the store was damaged).
        """
        version = self.version
        if self._current is not None and self._current.version == version:
            return self._current
        for _ in range(100):  # a writer may publish and retire versions between the read and the open
            try:
                fd = os.open(os.path.join(self.directory, f"v{version}.bin"), os.O_RDONLY)
                break
            except FileNotFoundError:
                latest = self.version
                if latest == version:
                    raise InferenceFailure(f"model '{self.model}': weights version {version} is missing") from None
                version = latest
        else:
            raise InferenceFailure(f"model '{self.model}': weights keep changing; could not map a version")
        try:
            data = mmap.mmap(fd, self.size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        arrays = {
            s.name: np.frombuffer(data, np.dtype(s.dtype), int(np.prod(s.shape, dtype=np.int64)), off).reshape(s.shape)
            for s, off in zip(self.specs, self.offsets)
        }
        self._current = Snapshot(version, arrays)  # the old mapping goes when its last array does
        if self.on_switch is not None:
            self.on_switch(version)
        return self._current

    def update(self, manifest: str, data: Any) -> int:
        """Validate and publish new values for some or all weights; returns the new version.

        Args:
            manifest: see `parse_update`.
            data: the new values' bytes, back to back in manifest order (any buffer, e.g. a uint8 array).

        Raises:
            RequestError: the update does not fit the weights; nothing changed.
            InferenceFailure: writing the new version failed; nothing changed.
        """
        view = memoryview(data).cast("B")
        changes = parse_update(self.model, manifest, view.nbytes, self.specs)
        return self._publish(lambda tmp, current: self._write(tmp, current, changes, view))

    def adopt(self, manifest: str, name: str) -> int:
        """Publish the weights of a file that a client on this host wrote into the store's directory.

        The file holds the manifest's weights in its order, each at a 64-byte aligned offset (`layout`).
        Holding every weight in declared order, it is the version layout, and a hard link makes it the
        new version without a copy; else its weights are copied into the new version, the others kept
        (the client removes its own name afterwards). No request carries the values, so no request size
        limit applies.

        Raises:
            RequestError: the manifest does not fit; or the file is missing, foreign or of the wrong size
                (message `FILE_REFUSED`: the client, e.g. on another host, sends the values inline instead).
            InferenceFailure: publishing failed; nothing changed.
        """
        listed = tuple(_checked_entries(self.model, manifest, self.specs))
        offsets, size = layout(listed)
        path = upload_path(name, os.path.dirname(self.directory))
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise RequestError(f"model '{self.model}': {FILE_REFUSED} (missing)") from None
        except OSError:  # e.g. a symbolic link (ELOOP)
            raise RequestError(f"model '{self.model}': {FILE_REFUSED} (not a regular file)") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_size != size:
                raise RequestError(
                    f"model '{self.model}': {FILE_REFUSED} (not a regular file of this user of {size} bytes)"
                )
            if listed == self.specs:

                def link(tmp: str, _: int) -> None:
                    try:
                        os.link(path, tmp)
                    except OSError:  # another file system, or links refused: copy
                        shutil.copyfile(path, tmp)

                return self._publish(link)
            view = memoryview(mmap.mmap(fd, size, access=mmap.ACCESS_READ))
            changes = {spec.name: (offset, spec.nbytes) for spec, offset in zip(listed, offsets)}
            return self._publish(lambda tmp, current: self._write(tmp, current, changes, view))
        finally:
            os.close(fd)

    def _publish(self, fill: Callable[[str, int], None]) -> int:
        """Write the next version with `fill(tmp, current)` under the writers' lock, rename it, publish it.

        Nothing is published when `fill` fails.
        """
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            _remove_orphans(self.directory)
            current = self.version
            new = current + 1
            tmp = os.path.join(self.directory, f".v{new}.{os.getpid()}.tmp")
            try:
                fill(tmp, current)
                os.rename(tmp, os.path.join(self.directory, f"v{new}.bin"))
            except OSError as e:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise InferenceFailure(f"model '{self.model}': writing the new weights failed ({e.strerror})") from e
            self._version[0] = new  # publish: an aligned 8-byte store, seen whole or not at all
            _retire(self.directory, keep_from=current)
            return new
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _write(self, tmp: str, current: int, changes: dict[str, tuple[int, int]], view: memoryview) -> None:
        """The new version file: changed weights from the update, the others copied from `current`."""
        with open(os.path.join(self.directory, f"v{current}.bin"), "rb") as src:
            previous = memoryview(mmap.mmap(src.fileno(), self.size, access=mmap.ACCESS_READ))
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, self.size)
            for spec, offset in zip(self.specs, self.offsets):
                if spec.name in changes:
                    start, n = changes[spec.name]
                    _pwrite_all(fd, view[start : start + n], offset)
                else:
                    _pwrite_all(fd, previous[offset : offset + spec.nbytes], offset)
        finally:
            os.close(fd)  # the old mapping is unmapped when `previous` goes

    def nonce_used(self, nonce: str) -> bool:
        """True when a worker of this model accepted an update proof with this nonce (within the window)."""
        return any(n == nonce for _, n in _proof_rows(_read(os.path.join(self.directory, PROOFS_FILE))))

    def claim_nonce(self, nonce: str, timestamp: int, oldest: float) -> bool:
        """Record an accepted proof's nonce for every worker; False when one recorded it first.

        Entries dated before `oldest` (out of the window: refused anyway) are dropped, and at most
        `MAX_PROOFS` are kept, the newest.
        """
        path = os.path.join(self.directory, PROOFS_FILE)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            rows = _proof_rows(_read(path))
            if any(n == nonce for _, n in rows):
                return False
            rows = sorted([r for r in rows if r[0] >= oldest] + [(timestamp, nonce)])[-MAX_PROOFS:]
            tmp = os.path.join(self.directory, f".{PROOFS_FILE}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with open(fd, "w", encoding="ascii") as f:
                f.write("".join(f"{t} {n}\n" for t, n in rows))
            os.rename(tmp, path)
            return True
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def close(self, *, failed_load: bool = False) -> None:
        """Leave the store; the last worker out removes it, unless the launcher owns it. Safe to call twice.

        Args:
            failed_load: the worker's load failed after it joined. A launcher's store goes too then, when
                the last one out, if it holds only the version 1 this worker wrote: no update to keep,
                and a model that did not load must not leave a store of its weights' size behind.
        """
        if self._lock_fd < 0:
            return
        self._current = None
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._alive_fd, fcntl.LOCK_UN)
            nothing_to_keep = failed_load and self.made and self.version == 1
            if not self.persistent or nothing_to_keep:  # a launcher's store stays until the launcher stops
                try:
                    fcntl.flock(self._alive_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    shutil.rmtree(self.directory, ignore_errors=True)  # nobody else holds it: the last one out
                except BlockingIOError:
                    pass
        finally:
            os.close(self._alive_fd)
            os.close(self._lock_fd)  # releases the lock
            self._lock_fd = self._alive_fd = -1
            del self._version
            self._version_map.close()


def _open_locked(directory: str) -> int:
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


def _adoptable(directory: str, version_fd: int, described: str, size: int) -> bool:
    """True when the store holds a published version of this layout (left by an earlier load or server)."""
    if _read(os.path.join(directory, "layout.json")) != described or os.fstat(version_fd).st_size != 8:
        return False
    version = int(np.frombuffer(os.pread(version_fd, 8, 0), dtype=np.uint64)[0])
    try:
        st = os.stat(os.path.join(directory, f"v{version}.bin"))
    except OSError:
        return False
    return version >= 1 and stat.S_ISREG(st.st_mode) and st.st_size == size


def _reset(
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
            _pwrite_all(fd, np.ascontiguousarray(value, dtype=np.dtype(spec.dtype)).reshape(-1).data.cast("B"), offset)
    finally:
        os.close(fd)
    os.rename(tmp, os.path.join(directory, "v1.bin"))
    fd = os.open(os.path.join(directory, "layout.json"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "w", encoding="utf-8") as f:
        f.write(described)
    os.ftruncate(version_fd, 8)
    os.pwrite(version_fd, np.array([1], dtype=np.uint64).tobytes(), 0)


def _remove_orphans(directory: str) -> None:
    """Remove the temporary files of writers killed mid-write (call under the writers' lock).

    Every temporary file is written under that lock, so one found while holding it has no live writer:
    without this, a worker killed during an update would leave a file of the weights' full size for as
    long as the store lives.
    """
    for name in os.listdir(directory):
        if name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))


def _retire(directory: str, keep_from: int) -> None:
    """Unlink versions older than `keep_from`; workers still mapping one keep it until they remap."""
    for name in os.listdir(directory):
        m = _VERSION_FILE.match(name)
        if m and int(m.group(1)) < keep_from:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))


def _proof_rows(text: str) -> list[tuple[int, str]]:
    rows = []
    for line in text.splitlines():
        stamp, _, nonce = line.partition(" ")
        if stamp.isdigit() and nonce:
            rows.append((int(stamp), nonce))
    return rows


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while data.nbytes:
        n = os.pwrite(fd, data, offset)
        data, offset = data[n:], offset + n


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""
