"""The container files, checked without a container engine: nothing in this module starts a container (`make
test-deploy` does, with podman: tests/containers).

docker-compose.yml (and its GPU override and scale-out profile) is validated by a real Compose implementation's
`config` command (Debian's docker-compose), whose normalised output is then checked: every bind mount points at a
real path in the repository, ports are on loopback, the GPU is reserved. The YAML is read with the YAML library
of that same Compose installation (the project's venv has none). The image's entrypoint script is run with the
wheel's `tritonserver` standing in for the image's, and serves through the gateway, and the image's healthcheck
script passes against it; the Kubernetes manifests (the plain Deployment + Service, and KServe's) are parsed and
checked for structure.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from mslite_contract import settings
from mslite_server.cli import DEFAULT_EXIT_TIMEOUT_S, build_parser
from mslite_server.ports import pick_ports
from mslite_server.workspace import triton_dir
from tests.support.repository import GEN, ROOT, add_model

pytestmark = pytest.mark.integration

APT_LINE = "apt-get update && apt-get install -y --no-install-recommends docker-compose"
KEY = "test-admin-key"
GPU_OVERRIDE = "deploy/compose.gpu.yml"
HEALTHCHECK = "mslite-triton-healthcheck"


@pytest.fixture(scope="module")
def compose() -> str:
    path = shutil.which("docker-compose")
    if path is None:
        pytest.fail(f"Debian's docker-compose is missing (scripts/check_system.sh says so too): {APT_LINE}")
    return path


def load_yaml(compose_bin: str, text: str) -> list[Any]:
    """Every document of `text`, read by the PyYAML that the docker-compose installation itself uses."""
    with open(compose_bin, encoding="utf-8", errors="replace") as f:
        shebang = f.readline()
    python = shlex.split(shebang[2:])[0] if shebang.startswith("#!") else "python3"
    code = "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(sys.stdin))))"
    out = subprocess.run([python, "-c", code], input=text, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return list(json.loads(out.stdout))


def compose_config(
    compose_bin: str, *files: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    args = [compose_bin, "--project-directory", str(ROOT)]
    for f in ("docker-compose.yml", *files):
        args += ["-f", str(ROOT / f)]
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("MSLITE_", "COMPOSE_", "DOCKER_"))}
    environ.update(env if env is not None else {settings.ADMIN_KEY_ENV: KEY})
    return subprocess.run([*args, "config"], capture_output=True, text=True, timeout=120, env=environ, cwd=ROOT)


@functools.cache
def services(compose_bin: str, *files: str) -> dict[str, Any]:
    out = compose_config(compose_bin, *files)
    assert out.returncode == 0, out.stderr
    (doc,) = load_yaml(compose_bin, out.stdout)
    return dict(doc["services"])


def bind_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(host source, container target) of each bind mount, in short or long syntax."""
    mounts = []
    for v in service.get("volumes", []):
        if isinstance(v, dict):
            if v.get("type") == "bind":
                mounts.append((v["source"], v["target"]))
        else:
            source, target = v.split(":")[:2]
            if source.startswith(("/", ".")):  # a named volume has no path
                mounts.append((source, target))
    return mounts


def published(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(host ip, container port) of each published port."""
    result = []
    for p in service.get("ports", []):
        if isinstance(p, dict):
            result.append((p.get("host_ip", ""), str(p["target"])))
        else:
            parts = str(p).split("/")[0].split(":")
            result.append((parts[0] if len(parts) == 3 else "", parts[-1]))
    return result


@pytest.mark.parametrize("files", [(), (GPU_OVERRIDE,)], ids=["cpu", "gpu"])
def test_compose_config_is_valid_and_mounts_are_real(compose, files):
    svcs = services(compose, *files)
    assert {"triton", "prometheus", "triton-replica", "nginx"} <= set(svcs)
    for name, svc in svcs.items():
        for source, _ in bind_mounts(svc):
            path = Path(source)
            assert path.is_absolute() and path.exists(), f"{name}: bind mount source {source} does not exist"
            assert path.resolve().is_relative_to(ROOT), f"{name}: {source} is outside the repository"
        for host_ip, port in published(svc):
            assert host_ip == "127.0.0.1", f"{name}: port {port} is published on '{host_ip or 'every interface'}'"
    for name in ("triton", "triton-replica"):
        triton = svcs[name]
        mounts = dict((t, s) for s, t in bind_mounts(triton))
        # the image's installed project is what serves (its launcher composes the backend); no copy mounted over it
        assert set(mounts) == {"/models"} and Path(mounts["/models"]) == ROOT / "model_repository"
        assert triton["build"]["dockerfile"] == "deploy/Dockerfile"
        assert triton["shm_size"] in ("1gb", "1g", 1 << 30)
        # the image's script (no argument with spaces: podman's Docker-compatible API would split it)
        assert triton["healthcheck"]["test"] == ["CMD", HEALTHCHECK, "8000"]
        assert triton["environment"][settings.ADMIN_KEY_ENV] == KEY
    assert {port for _, port in published(svcs["triton"])} == {"8000", "8001", "8002"}
    assert svcs["triton-replica"]["deploy"]["replicas"] >= 2 and not published(svcs["triton-replica"])
    assert svcs["nginx"]["depends_on"]["triton-replica"]["condition"] == "service_healthy"
    if files:
        (device,) = svcs["triton"]["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
        assert svcs["triton"]["build"]["args"]["ORT_PACKAGE"].startswith("onnxruntime-gpu==")
        assert svcs["triton"]["image"] != svcs["triton-replica"]["image"]
    else:
        assert "deploy" not in svcs["triton"]


def test_compose_requires_the_admin_key(compose):
    out = compose_config(compose, env={})
    assert out.returncode != 0
    assert settings.ADMIN_KEY_ENV in out.stderr


def test_compose_rejects_a_broken_file(compose, tmp_path):
    """The validator is real: a wrong type is refused (so the passes above mean something)."""
    text = (ROOT / "docker-compose.yml").read_text().replace("shm_size: 1gb", "shm_size: [1gb]")
    (tmp_path / "docker-compose.yml").write_text(text)
    out = subprocess.run(
        [compose, "-f", str(tmp_path / "docker-compose.yml"), "config"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, settings.ADMIN_KEY_ENV: KEY},
    )
    assert out.returncode != 0 and "shm_size" in out.stderr


def test_prometheus_scrapes_the_metrics_port(compose):
    (prom,) = load_yaml(compose, (ROOT / "deploy" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in prom["scrape_configs"]}
    assert jobs["triton"]["static_configs"][0]["targets"] == ["triton:8002"]
    (sd,) = jobs["triton-replicas"]["dns_sd_configs"]
    assert sd["names"] == ["triton-replica"] and sd["port"] == 8002
    svcs = services(compose)
    assert (ROOT / "deploy" / "prometheus.yml", "/etc/prometheus/prometheus.yml") in [
        (Path(s), t) for s, t in bind_mounts(svcs["prometheus"])
    ]


def dockerfile_cmd() -> list[str]:
    text = (ROOT / "deploy" / "Dockerfile").read_text().replace("\\\n", " ")
    (line,) = [line for line in text.splitlines() if line.startswith("CMD ")]
    return list(json.loads(line[4:]))


def test_image_is_the_triton_release_with_what_the_backend_needs():
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    # Triton 2.59.1: the first release with the fixes for 2.51's public advisories
    assert "ARG TRITON_IMAGE=nvcr.io/nvidia/tritonserver:25.07-py3" in text
    (numpy,) = re.findall(r"NUMPY_PACKAGE=numpy==(\d+)\.", text)
    assert int(numpy) < 2 and "ORT_PACKAGE=onnxruntime==" in text  # numpy 2 empties every output
    assert "ONNX_PACKAGE=onnx==" in text  # the backend imports onnx
    assert f"COPY deploy/triton-healthcheck.py /usr/local/bin/{HEALTHCHECK}" in text
    assert f'HEALTHCHECK --interval=5s --timeout=3s --retries=5 --start-period=120s CMD ["{HEALTHCHECK}"]' in text
    ignored = [p for p in (ROOT / ".dockerignore").read_text().splitlines() if p and not p.startswith("#")]
    assert ignored[0] == "*"  # everything out, then only what the image needs back in
    for line in text.splitlines():
        if line.startswith("COPY ") and not line.startswith("COPY --from="):  # not from a build stage
            source = line.split()[1]
            assert (ROOT / source).exists(), source
            assert f"!{source}" in ignored, f"{source} is excluded from the build context by .dockerignore"
    flags = dockerfile_cmd()
    assert "--model-repository=/models" in flags and "--host=0.0.0.0" in flags
    assert f"ENV {settings.SERVER_BIN_ENV}=/opt/tritonserver/bin/tritonserver" in text
    # the shm_private library, built in a stage of its own (tritonserver's regions 0600 from their creation)
    assert f"ENV {settings.SHM_PRELOAD_ENV}=/opt/mslite-triton/lib/libmslite_shm_private.so" in text
    assert "COPY --from=shm-private /libmslite_shm_private.so /opt/mslite-triton/lib/" in text
    assert "nvidia-pytriton" not in text.replace("nvidia-pytriton wheel", "")  # no second tritonserver


def test_the_entrypoint_serves_through_the_gateway_in_front_of_the_given_tritonserver(tmp_path):
    """The image's entrypoint with the image's command, run here with the wheel's tritonserver as the image's."""
    repo = tmp_path / "repo"
    add_model(repo, "tiny", GEN.build_tiny())
    http, grpc_, metrics = pick_ports([("127.0.0.1", 0, "free")] * 3)
    wanted = {"--model-repository": repo, "--host": "127.0.0.1", "--http-port": http, "--grpc-port": grpc_,
              "--metrics-port": metrics}  # fmt: skip
    cmd = dockerfile_cmd()
    assert sorted(flag.split("=")[0] for flag in cmd) == sorted(wanted)  # the image's options, our values
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        settings.ADMIN_KEY_ENV: KEY,
        settings.SERVER_BIN_ENV: str(triton_dir() / "bin" / "tritonserver"),
    }
    proc = subprocess.Popen(
        ["sh", str(ROOT / "deploy" / "triton-entrypoint.sh"), *(f"{k}={v}" for k, v in wanted.items())],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []
    try:
        while not (lines and lines[-1].startswith("serving")):
            line = proc.stdout.readline()
            assert line, proc.stderr.read()[-3000:]
            lines.append(line)
        printed = "".join(lines)
        assert "tritonserver itself on Unix sockets in" in printed and KEY not in printed, printed
        assert f"ADMIN KEY from {settings.ADMIN_KEY_ENV}" in printed
        body = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]})
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/models/tiny/infer", body.encode(), timeout=60) as r:
            assert len(json.load(r)["outputs"][0]["data"]) == 4
        index = urllib.request.Request(f"http://127.0.0.1:{http}/v2/repository/index", b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:  # model control needs the deployment's key
            urllib.request.urlopen(index, timeout=30)
        assert refused.value.code == 403
        index.add_header("mslite-key", KEY)
        with urllib.request.urlopen(index, timeout=30) as r:
            assert [m["name"] for m in json.load(r)] == ["tiny"]
        assert healthcheck(http).returncode == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    unhealthy = healthcheck(http)
    assert unhealthy.returncode == 1 and "not ready" in unhealthy.stderr


def healthcheck(port: int) -> subprocess.CompletedProcess[str]:
    """The image's healthcheck script, as the engine runs it, against a server on `port`."""
    script = ROOT / "deploy" / "triton-healthcheck.py"
    return subprocess.run([sys.executable, str(script), str(port)], capture_output=True, text=True, timeout=60)


def test_kserve_manifest_structure(compose):
    docs = load_yaml(compose, (ROOT / "deploy" / "kubernetes" / "kserve.yaml").read_text())
    by_kind = {d["kind"]: d for d in docs}
    assert set(by_kind) == {"ServingRuntime", "InferenceService"}
    runtime, isvc = by_kind["ServingRuntime"], by_kind["InferenceService"]
    assert runtime["apiVersion"] == "serving.kserve.io/v1alpha1"
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["modelFormat"]["name"] in {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    assert "v2" in runtime["spec"]["protocolVersions"]
    (container,) = runtime["spec"]["containers"]
    args = container["args"]
    # the image's serving flags, with KServe's model dir and ports
    same = [f for f in dockerfile_cmd() if not f.startswith(("--model-repository=", "--http-port=", "--grpc-port="))]
    assert [a for a in args if a in same] == same
    assert "--model-repository=/mnt/models" in args and "--http-port=8080" in args
    assert build_parser().parse_args(["serve", *args]).http_port == 8080  # options `serve` takes
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    (key_env,) = [e for e in container["env"] if e["name"] == settings.ADMIN_KEY_ENV]
    assert "secretKeyRef" in key_env["valueFrom"]
    (shm,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    volumes = {v["name"]: v for v in runtime["spec"]["volumes"]}
    assert volumes[shm["name"]]["emptyDir"]["medium"] == "Memory"


def test_plain_kubernetes_manifest_structure(compose):
    """deploy/kubernetes/mslite-triton.yaml: a Deployment of the image with `serve`'s options and a Service in front.
    `make test-deploy` validates it against Kubernetes' schemas and plays its Deployment with podman."""
    docs = load_yaml(compose, (ROOT / "deploy" / "kubernetes" / "mslite-triton.yaml").read_text())
    by_kind = {d["kind"]: d for d in docs}
    assert set(by_kind) == {"Deployment", "Service"}
    deployment, service = by_kind["Deployment"], by_kind["Service"]
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    (container,) = pod["spec"]["containers"]
    assert container["args"] == dockerfile_cmd()  # the image's options, stated
    assert build_parser().parse_args(["serve", *container["args"]]).http_port == 8000
    assert pod["spec"]["terminationGracePeriodSeconds"] > DEFAULT_EXIT_TIMEOUT_S  # a stop is never a kill
    (key_env,) = [e for e in container["env"] if e["name"] == settings.ADMIN_KEY_ENV]
    assert "secretKeyRef" in key_env["valueFrom"]
    assert not [a for a in container["args"] if "key" in a.lower()]  # the key by environment only
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    assert {p["targetPort"] for p in service["spec"]["ports"]} == set(ports)
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert mounts["/models"]["readOnly"] and "persistentVolumeClaim" in volumes[mounts["/models"]["name"]]
    assert volumes[mounts["/dev/shm"]["name"]]["emptyDir"]["medium"] == "Memory"
