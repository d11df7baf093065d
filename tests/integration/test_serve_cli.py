"""`mslite-triton serve` as a newcomer runs it: Triton on private sockets, and a SIGTERM that says what it does."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mslite_contract import settings
from mslite_server.ports import pick_ports

pytestmark = pytest.mark.integration


def test_serve_puts_triton_on_private_sockets_and_reports_a_sigterm(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    ports = [str(p) for p in pick_ports([("127.0.0.1", 0, "free")] * 3)]
    env = {**os.environ, settings.KEY_DIR_ENV: str(tmp_path / "keys")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mslite_server.cli", "serve", "--model-repository", str(repo),
         "--http-port", ports[0], "--grpc-port", ports[1], "--metrics-port", ports[2], "--exit-timeout-s", "5"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines = []
    try:
        while not (lines and lines[-1].startswith("serving")):
            line = proc.stdout.readline()
            assert line or proc.poll() is None, proc.stderr.read()[-3000:]
            lines.append(line)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=90)
    printed = "".join(lines)
    sockets = re.search(
        r"tritonserver itself on Unix sockets in (\S+)/ \(mode 0700: this user only; gRPC: (\S+)\)", printed
    )
    assert sockets and sockets[2] == f"unix:{sockets[1]}/grpc:0", printed
    assert proc.returncode == 0, err[-3000:]
    assert "mslite-triton: SIGTERM received: stopping (requests in flight get up to 5 s)" in err, err[-3000:]
    assert "mslite-triton: stopped" in err


def test_why_a_repository_model_failed_to_load_reaches_a_remote_client(server):
    import mslite_triton as mslite

    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    runner = mslite.ModelParallelRunner()
    with pytest.raises(RuntimeError) as info:
        runner.build_from_file("triton://corrupt", ctx)
    text = str(info.value)
    assert text.startswith("ModelParallelRunner's build from file failed! Error is kLiteError: "), text
    assert "model 'corrupt' failed to load on the server: model file 'model.onnx' is not a valid ONNX" in text, text
    assert "At:" not in text and str(server.config.model_repository) not in text, text
