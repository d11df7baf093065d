"""The Python client's own server: a child `mslite-triton serve --private`, its program's alone.

Started from a thread that is not the main one; the key in no process's command line; another local account
(a user made here) loads nothing through any TCP port the server listens on; after the program's exit, or its
SIGKILL, no server process and no folder of it is left.
"""

from __future__ import annotations

import base64
import json
import os
import pwd
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from mslite_contract import settings
from mslite_contract.protocol import ADMIN_KEY_HEADER, GATEWAY_MODULE
from tests.support.eventually import eventually
from tests.support.other_clients import folders_left
from tests.support.processes import command_lines_holding, descendants_of, is_gone
from tests.support.repository import GEN

pytestmark = pytest.mark.integration

OTHER_USER = "mslite_localprivate"  # another local account, made for these tests

# Builds and predicts from a worker thread (which ends before the program does), then says who its server is.
PROGRAM = """
import sys, threading, numpy as np
import mslite_triton as mslite
from mslite_triton import _endpoint

def build_and_predict():
    r = mslite.ModelParallelRunner()
    r.build_from_file(sys.argv[1])
    i = r.get_inputs(); i[0].set_data_from_numpy(np.ones(4, np.float32))
    print("RESULT", r.predict(i)[0].get_data_to_numpy().tolist(), flush=True)

t = threading.Thread(target=build_and_predict); t.start(); t.join()
server = _endpoint.started_server()
print("SERVER", server.pid, server.key, server.http_url, flush=True)
if sys.argv[2] == "hold":
    sys.stdin.read()  # until the test closes it (or kills this program)
"""

# Run as the other account (the system's interpreter, standard library only): a keyless model load over HTTP on
# each port, and a connection to each of tritonserver's own sockets.
ATTACK = """
import base64, json, socket, sys, urllib.error, urllib.request
ports, sockets, onnx = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
config = json.dumps({"backend": "mslite", "max_batch_size": 0})
body = json.dumps({"parameters": {"config": config, "file:1/model.onnx": onnx}}).encode()
seen = {}
for port in ports:
    url = f"http://127.0.0.1:{port}/v2/repository/models/planted/load"
    try:
        seen[f"http {port}"] = urllib.request.urlopen(urllib.request.Request(url, body), timeout=30).status
    except urllib.error.HTTPError as e:
        seen[f"http {port}"] = e.code
    except Exception as e:  # the gRPC port answers HTTP/1 with HTTP/2 bytes
        seen[f"http {port}"] = type(e).__name__
for path in sockets:
    try:
        socket.socket(socket.AF_UNIX).connect(path)
        seen[path] = "connected"
    except OSError as e:
        seen[path] = type(e).__name__
print(json.dumps(seen))
"""


@dataclass
class Program:
    """A running program with a server of its own: the program, the `serve` child's pid, key and HTTP URL."""

    proc: subprocess.Popen[str]
    pid: int
    key: str
    http_url: str
    tmp: Path


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (settings.URL_ENV, settings.ADMIN_KEY_ENV)}
    env["TMPDIR"] = str(tmp)
    return env


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.onnx"
    path.write_bytes(GEN.build_tiny().SerializeToString())
    return path


def _start(tiny: Path, tmp_path: Path, ending: str) -> Program:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, str(tiny), ending],
        env=_env(tmp), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    result, server = proc.stdout.readline(), proc.stdout.readline()
    assert result.startswith("RESULT [[3.0, 3.0, 3.0, 3.0]]"), (
        result + server + (proc.stderr.read() if proc.stderr else "")
    )
    _, pid, key, http_url = server.split()
    return Program(proc, int(pid), key, http_url, tmp)


@pytest.fixture
def held(tiny: Path, tmp_path: Path) -> Iterator[Program]:
    program = _start(tiny, tmp_path, "hold")
    try:
        yield program
    finally:
        if program.proc.poll() is None:
            program.proc.kill()
            program.proc.wait(timeout=60)


def _left_behind(program: Program, below: list[tuple[int, str]]) -> None:
    """Waits until the server and every process under it have ended, and its folders are gone."""
    for pid in [program.pid, *(p for p, _ in below)]:
        eventually(lambda pid=pid: is_gone(pid), f"process {pid} of the server to end", 120, 0.2)
    left = lambda: folders_left(program.tmp)  # noqa: E731
    eventually(lambda: not left(), "the server's temporary folders to go", 30, 0.2)
    assert not list(Path("/dev/shm").glob(f"mslite{program.pid}_*"))


@pytest.mark.parametrize("ending", ["exit", "sigkill"])
def test_the_server_and_its_folders_end_with_the_program(tiny, tmp_path, ending):
    """Started from a worker thread: a normal exit, or SIGKILL (no atexit), leaves no process and no folder."""
    program = _start(tiny, tmp_path, "hold" if ending == "sigkill" else "exit")
    try:
        below = descendants_of(program.pid)
        assert any("tritonserver" in c for _, c in below) or ending == "exit", below
        if ending == "sigkill":
            assert any(GATEWAY_MODULE in c for _, c in below), below
            program.proc.kill()
        program.proc.wait(timeout=120)
        _left_behind(program, below)
    finally:
        if program.proc.poll() is None:
            program.proc.kill()
            program.proc.wait(timeout=60)


def test_the_key_is_on_no_command_line(held):
    below = descendants_of(held.pid)
    assert {"tritonserver", GATEWAY_MODULE} <= {w for _, c in below for w in ("tritonserver", GATEWAY_MODULE) if w in c}
    assert command_lines_holding(held.key) == []
    flags = [c for _, c in below if f"{ADMIN_KEY_HEADER}=" in c]
    assert flags == []  # no restricted-API flag of the server's processes carries a key


def _listening_ports(pids: set[int]) -> set[int]:
    return {c.laddr.port for c in psutil.net_connections("tcp") if c.status == "LISTEN" and c.pid in pids}


@pytest.fixture(scope="module")
def other_user() -> str:
    if os.geteuid() != 0:
        pytest.skip("making another local account needs root")
    try:
        pwd.getpwnam(OTHER_USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER], check=True)
    return OTHER_USER


def test_another_account_loads_nothing_through_any_port(held, tiny, other_user):
    """Every TCP port of the server's processes refuses a keyless load; tritonserver's sockets refuse the account.

    A TCP request carries no account: the keyless gRPC load is sent from here; the HTTP ones and the sockets
    are tried as the other account.
    """
    below = descendants_of(held.pid)
    ports = _listening_ports({held.pid, *(p for p, _ in below)})
    assert len(ports) == 2, ports  # the gateway's HTTP and gRPC ports: no metrics port, tritonserver on sockets
    (triton,) = [c for _, c in below if "tritonserver" in c and "--http-address=unix:" in c]
    sockets = [w.split("unix:", 1)[1] for w in triton.split("\0") if w.startswith("--http-address=unix:")]
    onnx = base64.b64encode(tiny.read_bytes()).decode()
    out = subprocess.run(
        [shutil.which("runuser") or "runuser", "-u", other_user, "--", "/usr/bin/python3", "-I", "-c", ATTACK,
         json.dumps(sorted(ports)), json.dumps(sockets), onnx],
        capture_output=True, text=True, timeout=300, env={"PATH": "/usr/bin:/bin"}, cwd="/tmp",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.splitlines()[-1])
    assert [seen[f"http {p}"] for p in sorted(ports)].count(403) == 1, seen  # the HTTP port; the gRPC one: no HTTP/1
    assert not [k for k, v in seen.items() if v in (200, "connected")], seen
    assert seen[sockets[0]] == "PermissionError", seen
    for port in ports:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
        with pytest.raises(InferenceServerException) as refused:
            client.load_model("planted", config=json.dumps({"backend": "mslite"}), files={"file:1/model.onnx": b"x"})
        assert refused.value.status() in ("StatusCode.PERMISSION_DENIED", "StatusCode.UNAVAILABLE"), refused.value
        client.close()
    ready = urllib.request.Request(f"{held.http_url}/v2/models/planted/ready", headers={ADMIN_KEY_HEADER: held.key})
    try:
        status = urllib.request.urlopen(ready, timeout=30).status
    except urllib.error.HTTPError as e:
        status = e.code
    assert status != 200  # nothing named so was loaded
