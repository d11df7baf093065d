"""Files in /dev/shm named after the process that owns them, and their removal once that process is gone.

Every file or folder this project leaves in /dev/shm is named `<prefix><owner pid>_<rest>` (the prefixes
are protocol.py's):

- CLIENT_REGION_PREFIX: a client's region for shared-memory inputs (client `_transport`);
- GATEWAY_REGION_PREFIX: the gateway's region for the large inputs it stages (gateway `staging`);
- UPLOAD_PREFIX: a client's weights-update file (client `_weights`);
- WEIGHTS_STORE_PREFIX: a model's weights store (`weight_store`), named after the launcher that owns it
  or the tritonserver process.

The python backend's own region of each worker (`<launcher's shm prefix><uuid>`, made by tritonserver and
carrying every request's tensors) is the launcher's to remove; `close_stub_region` takes it away from the
other local users.

Their owners remove them; an owner killed first cannot, so whoever makes new ones calls `sweep_dead_owners`
first, and the launcher's supervisor sweeps the regions of dead clients (after unregistering them from
Triton). A zombie (dead, not yet reaped) counts as gone. A pid reused by another process keeps its dead
owner's files until that process is gone too.

This module imports only the standard library: the client and the launcher import it too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat

from .protocol import CLIENT_REGION_PREFIX, GATEWAY_REGION_PREFIX, SHM_DIR

# the shared-memory regions registered with Triton whose dead owner leaves them behind: the launcher's
# supervisor unregisters them (`region_owner`)
REGION_PREFIXES = (CLIENT_REGION_PREFIX, GATEWAY_REGION_PREFIX)


def owner_pid(name: str, prefix: str) -> int | None:
    """The pid that follows `prefix` in `name` (`<prefix><pid>_...`), or None when `name` is not of that form."""
    if not name.startswith(prefix):
        return None
    pid = name[len(prefix) :].split("_", 1)[0]
    return int(pid) if pid.isascii() and pid.isdigit() else None


def region_owner(name: str) -> int | None:
    """The pid of the process (a client of this library, or the gateway) that created a region, from its name.

    None for any other name.
    """
    for prefix in REGION_PREFIXES:
        pid = owner_pid(name, prefix)
        if pid is not None:
            return pid
    return None


def process_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def sweep_dead_owners(prefix: str, *, root: str = SHM_DIR) -> list[str]:
    """Remove every file or folder in `root` named `<prefix><pid>_...` whose pid is gone; returns their names.

    Names where another word follows `prefix` (`mslite_weights_upload_...` for the prefix `mslite_weights_`)
    are not of the form, and stay.
    """
    dead = []
    for name in _names(root):
        pid = owner_pid(name, prefix)
        if pid is not None and not process_alive(pid):
            dead.append(name)
    return _remove(root, dead)


def remove_prefixed(prefix: str, *, root: str = SHM_DIR) -> list[str]:
    """Remove every file or folder in `root` whose name starts with `prefix` (an owner that is done with them)."""
    return _remove(root, [name for name in _names(root) if name.startswith(prefix)])


def close_stub_region(*, root: str = SHM_DIR) -> str | None:
    """Make this python-backend worker's own region readable and writable by its user only; returns its name.

    Tritonserver creates the region with mode 0644 whatever the umask (its shared-memory library sets the
    mode after creating it), so every local user could read the tensors of each request, unless the launcher
    preloaded its `shm_private` library (which makes it 0600 from its creation): a second lock. The worker
    (stub) is started with the region's name as its second argument and has it open already, so this
    runs before any request can reach it. None (and nothing changed) outside a worker or for a file
    that is not this user's.
    """
    try:
        with open("/proc/self/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return None
    name = args[2].decode(errors="replace") if len(args) > 2 else ""
    if not name or "/" in name or name.startswith("."):
        return None
    try:
        fd = os.open(os.path.join(root, name), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return None
        os.fchmod(fd, 0o600)
        return name
    finally:
        os.close(fd)


def _names(root: str) -> list[str]:
    try:
        return sorted(os.listdir(root))
    except OSError:  # no /dev/shm (or not readable): nothing of ours is there
        return []


def _remove(root: str, names: list[str]) -> list[str]:
    """Remove each entry (another process may remove one first); returns the names of those that went."""
    removed = []
    for name in names:
        path = os.path.join(root, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(name)
            continue
        with contextlib.suppress(OSError):
            os.unlink(path)
            removed.append(name)
    return removed
