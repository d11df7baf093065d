"""The served test repository: the shipped configs with generated models, the zoo, and two bad models."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import onnx

from tests.support import model_zoo

ROOT = Path(__file__).resolve().parents[2]


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


def add_model(repo: Path, name: str, model: onnx.ModelProto | bytes, config: str = MINIMAL) -> None:
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
    add_model(repo, "tiny", GEN.build_tiny(), (ROOT / "model_repository" / "tiny" / "config.pbtxt").read_text())
    for name, build in ZOO.items():
        add_model(repo, name, build())
    # one instance, so concurrent requests queue up, and the backend merges them into one run
    add_model(
        repo,
        "batched",
        GEN.build_tiny(),
        MINIMAL
        + "max_batch_size: 64\ninstance_group [ { kind: KIND_CPU, count: 1 } ]\n"
        + "dynamic_batching { preferred_batch_size: [ 16 ] max_queue_delay_microseconds: 5000 }\n"
        + 'parameters { key: "merge_requests" value { string_value: "true" } }\n',
    )
    add_model(repo, "cpu_defaults", GEN.build_tiny(), MINIMAL + "instance_group [ { kind: KIND_CPU, count: 2 } ]\n")
    add_model(repo, "corrupt", model_zoo.broken_bytes())
    add_model(
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


def flat_tiny(repo: Path) -> Path:
    """The tiny model as `flat`: one worker, no batch dimension (any leading size), in `repo`; returns its dir."""
    model = repo / "flat" / "1"
    model.mkdir(parents=True)
    (model / "model.onnx").write_bytes(GEN.build_tiny().SerializeToString())
    (model.parent / "config.pbtxt").write_text(
        'backend: "mslite"\nmax_batch_size: 0\ninstance_group [ { kind: KIND_CPU, count: 1 } ]\n'
        'input [ { name: "x", data_type: TYPE_FP32, dims: [ -1, 4 ] } ]\n'
        'output [ { name: "y", data_type: TYPE_FP32, dims: [ -1, 4 ] } ]\n'
    )
    return model.parent


def unload(server, name: str) -> None:
    """Unload model `name` from `server` (an LocalServer; with its admin key), to leave it as it was."""
    server.http_json("POST", f"/v2/repository/models/{name}/unload", {}, timeout_s=60)
