"""The admin key's files: the local server writes them, every client (Python, C++, Java) reads them.

The key guards model control, shared memory, logging and trace on both protocols. A local server generates
one key per start and writes it, mode 0600, to
`<key dir>/<host>_<port>.key` for its HTTP and its gRPC port; the key dir is `settings.KEY_DIR_ENV`
or `~/.mslite-triton/keys`. Clients send it in the `mslite-key` header (gRPC metadata), taken from
`settings.ADMIN_KEY_ENV` or from the key file of the URL's host and port.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from urllib.parse import urlparse

from . import settings


def key_dir() -> Path:
    """Where key files live."""
    return settings.key_dir()


def key_path(host: str, port: int) -> Path:
    """The key file of one server endpoint."""
    return key_dir() / f"{host}_{port}.key"


def new_key() -> str:
    """A fresh random key."""
    return secrets.token_urlsafe(24)


def write_key(key: str, host: str, ports: list[int]) -> list[Path]:
    """Write `key` to the key file of each port, readable by the owner only; returns the files."""
    directory = key_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    written = []
    for port in ports:
        path = key_path(host, port)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key + "\n")
        os.chmod(path, 0o600)
        written.append(path)
    return written


def remove_key(paths: list[Path], key: str) -> None:
    """Remove the key files among `paths` that still hold `key` (another server may have its port now)."""
    for path in paths:
        try:
            if path.read_text().strip() == key:
                path.unlink()
        except OSError:
            pass


def key_for(url: str) -> str | None:
    """The key to send to `url`: `settings.ADMIN_KEY_ENV`, else the key file of its host and port, else None.

    A key file outlives a server killed abruptly, and its port may then be another account's: a key from a
    file goes only to a loopback port on which every listener belongs to the file's owner (`listener_uids`),
    never to another host and never to a port nobody (or somebody else) listens on.
    """
    env = settings.admin_key()
    if env:
        return env
    parsed = urlparse(url)
    if not parsed.hostname or not parsed.port or parsed.hostname not in _LOOPBACK:
        return None
    for host in {parsed.hostname, "127.0.0.1" if parsed.hostname == "localhost" else parsed.hostname}:
        try:
            with open(key_path(host, parsed.port)) as f:
                owner, key = os.fstat(f.fileno()).st_uid, f.read().strip()
        except OSError:
            continue
        if key and listener_uids(parsed.port) == {owner}:
            return key
    return None


_LOOPBACK = {"localhost", "127.0.0.1", "::1"}
_LISTEN = "0A"  # the state column of a listening socket in /proc/net/tcp
_REACHES_LOOPBACK = {  # local addresses (as /proc/net/tcp* writes them) a connection to loopback may reach
    "0100007F",  # 127.0.0.1
    "00000000",  # 0.0.0.0
    "00000000000000000000000001000000",  # ::1
    "00000000000000000000000000000000",  # ::
    "0000000000000000FFFF00000100007F",  # ::ffff:127.0.0.1
}


def listener_uids(port: int) -> set[int]:
    """The accounts owning a socket that listens on `port` at a loopback or wildcard address.

    Read from Linux's /proc/net/tcp and tcp6; empty where they cannot be read.
    """
    uids = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 8 or fields[3] != _LISTEN:
                continue
            address, _, hex_port = fields[1].partition(":")
            if int(hex_port, 16) == port and address.upper() in _REACHES_LOOPBACK:
                uids.add(int(fields[7]))
    return uids
