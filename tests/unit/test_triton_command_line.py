"""Tritonserver's command line carries the admin key only where Triton must check it itself (no gateway)."""

from __future__ import annotations

from pathlib import Path

from mslite_contract import settings
from mslite_server.config import ServerConfig
from mslite_server.triton_endpoints import TritonEndpoints
from mslite_server.triton_process import command_line, environment
from mslite_server.workspace import Workspace

KEY = "the-admin-key-0123456789"


def _args(endpoints: TritonEndpoints, tmp_path: Path) -> list[str]:
    ws = Workspace()
    try:
        cfg = ServerConfig(model_repository=tmp_path)
        return command_line(
            "tritonserver", cfg, workspace=ws, endpoints=endpoints, metrics_port=8002, admin_key=KEY, load_models=()
        )
    finally:
        ws.remove()


def test_behind_the_gateway_the_key_is_on_no_command_line(tmp_path: Path):
    args = _args(TritonEndpoints(socket_dir=tmp_path / "sock"), tmp_path)
    assert not [a for a in args if KEY in a or "restricted" in a]
    env = environment(Path("/nonexistent/tritonserver"), admin_key=KEY, weights_owner="o")
    assert env[settings.ADMIN_KEY_ENV] == KEY  # the workers check weights updates against it


def test_without_the_gateway_triton_restricts_its_admin_apis_itself(tmp_path: Path):
    args = _args(TritonEndpoints(host="127.0.0.1", http_port=8000, grpc_port=8001), tmp_path)
    assert sum(KEY in a for a in args) == 2  # the HTTP and the gRPC flag: what `serve --no-gateway` warns about
