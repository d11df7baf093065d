"""The shared-memory regions a running server made: what the launcher can close, and what it cannot.

The python backend creates each worker's region (every request's and answer's tensors). The launcher starts
tritonserver with umask 077, which every worker inherits, and a plain `backend: "python"` model serves with it.
But the python backend makes its regions with Boost.Interprocess, which sets their mode (0644) with fchmod
after creating them, whatever the umask: a plain python model's region stays 0644; ours are closed to 0600
by the worker as it starts (`owned_files.close_stub_region`). This test holds both facts.
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from mslite_server import LocalServer, ServerConfig
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


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    repo = tmp_path_factory.mktemp("shm_modes")
    add_model(repo, "tiny", GEN.build_tiny(), MINIMAL)
    plain = repo / "plain"
    (plain / "1").mkdir(parents=True)
    (plain / "1" / "model.py").write_text(PLAIN_MODEL)
    (plain / "config.pbtxt").write_text(PLAIN_CONFIG)
    with LocalServer(ServerConfig(model_repository=repo, supervise=False, exit_timeout_s=5)) as server:
        yield server


def _umask(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    raise AssertionError(f"no Umask line for pid {pid}")


def test_the_workers_inherit_a_private_umask_and_the_python_backend_sets_its_regions_mode_itself(
    srv: LocalServer,
) -> None:
    assert srv.process is not None
    client = httpclient.InferenceServerClient(f"127.0.0.1:{srv.http_port}")
    try:
        x = httpclient.InferInput("x", [4], "FP32")
        x.set_data_from_numpy(np.arange(4, dtype=np.float32))
        assert client.infer("plain", [x]).as_numpy("y").tolist() == [0.0, 1.0, 2.0, 3.0]
    finally:
        client.close()
    workers = [w for w in workers_of(srv.process.pid) if w.state != "Z"]
    assert {w.model for w in workers} >= {"tiny", "plain"}, workers
    # the umask is inherited by tritonserver and every worker (which makes its own files with it too)
    assert {_umask(p) for p in [srv.process.pid, *(w.pid for w in workers)]} == {SERVER_UMASK}
    regions = {w.model: Path("/dev/shm", _args(w.pid)[2]) for w in workers}
    assert all(p.name.startswith(srv.workspace.shm_prefix) for p in regions.values()), regions
    modes = {model: stat.S_IMODE(path.stat().st_mode) for model, path in regions.items()}
    assert modes["tiny"] == 0o600, oct(modes["tiny"])  # closed by our worker
    assert modes["plain"] == 0o644, oct(modes["plain"])  # Triton's fchmod, not the umask, sets it


def _args(pid: int) -> list[str]:
    return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
