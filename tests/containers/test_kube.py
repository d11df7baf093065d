"""The Kubernetes manifests: validated against Kubernetes' schemas (kubernetes-validate, from PyPI, with the
schemas it ships), and deploy/kubernetes/mslite-triton.yaml's Deployment started with `podman kube play`.

Podman 4.3 plays the Deployment (a pod per replica; it ignores the Service and the probes) and publishes ports
only through `hostPort`, so the test plays an overlay of the manifest: one replica, the local image, hostPorts on
free loopback ports. The manifest's Secret and PersistentVolumeClaim are made the podman way first: a podman
secret of the same name (podman reads a Secret's keys from JSON, base64 values) and a podman volume of the
claim's name holding the repository's models. The checks: the key from the Secret reaches the server's
environment and gates model control, the volumes are mounted where the manifest says, and every probe's path
answers 200 on its port.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mslite_contract import settings
from mslite_contract.protocol import ADMIN_KEY_HEADER
from mslite_server.ports import pick_ports
from tests.containers.engine import DEPLOY_VENV, IMAGE, http_status, infer_tiny, podman, wait_ready, yaml_documents
from tests.support.repository import ROOT

MANIFEST = ROOT / "deploy" / "kubernetes" / "mslite-triton.yaml"
KSERVE = ROOT / "deploy" / "kubernetes" / "kserve.yaml"


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    cmd = [str(DEPLOY_VENV / "bin" / "kubernetes-validate"), "--strict", str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_the_plain_manifest_validates_against_kubernetes_schemas(tmp_path):
    out = validate(MANIFEST)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "passed for resource deployment/mslite-triton" in out.stdout
    assert "passed for resource service/mslite-triton" in out.stdout
    # the validator is real: a wrong type and an unknown field are refused
    broken = tmp_path / "broken.yaml"
    broken.write_text(MANIFEST.read_text().replace("periodSeconds: 5", "periodSeconds: five", 1))
    assert validate(broken).returncode != 0
    broken.write_text(MANIFEST.read_text().replace("readOnly: true", "readOnly: true\n              readonly: true", 1))
    assert validate(broken).returncode != 0


def test_the_kserve_runtime_container_validates_as_a_pod(tmp_path):
    """No KServe CRD schema is to be had here: the ServingRuntime's containers and volumes (core Kubernetes
    types) are validated as a Pod's."""
    (runtime,) = [d for d in yaml_documents(KSERVE) if d["kind"] == "ServingRuntime"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kserve-runtime"},
           "spec": {"containers": runtime["spec"]["containers"], "volumes": runtime["spec"]["volumes"]}}  # fmt: skip
    path = tmp_path / "pod.json"
    path.write_text(json.dumps(pod))
    out = validate(path)
    assert out.returncode == 0 and "passed for resource pod/kserve-runtime" in out.stdout, out.stdout + out.stderr


@dataclass
class Played:
    overlay: Path
    container: Any
    name: str
    key: str
    ports: dict[str, int]  # container port name -> host port


def overlay(tmp_path: Path, ports: list[int]) -> tuple[Path, dict[str, Any], dict[str, int]]:
    docs = yaml_documents(MANIFEST)
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    deployment["spec"]["replicas"] = 1
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    container["image"] = IMAGE
    host = {}
    for port, free in zip(container["ports"], ports, strict=True):
        port["hostPort"], port["hostIP"] = free, "127.0.0.1"
        host[port["name"]] = free
    path = tmp_path / "mslite-triton.play.json"
    path.write_text(json.dumps(deployment))  # JSON is YAML
    return path, container, host


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Played]:
    tmp = tmp_path_factory.mktemp("kube")
    path, container, ports = overlay(tmp, pick_ports([("127.0.0.1", 0, "free")] * 3))
    (key_env,) = [e for e in container["env"] if e["name"] == settings.ADMIN_KEY_ENV]
    secret = key_env["valueFrom"]["secretKeyRef"]
    claim = next(v for v in yaml_documents(MANIFEST)[0]["spec"]["template"]["spec"]["volumes"] if v["name"] == "models")
    volume = claim["persistentVolumeClaim"]["claimName"]
    key = secrets.token_hex(24)
    data = json.dumps({secret["key"]: base64.b64encode(key.encode()).decode()})
    podman("secret", "rm", secret["name"], check=False)
    podman("secret", "create", secret["name"], "-", input=data)
    podman("volume", "rm", "-f", volume, check=False)
    podman("volume", "create", volume)
    models = tmp / "models.tar"
    with tarfile.open(models, "w") as tar:
        tar.add(ROOT / "model_repository", arcname=".")
    podman("volume", "import", volume, str(models))
    name = f"{yaml_documents(MANIFEST)[0]['metadata']['name']}-pod-0-{container['name']}"
    try:
        podman("kube", "play", str(path))
        wait_ready(ports["http"], name)
        yield Played(path, container, name, key, ports)
    finally:
        podman("kube", "down", str(path), check=False)
        podman("secret", "rm", secret["name"], check=False)
        podman("volume", "rm", "-f", volume, check=False)


def test_the_key_from_the_secret_gates_model_control(played):
    env = podman("exec", played.name, "printenv", settings.ADMIN_KEY_ENV).stdout.strip()
    assert env == played.key
    index = f"http://127.0.0.1:{played.ports['http']}/v2/repository/index"
    assert http_status(index, b"{}") == 403
    assert http_status(index, b"{}", {ADMIN_KEY_HEADER: played.key}) == 200
    assert infer_tiny(played.ports["http"]) == [3.0, 5.0, 7.0, 9.0]
    args = podman("inspect", played.name, "--format", "{{json .Args}}").stdout
    assert played.key not in args and json.loads(args)[-len(played.container["args"]) :] == played.container["args"]


def test_the_volumes_are_mounted_where_the_manifest_says(played):
    mounts = json.loads(podman("inspect", played.name, "--format", "{{json .Mounts}}").stdout)
    by_target = {m["Destination"]: m for m in mounts}
    for mount in played.container["volumeMounts"]:
        assert mount["mountPath"] in by_target, mounts
        assert (not by_target[mount["mountPath"]]["RW"]) == bool(mount.get("readOnly")), by_target[mount["mountPath"]]
    listing = podman("exec", played.name, "ls", "/models").stdout.split()
    assert {"mobilenetv2", "tiny"} <= set(listing)
    probe = "import os; p = '/dev/shm/mslite-kube-probe'; open(p, 'w').close(); os.remove(p)"
    podman("exec", played.name, "python3", "-c", probe)  # /dev/shm writable


def test_every_probe_path_answers_on_its_port(played):
    for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
        get = played.container[kind]["httpGet"]
        port = played.ports[get["port"]] if isinstance(get["port"], str) else get["port"]
        assert http_status(f"http://127.0.0.1:{port}{get['path']}") == 200, kind
