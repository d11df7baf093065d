"""The tools venv (`.tools-venv/`) of the tests and benchmarks: perf_analyzer and matplotlib, kept out of the main
environment.

perf_analyzer comes from the `tritonclient==2.40.0` wheel (the current perf-analyzer package needs a newer
glibc than Debian 12's); it needs `libcudart.so.12` (PyPI `nvidia-cuda-runtime-cu12`) and Debian's
`libb64-0d`. matplotlib lives here too, so the main venv keeps only the project's own dependencies; the
plot is drawn by `plot.py` run with this venv's Python.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mslite_server.tune import cuda_runtime_dir
from tests.support.perf_analyzer import perf_env

REQUIREMENTS = (
    "tritonclient==2.40.0",
    "nvidia-cuda-runtime-cu12==12.9.79",
    "matplotlib==3.11.2",
)
APT_PACKAGE = "libb64-0d"
_STAMP = ".bench-requirements"


class ToolsError(RuntimeError):
    """The tools venv could not be created, or perf_analyzer does not run."""


@dataclass(frozen=True)
class Tools:
    """Where the tools are and how to run them."""

    perf_analyzer: Path
    python: Path
    env: dict[str, str]  # environment for perf_analyzer (perf_env: LD_LIBRARY_PATH with libcudart)
    version: str


def ensure_tools(root: Path, *, note: Callable[[str], None] = lambda _: None) -> Tools:
    """Create or reuse `<root>/.tools-venv`, install what is missing, and check perf_analyzer starts.

    Raises:
        ToolsError: pip or apt failed, or perf_analyzer does not run (the message says why).
    """
    venv = root / ".tools-venv"
    python = venv / "bin" / "python"
    if not python.exists():
        note(f"creating {venv}")
        _run([sys.executable, "-m", "venv", "--clear", str(venv)], "python -m venv")
    stamp = venv / _STAMP
    wanted = "\n".join(REQUIREMENTS)
    if not stamp.exists() or stamp.read_text() != wanted:
        note(f"installing {' '.join(REQUIREMENTS)} into {venv}")
        _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *REQUIREMENTS], "pip install")
        stamp.write_text(wanted)
    _ensure_libb64(note)
    binary = venv / "bin" / "perf_analyzer"
    libdir = cuda_runtime_dir(binary)
    if libdir is None:
        raise ToolsError(f"nvidia/cuda_runtime/lib not found in {venv}; delete the venv and rerun")
    env = perf_env(binary)
    out = subprocess.run([str(binary), "--version"], env=env, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise ToolsError(f"perf_analyzer does not run (exit {out.returncode}): {(out.stderr or out.stdout)[-800:]}")
    version = (out.stdout + out.stderr).strip().splitlines()
    return Tools(perf_analyzer=binary, python=python, env=env, version=version[-1] if version else "unknown")


def _ensure_libb64(note: Callable[[str], None]) -> None:
    listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    if "libb64.so.0d" in listing:
        return
    line = f"apt-get update && apt-get install -y {APT_PACKAGE}"
    if os.geteuid() != 0:
        raise ToolsError(f"perf_analyzer needs Debian's {APT_PACKAGE}; run as root: {line}")
    note(f"installing {APT_PACKAGE} (apt-get)")
    _run(["apt-get", "update", "-qq"], "apt-get update")
    _run(["apt-get", "install", "-y", "-qq", APT_PACKAGE], "apt-get install")


def _run(cmd: list[str], what: str) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise ToolsError(f"{what} failed (exit {out.returncode}): {(out.stderr or out.stdout)[-1500:]}")
