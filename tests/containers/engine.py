"""Podman and the images scripts/deploy_setup.sh built, for the container tests; the checks a user would make.

Podman runs with runc and without default ulimits (/etc/containers/containers.conf, written by the set-up);
its healthcheck timers need systemd, which is not PID 1 here, so the tests run `podman healthcheck run`
themselves where the engine's timer would.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.repository import ROOT

IMAGE = "localhost/mslite-triton:local"  # deploy/Dockerfile on localhost/mslite-triton-base:2.51
DEPLOY_VENV = ROOT / ".deploy-venv"  # kubernetes-validate (and PyYAML with it), made by the set-up
TINY = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}).encode()


def podman(*args: str, check: bool = True, timeout: float = 300, **kw: Any) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, **kw)
    if check and out.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: rc {out.returncode}: {out.stderr[-3000:]}")
    return out


def inspect(container: str, template: str) -> str:
    return podman("inspect", container, "--format", template).stdout.strip()


def http_status(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, data, headers or {}, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def wait_ready(port: int, container: str, timeout: float = 300) -> None:
    """Until the published port answers ready; fails with the container's log if it does not in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if http_status(f"http://127.0.0.1:{port}/v2/health/ready") == 200:
                return
        except OSError:
            pass
        time.sleep(2)
    log = podman("logs", container, check=False).stderr[-4000:]
    raise AssertionError(f"{container} not ready on 127.0.0.1:{port} within {timeout:.0f} s:\n{log}")


def infer_tiny(port: int) -> list[float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/tiny/infer", TINY, timeout=60) as r:
        return list(json.load(r)["outputs"][0]["data"])


def metrics_in(container: str) -> str:
    """Triton's metrics as the container serves them on its metrics port (8002), read from inside it."""
    code = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8002/metrics', timeout=10).read().decode())"
    return podman("exec", container, "python3", "-c", code).stdout


def successes(metrics: str, model: str) -> int:
    """nv_inference_request_success of `model` (its one version), 0 when absent."""
    prefix = f'nv_inference_request_success{{model="{model}",'
    return sum(int(float(line.split()[-1])) for line in metrics.splitlines() if line.startswith(prefix))


def tcp_listeners(container: str) -> set[int]:
    """The ports with a listening TCP socket in the container's network namespace (IPv4 and IPv6)."""
    text = podman("exec", container, "cat", "/proc/net/tcp", "/proc/net/tcp6").stdout
    ports = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def healthcheck(container: str) -> subprocess.CompletedProcess[str]:
    """The image's (or the compose file's) healthcheck command, run once by the engine, as its timer would."""
    return podman("healthcheck", "run", container, check=False, timeout=60)


def mobilenet_reference() -> tuple[str, np.ndarray, str, np.ndarray]:
    """(input name, input, output name, output) of the repository's mobilenetv2 by in-process ONNX Runtime."""
    import onnxruntime as ort

    folder = ROOT / "model_repository" / "mobilenetv2"
    x = np.fromfile(folder / "input.bin", dtype=np.float32).reshape(1, 3, 224, 224)
    session = ort.InferenceSession(str(folder / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    x_name, y_name = session.get_inputs()[0].name, session.get_outputs()[0].name
    (y,) = session.run([y_name], {x_name: x})
    return x_name, x, y_name, np.asarray(y)


def yaml_documents(path: Path) -> list[Any]:
    """Every document of a YAML file, read by the PyYAML of the set-up's tools venv (the project's has none)."""
    code = "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))"
    out = subprocess.run([str(DEPLOY_VENV / "bin" / "python"), "-c", code, str(path)], capture_output=True,
                         text=True, timeout=60, check=True)  # fmt: skip
    return list(json.loads(out.stdout))
