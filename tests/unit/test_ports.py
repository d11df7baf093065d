"""Port probing of the launcher: a port is taken only while something listens on it."""

from __future__ import annotations

import socket

import pytest

from mslite_server.errors import ServerStartError
from mslite_server.ports import pick_ports


def _time_wait_port() -> int:
    """A loopback port whose only trace is a connection in TIME_WAIT (its server closed first, then went)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = int(listener.getsockname()[1])
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = listener.accept()
    conn.close()  # the side that closes first keeps the port in TIME_WAIT for a minute
    client.close()
    listener.close()
    return port


def test_a_port_left_in_time_wait_by_a_dead_server_can_be_taken_again() -> None:
    port = _time_wait_port()
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with pytest.raises(OSError):  # what a plain bind (the old probe) says for the next minute
        probe.bind(("127.0.0.1", port))
    probe.close()
    assert pick_ports([("127.0.0.1", port, "http")]) == [port]


def test_a_port_something_listens_on_is_refused_by_name() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = int(listener.getsockname()[1])
        with pytest.raises(ServerStartError, match=f"http port {port} on 127.0.0.1 is already in use"):
            pick_ports([("127.0.0.1", port, "http")])
