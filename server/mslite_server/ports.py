"""A local server's ports: picked free (or checked free) before start, found held by it (or by another) after."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from mslite_server.errors import ServerStartError

LOOPBACK = "127.0.0.1"
_LISTEN = "0A"  # a listening socket's state in /proc/net/tcp
_ACCEPTING = 0x10000  # __SO_ACCEPTCON in /proc/net/unix's flags: a listening socket


class PortTakenError(ServerStartError):
    """A (re)start failed because another process holds one of the server's public TCP ports."""


def pick_ports(wanted: list[tuple[str, int, str]]) -> list[int]:
    """For each (host, port, what): `port`, or a free one when it is 0; raise naming a port that is taken.

    Every socket stays bound until all are picked, so two free ports are never the same one. The probe
    binds as the servers do, with SO_REUSEADDR (Triton's HTTP and gRPC fronts and the gateway all set it):
    the connections of a server that just died linger in TIME_WAIT on its port for a minute, and only a
    listener makes the port really taken.

    Raises:
        ServerStartError: a port asked for is in use, naming it and the option that chooses another.
    """
    held: list[socket.socket] = []
    try:
        for host, port, what in wanted:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError as e:
                raise ServerStartError(
                    f"{what} port {port} on {host} is already in use (held by {holder_of(port)}); choose another "
                    f"with --{what}-port"
                ) from e
        return [int(s.getsockname()[1]) for s in held]
    finally:
        for s in held:
            s.close()


def _socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets process `pid` holds open, from its /proc fd links."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return set()
    inodes = set()
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process `pid` listens on (any address, IPv4 or IPv6), from /proc.

    A port that answers need not be the server's: another process may have taken it between its pick and
    the server's bind (a second test run, a client's outgoing connection), and would answer in its place.
    """
    inodes = _socket_inodes(pid)
    return {port for port, inode in _tcp_listeners(f"/proc/{pid}/net") if inode in inodes}


def listening_unix_paths(pid: int) -> set[str]:
    """The paths of the Unix sockets process `pid` listens on, from /proc.

    A socket file that answers was bound by a process that could write its folder; this says it is `pid`.
    """
    inodes = _socket_inodes(pid)
    try:
        lines = Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]
    except OSError:
        return set()
    paths = set()
    for line in lines:
        fields = line.split(maxsplit=7)  # Num RefCount Protocol Flags Type St Inode [Path]
        if len(fields) == 8 and int(fields[3], 16) & _ACCEPTING and fields[6] in inodes:
            paths.add(fields[7])
    return paths


def holder_of(port: int) -> str:
    """Who listens on TCP `port` on this host, as far as /proc tells: "pid N (name)", or why it cannot say."""
    inodes = {inode for p, inode in _tcp_listeners("/proc/net") if p == port}
    if not inodes:
        return "no listener found (a port held in TIME_WAIT, or bound but not listening)"
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and _socket_inodes(int(proc.name)) & inodes:
            try:
                name = (proc / "comm").read_text().strip()
            except OSError:
                name = "?"
            return f"pid {proc.name} ({name})"
    return "a process this user cannot inspect (another user's)"


def holders(ports: list[int], ours: set[int]) -> str:
    """Who holds each of `ports` that someone other than processes `ours` listens on, for a failed start's message."""
    own = set().union(*(listening_ports(pid) for pid in ours))  # a holder found there is no squatter
    held = [f"port {p} on this host is held by {holder_of(p)}" for p in ports if p and p not in own]
    return "; ".join(held) or "(no listener on the server's public ports now)"


def _tcp_listeners(net: str) -> list[tuple[int, str]]:
    """(port, inode) of every listening TCP socket in the `/proc/.../net` folder `net`, IPv4 and IPv6."""
    found = []
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"{net}/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()  # sl local_address rem_address st ... inode (the 10th)
            if fields[3] == _LISTEN:
                found.append((int(fields[1].rpartition(":")[2], 16), fields[9]))
    return found
