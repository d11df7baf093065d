"""One tritonclient connection of the pool (`_transport.Transport`), with the shared-memory region its inputs use.

A connection is used by one thread at a time, so its region needs no lock: it is created on the first request
big enough (`_transport.SHM_MIN_BYTES`), registered with the server, grown by powers of two, and removed with
the connection. A region's file is reserved here before tritonclient attaches to it, so a full /dev/shm is an
error to fall back from (tensors sent inline), not a SIGBUS.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from dataclasses import dataclass
from multiprocessing import resource_tracker
from typing import Any

import tritonclient.utils.shared_memory as sysshm

from mslite_contract.owned_files import sweep_dead_owners
from mslite_contract.protocol import CLIENT_REGION_PREFIX

_region_ids = itertools.count()
log = logging.getLogger(__name__)


@dataclass
class Region:
    """A system shared-memory region registered with the server under `name`."""

    name: str
    handle: Any
    size: int


class Connection:
    """One tritonclient connection, used by one thread at a time, with its own input region."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.region: Region | None = None
        self.shm_failed = False

    def region_for(self, size: int, headers: dict[str, str] | None) -> Region | None:
        """A registered region of at least `size` bytes, or None when shared memory is unusable."""
        if self.shm_failed:
            return None
        if self.region is not None and self.region.size >= size:
            return self.region
        self._release(headers)
        name = f"{CLIENT_REGION_PREFIX}{os.getpid()}_{next(_region_ids)}"
        capacity = max(size, 1 << (size - 1).bit_length())  # grow by powers of two
        try:
            sweep_dead_owners(CLIENT_REGION_PREFIX)  # regions of clients killed before they removed them
            _reserve(name, capacity)
            try:
                handle = sysshm.create_shared_memory_region(name, "/" + name, capacity)
            except Exception:
                os.unlink(f"/dev/shm/{name}")
                raise
            try:
                self.client.register_system_shared_memory(name, "/" + name, capacity, headers=headers)
            except Exception:
                _destroy(name, handle)
                raise
        except Exception as e:  # e.g. a server on another host, or the shm API refused: send inline
            log.info("shared memory unavailable (%s); sending tensors inline", e)
            self.shm_failed = True
            return None
        self.region = Region(name, handle, capacity)
        return self.region

    def forget_region(self) -> None:
        """Drop the region locally without asking the server, which no longer knows it."""
        region, self.region = self.region, None
        if region is not None:
            _destroy(region.name, region.handle)

    def _release(self, headers: dict[str, str] | None) -> None:
        region, self.region = self.region, None
        if region is None:
            return
        try:
            self.client.unregister_system_shared_memory(region.name, headers=headers)
        except Exception:  # the server may be gone; the local region is removed regardless
            pass
        _destroy(region.name, region.handle)

    def close(self, headers: dict[str, str] | None) -> None:
        self._release(headers)
        _close(self.client)


def _destroy(name: str, handle: Any) -> None:
    """Unmap a region and remove its file.

    `_reserve` creates the file, so tritonclient only attaches to it: it never unlinks it, and Python's
    resource tracker, which registers every attach, would report it leaked at exit (and only then remove
    it). The file goes now, and the tracker forgets it.
    """
    tracked = getattr(getattr(handle, "_mpsm_handle", None), "_name", None)  # the name the tracker holds
    sysshm.destroy_shared_memory_region(handle)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(f"/dev/shm/{name}")
    if tracked:
        with contextlib.suppress(Exception):
            resource_tracker.unregister(tracked, "shared_memory")


def _reserve(name: str, size: int) -> None:
    """Create `/dev/shm/<name>` with `size` bytes allocated now.

    tmpfs allocates pages on first write: a region only truncated to size would be written with /dev/shm
    full and kill this process with SIGBUS. Reserved here, a full /dev/shm is an OSError (ENOSPC) instead,
    and the caller sends inline. tritonclient then opens the existing file.

    Raises:
        OSError: the file exists, or the space is not there (nothing is left behind).
    """
    path = f"/dev/shm/{name}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError:
        os.unlink(path)
        raise
    finally:
        os.close(fd)


def _close(client: Any) -> None:
    try:
        client.close()
    except Exception:  # closing a broken connection may raise anything; it is being dropped anyway
        pass
