"""One real embedded tritonserver for the whole test session, on free loopback ports."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import onnx
import pytest

from mslite_triton._workers import workers_of
from mslite_triton.server import EmbeddedServer, ServerConfig

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import model_zoo  # noqa: E402


def _generators():
    spec = importlib.util.spec_from_file_location("generate_models", ROOT / "model_repository" / "generate_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generators()
MINIMAL = 'backend: "mslite"\n'
ZOO = {
    "multi_io": model_zoo.multi_io,
    "mixed_dtypes": model_zoo.mixed_dtypes,
    "odd_names": model_zoo.odd_names,
    "no_batch": model_zoo.no_batch,
    "variable_seq": model_zoo.variable_seq,
}


def _add(repo: Path, name: str, model: onnx.ModelProto | bytes, config: str = MINIMAL) -> None:
    (repo / name / "1").mkdir(parents=True)
    data = model if isinstance(model, bytes) else model.SerializeToString()
    (repo / name / "1" / "model.onnx").write_bytes(data)
    (repo / name / "config.pbtxt").write_text(config)


def build_repository(repo: Path) -> None:
    """The served repository: the shipped configs with generated models, the zoo, and two bad models."""
    mobilenet = ROOT / "model_repository" / "mobilenetv2"
    if not (mobilenet / "1" / "model.onnx").exists():
        GEN.save_model(GEN.build_mobilenetv2(), mobilenet / "1" / "model.onnx")
    shutil.copytree(mobilenet, repo / "mobilenetv2")
    _add(repo, "tiny", GEN.build_tiny(), (ROOT / "model_repository" / "tiny" / "config.pbtxt").read_text())
    for name, build in ZOO.items():
        _add(repo, name, build())
    # one instance, so concurrent requests queue up, and the backend merges them into one run
    _add(
        repo,
        "batched",
        GEN.build_tiny(),
        MINIMAL
        + "max_batch_size: 64\ninstance_group [ { kind: KIND_CPU, count: 1 } ]\n"
        + "dynamic_batching { preferred_batch_size: [ 16 ] max_queue_delay_microseconds: 5000 }\n"
        + 'parameters { key: "merge_requests" value { string_value: "true" } }\n',
    )
    _add(repo, "cpu_defaults", GEN.build_tiny(), MINIMAL + "instance_group [ { kind: KIND_CPU, count: 2 } ]\n")
    _add(repo, "corrupt", model_zoo.broken_bytes())
    _add(
        repo,
        "mismatch",
        GEN.build_tiny(),
        MINIMAL + 'max_batch_size: 8\ninput [ { name: "x", data_type: TYPE_FP32, dims: [ 5 ] } ]\n',
    )


def private_tiny(directory: Path, tag: str) -> Path:
    """The tiny model (y = 2x + 1) in a file of its own: uploaded, it is a model no other test shares.

    The client names a model by a hash of its file and config, so a different doc string is a different model,
    whose batching a test may configure as it needs.
    """
    model = GEN.build_tiny()
    model.doc_string = f"private to {tag}"
    path = directory / f"tiny_{tag}.onnx"
    path.write_bytes(model.SerializeToString())
    return path


@pytest.fixture(scope="session")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("repo")
    build_repository(repo)
    return repo


# What the server log holds after a crash or a bug of ours: Triton's crash handler ("Signal (11) received"),
# an abort, a worker found dead, a traceback from the backend.
LOG_ALARMS = ("Signal (", "terminate called", "is not healthy", "Traceback", "mslite: execute failed")


def log_alarms(text: str) -> list[str]:
    """The lines of a server log that say something crashed (at most 10)."""
    return [line for line in text.splitlines() if any(alarm in line for alarm in LOG_ALARMS)][:10]


def assert_never_healed(srv: EmbeddedServer) -> None:
    """The server never restarted nor replaced a worker, and its log holds no crash.

    The supervisor heals crashes and the client retries meanwhile, so without this check a backend crash
    during a test would pass unseen. Tests that kill workers or servers on purpose start their own.
    """
    supervisor = srv._supervisor
    heals = list(supervisor.recoveries) if supervisor is not None else []
    alarms = log_alarms(srv.log_path.read_text(errors="replace"))
    running = srv.is_running()
    dead = [w.pid for w in workers_of(srv.process.pid) if w.state == "Z"] if running else []  # died too late to heal
    assert running and srv.restarts == 0 and not heals and not alarms and not dead, (
        f"the session server crashed: running {running}, {srv.restarts} restart(s), heals taking {heals} s; "
        f"dead workers {dead}; log: {alarms}"
    )


@pytest.fixture(scope="session")
def server(repository: Path):
    with EmbeddedServer(ServerConfig(model_repository=repository, startup_timeout_s=240)) as srv:
        yield srv
        assert_never_healed(srv)  # before the log goes with the workspace
