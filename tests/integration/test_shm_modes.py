"""The shared-memory regions a running server makes are its user's alone from the instant they exist.

The python backend makes each worker's region (every request's and answer's tensors) with Boost.Interprocess,
which sets its mode with fchmod(0644) after creating it, whatever the umask. The launcher preloads
`shm_private` into tritonserver (and so its workers), which takes the group's and others' bits out of that
fchmod: a watcher on /dev/shm (inotify) reads the mode of each region as it is created and again at each change
of its attributes, and every mode it sees, for our model's region and a plain `backend: "python"` model's, is
0600. The launcher's umask (077), inherited by tritonserver and every worker, covers the files they make.
"""

from __future__ import annotations

import ctypes
import os
import select
import stat
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from mslite_server import LocalServer, ServerConfig
from mslite_server.shm_private import LIBRARY
from mslite_server.triton_process import SERVER_UMASK
from mslite_server.workers import workers_of
from tests.support.repository import GEN, MINIMAL, add_model

pytestmark = pytest.mark.integration

PLAIN_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy())])
            for r in requests
        ]
"""
PLAIN_CONFIG = """backend: "python"
max_batch_size: 0
input [ { name: "x", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU, count: 1 } ]
"""


IN_ATTRIB, IN_CREATE = 0x4, 0x100


class ShmWatcher:
    """Every mode seen of each file created in /dev/shm while it runs: at its creation and at each chmod."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.modes: dict[str, set[int]] = {}
        libc = ctypes.CDLL(None, use_errno=True)
        self._fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self._fd >= 0, os.strerror(ctypes.get_errno())
        assert libc.inotify_add_watch(self._fd, b"/dev/shm", IN_CREATE | IN_ATTRIB) >= 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not select.select([self._fd], [], [], 0.1)[0]:
                continue
            data = os.read(self._fd, 1 << 16)
            offset = 0
            while offset < len(data):
                _wd, _mask, _cookie, size = struct.unpack_from("iIII", data, offset)
                name = data[offset + 16 : offset + 16 + size].rstrip(b"\0").decode(errors="replace")
                offset += 16 + size
                if name.startswith(self.prefix):
                    try:
                        self.modes.setdefault(name, set()).add(stat.S_IMODE(os.stat(f"/dev/shm/{name}").st_mode))
                    except FileNotFoundError:
                        pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        os.close(self._fd)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalServer, ShmWatcher]]:
    repo = tmp_path_factory.mktemp("shm_modes")
    add_model(repo, "tiny", GEN.build_tiny(), MINIMAL)
    plain = repo / "plain"
    (plain / "1").mkdir(parents=True)
    (plain / "1" / "model.py").write_text(PLAIN_MODEL)
    (plain / "config.pbtxt").write_text(PLAIN_CONFIG)
    server = LocalServer(ServerConfig(model_repository=repo, supervise=False, exit_timeout_s=5))
    watcher = ShmWatcher(server.workspace.shm_prefix)  # before the server starts: its regions come with the models
    try:
        with server:
            yield server, watcher
    finally:
        watcher.close()


def _umask(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    raise AssertionError(f"no Umask line for pid {pid}")


def test_every_region_of_the_server_is_0600_from_its_creation(srv: tuple[LocalServer, ShmWatcher]) -> None:
    server, watcher = srv
    assert server.process is not None
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    try:  # requests through both models: their tensors pass through the regions
        x = httpclient.InferInput("x", [4], "FP32")
        x.set_data_from_numpy(np.arange(4, dtype=np.float32))
        assert client.infer("plain", [x]).as_numpy("y").tolist() == [0.0, 1.0, 2.0, 3.0]
        (spec,) = client.get_model_metadata("tiny")["inputs"]
        shape = [max(d, 1) for d in spec["shape"]]
        tiny = httpclient.InferInput(spec["name"], shape, spec["datatype"])
        tiny.set_data_from_numpy(np.ones(shape, np.float32))
        assert client.infer("tiny", [tiny]).get_response()["outputs"]
    finally:
        client.close()
    workers = [w for w in workers_of(server.process.pid) if w.state != "Z"]
    assert {w.model for w in workers} >= {"tiny", "plain"}, workers
    # the umask is inherited by tritonserver and every worker (which makes its own files with it too)
    assert {_umask(p) for p in [server.process.pid, *(w.pid for w in workers)]} == {SERVER_UMASK}
    # the library is in tritonserver and in every worker
    for pid in [server.process.pid, *(w.pid for w in workers)]:
        assert LIBRARY in Path(f"/proc/{pid}/maps").read_text(), pid
    regions = {w.model: _args(w.pid)[2] for w in workers}
    assert all(name.startswith(server.workspace.shm_prefix) for name in regions.values()), regions
    # each worker's region was seen as it was created, and the mode Triton's fchmod set, 0600 every time
    assert set(regions.values()) <= set(watcher.modes), (regions, watcher.modes)
    assert watcher.modes and all(modes == {0o600} for modes in watcher.modes.values()), {
        name: sorted(oct(m) for m in modes) for name, modes in watcher.modes.items()
    }
    for name in regions.values():
        assert stat.S_IMODE(os.stat(f"/dev/shm/{name}").st_mode) == 0o600, name


def _args(pid: int) -> list[str]:
    return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
