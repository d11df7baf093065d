"""Shared-memory regions that are this user's alone from the instant they exist: tritonserver's `LD_PRELOAD`.

The python backend (in tritonserver, and its stubs) makes each region with Boost.Interprocess, which creates
it under the umask (0600 under the launcher's 077) and then sets its mode with `fchmod(fd, 0644)`, whatever the
umask: every local account could open it, and a descriptor opened then stays valid after a later chmod.
The small library below, preloaded into tritonserver (its stubs inherit the environment), takes the group's
and others' bits out of every `fchmod`, `chmod` and `fchmodat` of a file in /dev/shm, so the regions of every
model, ours and plain `backend: "python"` ones alike, are 0600 throughout. Triton only opens the regions
clients and the gateway register (it never changes their mode), so those work as before.

The library is compiled with the machine's C compiler (`cc`, else `gcc`) into the per-user build cache
(`build_cache`: this user's, nobody else's to write, kept while a launcher uses it), keyed by its source, the
first time a launcher starts a server. Where no compiler exists, `settings.SHM_PRELOAD_ENV` names a library built
elsewhere (the container image sets it); with neither, the launcher logs once that the window stays open.

Run as a script, `python shm_private.py OUT` compiles the library to OUT (the container image's build stage).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys

from mslite_contract.build_cache import ensure_built
from mslite_contract.settings import SHM_PRELOAD_ENV, shared_cache_root

log = logging.getLogger(__name__)

LIBRARY = "libmslite_shm_private.so"
COMPILE_TIMEOUT_S = 120.0
_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* a file in /dev/shm (or below), not the folder itself */
static int shm_file(const char *path) { return strncmp(path, "/dev/shm/", 9) == 0 && path[9] != 0; }

/* the path of descriptor `fd` (AT_FDCWD: the working directory) into `buf`, or "" */
static const char *path_of(int fd, char *buf, size_t size) {
    char link[64];
    ssize_t n = -1;
    if (fd == AT_FDCWD) return getcwd(buf, size) ? buf : "";
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, buf, size - 1);
    buf[n > 0 ? n : 0] = 0;
    return buf;
}

/* whether `path`, relative to `dirfd` unless absolute, names a file in /dev/shm */
static int in_shm(int dirfd, const char *path) {
    char buf[4096];
    const char *dir;
    if (path == NULL || path[0] == 0) return 0;
    if (path[0] == '/') return shm_file(path);
    if (strcmp(path, ".") == 0 || strncmp(path, "..", 2) == 0) return 0;
    dir = path_of(dirfd, buf, sizeof buf);
    return strcmp(dir, "/dev/shm") == 0 || shm_file(dir);
}

/* whether descriptor `fd` is a file in /dev/shm */
static int fd_in_shm(int fd) {
    char buf[4096];
    return shm_file(path_of(fd, buf, sizeof buf));
}

int fchmod(int fd, mode_t mode) {
    static int (*next)(int, mode_t);
    if (!next) next = (int (*)(int, mode_t))dlsym(RTLD_NEXT, "fchmod");
    return next(fd, fd_in_shm(fd) ? mode & ~(mode_t)077 : mode);
}

int chmod(const char *path, mode_t mode) {
    static int (*next)(const char *, mode_t);
    if (!next) next = (int (*)(const char *, mode_t))dlsym(RTLD_NEXT, "chmod");
    return next(path, in_shm(AT_FDCWD, path) ? mode & ~(mode_t)077 : mode);
}

int fchmodat(int dirfd, const char *path, mode_t mode, int flags) {
    static int (*next)(int, const char *, mode_t, int);
    if (!next) next = (int (*)(int, const char *, mode_t, int))dlsym(RTLD_NEXT, "fchmodat");
    return next(dirfd, path, in_shm(dirfd, path) ? mode & ~(mode_t)077 : mode, flags);
}
"""
_FLAGS = ["-O2", "-shared", "-fPIC", "-Wall", "-x", "c", "-", "-ldl"]
_warned = False


def compiler() -> str | None:
    """The machine's C compiler (`cc`, else `gcc`), or None."""
    return shutil.which("cc") or shutil.which("gcc")


def compile_to(out: str, cc: str) -> None:
    """Compile the library to `out` with `cc`.

    Raises:
        subprocess.CalledProcessError, subprocess.TimeoutExpired: the compiler failed (its message in `stderr`).
    """
    subprocess.run(
        [cc, *_FLAGS, "-o", out], input=_SOURCE.encode(), capture_output=True, check=True, timeout=COMPILE_TIMEOUT_S
    )


def preload_library() -> str | None:
    """The library's path, built into the build cache (or named by `SHM_PRELOAD_ENV`); None, logged once, if none."""
    given = os.environ.get(SHM_PRELOAD_ENV)
    if given:
        return given
    cc = compiler()
    error = "no C compiler (cc or gcc) on PATH"
    if cc is not None:
        key = "shm-private-" + hashlib.sha256(_SOURCE.encode() + os.uname().machine.encode()).hexdigest()[:16]
        try:
            return ensure_built(
                shared_cache_root(), key, lambda d: compile_to(os.path.join(d, LIBRARY), cc), filename=LIBRARY
            )
        except (OSError, subprocess.SubprocessError, TimeoutError) as e:
            stderr = getattr(e, "stderr", b"") or b""
            error = f"{cc} failed: {e} {stderr.decode(errors='replace')[-500:]}".strip()
    global _warned
    if not _warned:
        _warned = True
        log.warning(
            "the python backend's shared-memory regions are made 0644 and closed to 0600 only later "
            "(%s; %s names a library built elsewhere)",
            error,
            SHM_PRELOAD_ENV,
        )
    return None


def with_private_shm(env: dict[str, str]) -> dict[str, str]:
    """`env` with the library first in `LD_PRELOAD` (unchanged when there is none)."""
    library = preload_library()
    if library is not None:
        env["LD_PRELOAD"] = library + (" " + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    return env


if __name__ == "__main__":  # the container image's build stage
    compile_to(sys.argv[1], compiler() or "cc")
