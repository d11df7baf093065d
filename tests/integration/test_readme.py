"""The README's quick start runs as printed, against the real server, and prints MobileNetV2's outputs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mslite_contract import settings
from tests.support.model_zoo import run_reference
from tests.support.repository import GEN, ROOT

pytestmark = pytest.mark.integration


def _quick_start() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README has no python block under 'Quick start'"
    return match.group(1)


def test_readme_quick_start_names_the_missing_model(tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, "-c", _quick_start()], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode != 0
    said = "ModelParallelRunner's build from file failed, model_path does not exist! model_path: "
    last = proc.stderr.strip().splitlines()[-1]
    assert last == f"RuntimeError: {said}examples/model/mobilenetv2.onnx", proc.stderr[-3000:]
    readme = " ".join((ROOT / "README.md").read_text().split("## Quick start", 1)[1].split())
    assert f"`{last}`" in readme  # what the README says it stops with


def test_readme_quick_start_runs(server, tmp_path: Path):
    model_dir = tmp_path / "examples" / "model"
    model_dir.mkdir(parents=True)
    (model_dir / "mobilenetv2.onnx").write_bytes(GEN.build_mobilenetv2().SerializeToString())
    x = GEN.make_input_bin()
    (model_dir / "input.bin").write_bytes(x.tobytes())
    proc = subprocess.run(
        [sys.executable, "-c", _quick_start()],
        cwd=tmp_path,
        env={**os.environ, settings.URL_ENV: server.grpc_url, settings.LOG_ENV: "info"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the log variable at info (what `make demo` sets) says where the model went and with how many workers
    said = r"mslite_triton: model '\S+' (loaded at \S+: 2 worker\(s\) x 1 thread|already loaded)"
    assert re.search(said, proc.stderr), proc.stderr[-3000:]
    (expected,) = run_reference(GEN.build_mobilenetv2(), {"input": x.reshape(1, 3, 224, 224)})
    printed = [float(v) for v in re.findall(r"[-+]?\d+\.\d+(?:e[-+]?\d+)?", proc.stdout.split("]", 1)[1])]
    np.testing.assert_allclose(printed, expected.flatten()[:3], rtol=1e-5)
    section = (ROOT / "README.md").read_text().split("## Quick start", 1)[1]
    shown = re.search(r"It prints.*?```\n(.*?)```", section, re.S)
    assert shown, "README's quick start shows no expected output"
    assert proc.stdout.strip() == shown.group(1).strip()  # the output a reader is told to expect
