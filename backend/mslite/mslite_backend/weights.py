"""What ONNX Runtime loads in each worker, so that the workers of a model share one copy of its weights.

Sharing (CPU): ONNX Runtime memory-maps external data, but its kernels repack MatMul/Gemm/Conv weights
into private heap buffers, so N workers hold N copies. Instead, the model is optimized once per machine
with its prepacked blobs saved into the external-data file
(`session.save_external_prepacked_constant_initializers`); every worker then maps that file, getting
prepacked speed and one physical copy (docs/weights.md). The file is
built in a cache directory keyed by the model's content, the ONNX Runtime version, the CPU flags (packed
layouts depend on the ISA) and the settings that change the optimized graph; the first worker builds it
under a lock into a temporary directory and renames it into place, the others wait and load it. Anything
that fails falls back to the plain model (the caller logs why).

GPU (KIND_GPU): every worker keeps its own device copy; ONNX Runtime has no cross-process device sharing.

Updatable weights (`variable_weights_list`) stop being initializers: they become graph inputs, fed on
every run from the shared store (`weight_store.py`). They are no longer constant, so ONNX Runtime
neither prepacks nor constant-folds them.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mslite_contract.build_cache import ensure_built
from mslite_contract.settings import shared_cache_root, weights_cache

from .config import BackendConfig, InstanceInfo
from .errors import ModelLoadError
from .graph import GraphIO, GraphTensor, read_graph_io
from .resized import free_dims

MIN_SHARED_BYTES = 1 << 20  # below this, per-worker copies cost less than the optimized file's load
CACHE_DIR_NAME = ".mslite-cache"
EXTERNAL_FOLDER_KEY = "session.model_external_initializers_file_folder_path"


@dataclass(frozen=True)
class WeightSpec:
    """One updatable weight: its name, numpy dtype string (e.g. `<f4`) and shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        """Size of its values in bytes."""
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class ModelSource:
    """What one `InferenceSession` is created from."""

    model: str | bytes  # a path, or a serialized (transformed) model
    preoptimized: bool = False  # graph optimizations already applied and saved: load with them off
    config_entries: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class PreparedModel:
    """The source to load, a plain source to fall back to, and what the runtime and the store need to know."""

    source: ModelSource
    fallback: Callable[[], ModelSource] | None = None
    io: GraphIO | None = None  # the original graph's I/O when already known (None: read it from the file)
    updatable: tuple[WeightSpec, ...] = ()
    content_key: str = ""  # hash of the model's files and settings: equal keys, equal weights
    shared: bool = False
    notes: tuple[str, ...] = field(default=())  # for the log: why weights are not shared


def prepare_model(version_dir: str, cfg: BackendConfig, instance: InstanceInfo) -> PreparedModel:
    """Decide what the worker loads; build the shared, prepacked model once per machine when it applies.

    A worker that finds the model already built reads everything it needs from the cache entry and
    never imports `onnx` (that module alone costs each worker several MiB of private memory).

    Raises:
        ModelLoadError: an updatable weight is not an initializer of the graph, or has a non-numeric
            type; the file is not an ONNX model.
    """
    path = os.path.join(version_dir, cfg.model_filename)
    names = cfg.variable_weights
    if not os.path.isfile(path):
        return PreparedModel(ModelSource(path))  # the caller reports the missing file
    share = (
        cfg.share_weights
        and instance.kind != "GPU"  # on GPU each worker keeps its own device copy
        and _files_size(version_dir) >= MIN_SHARED_BYTES
    )
    resized = cfg.resized_inputs
    if not share and not names and not resized:
        return PreparedModel(ModelSource(path))
    key = content_key(version_dir, cfg)

    def plain() -> ModelSource:
        if not names and not resized:
            return ModelSource(path)
        import onnx

        transformed = onnx.load(path, load_external_data=False)
        weights_to_inputs(transformed, names)
        if resized:
            free_dims(transformed, resized, cfg.model_name)
        return ModelSource(transformed.SerializeToString(), config_entries=((EXTERNAL_FOLDER_KEY, version_dir),))

    if share:
        try:
            built = ensure_built(cache_root(version_dir), key, lambda out: _build(path, cfg, plain, out))
            io, specs = _read_meta(os.path.dirname(built))
            return PreparedModel(ModelSource(built, preoptimized=True), plain, io, specs, key, shared=True)
        except ModelLoadError:
            raise  # a wrong model or weight name: not a sharing problem
        except Exception as e:  # the plain, unshared model serves the same results with more memory
            note = f"model '{cfg.model_name}': weights not shared between workers ({type(e).__name__}: {e})"
            io, specs = describe(path, cfg)
            return PreparedModel(plain(), io=io, updatable=specs, content_key=key, notes=(note,))
    io, specs = describe(path, cfg)
    return PreparedModel(plain(), io=io, updatable=specs, content_key=key)


def describe(path: str, cfg: BackendConfig) -> tuple[GraphIO, tuple[WeightSpec, ...]]:
    """The graph's I/O and the updatable weights' specs, read from the model file.

    Raises:
        ModelLoadError: the file is not ONNX, or an updatable weight is not in it.
    """
    import onnx

    io = read_graph_io(path, cfg.resized_inputs, cfg.model_name)
    if not cfg.variable_weights:
        return io, ()
    return io, updatable_specs(cfg.model_name, onnx.load(path, load_external_data=False), cfg.variable_weights)


def updatable_specs(model: str, proto: Any, names: tuple[str, ...]) -> tuple[WeightSpec, ...]:
    """Name, dtype and shape of each updatable weight, in the order given.

    Raises:
        ModelLoadError: naming the tensor and listing (some of) the graph's initializers.
    """
    from onnx import helper

    inits = {t.name: t for t in proto.graph.initializer}
    missing = [n for n in names if n not in inits]
    if missing:
        known = sorted(inits)
        shown = ", ".join(known[:20]) + (f", ... ({len(known)} in all)" if len(known) > 20 else "")
        raise ModelLoadError(
            f"model '{model}': updatable weight(s) {missing} are not initializers of the ONNX graph; "
            f"its initializers are [{shown}]"
        )
    specs = []
    for name in names:
        t = inits[name]
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type))
        if dtype.kind not in "biuf":
            raise ModelLoadError(f"model '{model}', updatable weight '{name}': data type {dtype} cannot be updated")
        specs.append(WeightSpec(name, dtype.str, tuple(int(d) for d in t.dims)))
    return tuple(specs)


def weights_to_inputs(proto: Any, names: tuple[str, ...]) -> None:
    """Turn the named initializers of `proto` (in place) into graph inputs of the same type and shape."""
    from onnx import helper

    wanted = set(names)
    declared = {v.name for v in proto.graph.input}
    kept = []
    for t in proto.graph.initializer:
        if t.name not in wanted:
            kept.append(t)
        elif t.name not in declared:
            proto.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(kept)


def initial_values(version_dir: str, cfg: BackendConfig, specs: tuple[WeightSpec, ...]) -> Iterator[np.ndarray]:
    """The model file's values of the updatable weights, one at a time, in `specs` order."""
    import onnx
    from onnx import numpy_helper

    proto = onnx.load(os.path.join(version_dir, cfg.model_filename), load_external_data=False)
    inits = {t.name: t for t in proto.graph.initializer}
    for spec in specs:
        yield numpy_helper.to_array(inits[spec.name], base_dir=version_dir)


def content_key(version_dir: str, cfg: BackendConfig) -> str:
    """Hash of what the optimized model depends on.

    That is every file of the version directory (the model and its external data; hidden entries such
    as the cache are skipped), ONNX Runtime's version, the CPU's flags (packed layouts depend on the
    ISA), and the settings that change the optimized graph.
    """
    import onnxruntime as ort

    digest = hashlib.sha256()
    for part in (ort.__version__, platform.machine(), _cpu_flags(), str(cfg.graph_optimization_level)):
        digest.update(part.encode() + b"\0")
    digest.update(f"{cfg.model_filename}\0{','.join(cfg.variable_weights)}\0{cfg.resized_inputs}\0".encode())
    buf = bytearray(1 << 20)  # one reused buffer: hashing must not grow the worker's heap
    view = memoryview(buf)
    for file in _files(version_dir):
        digest.update(os.path.relpath(file, version_dir).encode() + b"\0")
        with open(file, "rb", buffering=0) as f:
            while True:
                n = f.readinto(buf)
                if not n:
                    break
                digest.update(view[:n])
    return digest.hexdigest()[:32]


def _files(version_dir: str) -> list[str]:
    """Regular files under `version_dir`, sorted, hidden files and directories skipped."""
    found = []
    for root, dirs, files in os.walk(version_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [os.path.join(root, f) for f in sorted(files) if not f.startswith(".")]
    return found


def _files_size(version_dir: str) -> int:
    return sum(os.path.getsize(f) for f in _files(version_dir))


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def cache_root(version_dir: str) -> str:
    """Where built models go.

    `settings.WEIGHTS_CACHE_ENV` when set, else beside the model when its directory is writable (so it
    goes away with an uploaded model), else a per-user directory under the temporary directory.
    """
    if weights_cache() is None and os.access(version_dir, os.W_OK):
        return os.path.join(version_dir, CACHE_DIR_NAME)  # hidden: never part of the content key
    return shared_cache_root()


def _build(path: str, cfg: BackendConfig, plain: Callable[[], ModelSource], out_dir: str) -> None:
    """Write the optimized model into `out_dir`, with its prepacked weights in its external-data file.

    Also `meta.json`: the original graph's I/O and the updatable weights' specs, so that the workers
    loading the entry need no `onnx`.
    """
    import onnxruntime as ort

    from .session import session_options

    io, specs = describe(path, cfg)
    source = plain()
    so = session_options(cfg)
    so.optimized_model_filepath = os.path.join(out_dir, "model.onnx")
    for key, value in (
        *source.config_entries,
        ("session.optimized_model_external_initializers_file_name", "model.onnx.data"),
        ("session.optimized_model_external_initializers_min_size_in_bytes", "1024"),
        ("session.save_external_prepacked_constant_initializers", "1"),
    ):
        so.add_session_config_entry(key, value)
    ort.InferenceSession(source.model, so, providers=["CPUExecutionProvider"])
    if not os.path.isfile(so.optimized_model_filepath):
        raise RuntimeError("ONNX Runtime did not write the optimized model")
    meta = {
        "inputs": [[t.name, t.data_type, list(t.dims)] for t in io.inputs],
        "outputs": [[t.name, t.data_type, list(t.dims)] for t in io.outputs],
        "updatable": [[w.name, w.dtype, list(w.shape)] for w in specs],
    }
    with open(os.path.join(out_dir, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f)


def _read_meta(entry: str) -> tuple[GraphIO, tuple[WeightSpec, ...]]:
    with open(os.path.join(entry, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)

    def tensors(rows: list) -> tuple[GraphTensor, ...]:
        return tuple(GraphTensor(str(n), str(t), tuple(int(d) for d in dims)) for n, t, dims in rows)

    specs = tuple(WeightSpec(str(n), str(t), tuple(int(d) for d in dims)) for n, t, dims in meta["updatable"])
    return GraphIO(tensors(meta["inputs"]), tensors(meta["outputs"])), specs


def release_free_memory() -> None:
    """Give the heap's free pages back to the system (glibc keeps them).

    Each worker's private memory is what sharing cannot remove, so it counts N times.
    """
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
