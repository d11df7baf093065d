"""Tests' way around the gateway to tritonserver's own endpoints, to compare what Triton itself answers.

Behind the gateway those are Unix sockets (`TritonEndpoints`): tritonclient's gRPC client reaches them as
they are, but its HTTP client and this library's `Context.server_url` speak TCP only, so those tests go
through a loopback bridge of their own that forwards each connection to the socket. Without the gateway
both are the server's TCP ports.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

from mslite_server import LocalServer

_bridges: dict[Path, int] = {}
_lock = threading.Lock()


def grpc_address(server: LocalServer) -> str:
    """tritonserver's own gRPC endpoint, as tritonclient's gRPC client takes it (`unix:PATH` or `host:port`)."""
    return server.triton_endpoints.grpc_address


def http_address(server: LocalServer) -> str:
    """`127.0.0.1:port` where tritonserver's own HTTP endpoint answers (a bridge to its socket behind a gateway)."""
    path = server.triton_endpoints.http_socket
    return server.triton_endpoints.http_address if path is None else f"127.0.0.1:{bridge(path)}"


def grpc_url(server: LocalServer) -> str:
    """`grpc://127.0.0.1:port` where tritonserver's own gRPC endpoint answers, for `Context.server_url`."""
    path = server.triton_endpoints.grpc_socket
    return f"grpc://{server.triton_endpoints.grpc_address if path is None else f'127.0.0.1:{bridge(path)}'}"


def http_port(server: LocalServer) -> int:
    """The port of `http_address`."""
    return int(http_address(server).rpartition(":")[2])


def bridge(path: Path) -> int:
    """The loopback port of this process's bridge to the Unix socket `path` (started on first use)."""
    with _lock:
        if path not in _bridges:
            _bridges[path] = _start_bridge(path)
        return _bridges[path]


def _start_bridge(path: Path) -> int:
    """A daemon thread that accepts on a free loopback port and relays each connection to the socket `path`."""
    listener = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:
        while True:
            client, _ = listener.accept()
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(str(path))
            except OSError:  # tritonserver away (restarting): the client sees its connection closed
                client.close()
                upstream.close()
                continue
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True).start()

    threading.Thread(target=accept, name=f"bridge to {path}", daemon=True).start()
    return int(listener.getsockname()[1])


def _pump(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(1 << 16):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)
