"""Where tritonserver's own HTTP and gRPC endpoints are, and the launcher's one way to call its HTTP API.

Behind the gateway they are Unix sockets in a folder of mode 0700 owned by the server's user: no other
local user can reach them, crash tritonserver through them, or take their place while it restarts (a TCP
port on the loopback can be bound by anyone once the server is gone, and would then receive every request
the gateway relays, admin key included). Without the gateway tritonserver serves the public TCP ports.

tritonserver 2.51 takes `--http-address=unix:PATH` (evhtp; the port is ignored) and
`--grpc-address=unix:PATH`, for which gRPC appends `:PORT` to the file's name (`grpc:0` with port 0).
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mslite_contract.protocol import UNIX_ADDRESS_PREFIX
from mslite_server.errors import ServerStartError

HTTP_SOCKET = "http"
GRPC_SOCKET = "grpc"
GRPC_SOCKET_FILE = f"{GRPC_SOCKET}:0"  # what gRPC names the socket of `--grpc-address=unix:.../grpc --grpc-port=0`
_SUN_PATH_MAX = 107  # bytes of a socket path the kernel takes (sun_path is 108 with its NUL)
_SHORT_ROOT = "/tmp"  # where the folder goes when the workspace's path would make a socket path too long


@dataclass(frozen=True)
class TritonEndpoints:
    """tritonserver's own endpoints: Unix sockets in `socket_dir`, or TCP `host:http_port` / `host:grpc_port`."""

    socket_dir: Path | None = None
    host: str = ""
    http_port: int = 0
    grpc_port: int = 0

    @property
    def http_socket(self) -> Path | None:
        """The HTTP endpoint's socket file (None on TCP)."""
        return None if self.socket_dir is None else self.socket_dir / HTTP_SOCKET

    @property
    def grpc_socket(self) -> Path | None:
        """The gRPC endpoint's socket file (None on TCP)."""
        return None if self.socket_dir is None else self.socket_dir / GRPC_SOCKET_FILE

    @property
    def http_address(self) -> str:
        """`unix:PATH` or `host:port`: the gateway's `--upstream-http`."""
        return f"{UNIX_ADDRESS_PREFIX}{self.http_socket}" if self.http_socket else f"{self.host}:{self.http_port}"

    @property
    def grpc_address(self) -> str:
        """`unix:PATH` or `host:port`: the gateway's `--upstream-grpc`, and a tritonclient gRPC client's url."""
        return f"{UNIX_ADDRESS_PREFIX}{self.grpc_socket}" if self.grpc_socket else f"{self.host}:{self.grpc_port}"

    @property
    def grpc_url(self) -> str:
        """The gRPC endpoint as this library's `Transport` takes it: `unix:PATH` (gRPC's form) or `grpc://host:port`."""
        return self.grpc_address if self.grpc_socket else f"grpc://{self.grpc_address}"

    def flags(self) -> list[str]:
        """The arguments of tritonserver for these endpoints."""
        if self.socket_dir is None:
            return [f"--http-address={self.host}", f"--http-port={self.http_port}",
                    f"--grpc-address={self.host}", f"--grpc-port={self.grpc_port}"]  # fmt: skip
        return [f"--http-address={UNIX_ADDRESS_PREFIX}{self.http_socket}", "--http-port=0",
                f"--grpc-address={UNIX_ADDRESS_PREFIX}{self.socket_dir / GRPC_SOCKET}", "--grpc-port=0"]  # fmt: skip

    def http_connection(self, timeout_s: float) -> http.client.HTTPConnection:
        """A new HTTP connection to tritonserver's own endpoint (not connected yet)."""
        if self.http_socket is None:
            return http.client.HTTPConnection(self.host, self.http_port, timeout=timeout_s)
        return _UnixHTTPConnection(str(self.http_socket), timeout_s)

    def ready_for_start(self) -> TritonEndpoints:
        """These endpoints, ready for a start of tritonserver; new ones when the folder is no longer private.

        A killed server leaves its socket files behind, and tritonserver's HTTP front refuses a path that
        exists: they are removed. Only the server's user can have put anything in a private folder, so
        anything there is ours. A folder that is gone, or whose owner or mode changed, is given up for a new one.
        """
        if self.socket_dir is None:
            return self
        if is_private_dir(self.socket_dir):
            try:
                for sock in (self.http_socket, self.grpc_socket):
                    assert sock is not None
                    sock.unlink(missing_ok=True)
                return self
            except OSError:  # not ours to clear after all
                pass
        return TritonEndpoints(socket_dir=make_socket_dir(self.socket_dir.parent))

    def remove(self) -> None:
        """Delete the socket folder (the server has exited)."""
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)


def make_socket_dir(near: Path) -> Path:
    """A new folder of mode 0700 for the sockets, under `near` or, when that path is too long for them, /tmp.

    Raises:
        ServerStartError: even /tmp gives a socket path too long (it cannot: /tmp is short).
    """
    for root in (near, Path(_SHORT_ROOT)):
        # mkdtemp makes the folder 0700 and fails rather than reuse an existing path
        probe = root / "mslite-sock-xxxxxxxx" / GRPC_SOCKET_FILE
        if len(os.fsencode(probe)) <= _SUN_PATH_MAX and root.is_dir():
            return Path(tempfile.mkdtemp(prefix="mslite-sock-", dir=root))
    raise ServerStartError(f"no folder short enough for tritonserver's sockets under {near} or {_SHORT_ROOT}")


def is_private_dir(path: Path) -> bool:
    """Whether `path` is a real folder (not a link) owned by this user that no one else may enter."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


class _UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a Unix socket (the Host header names no host: tritonserver does not read it)."""

    def __init__(self, path: str, timeout_s: float) -> None:
        super().__init__("localhost", timeout=timeout_s)
        self._path = path

    def connect(self) -> None:
        """Connect to the socket file instead of host:port."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock
