"""The embedded server's ports: picked free (or checked free) before start, probed for readiness after."""

from __future__ import annotations

import socket

from mslite_triton.errors import ServerStartError

LOOPBACK = "127.0.0.1"


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


def accepts(host: str, port: int) -> bool:
    """True when something accepts TCP connections on host:port (the gRPC endpoint starts on its own)."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False
