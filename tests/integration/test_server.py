"""`LocalServer`: start-up, per-model readiness, bad models, ports, shutdown and /dev/shm cleanup."""

from __future__ import annotations

import glob
import ipaddress
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from mslite_contract import settings
from mslite_contract.admin_key import key_path, write_key
from mslite_server import LocalServer, ServerConfig, ServerStartError, local_server
from mslite_server.ports import LOOPBACK, pick_ports
from mslite_server.workers import workers_of

pytestmark = pytest.mark.integration


def _states(server):
    return {m.name: m for m in server.model_states()}


def test_good_models_ready_and_bad_models_reported(server):
    states = _states(server)
    for name in ("mobilenetv2", "tiny", "multi_io", "mixed_dtypes", "odd_names", "no_batch", "variable_seq"):
        assert states[name].ready, f"{name}: {states[name].state} {states[name].reason}"
    assert not states["corrupt"].ready
    assert "not a valid ONNX model" in states["corrupt"].reason
    assert not states["mismatch"].ready
    reason = states["mismatch"].reason
    assert "'mismatch'" in reason and "'x'" in reason and "[4]" in reason and "[5]" in reason


def listening_addresses(port: int) -> list[str]:
    """Every address a TCP socket listens on at `port`, IPv4 and IPv6, from the kernel's tables (no `ss` needed)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(address)
                # the kernel prints each 32-bit word in host (little-endian) order
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                ip = ipaddress.ip_address(words)
                found.append(str(getattr(ip, "ipv4_mapped", None) or ip))  # ::ffff:127.0.0.1 is 127.0.0.1
    return found


def test_server_bound_to_loopback_only(server):
    for port in (server.http_port, server.grpc_port, server.metrics_port):
        addresses = listening_addresses(port)
        assert addresses and set(addresses) == {"127.0.0.1"}, (port, addresses)  # listening, and only there
    assert server.http_url.startswith("http://127.0.0.1:")


def test_port_in_use_is_named(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        srv = LocalServer(ServerConfig(model_repository=tmp_path, grpc_port=port))
        with pytest.raises(ServerStartError, match=f"grpc port {port} on 127.0.0.1 is already in use"):
            srv.start()
        srv.remove_workspace()


def test_stop_removes_shm_and_workers(repository: Path, tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "tiny").symlink_to(repository / "tiny")
    srv = LocalServer(ServerConfig(model_repository=repo))
    with srv:
        assert glob.glob(f"/dev/shm/{srv.workspace.shm_prefix}*"), "the python backend should have created shm regions"
        pid = srv.process.pid
        stubs = subprocess.run(["pgrep", "-s", str(pid)], capture_output=True, text=True).stdout.split()
        assert len(stubs) >= 2  # the server and at least one worker
        started = time.monotonic()
    assert time.monotonic() - started < 30
    assert not glob.glob(f"/dev/shm/{srv.workspace.shm_prefix}*")
    left = subprocess.run(["pgrep", "-s", str(pid)], capture_output=True, text=True).stdout.split()
    assert left == []
    assert not srv.workspace.path.exists()


def test_the_workers_regions_are_private(server):
    """Tritonserver makes each worker's region (every request's tensors) 0644; the worker closes it to 0600."""
    regions = {}
    for worker in (w for w in workers_of(server.process.pid) if w.state != "Z"):  # a dead one has no command line
        args = Path(f"/proc/{worker.pid}/cmdline").read_bytes().split(b"\0")
        regions[worker.instance] = Path("/dev/shm", args[2].decode())
    assert len(regions) >= 8 and all(p.name.startswith(server.workspace.shm_prefix) for p in regions.values())
    modes = {instance: oct(path.stat().st_mode & 0o777) for instance, path in regions.items()}
    assert set(modes.values()) == {"0o600"}, modes


def test_missing_repository_is_named(tmp_path: Path):
    srv = LocalServer(ServerConfig(model_repository=tmp_path / "missing"))
    with pytest.raises(ServerStartError, match="missing' is not a directory"):
        srv.start()
    srv.remove_workspace()


def test_dead_server_fails_fast_with_log_tail(tmp_path: Path):
    srv = LocalServer(ServerConfig(model_repository=tmp_path, extra_args=("--no-such-flag=1",)))
    started = time.monotonic()
    with pytest.raises(ServerStartError, match="exited during start-up") as info:
        srv.start()
    assert time.monotonic() - started < 30
    assert "no-such-flag" in str(info.value)  # the log tail says what was wrong
    srv.remove_workspace()


@pytest.mark.parametrize("ending", ["stop", "kill"])
def test_upload_copies_do_not_outlive_the_server(repository: Path, tmp_path: Path, ending: str):
    """Triton copies uploaded models to /tmp/folderXXXXXX; a killed server (or an HTTP upload) left them there."""
    import mslite_triton as mslite

    srv = LocalServer(ServerConfig(model_repository=tmp_path, load_models=()))
    with srv:
        copies = set()
        for url in (srv.http_url, srv.grpc_url):
            ctx = mslite.Context()
            ctx.server_url = url
            ctx.cpu.thread_num = 1 if url == srv.http_url else 2  # two configs: two uploads
            mslite.Model().build_from_file(str(repository / "tiny" / "1" / "model.onnx"), mslite.ModelType.MINDIR, ctx)
        copies = {w.model_dir for w in workers_of(srv.process.pid)}
        assert len(copies) == 2 and all(c.startswith("/tmp/folder") for c in copies), copies
        if ending == "kill":
            srv.process.kill()
            srv.process.wait()
    assert not [c for c in copies if Path(c).exists()]


def _pairs_model() -> bytes:
    """y = x reshaped to pairs: runs for an even number of values, fails for the warm-up's one value."""
    from onnx import TensorProto, helper, numpy_helper

    shape = numpy_helper.from_array(np.array([-1, 2], dtype=np.int64), name="pairs")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "pairs"], ["y"])],
        "pairs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", 2])],
        initializer=[shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


def test_warm_up_runs_before_the_model_is_ready(tmp_path: Path):
    """A model whose warm-up (zeros, every dynamic dim 1) fails never becomes ready; with warmup off it serves."""
    for name, extra in (("warm", ""), ("cold", 'parameters { key: "warmup" value { string_value: "false" } }\n')):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "1" / "model.onnx").write_bytes(_pairs_model())
        (tmp_path / name / "config.pbtxt").write_text('backend: "mslite"\n' + extra)
    with LocalServer(ServerConfig(model_repository=tmp_path)) as srv:
        states = _states(srv)
        assert not states["warm"].ready and "reshape" in states["warm"].reason.lower(), states["warm"]
        assert states["cold"].ready, states["cold"]
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": x.flatten().tolist()}]}
        out = srv.http_json("POST", "/v2/models/cold/infer", body)["outputs"][0]
        assert out["shape"] == [2, 2] and out["data"] == [0, 1, 2, 3]


@pytest.mark.parametrize("taken", ["http", "grpc", "metrics"])
def test_a_port_taken_between_its_pick_and_the_start_is_picked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: str
):
    # Another process (a second test run beside, a client's outgoing connection) took a port after the
    # launcher picked it and before the server bound it: the start failed, and wrote its key over theirs.
    monkeypatch.setenv(settings.KEY_DIR_ENV, str(tmp_path / "keys"))
    occupant, picks = socket.socket(), []

    def pick_then_lose_one(wanted: list[tuple[str, int, str]]) -> list[int]:
        ports = pick_ports(wanted)
        if not picks:  # the first pick only
            port = ports[[what for _, _, what in wanted].index(taken)]
            occupant.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            occupant.bind((LOOPBACK, port))
            occupant.listen()
            write_key("theirs", LOOPBACK, [port])
        picks.append(ports)
        return ports

    monkeypatch.setattr(local_server, "pick_ports", pick_then_lose_one)
    (tmp_path / "repo").mkdir()
    with occupant:
        with LocalServer(ServerConfig(model_repository=tmp_path / "repo", gateway=True)) as srv:
            occupant_port = occupant.getsockname()[1]
            lost = key_path(LOOPBACK, occupant_port)
            assert len(picks) == 2, picks  # one start lost a port; the next, on other ports, started
            ours = [srv.http_port, srv.grpc_port, srv.metrics_port]
            assert occupant_port not in ours
            assert srv.answers_live() and srv.gateway_answers_live()
            assert srv.admin_key and key_path(LOOPBACK, srv.http_port).read_text().strip() == srv.admin_key
            assert lost.read_text().strip() == "theirs"
        assert lost.read_text().strip() == "theirs"  # our stop removed our key files only
        assert not key_path(LOOPBACK, ours[0]).exists()
