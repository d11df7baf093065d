"""What the kernel says of a loopback TCP connection, for tests that must know where sent bytes are."""

from __future__ import annotations

import fcntl
import socket
import struct
import termios
import time
from pathlib import Path


def unsent_bytes(sock: socket.socket) -> int:
    """Bytes written to `sock` that the peer's kernel has not acknowledged yet (SIOCOUTQ)."""
    return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0])


def peer_unread_bytes(sock: socket.socket) -> int | None:
    """Bytes of `sock`'s loopback connection waiting in the peer socket's receive queue (None: not found)."""
    ours, theirs = sock.getsockname()[1], sock.getpeername()[1]
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            local_port, remote_port = int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16)
            if local_port == theirs and remote_port == ours:
                return int(fields[4].split(":")[1], 16)  # tx_queue:rx_queue
    return None


def wait_until_taken(sock: socket.socket, timeout_s: float = 30.0) -> None:
    """Wait until the process at the other end of loopback `sock` has read every byte sent on it.

    Raises:
        TimeoutError: bytes are still queued in either kernel after `timeout_s`.
    """
    deadline = time.monotonic() + timeout_s
    while unsent_bytes(sock) or peer_unread_bytes(sock) != 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{unsent_bytes(sock)} bytes unsent, {peer_unread_bytes(sock)} unread by the peer")
        time.sleep(0.01)


def http_answer(sock: socket.socket) -> bytes:
    """One HTTP/1.1 answer read from `sock`: its head and its Content-Length body (less if the peer closes)."""
    data = b""
    while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + _content_length(data):
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    return data


def _content_length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0
