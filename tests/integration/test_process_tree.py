"""Nothing outlives its parent: a gateway killed with SIGKILL leaves none of its helper processes behind.

A 5 MiB JSON body starts the gateway's offload pool (a spawned worker and multiprocessing's resource tracker);
the worker dies with the gateway (parent-death signal) and the tracker then reads the end of its pipe. The
supervisor, restarting the gateway, also ends what is left of the old gateway's process group, and checks it.
"""

from __future__ import annotations

import http.client
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from mslite_server import LocalServer, ServerConfig
from mslite_server.parent_death import group_members
from tests.support.eventually import eventually
from tests.support.processes import children_of
from tests.support.repository import GEN, MINIMAL, add_model

pytestmark = pytest.mark.integration


def _tree(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        for child, _ in children_of(todo.pop()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _start_offload(port: int) -> None:
    """A 5 MiB JSON body: checked in the offload lane (refused or not, the pool has started)."""
    values = ",".join(["0.5"] * ((5 << 20) // 4))
    body = f'{{"inputs":[{{"name":"x","shape":[{(5 << 20) // 4}],"datatype":"FP32","data":[{values}]}}]}}'.encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", "/v2/models/tiny/infer", body=body, headers={"Content-Type": "application/json"})
        conn.getresponse().read()
    finally:
        conn.close()


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LocalServer]:
    add_model(tmp_path / "repo", "tiny", GEN.build_tiny(), MINIMAL)
    config = ServerConfig(model_repository=tmp_path / "repo", gateway=True, supervise=request.param, exit_timeout_s=5)
    with LocalServer(config) as srv:
        yield srv


@pytest.mark.parametrize("server", [False, True], ids=["alone", "supervised"], indirect=True)
def test_a_killed_gateway_leaves_no_process_of_its_tree(server: LocalServer) -> None:
    gateway = server.gateway
    assert gateway is not None and gateway.pid is not None
    pid = gateway.pid
    _start_offload(server.http_port)
    tree = eventually(lambda: _tree(pid) if len(_tree(pid)) >= 2 else set(), "the offload worker and its tracker")
    assert set(group_members(pid)) >= tree | {pid}
    os.kill(pid, signal.SIGKILL)
    eventually(lambda: not [p for p in tree if _alive(p)], f"the old gateway's helpers {sorted(tree)} to end", 30)
    eventually(lambda: not group_members(pid), "the old gateway's process group to be empty", 30)
    if server.supervisor is not None:  # and the restarted gateway serves
        eventually(lambda: server.gateway is not None and server.gateway.pid not in (None, pid), "a new gateway")
        eventually(lambda: server.gateway_answers_live(), "the new gateway to answer")
