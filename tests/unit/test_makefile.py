"""The README's commands install what each needs, no more (`make -n` on a venv that does not exist yet)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _installs(target: str, tmp_path: Path) -> list[str]:
    if shutil.which("make") is None:
        pytest.fail("make is needed: `make demo` / `make test` are the README's commands")
    proc = subprocess.run(
        ["make", "-n", target, f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return re.findall(r"pip install -q -e '\.\[([^\]]*)\]'", proc.stdout)


def test_demo_installs_only_the_server(tmp_path: Path) -> None:
    assert _installs("demo", tmp_path) == ["server"]


def test_demo_runs_the_sample_a_whole_line_at_a_time(tmp_path: Path) -> None:
    proc = subprocess.run(["make", "-n", "demo", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True, text=True)
    assert re.search(r"python \.\./scripts/whole_lines\.py quick_start_parallel_python\.py$", proc.stdout, re.M)


def test_test_installs_what_the_tests_need(tmp_path: Path) -> None:
    extras = {e for line in _installs("test", tmp_path) for e in line.split(",")}
    assert extras == {"server", "test", "mindir", "tune"}


def test_serve_takes_port_variables(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["make", "-n", "serve", f"VENV={tmp_path / 'venv'}", "HTTP_PORT=9000", "GRPC_PORT=9001", "METRICS_PORT=9002"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "--http-port 9000" in proc.stdout and "--grpc-port 9001" in proc.stdout
    assert "--metrics-port 9002" in proc.stdout
