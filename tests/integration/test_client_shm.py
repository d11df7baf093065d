"""Clients' shared memory: a killed client's registrations are swept; a full /dev/shm is an error, not SIGBUS."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mslite_contract.owned_files import region_owner
from tests.support import private_shm
from tests.support.eventually import eventually
from tests.support.repository import flat_tiny

pytestmark = pytest.mark.integration

# A client that predicts 128 KiB inputs (through a shared-memory region) until it is killed.
_CLIENT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import mslite_triton as mslite
    ctx = mslite.Context()
    ctx.server_url = sys.argv[1]
    model = mslite.Model()
    model.build_from_file("triton://variable_seq", mslite.ModelType.MINDIR, ctx)
    x = mslite.Tensor(np.ones((1, 32768), np.float32))
    model.predict([x])
    print("ready", flush=True)
    while True:
        model.predict([x])
    """
)


def _client_regions(server) -> dict[str, int]:
    """Registered regions of this library's clients: name -> owner pid."""
    regions = server.http_json("GET", "/v2/systemsharedmemory/status", None) or []
    return {r["name"]: region_owner(r["name"]) for r in regions if region_owner(r["name"]) is not None}


def _mapped_mib(server, pids: set[int]) -> float:
    """MiB of tritonserver's mappings of the regions of clients `pids`."""
    total = 0
    for line in Path(f"/proc/{server.process.pid}/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and region_owner(os.path.basename(fields[5].split()[0])) in pids:
            start, end = (int(v, 16) for v in fields[0].split("-"))
            total += end - start
    return total / 2**20


def test_the_regions_of_clients_killed_mid_predict_are_unregistered(server):
    baseline = _client_regions(server)
    clients = [
        subprocess.Popen([sys.executable, "-c", _CLIENT, server.grpc_url], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    pids = {c.pid for c in clients}
    try:
        for c in clients:
            assert c.stdout.readline().strip() == "ready", f"client {c.pid} did not start (rc {c.poll()})"
        assert pids <= set(_client_regions(server).values())
        assert _mapped_mib(server, pids) > 0  # past "ready" each loops on predict: a kill lands mid-predict
    finally:
        for c in clients:
            c.send_signal(signal.SIGKILL)
            c.wait()

    def released() -> bool:
        assert not pids & set(_client_regions(server).values()), "still registered"
        assert _mapped_mib(server, pids) == 0, "still mapped"
        return True

    eventually(released, "the killed clients' regions released", 10, pause_s=0.2)
    assert _client_regions(server) == baseline  # back to what it was (other clients' regions untouched)
    assert not [n for n in os.listdir("/dev/shm") if region_owner(n) in pids]


# Runs inside a private /dev/shm: a server, then /dev/shm filled up, then a client predicting 256 KiB inputs.
_FULL = textwrap.dedent(
    """
    import json, os, subprocess, sys
    from pathlib import Path
    from mslite_server import LocalServer, ServerConfig
    client = '''
    import sys
    import numpy as np
    import mslite_triton as mslite
    ctx = mslite.Context()
    ctx.server_url = sys.argv[1]
    model = mslite.Model()
    model.build_from_file("triton://flat", mslite.ModelType.MINDIR, ctx)
    x = np.ones((16384, 4), np.float32)  # 256 KiB: over what is left in /dev/shm, within the worker's pool
    try:
        (y,) = model.predict([mslite.Tensor(x)])
        print("ok", float(y.get_data_to_numpy()[0, 0]))
    except Exception as e:
        print("error", type(e).__name__, e)
    '''
    config = ServerConfig(model_repository=Path(sys.argv[1]), supervise=False, shm_default_byte_size=2 << 20)
    with LocalServer(config) as server:
        free = os.statvfs("/dev/shm")
        fd = os.open("/dev/shm/filler", os.O_RDWR | os.O_CREAT, 0o600)
        os.posix_fallocate(fd, 0, free.f_bavail * free.f_frsize - (128 << 10))  # leave 128 KiB
        os.close(fd)
        run = subprocess.run([sys.executable, "-c", client, server.grpc_url], capture_output=True, text=True)
        print(json.dumps({"rc": run.returncode, "out": run.stdout, "err": run.stderr[-2000:]}), flush=True)
    """
)


def test_a_nearly_full_dev_shm_gives_the_client_an_answer_not_a_signal(tmp_path):
    reason = private_shm.unavailable()
    if reason:
        pytest.skip(reason)
    flat_tiny(tmp_path / "repo")
    run = private_shm.popen(
        32 * 1024, [sys.executable, "-c", _FULL, str(tmp_path / "repo")], stdout=subprocess.PIPE, text=True
    )
    out, _ = run.communicate(timeout=300)
    assert run.returncode == 0, out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["rc"] == 0, f"the client died with signal {-result['rc']}: {result['err']}"
    # served inline: tiny computes 2x + 1
    assert result["out"].split() == ["ok", "3.0"], result


_GROWING = textwrap.dedent(
    """
    import glob, os, sys, warnings
    import numpy as np
    import mslite_triton as mslite
    warnings.simplefilter("error")  # the resource tracker's "leaked shared_memory" warning fails the run
    ctx = mslite.Context()
    ctx.server_url = sys.argv[1]
    model = mslite.Model()
    model.build_from_file("triton://variable_seq", mslite.ModelType.MINDIR, ctx)
    for n in (1024, 8192, 65536):  # each larger input moves to a larger region
        model.predict([mslite.Tensor(np.ones((1, n), np.float32))])
    print(len(glob.glob(f"/dev/shm/mslite_client_{os.getpid()}_*")), flush=True)
    """
)


def test_a_client_keeps_one_region_file_and_leaves_none(server):
    run = subprocess.run([sys.executable, "-c", _GROWING, server.grpc_url], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["1"]  # a grown region's old file is gone at once, not at exit
    assert "leaked" not in run.stderr, run.stderr[-3000:]
