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

What is done to the directory's files (its name, the version layout, the lock, version 1, sweeping) is
`store_files`'s; an update's manifest and upload file are checked by `weight_update`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import mmap
import os
import shutil
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mslite_contract.protocol import FILE_REFUSED

from . import store_files
from .errors import InferenceFailure, ModelLoadError, RequestError
from .weight_update import checked_entries, parse_update, upload_path
from .weights import WeightSpec

PROOFS_FILE = "proofs"
MAX_PROOFS = 10_000  # accepted proofs remembered per model; a window's worth of updates is far fewer


@dataclass(frozen=True)
class Snapshot:
    """The weights one execute uses: a version and a read-only array per weight."""

    version: int
    arrays: dict[str, np.ndarray]


class WeightStore:
    """One worker's handle on the shared store of its model (see the module docstring)."""

    def __init__(self, directory: str, model: str, specs: tuple[WeightSpec, ...], fds: tuple[int, int, int]) -> None:
        """Use `open`; `fds` are the held `lock` and `alive` files and the `version` file to map."""
        self.directory = directory
        self.model = model
        self.specs = specs
        self.offsets, self.size = store_files.layout(specs)
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
            store_files.sweep_stale(os.path.dirname(directory))
            lock_fd = store_files.open_locked(directory)
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
            store_files.remove_orphans(directory)
            described = json.dumps([[s.name, s.dtype, list(s.shape)] for s in specs])
            if first and not (
                persistent and store_files.adoptable(directory, fds[1], described, store_files.layout(specs)[1])
            ):
                made = True
                store_files.write_first_version(directory, fds[1], described, specs, initial)
            elif store_files.read_text(os.path.join(directory, "layout.json")) != described:
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
        listed = tuple(checked_entries(self.model, manifest, self.specs))
        offsets, size = store_files.layout(listed)
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
            store_files.remove_orphans(self.directory)
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
            store_files.retire(self.directory, keep_from=current)
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
                    store_files.pwrite_all(fd, view[start : start + n], offset)
                else:
                    store_files.pwrite_all(fd, previous[offset : offset + spec.nbytes], offset)
        finally:
            os.close(fd)  # the old mapping is unmapped when `previous` goes

    def nonce_used(self, nonce: str) -> bool:
        """True when a worker of this model accepted an update proof with this nonce (within the window)."""
        return any(n == nonce for _, n in _proof_rows(store_files.read_text(os.path.join(self.directory, PROOFS_FILE))))

    def claim_nonce(self, nonce: str, timestamp: int, oldest: float) -> bool:
        """Record an accepted proof's nonce for every worker; False when one recorded it first.

        Entries dated before `oldest` (out of the window: refused anyway) are dropped, and at most
        `MAX_PROOFS` are kept, the newest.
        """
        path = os.path.join(self.directory, PROOFS_FILE)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            rows = _proof_rows(store_files.read_text(path))
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


def _proof_rows(text: str) -> list[tuple[int, str]]:
    rows = []
    for line in text.splitlines():
        stamp, _, nonce = line.partition(" ")
        if stamp.isdigit() and nonce:
            rows.append((int(stamp), nonce))
    return rows
