"""tritonserver's own endpoints (Unix sockets in a private folder) and what /proc tells of listeners (no server)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from mslite_gateway.upstream_address import UpstreamAddress
from mslite_server.ports import holder_of, listening_ports, listening_unix_paths
from mslite_server.triton_endpoints import TritonEndpoints, is_private_dir, make_socket_dir
from mslite_triton._transport import Transport


def test_the_socket_folder_is_private_and_named_in_triton_s_flags(tmp_path: Path) -> None:
    folder = make_socket_dir(tmp_path)
    assert folder.parent == tmp_path and stat.S_IMODE(folder.stat().st_mode) == 0o700 and is_private_dir(folder)
    ends = TritonEndpoints(socket_dir=folder)
    assert ends.flags() == [f"--http-address=unix:{folder}/http", "--http-port=0",
                            f"--grpc-address=unix:{folder}/grpc", "--grpc-port=0"]  # fmt: skip
    # gRPC appends the port to the file's name: that file is what clients and the gateway connect to
    assert ends.grpc_address == ends.grpc_url == f"unix:{folder}/grpc:0" and ends.http_address == f"unix:{folder}/http"
    tcp = TritonEndpoints(host="127.0.0.1", http_port=8000, grpc_port=8001)
    assert tcp.flags()[:2] == ["--http-address=127.0.0.1", "--http-port=8000"]
    assert (tcp.http_address, tcp.grpc_url) == ("127.0.0.1:8000", "grpc://127.0.0.1:8001")


def test_a_workspace_too_deep_for_a_socket_path_puts_the_folder_under_tmp(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    folder = make_socket_dir(deep)
    try:
        assert folder.parent == Path("/tmp") and len(os.fsencode(folder / "grpc:0")) < 108
    finally:
        folder.rmdir()


def test_a_killed_server_s_socket_files_go_before_the_next_start(tmp_path: Path) -> None:
    ends = TritonEndpoints(socket_dir=make_socket_dir(tmp_path))
    left = []
    for path in (ends.http_socket, ends.grpc_socket):  # bound, never closed cleanly: what a kill -9 leaves
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        left.append(s)
    assert ends.ready_for_start() is ends
    assert not ends.http_socket.exists() and not ends.grpc_socket.exists()  # type: ignore[union-attr]
    for s in left:
        s.close()


@pytest.mark.parametrize("change", ["mode", "gone", "link"])
def test_a_folder_no_longer_private_is_replaced(tmp_path: Path, change: str) -> None:
    ends = TritonEndpoints(socket_dir=make_socket_dir(tmp_path))
    folder = ends.socket_dir
    assert folder is not None
    if change == "mode":
        folder.chmod(0o755)
    elif change == "gone":
        folder.rmdir()
    else:
        folder.rmdir()
        folder.symlink_to(make_socket_dir(tmp_path))
    fresh = ends.ready_for_start()
    assert fresh.socket_dir is not None and fresh.socket_dir != folder and is_private_dir(fresh.socket_dir)


def test_proc_tells_which_sockets_this_process_listens_on(tmp_path: Path) -> None:
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(tmp_path / "s"))
    tcp = socket.create_server(("127.0.0.1", 0))
    try:
        assert str(tmp_path / "s") not in listening_unix_paths(os.getpid())  # bound, not listening yet
        unix.listen()
        assert str(tmp_path / "s") in listening_unix_paths(os.getpid())
        port = tcp.getsockname()[1]
        assert port in listening_ports(os.getpid())
        assert holder_of(port) == f"pid {os.getpid()} ({Path('/proc/self/comm').read_text().strip()})"
    finally:
        unix.close()
        tcp.close()
    assert holder_of(port).startswith("no listener found")


def test_the_gateway_and_the_transport_take_a_unix_socket_address() -> None:
    assert UpstreamAddress.parse("unix:/tmp/x/grpc:0") == UpstreamAddress(path="/tmp/x/grpc:0")
    assert UpstreamAddress.parse("127.0.0.1:8001") == UpstreamAddress("127.0.0.1", 8001)
    assert str(UpstreamAddress.parse("unix:/tmp/x/http")) == "unix:/tmp/x/http"
    with pytest.raises(ValueError, match="unix:PATH or host:port"):
        UpstreamAddress.parse("8001")
    transport = Transport("unix:/tmp/x/grpc:0")
    assert transport.protocol == "grpc" and transport.host == "localhost"  # a local server: shared memory may serve
    with pytest.raises(ValueError):
        Transport("unix:")
