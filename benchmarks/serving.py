"""The benchmark's server: a composed model repository, a `LocalServer` with the naive backend (and,
when given, Triton's C++ ONNX Runtime backend) beside ours, explicit model load/unload, and CPU accounting from
/proc and Triton's statistics.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
from onnx import TensorProto

from mslite_server import LocalServer, ServerConfig
from tests.support.processes import model_worker_pids

NAIVE_MODEL_PY = Path(__file__).parent / "naive_backend" / "model.py"
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_TRITON_TYPES = {TensorProto.FLOAT: "TYPE_FP32", TensorProto.INT64: "TYPE_INT64", TensorProto.INT32: "TYPE_INT32"}


@dataclass(frozen=True)
class ModelSpec:
    """One model of the composed repository: which source model, which backend, how many workers and threads."""

    name: str
    source: str  # directory name under model_repository/
    backend: str  # "mslite", "naive" or "onnxruntime" (Triton's C++ backend, the peer)
    workers: int
    threads: int
    max_queue_size: int = 0  # ours: an opt-in queue bound (0: the repository config as shipped, no bound)


PEER_LIBRARY = "libtriton_onnxruntime.so"
UNLOAD_WAIT_S = 60.0


def find_peer_backend(folder: Path) -> Path:
    """The folder holding Triton's C++ ONNX Runtime backend: `folder` itself or its `onnxruntime/`.

    Takes a built backend folder, or a backends directory such as a Triton container's
    `/opt/tritonserver/backends`.

    Raises:
        FileNotFoundError: no libtriton_onnxruntime.so in either place.
    """
    for candidate in (folder, folder / "onnxruntime"):
        if (candidate / PEER_LIBRARY).is_file():
            return candidate
    raise FileNotFoundError(f"no {PEER_LIBRARY} in {folder} or {folder / 'onnxruntime'}")


def peer_ort_version(backend: Path) -> str:
    """The ONNX Runtime version the C++ backend folder ships (from its libonnxruntime.so.X.Y.Z), or "unknown"."""
    found = sorted(
        m.group(1) for f in backend.iterdir() if (m := re.fullmatch(r"libonnxruntime\.so\.(\d+\.\d+\.\d+)", f.name))
    )
    return found[-1] if found else "unknown"


def with_batcher(text: str, batcher: str) -> str:
    """A config.pbtxt's text with its `dynamic_batching` block (if any) replaced by `batcher`."""
    text = re.sub(r"(?ms)^dynamic_batching \{.*?^\}\n", "", text)
    if not re.search(r"(?m)^max_batch_size", text):  # Triton checks preferred sizes against it before auto-complete
        text += "max_batch_size: 64\n"
    return text + batcher


def ours_config(source_text: str, workers: int, threads: int, max_queue_size: int = 0) -> str:
    """The repository's config.pbtxt with the instance count and `thread_num` set; the rest kept as is
    (but for an opt-in queue bound, which replaces the batcher section by the CPU defaults plus the bound)."""
    text = re.sub(r"(?m)^instance_group.*\n?", "", source_text)
    if max_queue_size:
        bound = f"default_queue_policy {{ max_queue_size: {max_queue_size} }}"
        text = with_batcher(text, f"dynamic_batching {{ preferred_batch_size: [ 2 ] {bound} }}\n")
    text = re.sub(r'(?m)^parameters \{ key: "(thread_num|intra_op_thread_count)".*\n?', "", text)
    return (
        text.rstrip("\n")
        + f"\ninstance_group [ {{ kind: KIND_CPU, count: {workers} }} ]\n"
        + f'parameters {{ key: "thread_num" value {{ string_value: "{threads}" }} }}\n'
    )


def naive_config(onnx_path: Path, workers: int, threads: int, backend: str = "naive") -> str:
    """An explicit config for the naive backend (it has no auto-complete): tensors read from the ONNX file.

    With `backend` "onnxruntime", the same config for Triton's C++ backend: its batcher as Triton's
    defaults give it (merging requests into batches), one inter-op thread.
    """
    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}

    def entries(values: Any) -> str:
        out = []
        for v in values:
            if v.name in initializers:
                continue
            t = v.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim][1:]
            out.append(f'{{ name: "{v.name}" data_type: {_TRITON_TYPES[t.elem_type]} dims: {dims} }}')
        return ", ".join(out)

    text = (
        f'backend: "{backend}"\nmax_batch_size: 64\n'
        "dynamic_batching { max_queue_delay_microseconds: 0 }\n"
        f"input [ {entries(graph.input)} ]\noutput [ {entries(graph.output)} ]\n"
        f"instance_group [ {{ kind: KIND_CPU, count: {workers} }} ]\n"
        f'parameters {{ key: "intra_op_thread_count" value {{ string_value: "{threads}" }} }}\n'
    )
    if backend == "onnxruntime":
        text += 'parameters { key: "inter_op_thread_count" value { string_value: "1" } }\n'
    return text


def compose_repository(root: Path, source_repo: Path, specs: list[ModelSpec]) -> Path:
    """Write one model directory per spec under `root` (model file copied, config adjusted)."""
    for spec in specs:
        src = source_repo / spec.source
        onnx_path = src / "1" / "model.onnx"
        if not onnx_path.exists():
            raise FileNotFoundError(f"{onnx_path} is missing: run `make models` first")
        dst = root / spec.name
        (dst / "1").mkdir(parents=True)
        shutil.copy2(onnx_path, dst / "1" / "model.onnx")
        if spec.backend in ("naive", "onnxruntime"):
            text = naive_config(onnx_path, spec.workers, spec.threads, spec.backend)
        else:
            text = ours_config((src / "config.pbtxt").read_text(), spec.workers, spec.threads, spec.max_queue_size)
        (dst / "config.pbtxt").write_text(text)
    return root


class BenchServer:
    """A `LocalServer` on loopback, with `backends/naive/model.py` (and the C++ peer's folder, when given)
    added before start; models loaded on demand."""

    def __init__(
        self, repository: Path, peer_backend: Path | None = None, extra_backends: dict[str, Path] | None = None
    ) -> None:
        self.peer_backend = peer_backend
        self.extra_backends = dict(extra_backends or {})  # backend name -> a folder like backend/mslite
        # perf_analyzer cannot send the admin key over gRPC (its -H is HTTP-only), and `--shared-memory
        # system` registers regions through the restricted API: the benchmark's server runs unrestricted.
        # A supervisor restart would change the worker pids mid-measurement: off too. (Either switch is
        # passed only when this version of ServerConfig has it.)
        wanted = {"restrict_admin": False, "supervise": False}
        known = {f.name for f in dataclasses.fields(ServerConfig)}
        self.lifted = {k: v for k, v in wanted.items() if k in known}
        config = ServerConfig(model_repository=repository, load_models=(), **self.lifted)  # type: ignore[arg-type]
        self.server = LocalServer(config)
        self.loaded: set[str] = set()

    def start(self) -> BenchServer:
        naive = self.server.workspace.backends / "naive"
        naive.mkdir(parents=True, exist_ok=True)
        shutil.copy2(NAIVE_MODEL_PY, naive / "model.py")
        if self.peer_backend is not None:  # beside python/ and mslite/, as in a Triton container's backends/
            shutil.copytree(self.peer_backend, self.server.workspace.backends / "onnxruntime", symlinks=True)
        for name, folder in self.extra_backends.items():
            shutil.copytree(folder, self.server.workspace.backends / name, symlinks=True)
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
        self.server.remove_workspace()

    @property
    def pid(self) -> int:
        assert self.server.process is not None, "server not started"
        return self.server.process.pid

    @property
    def grpc_address(self) -> str:
        """`host:port` as perf_analyzer wants it."""
        return f"{self.server.config.host}:{self.server.grpc_port}"

    def load(self, name: str) -> None:
        """Load `name` (the call returns once its workers are up and warmed)."""
        self._post(f"/v2/repository/models/{name}/load")
        self.loaded.add(name)

    def unload(self, name: str) -> None:
        """Unload `name` and wait until its worker processes are gone.

        Raises:
            RuntimeError: some of them still run after `UNLOAD_WAIT_S`.
        """
        self._post(f"/v2/repository/models/{name}/unload")  # returns before Triton has stopped the workers
        self.loaded.discard(name)
        deadline = time.monotonic() + UNLOAD_WAIT_S
        while left := model_worker_pids(self.pid, name):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: worker processes {left} still run {UNLOAD_WAIT_S:.0f} s after unload")
            time.sleep(0.2)

    def only(self, *names: str) -> None:
        """Make `names` the loaded models (nothing else keeps worker processes alive)."""
        for other in sorted(self.loaded - set(names)):
            self.unload(other)
        for name in names:
            if name not in self.loaded:
                self.load(name)

    def inference_count(self, name: str) -> tuple[int, int]:
        """(inferences, executions) from Triton's statistics: images served and worker `execute` calls."""
        body = self._get(f"/v2/models/{name}/stats")
        stats = body["model_stats"][0]
        return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))

    def cpu_s(self, model: str) -> tuple[float, float]:
        """(CPU seconds of `model`'s worker processes, CPU seconds of tritonserver itself), from /proc."""
        workers = sum(process_cpu_s(pid) for pid in model_worker_pids(self.pid, model))
        return workers, process_cpu_s(self.pid)

    def batcher(self, name: str) -> dict[str, Any]:
        """The dynamic_batching section `name` is served with (after auto-complete)."""
        return dict(self._get(f"/v2/models/{name}/config").get("dynamic_batching") or {})

    def _headers(self) -> dict[str, str]:
        key = getattr(self.server, "admin_key", None)  # set only when the server restricts its admin API
        return {"mslite-key": key} if key else {}

    def _post(self, path: str) -> Any:
        req = urllib.request.Request(self.server.http_url + path, data=b"{}", method="POST", headers=self._headers())
        with urllib.request.urlopen(req, timeout=300) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def _get(self, path: str) -> Any:
        req = urllib.request.Request(self.server.http_url + path, headers=self._headers())
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())


def process_cpu_s(pid: int) -> float:
    """utime + stime of one process (all its threads), in seconds; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # after the command name: state is field 3, utime and stime are fields 14 and 15 (1-based)
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK
