"""The parts of `LocalServer` that need no tritonserver: its `Workspace` and `TritonApi` (against a stand-in)."""

from __future__ import annotations

import json
import secrets
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mslite_contract import settings
from mslite_contract.admin_key import key_path, write_key
from mslite_contract.protocol import ADMIN_KEY_HEADER
from mslite_server.errors import TritonUnavailableError
from mslite_server.ports import LOOPBACK
from mslite_server.triton_api import TritonApi
from mslite_server.triton_endpoints import TritonEndpoints
from mslite_server.workspace import Workspace


@pytest.fixture
def workspace() -> Iterator[Workspace]:
    ws = Workspace()
    yield ws
    ws.remove()


def test_a_workspace_names_its_files_after_this_launcher(workspace: Workspace) -> None:
    other = Workspace()
    try:
        assert workspace.path.is_dir() and workspace.log_path.parent == workspace.path
        assert workspace.shm_prefix != other.shm_prefix and workspace.weights_owner != other.weights_owner
    finally:
        other.remove()
    workspace.remove()
    assert not workspace.path.exists()


def test_only_the_regions_with_the_workspace_s_prefix_are_removed(workspace: Workspace) -> None:
    ours, theirs = Path(f"/dev/shm/{workspace.shm_prefix}region"), Path(f"/dev/shm/{workspace.shm_prefix[:-1]}Xother")
    ours.write_bytes(b"x")
    theirs.write_bytes(b"x")
    try:
        assert f"{workspace.shm_prefix}region" in workspace.remove_shm()
        assert not ours.exists() and theirs.exists()
    finally:
        theirs.unlink(missing_ok=True)


def test_a_key_file_another_server_took_over_is_left_alone(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(settings.KEY_DIR_ENV, str(tmp_path))
    workspace.write_keys("ours", LOOPBACK, [1001, 1002])
    assert [p.read_text().strip() for p in workspace.key_files] == ["ours", "ours"]
    write_key("theirs", LOOPBACK, [1002])  # the port is someone else's now
    workspace.remove_keys("ours")
    assert not key_path(LOOPBACK, 1001).exists() and key_path(LOOPBACK, 1002).read_text().strip() == "theirs"
    assert workspace.key_files == []


def test_only_triton_s_upload_copies_are_noted_and_removed(workspace: Workspace, tmp_path: Path) -> None:
    copy = Path(f"/tmp/folder{secrets.token_hex(3)}")  # the name libtritonserver gives an upload's copy
    copy.mkdir()
    try:
        workspace.note_model_dirs([str(tmp_path), str(copy), f"{copy}x", "/models/tiny"])
        assert workspace.remove_upload_copies() == [str(copy)]
        assert not copy.exists() and tmp_path.is_dir()
        assert workspace.remove_upload_copies() == []  # forgotten once removed
    finally:
        shutil.rmtree(copy, ignore_errors=True)


class _Triton(BaseHTTPRequestHandler):
    """Answers as tritonserver does to the calls `TritonApi` makes, and records the key it was sent."""

    keys: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        self.keys.append(self.headers.get(ADMIN_KEY_HEADER))
        if self.path == "/v2/models/stats":
            self._answer(200, {"model_stats": [{"name": "ready_one"}, {"name": "unloading"}]})
        elif self.path == "/v2/models/ready_one/ready" or self.path == "/v2/health/live":
            self._answer(200, None)
        else:
            self._answer(400, {"error": "no such thing"})

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.keys.append(self.headers.get(ADMIN_KEY_HEADER))
        self._answer(200, [{"name": "m", "version": "1", "state": "READY"}, {"name": "n", "state": "UNAVAILABLE"}])

    def _answer(self, status: int, body: object) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def triton() -> Iterator[TritonEndpoints]:
    _Triton.keys = []
    server = ThreadingHTTPServer((LOOPBACK, 0), _Triton)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield TritonEndpoints(host=LOOPBACK, http_port=server.server_address[1])
    server.shutdown()
    server.server_close()


def test_the_api_reads_models_and_sends_the_key_only_where_asked(triton: TritonEndpoints) -> None:
    api = TritonApi(triton, "k", "http://public:1")
    assert api.answers_live() and api.loaded_models() == ["ready_one"]
    states = api.model_states()
    assert [(s.name, s.version, s.ready) for s in states] == [("m", "1", True), ("n", "", False)]
    # the JSON calls carry the key; the status probes (liveness, readiness) do not
    assert _Triton.keys == [None, "k", None, None, "k"]


def test_an_error_status_or_no_answer_is_server_unavailable(triton: TritonEndpoints) -> None:
    api = TritonApi(triton, None, "http://public:1")
    with pytest.raises(TritonUnavailableError, match="/v2/nothing answered 400"):
        api.json("GET", "/v2/nothing", None)
    gone = TritonApi(TritonEndpoints(host=LOOPBACK, http_port=1), None, "http://public:1")
    assert gone.status("GET", "/v2/health/live", 1) == 0 and not gone.answers_live(1)
    with pytest.raises(TritonUnavailableError, match="no answer to /v2/models/stats"):
        gone.loaded_models()


def test_tritonserver_finds_bash_whatever_path_the_caller_has(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The python backend starts each stub through `bash`: the system's folders are on tritonserver's PATH."""
    from mslite_server.triton_process import environment

    monkeypatch.setenv("PATH", "/nonexistent")
    folders = environment(tmp_path / "tritonserver", admin_key=None, weights_owner="o")["PATH"].split(":")
    assert "/nonexistent" in folders and {"/bin", "/usr/bin"} <= set(folders)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    folders = environment(tmp_path / "tritonserver", admin_key=None, weights_owner="o")["PATH"].split(":")
    assert folders.count("/bin") == 1 and folders.count("/usr/bin") == 1
