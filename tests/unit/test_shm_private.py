"""The `shm_private` library: built once into the build cache, and what it changes in the processes it is in."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from mslite_contract.settings import SHM_PRELOAD_ENV, WEIGHTS_CACHE_ENV
from mslite_server import shm_private

needs_cc = pytest.mark.skipif(shm_private.compiler() is None, reason="no C compiler on this machine")

# Makes one file in /dev/shm and one in `argv[1]` 0600, asks for 0644 in three ways, prints the modes they get.
_CHMODS = """
import os, stat, sys
shm, other = f"/dev/shm/{sys.argv[2]}", os.path.join(sys.argv[1], "plain")
modes = []
try:
    for path in (shm, other):
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        os.fchmod(fd, 0o644)
        modes.append(stat.S_IMODE(os.fstat(fd).st_mode))
        os.close(fd)
        os.chmod(path, 0o664)
        modes.append(stat.S_IMODE(os.stat(path).st_mode))
    shm_dir = os.open("/dev/shm", os.O_RDONLY)
    os.chmod(sys.argv[2], 0o644, dir_fd=shm_dir)
    modes.append(stat.S_IMODE(os.stat(shm).st_mode))
finally:
    os.unlink(shm)
print(" ".join(oct(m) for m in modes))
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv(WEIGHTS_CACHE_ENV, str(root))
    monkeypatch.delenv(SHM_PRELOAD_ENV, raising=False)
    return root


@needs_cc
def test_the_library_is_built_once_into_the_cache_and_takes_group_and_other_bits_in_dev_shm_only(
    cache: Path, tmp_path: Path
) -> None:
    library = shm_private.preload_library()
    assert library is not None and Path(library).parent.parent == cache
    built = os.stat(library)
    assert built.st_uid == os.getuid() and not built.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    assert shm_private.preload_library() == library and os.stat(library).st_mtime_ns == built.st_mtime_ns
    env = shm_private.with_private_shm({**os.environ, "LD_PRELOAD": "libc.so.6"})
    assert env["LD_PRELOAD"] == f"{library} libc.so.6"  # ours first, the caller's kept
    name = f"mslite_test_shm_private_{uuid.uuid4().hex}"
    out = subprocess.run(
        [sys.executable, "-c", _CHMODS, str(tmp_path), name], env=env, capture_output=True, text=True, check=True
    )
    # /dev/shm: fchmod, chmod and fchmodat all give 0600; elsewhere the modes asked for
    assert out.stdout.split() == ["0o600", "0o600", "0o644", "0o664", "0o600"], out.stderr


def test_a_library_named_by_the_setting_is_used_as_it_is(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SHM_PRELOAD_ENV, "/opt/lib/libmslite_shm_private.so")
    assert shm_private.with_private_shm({})["LD_PRELOAD"] == "/opt/lib/libmslite_shm_private.so"
    assert not cache.exists()


def test_without_a_compiler_the_environment_is_unchanged_and_the_launcher_says_so_once(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no cc, no gcc
    monkeypatch.setattr(shm_private, "_warned", False)
    with caplog.at_level(logging.WARNING, logger=shm_private.__name__):
        assert shm_private.with_private_shm({"A": "1"}) == {"A": "1"}
        assert shm_private.with_private_shm({}) == {}
    warnings = [r.getMessage() for r in caplog.records if r.name == shm_private.__name__]
    assert len(warnings) == 1 and "no C compiler" in warnings[0] and SHM_PRELOAD_ENV in warnings[0], warnings
