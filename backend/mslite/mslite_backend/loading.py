"""Loading a model into one worker: the sessions, the weights store, bound buckets, and the load-time runs.

`load_runtime` does every step that can fail before the first request (the file, the config against the
graph, the provider, the resized shapes, the bound buckets' check, the warm-up), so a model that cannot
serve fails its load with the reason instead of its first request.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

import numpy as np

from .affinity import cores_for_worker, pin_process
from .batching import Feeds
from .bound import BoundBucket, Bucket, Layout, PlainBucket, check_input, differs, graph_op_types, obstacle
from .buckets import session_per_bucket
from .config import BackendConfig, InstanceInfo
from .errors import BackendError, ModelLoadError
from .graph import GraphIO, check_config_against_graph, read_graph_io
from .model_source import resolve
from .ort_c_strings import CStringSession
from .providers import apply_env
from .request_checks import input_layout, output_layout
from .runtime import ModelRuntime
from .session import OrtSession, providers_for, session_settings
from .store_files import launcher_owner, store_directory
from .strings import placeholder
from .weight_store import WeightStore
from .weights import PreparedModel, initial_values, prepare_model, release_free_memory


def load_runtime(version_dir: str, cfg: BackendConfig, instance: InstanceInfo) -> ModelRuntime:
    """Load `<version_dir>/<model_filename>`, check it against the config, and warm it up.

    Raises:
        ModelLoadError: missing or corrupt file, or config/graph mismatch, or provider missing.
    """
    apply_env(providers_for(instance, cfg))  # e.g. the Ascend device: before ONNX Runtime is imported
    version_dir, cfg = resolve(version_dir, cfg)  # a MindIR model: its cached ONNX conversion
    prepared = prepare_model(version_dir, cfg, instance)
    path = os.path.join(version_dir, cfg.model_filename)
    io = prepared.io or read_graph_io(path, cfg.resized_inputs, cfg.model_name)
    check_config_against_graph(cfg, io)
    cores = cores_for_worker(cfg, instance.index, sorted(os.sched_getaffinity(0)))
    if cores is not None:  # before the session exists, so ORT's threads start inside the slice
        pin_process(cores)
    bind, graphs, bind_notes = _bind_plan(cfg, instance, io, path, updatable=bool(prepared.updatable))
    try:
        session, notes = _open_session(prepared, cfg, instance, cuda_graph=graphs)
    except ModelLoadError as e:
        if not graphs:
            raise
        # ONNX Runtime refuses graph capture when nodes fall back to CPU: the buckets run bound, unreplayed
        graphs = False
        bind_notes += (f"model '{cfg.model_name}': CUDA graphs off, the session cannot capture one: {e}",)
        session, notes = _open_session(prepared, cfg, instance)
    buckets = cfg.buckets_for(instance.kind)
    per_bucket = {}
    if session_per_bucket(instance.kind, buckets) and cfg.bucket_sessions != "one":
        others = {b: _open_session(prepared, cfg, instance, cuda_graph=graphs)[0] for b in buckets[1:]}
        per_bucket = {buckets[0]: session, **others}
    store = None
    if prepared.updatable:
        # Not the directory: a reload of an uploaded model comes from a fresh copy, and must find the store.
        key = hashlib.sha256(f"{cfg.model_name}\0{prepared.content_key}".encode()).hexdigest()[:24]
        store = WeightStore.open(
            store_directory(key),
            cfg.model_name,
            prepared.updatable,
            lambda: initial_values(version_dir, cfg, prepared.updatable),
            persistent=launcher_owner() is not None,
        )
    strings, string_notes = _string_session(prepared, cfg, instance, io)
    if strings is not None:  # every run goes to `strings` (`_run_once`): ORT's Python copy would only hold memory
        session.release()
    runtime = ModelRuntime(
        cfg,
        session,
        io,
        store,
        shared=prepared.shared and not notes,
        notes=prepared.notes + notes + bind_notes + string_notes,
        buckets=buckets,
        merge=cfg.merges_for(instance.kind),
        bucket_sessions=per_bucket,
        string_session=strings,
    )
    try:
        probe_resized(runtime)
        if bind:  # the load-time check runs every bucket: it is the warm-up too
            device = "cuda" if session.providers[0] == "CUDAExecutionProvider" else "cpu"
            sessions = runtime.bucket_sessions or dict.fromkeys(buckets, session)
            runtime.bound, refused = bind_buckets(
                sessions,
                runtime.checks.expected,
                output_layout(io),
                lambda: _open_session(prepared, cfg, instance)[0],
                device,
                instance.device_id,
            )
            if refused:
                runtime.notes += (
                    f"model '{cfg.model_name}': bucket(s) {', '.join(refused)} serve plain runs: the bound run "
                    "of a fixed random input differs from a plain session's",
                )
        elif cfg.warmup:
            warm_up(runtime)
    except BaseException:
        runtime.close(failed_load=True)
        raise
    release_free_memory()  # loading's temporaries (parsing, hashing, building) would stay in every worker
    return runtime


def bind_buckets(
    sessions: dict[int, OrtSession],
    inputs: Layout,
    outputs: Layout,
    open_plain: Callable[[], OrtSession],
    device: str,
    device_id: int,
) -> tuple[dict[int, Bucket], list[str]]:
    """Bind every bucket's buffers, and check each against a plain session (`bound.differs`).

    A bucket whose bound outputs differ from the plain session's in any bit serves plain runs on that
    session; otherwise the plain session is released here.

    Args:
        sessions: the session of each bucket size, in bucket order (one session may serve several).
        inputs: the model's input layout (`request_checks.input_layout`).
        outputs: its output layout (`request_checks.output_layout`).
        open_plain: opens a plain session of the model (no CUDA graph).
        device: "cpu" or "cuda".
        device_id: the worker's device.

    Returns:
        The bucket of each size, and the sizes refused (with why) for the load log.
    """
    # buckets sharing one session capture their CUDA graphs under distinct ids (ignored off CUDA)
    shared = len({id(s) for s in sessions.values()}) < len(sessions)
    reference = open_plain()
    names = list(outputs)

    def plain(feeds: Feeds) -> dict[str, np.ndarray]:
        return dict(zip(names, reference.run(names, feeds)))

    bound: dict[int, Bucket] = {}
    refused = []
    for graph_id, size in enumerate(sessions):
        bucket: Bucket = BoundBucket(
            sessions[size], size, inputs, outputs, device, device_id, graph_id if shared else None
        )
        why = differs(bucket, plain, check_input(inputs, size))
        if why is not None:
            refused.append(f"{size} ({why})")
            bucket = PlainBucket(reference, size, inputs, names)
        bound[size] = bucket
    return bound, refused


def warm_up(runtime: ModelRuntime) -> None:
    """Run requests of zeros (batch 1, and every bucket) so the first user request does not pay for lazy init."""
    weights = runtime.weights.snapshot().arrays if runtime.weights is not None else None
    for batch in runtime.buckets or (1,):
        feeds = {}
        for name, (dtype, dims) in runtime.checks.expected.items():
            shape = ([batch] if runtime.cfg.batched else []) + [d if d >= 0 else 1 for d in dims]
            feeds[name] = placeholder(shape) if name in runtime.string_inputs else np.zeros(shape, dtype=dtype)
        runtime.run(feeds, weights)


def probe_resized(runtime: ModelRuntime) -> None:
    """Run the resized inputs' shapes once (zeros), so a graph that cannot take them fails the load.

    The other inputs get their own dims (1 where dynamic), with the resized inputs' batch when batched.

    Raises:
        ModelLoadError: ONNX Runtime's reason, naming the model and the shapes.
    """
    cfg = runtime.cfg
    resized = dict(cfg.resized_inputs)
    if not resized:
        return
    batch = [next(iter(resized.values()))[0]] if cfg.batched else []
    feeds = {}
    for name, (dtype, dims) in runtime.checks.expected.items():
        shape = resized.get(name) or (batch + [d if d >= 0 else 1 for d in dims])
        feeds[name] = np.zeros(shape, dtype=dtype)
    weights = runtime.weights.snapshot().arrays if runtime.weights is not None else None
    try:
        runtime.run(feeds, weights)
    except BackendError as e:
        shown = ", ".join(f"input '{n}' at shape {list(s)}" for n, s in resized.items())
        reason = str(e).removeprefix("inference failed: ")
        raise ModelLoadError(f"model '{cfg.model_name}': the graph cannot run {shown}: {reason}") from e


def _bind_plan(
    cfg: BackendConfig, instance: InstanceInfo, io: GraphIO, path: str, *, updatable: bool
) -> tuple[bool, bool, tuple[str, ...]]:
    """Whether the worker binds its buckets, whether its sessions capture CUDA graphs, and the note of why not."""
    if not cfg.binds_for(instance.kind):
        return False, False, ()
    inputs, outputs = input_layout(cfg, io), output_layout(io)
    why = obstacle(
        batched=cfg.batched,
        inputs=inputs,
        outputs=outputs,
        op_types=graph_op_types(path),
        updatable=updatable,
        strings=any(dtype == np.object_ for dtype, _ in (*inputs.values(), *outputs.values())),
        resized=bool(cfg.resized_inputs),
    )
    if why is not None:
        return False, False, (f"model '{cfg.model_name}': buckets run plain, not on bound buffers: {why}",)
    return True, instance.kind == "GPU" and cfg.cuda_graphs, ()


def _open_session(
    prepared: PreparedModel, cfg: BackendConfig, instance: InstanceInfo, *, cuda_graph: bool = False
) -> tuple[OrtSession, tuple]:
    """The session of the prepared source, or of the plain model when the prepared one does not load."""
    src = prepared.source
    try:
        session = OrtSession(
            src.model,
            cfg,
            instance,
            preoptimized=src.preoptimized,
            config_entries=src.config_entries,
            cuda_graph=cuda_graph,
        )
        return session, ()
    except ModelLoadError as e:
        if prepared.fallback is None:
            raise
        plain = prepared.fallback()
        note = f"model '{cfg.model_name}': the shared optimized model did not load ({e}); loading it unshared"
        session = OrtSession(plain.model, cfg, instance, config_entries=plain.config_entries, cuda_graph=cuda_graph)
        return session, (note,)


def _string_session(
    prepared: PreparedModel, cfg: BackendConfig, instance: InstanceInfo, io: GraphIO
) -> tuple[CStringSession | None, tuple[str, ...]]:
    """A CPU model with string tensors: its C API session (`ort_c_strings`), or None and the note of why not.

    Without one the model runs through ORT's Python API as before, where strings must be UTF-8.

    Raises:
        ModelLoadError: ONNX Runtime could not load the model through its C API either.
    """
    strings = [t.data_type for t in cfg.inputs] + [t.data_type for t in io.outputs]
    if "TYPE_STRING" not in strings:
        return None, ()
    why = f"model '{cfg.model_name}': strings go to ONNX Runtime as UTF-8 text only"
    if instance.kind != "CPU":
        return None, (f"{why}: the C API path serves CPU instances, this one is {instance.kind}",)
    src = prepared.source
    try:
        settings = session_settings(cfg, preoptimized=src.preoptimized, config_entries=src.config_entries)
        session = CStringSession(src.model, settings, where=cfg.model_name)
    except (OSError, AttributeError) as e:
        return None, (f"{why}: ONNX Runtime's C API could not be loaded ({e})",)
    return session, ()
