"""The cache of built models (no server): whose entries are used, and what the bound removes."""

from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from mslite_contract import mindir, settings
from mslite_contract.build_cache import ensure_built, evict

FORK = multiprocessing.get_context("fork")
OTHER_UID = 1001
as_root = pytest.mark.skipif(os.getuid() != 0, reason="planting another user's files needs root (chown)")


def _writes(text: str, size: int = 0) -> Any:
    def build(out: str) -> None:
        Path(out, "model.onnx").write_text(text)
        if size:
            Path(out, "model.onnx.data").write_bytes(os.urandom(size))

    return build


def _plant(root: Path, key: str, text: str, *, uid: int | None = None, mode: int = 0o644) -> Path:
    entry = root / key
    entry.mkdir(parents=True, exist_ok=True)
    model = entry / "model.onnx"
    model.write_text(text)
    model.chmod(mode)
    if uid is not None:
        os.chown(entry, uid, uid)
        os.chown(model, uid, uid)
    return model


@as_root
def test_an_entry_planted_by_another_user_is_never_used(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    _plant(root, "k", "planted", uid=OTHER_UID)
    path = ensure_built(str(root), "k", _writes("ours"))
    assert Path(path).read_text() == "ours" and os.stat(Path(path).parent).st_uid == os.getuid()
    assert sorted(os.listdir(root)) == ["k", "k.lock"]  # the planted entry is gone, not kept aside


@as_root
def test_a_planted_mindir_conversion_is_not_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "v" / "model.mindir"
    model.parent.mkdir()
    model.write_bytes(b"a MindIR file")
    monkeypatch.setenv(settings.WEIGHTS_CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(mindir, "run_converter", lambda src, dst: Path(dst).write_bytes(b"converted by us"))
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    _plant(root, "mindir-" + mindir.cache_key(str(model)), "answers 1337.0", uid=OTHER_UID)
    assert Path(mindir.convert_cached(str(model))).read_bytes() == b"converted by us"


@pytest.mark.parametrize("mode", [0o664, 0o646])
def test_an_entry_others_may_write_to_is_built_again(tmp_path: Path, mode: int) -> None:
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    _plant(root, "k", "writable by others", mode=mode)
    assert Path(ensure_built(str(root), "k", _writes("ours"))).read_text() == "ours"


@as_root
def test_a_root_of_another_user_is_refused_naming_the_setting(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir(mode=0o777)
    os.chown(root, OTHER_UID, OTHER_UID)
    with pytest.raises(PermissionError, match=settings.WEIGHTS_CACHE_ENV):
        ensure_built(str(root), "k", _writes("ours"))
    assert os.listdir(root) == []


def test_a_root_of_ours_open_to_others_is_closed_before_use(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    root.chmod(0o777)
    ensure_built(str(root), "k", _writes("ours"))
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
    assert not os.stat(root / "k").st_mode & 0o022


def _build_and_exit(root: str, key: str, size: int) -> None:
    ensure_built(root, key, _writes(key, size), timeout_s=30)


def _build_and_hold(root: str, key: str, size: int, ready: Any, done: Any) -> None:
    ensure_built(root, key, _writes(key, size), timeout_s=30)
    ready.set()
    done.wait(60)


def _in_child(target: Any, *args: Any) -> None:
    p = FORK.Process(target=target, args=args)
    p.start()
    p.join(60)
    assert p.exitcode == 0


def test_the_bound_removes_least_recently_used_entries_nobody_holds(tmp_path: Path) -> None:
    root, mib = str(tmp_path / "cache"), 1 << 20
    ready, done = FORK.Event(), FORK.Event()
    holder = FORK.Process(target=_build_and_hold, args=(root, "held", mib, ready, done))
    holder.start()  # the oldest entry, in use by a live worker
    try:
        assert ready.wait(60)
        for key in ("old", "used", "recent"):
            _in_child(_build_and_exit, root, key, mib)
            os.utime(Path(root, key), (1, 1) if key == "old" else None)
        _in_child(_build_and_exit, root, "used", mib)  # used again: now more recent than "recent"
        os.utime(Path(root, "held"), (0, 0))
        assert sorted(evict(root, int(2.5 * mib))) == ["old", "recent"]
        assert sorted(n for n in os.listdir(root) if not n.endswith(".lock")) == ["held", "used"]
    finally:
        done.set()
        holder.join(60)
    assert evict(root, 1) == ["held", "used"]  # its worker has exited: nothing is held now


def test_a_build_applies_the_configured_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = str(tmp_path / "cache")
    _in_child(_build_and_exit, root, "first", 1 << 20)
    monkeypatch.setenv(settings.CACHE_MAX_BYTES_ENV, str(1 << 20))
    path = ensure_built(root, "second", _writes("second", 1 << 19))
    assert sorted(n for n in os.listdir(root) if not n.endswith(".lock")) == ["second"]
    assert Path(path).read_text() == "second"
    monkeypatch.setenv(settings.CACHE_MAX_BYTES_ENV, "2GB")
    with pytest.raises(ValueError, match=f"{settings.CACHE_MAX_BYTES_ENV} must be a number of bytes"):
        ensure_built(root, "third", _writes("third"))


def test_an_entry_built_under_a_loose_umask_is_trusted(tmp_path: Path) -> None:
    old = os.umask(0o002)
    try:
        path = ensure_built(str(tmp_path / "cache"), "k", _writes("ours"))
    finally:
        os.umask(old)
    assert not os.stat(path).st_mode & 0o022
    assert ensure_built(str(tmp_path / "cache"), "k", _writes("again")) == path
    assert Path(path).read_text() == "ours"  # used, not built again


def _use_and_hold(root: str, waiting: Any, release: Any, results: Any) -> None:
    """A worker: the model from the cache (building it if first), then the entry held until `release`.

    `waiting` is set once it has found no entry and been refused the exclusive lock, the state the test needs
    both workers in: this forked worker's `fcntl.flock` tells it, since the cache polls without blocking.
    """
    import fcntl

    flock = fcntl.flock

    def watched(fd: int, operation: int) -> None:
        try:
            flock(fd, operation)
        except BlockingIOError:
            if operation & fcntl.LOCK_EX:
                waiting.set()
            raise

    fcntl.flock = watched
    try:
        path = ensure_built(root, "k", _writes(f"built by {os.getpid()}"), timeout_s=10)
        results.put(("ok", os.getpid(), Path(path).read_text()))
    except Exception as e:  # noqa: BLE001 - the test reports what the worker met
        results.put(("error", os.getpid(), repr(e)))
    release.wait(30)


def test_workers_that_found_no_entry_together_do_not_wait_for_the_builder_to_exit(tmp_path: Path) -> None:
    # Both take the lock shared while another holder (this test) keeps anyone from building, both find no
    # entry, both wait for the exclusive lock; the first builds and then holds the entry shared for its life.
    # The second must use the entry, not wait for the builder to exit (it waited until the time-out before).
    import fcntl

    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    lock = os.open(root / "k.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_SH)
    release, results = FORK.Event(), FORK.Queue()
    waiting = [FORK.Event(), FORK.Event()]
    workers = [FORK.Process(target=_use_and_hold, args=(str(root), w, release, results)) for w in waiting]
    try:
        for w in workers:
            w.start()
        for w in waiting:  # however slow the machine: both past the look for an entry, refused the build
            assert w.wait(60), "a worker never waited for the exclusive lock"
        fcntl.flock(lock, fcntl.LOCK_UN)
        found = [results.get(timeout=8) for _ in workers]  # before: the second, a TimeoutError after 10 s
        assert [f[0] for f in found] == ["ok", "ok"], found
        assert found[0][2] == found[1][2]  # one build, used by both
    finally:
        release.set()
        for w in workers:
            w.join(10)
        os.close(lock)
