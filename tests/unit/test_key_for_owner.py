"""`key_for` sends a key file's key only to a loopback port whose listeners all belong to the file's owner."""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
from pathlib import Path

import pytest

from mslite_contract import admin_key, settings

OTHER = "mslite_keygateway"  # an account of this test's own
_PYTHON = "/usr/bin/python3"


@pytest.fixture(autouse=True)
def _key_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.KEY_DIR_ENV, str(tmp_path / "keys"))
    monkeypatch.delenv(settings.ADMIN_KEY_ENV, raising=False)


def test_a_key_goes_to_a_port_this_account_listens_on():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        admin_key.write_key("the-key", "127.0.0.1", [port])
        assert admin_key.key_for(f"http://127.0.0.1:{port}") == "the-key"
        assert admin_key.key_for(f"grpc://localhost:{port}") == "the-key"


def test_a_dead_servers_key_file_sends_nothing():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
    admin_key.write_key("the-key", "127.0.0.1", [port])  # its server is gone: nobody listens
    assert admin_key.key_for(f"http://127.0.0.1:{port}") is None


def test_a_key_file_sends_nothing_to_another_host():
    admin_key.write_key("the-key", "192.0.2.1", [8000])
    assert admin_key.key_for("http://192.0.2.1:8000") is None


def test_the_environments_key_is_the_callers_choice(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(settings.ADMIN_KEY_ENV, "from-env")
    assert admin_key.key_for("http://192.0.2.1:8000") == "from-env"


def _other_account() -> tuple[int, int]:
    if os.geteuid() != 0 or not Path(_PYTHON).exists():
        pytest.skip("needs root (to start a process as another account) and /usr/bin/python3")
    try:
        entry = pwd.getpwnam(OTHER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER], check=False)
        try:
            entry = pwd.getpwnam(OTHER)
        except KeyError:
            pytest.skip("useradd could not create the test's account")
    return entry.pw_uid, entry.pw_gid


def test_a_port_another_account_took_gets_no_key():
    uid, gid = _other_account()
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    admin_key.write_key("the-key", "127.0.0.1", [port])  # the owner's server died; another account binds

    def drop() -> None:
        os.setgid(gid)
        os.setuid(uid)

    source = (
        "import socket, sys; s = socket.create_server(('127.0.0.1', int(sys.argv[1]))); print('up', flush=True); "
        "sys.stdin.read()"
    )
    squatter = subprocess.Popen(
        [_PYTHON, "-I", "-c", source, str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=drop,  # noqa: PLW1509 - a test's child, no threads at stake
        cwd="/",
    )
    try:
        assert squatter.stdout is not None and squatter.stdout.readline().strip() == "up"
        assert admin_key.listener_uids(port) == {uid}
        assert admin_key.key_for(f"http://127.0.0.1:{port}") is None
    finally:
        squatter.kill()
        squatter.wait(timeout=30)
