"""A local process that tries to take the server's place: it binds TCP ports the moment they are free, records
every byte sent to them, and tries tritonserver's Unix sockets. Run as another user where the tests can.

The process runs `SOURCE` (standard library only, so that another user's interpreter can run it with `-I`). It
prints `waiting` once it has tried the sockets and begins to wait for the ports, one JSON line once it holds
every port it was given, then serves until its stdin closes, and then prints what it saw:
`{"bound": [...], "sockets": {path: outcome}, "received": "..."}`.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path
from typing import Any

SOURCE = r"""
import json, socket, sys, threading, time
ports, sockets, patience_s = json.loads(sys.argv[1])
received, lock = [], threading.Lock()

def outcome(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        return "connected: " + s.recv(64).decode("latin-1")
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()

tried = {p: outcome(p) for p in sockets}
print("waiting", flush=True)
listeners, deadline = {}, time.monotonic() + patience_s
while len(listeners) < len(ports) and time.monotonic() < deadline:
    for port in ports:
        if port in listeners:
            continue
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen(64)
            listeners[port] = s
        except OSError:
            s.close()
    time.sleep(0.001)

def keep(conn):
    while True:
        try:
            data = conn.recv(65536)
        except OSError:
            return
        if not data:
            return
        with lock:
            received.append(data)

def serve(s):
    while True:
        try:
            conn, _ = s.accept()
        except OSError:
            return
        threading.Thread(target=keep, args=(conn,), daemon=True).start()

for s in listeners.values():
    threading.Thread(target=serve, args=(s,), daemon=True).start()
print(json.dumps({"bound": sorted(listeners)}), flush=True)
sys.stdin.read()
for path in sockets:
    tried[path + " (after)"] = outcome(path)
with lock:
    data = b"".join(received).decode("latin-1")
print(json.dumps({"bound": sorted(listeners), "sockets": tried, "received": data}), flush=True)
"""

NOBODY = "nobody"
_OTHER_PYTHON = "/usr/bin/python3"  # an interpreter another user may run (the venv's may lie under /root)


def other_user() -> tuple[int, int] | None:
    """(uid, gid) of `nobody` when this process may start processes as them (root) and they can run Python."""
    if os.geteuid() != 0 or not Path(_OTHER_PYTHON).exists():
        return None
    try:
        entry = pwd.getpwnam(NOBODY)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


class Squatter:
    """The squatting process: `waiting()` for the ports, `taken()` once it holds them, `report()` when done."""

    def __init__(self, ports: list[int], sockets: list[str], *, patience_s: float = 20.0, as_other_user: bool) -> None:
        user = other_user() if as_other_user else None
        self.other_user = user is not None
        python = _OTHER_PYTHON if user is not None else sys.executable

        def drop() -> None:  # in the child, before it runs: nobody's ids
            assert user is not None
            os.setgid(user[1])
            os.setuid(user[0])

        self.process = subprocess.Popen(
            [python, "-I", "-c", SOURCE, json.dumps([ports, sockets, patience_s])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=drop if user is not None else None,  # noqa: PLW1509 - a test's child, no threads at stake
            cwd="/",
        )

    @property
    def pid(self) -> int:
        """Its process id."""
        return self.process.pid

    def waiting(self) -> None:
        """Wait until it has tried the sockets and waits for its ports (call before freeing them)."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.strip() == "waiting", f"the squatter died or said {line!r}"

    def taken(self) -> list[int]:
        """Wait until it holds its ports (or gave up on some): the ports it holds. After `waiting()`."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, "the squatter died"
        return list(json.loads(line)["bound"])

    def report(self) -> dict[str, Any]:
        """Let it go; what it saw (`bound`, `sockets`, `received`)."""
        out, _ = self.process.communicate(timeout=30)
        return dict(json.loads(out.strip().splitlines()[-1]))

    def kill(self) -> None:
        """End it, whatever it does."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
