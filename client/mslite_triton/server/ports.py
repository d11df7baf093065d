"""The embedded server's ports: picked free (or checked free) before start, found held by the server after."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from mslite_triton.errors import ServerStartError

LOOPBACK = "127.0.0.1"
_LISTEN = "0A"  # a listening socket's state in /proc/net/tcp


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
                    f"{what} port {port} on {host} is already in use; choose another with --{what}-port"
                ) from e
        return [int(s.getsockname()[1]) for s in held]
    finally:
        for s in held:
            s.close()


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process `pid` listens on (any address, IPv4 or IPv6), from /proc.

    A port that answers need not be the server's: another process may have taken it between its pick and
    the server's bind (a second test run, a client's outgoing connection), and would answer in its place.
    """
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
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()  # sl local_address rem_address st ... inode (the 10th)
            if fields[3] == _LISTEN and fields[9] in inodes:
                ports.add(int(fields[1].rpartition(":")[2], 16))
    return ports
