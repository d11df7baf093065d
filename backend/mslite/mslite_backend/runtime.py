"""A loaded model in one worker: request validation, batching and warm-up around an ORT session."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from mslite_contract.dtypes import TRITON_TO_NUMPY, wire_name

from .affinity import cores_for_worker, pin_process
from .batching import Feeds, Result, run_batched
from .bound import BoundBucket, Bucket, Layout, PlainBucket, check_input, differs, graph_op_types, obstacle
from .buckets import run_in_buckets, session_per_bucket
from .config import BackendConfig, InstanceInfo, TensorSpec
from .errors import BackendError, ModelLoadError, RequestError
from .graph import GraphIO, check_config_against_graph, read_graph_io
from .model_source import resolve
from .ort_c_strings import CStringSession
from .providers import apply_env
from .session import OrtSession, providers_for, session_settings
from .strings import from_ort, placeholder, to_ort
from .weight_store import WeightStore, launcher_owner, store_directory
from .weights import PreparedModel, initial_values, prepare_model, release_free_memory

ACCEPTED_CACHE_SIZE = 1024  # distinct input layouts remembered as valid (variable lengths make many)


class ModelRuntime:
    """Validates requests against the config and runs them on the worker's session."""

    def __init__(
        self,
        cfg: BackendConfig,
        session: OrtSession,
        io: GraphIO,
        weights: WeightStore | None = None,
        *,
        shared: bool = False,
        notes: tuple[str, ...] = (),
        buckets: tuple[int, ...] = (),
        merge: bool = False,
        bucket_sessions: dict[int, OrtSession] | None = None,
        string_session: CStringSession | None = None,
    ) -> None:
        self.cfg = cfg
        self.buckets = buckets  # fixed batch sizes the session runs at (GPU: one shape per bucket), or none
        self._bucketed = bool(buckets) and cfg.batched  # read on every run: decided once
        # GPU: one session per bucket, each only ever sees its own batch size (buckets.session_per_bucket)
        self.bucket_sessions = bucket_sessions or {}
        self._one_session = not self._bucketed and not self.bucket_sessions  # every run on `session` as it is
        self.merge = merge  # concatenate the requests of one execute into one run (BackendConfig.merges_for)
        self.session = session
        self.weights = weights  # the updatable weights' shared store, when the model has any
        self.shared = shared  # True when the constant weights are one file-backed copy for all workers
        self.notes = notes  # for the log: why weights are not shared, fallbacks taken
        self.output_names = [t.name for t in io.outputs]
        self._expected = input_layout(cfg, io)
        self._outputs = output_layout(io)
        # the bucket size -> bucket of a model on bound buffers (`bind_buckets`); empty: the ordinary paths
        self.bound: dict[int, Bucket] = {}
        self._required = {s.name for s in cfg.inputs if not s.optional}
        self._bool_inputs = {name for name, (dtype, _) in self._expected.items() if dtype == np.bool_}
        # BYTES tensors: converted for ONNX Runtime on every run (`strings`); models without any skip it
        self._string_inputs = {name for name, (dtype, _) in self._expected.items() if dtype == np.object_}
        self._string_outputs = {t.name for t in io.outputs if t.data_type == "TYPE_STRING"}
        self._strings = bool(self._string_inputs or self._string_outputs)
        # a string model's runs through ORT's C API, strings as raw bytes (`ort_c_strings`); None: the Python API
        self.string_session = string_session
        # (name, dtype, shape) of every input of requests that passed: the checks depend on nothing else,
        # except BOOL contents, which are checked on every request
        self._accepted: set[tuple] = set()

    @classmethod
    def load(cls, version_dir: str, cfg: BackendConfig, instance: InstanceInfo) -> ModelRuntime:
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
        runtime = cls(
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
            runtime.probe_resized()
            if bind:  # the load-time check runs every bucket: it is the warm-up too
                device = "cuda" if session.providers[0] == "CUDAExecutionProvider" else "cpu"
                runtime.bind_buckets(lambda: _open_session(prepared, cfg, instance)[0], device, instance.device_id)
            elif cfg.warmup:
                runtime.warm_up()
        except BaseException:
            runtime.close(failed_load=True)
            raise
        release_free_memory()  # loading's temporaries (parsing, hashing, building) would stay in every worker
        return runtime

    def bind_buckets(self, open_plain: Callable[[], OrtSession], device: str, device_id: int) -> None:
        """Bind every bucket's buffers, and check each against a plain session (`bound.differs`).

        A bucket whose bound outputs differ from the plain session's in any bit serves plain runs on that
        session, and the load log says so once; otherwise the plain session is released here.

        Args:
            open_plain: opens a plain session of the model (no CUDA graph).
            device: "cpu" or "cuda".
            device_id: the worker's device.
        """
        sessions = self.bucket_sessions or dict.fromkeys(self.buckets, self.session)
        # buckets sharing one session capture their CUDA graphs under distinct ids (ignored off CUDA)
        shared = len({id(s) for s in sessions.values()}) < len(sessions)
        reference = open_plain()
        names = self.output_names

        def plain(feeds: Feeds) -> dict[str, np.ndarray]:
            return dict(zip(names, reference.run(names, feeds)))

        refused = []
        for graph_id, size in enumerate(self.buckets):
            bucket: Bucket = BoundBucket(
                sessions[size], size, self._expected, self._outputs, device, device_id, graph_id if shared else None
            )
            why = differs(bucket, plain, check_input(self._expected, size))
            if why is not None:
                refused.append(f"{size} ({why})")
                bucket = PlainBucket(reference, size, self._expected, names)
            self.bound[size] = bucket
        if refused:
            self.notes += (
                f"model '{self.cfg.model_name}': bucket(s) {', '.join(refused)} serve plain runs: the bound run "
                "of a fixed random input differs from a plain session's",
            )

    def warm_up(self) -> None:
        """Run requests of zeros (batch 1, and every bucket) so the first user request does not pay for lazy init."""
        weights = self.weights.snapshot().arrays if self.weights is not None else None
        for batch in self.buckets or (1,):
            feeds = {}
            for name, (dtype, dims) in self._expected.items():
                shape = ([batch] if self.cfg.batched else []) + [d if d >= 0 else 1 for d in dims]
                feeds[name] = placeholder(shape) if name in self._string_inputs else np.zeros(shape, dtype=dtype)
            self.run(feeds, weights)

    def probe_resized(self) -> None:
        """Run the resized inputs' shapes once (zeros), so a graph that cannot take them fails the load.

        The other inputs get their own dims (1 where dynamic), with the resized inputs' batch when batched.

        Raises:
            ModelLoadError: ONNX Runtime's reason, naming the model and the shapes.
        """
        resized = dict(self.cfg.resized_inputs)
        if not resized:
            return
        batch = [next(iter(resized.values()))[0]] if self.cfg.batched else []
        feeds = {}
        for name, (dtype, dims) in self._expected.items():
            shape = resized.get(name) or (batch + [d if d >= 0 else 1 for d in dims])
            feeds[name] = np.zeros(shape, dtype=dtype)
        weights = self.weights.snapshot().arrays if self.weights is not None else None
        try:
            self.run(feeds, weights)
        except BackendError as e:
            shown = ", ".join(f"input '{n}' at shape {list(s)}" for n, s in resized.items())
            reason = str(e).removeprefix("inference failed: ")
            raise ModelLoadError(f"model '{self.cfg.model_name}': the graph cannot run {shown}: {reason}") from e

    def validate(self, feeds: Feeds) -> None:
        """Check one request's inputs: names, dtypes, ranks, fixed dims, batch size, BOOL values.

        Raises:
            RequestError: naming the tensor, what was expected and what arrived.
        """
        key = layout(feeds)
        if key not in self._accepted:
            self._check_layout(feeds)
            if len(self._accepted) >= ACCEPTED_CACHE_SIZE:
                self._accepted.clear()
            self._accepted.add(key)
        if not self._bool_inputs:
            return
        for name in self._bool_inputs & feeds.keys():
            arr = feeds[name]
            if arr.size and arr.view(np.uint8).max() > 1:
                raise RequestError(
                    f"model '{self.cfg.model_name}', input '{name}': BOOL values must be 0 or 1 "
                    "(bytes other than 0/1 found)"
                )

    def direct_run(self) -> Callable[..., list[np.ndarray]] | None:
        """ORT's own run, when a request that passed `validate` needs nothing else to run (`PlainExecutor`).

        `run(self.output_names, feeds, None)`, whose exceptions go through `session.failure`. None when a run
        needs more: updatable weights, buckets or a session per bucket, merging, BOOL inputs (checked on
        every request), strings (converted on every run), or a provider other than the CPU's.
        """
        direct = self.session.direct
        if direct is None or not self._one_session or self.weights is not None or self.merge:
            return None
        if self._bool_inputs or self._strings:
            return None
        return direct

    def _check_layout(self, feeds: Feeds) -> None:
        """Everything `validate` checks that follows from the names, dtypes and shapes alone."""
        where = f"model '{self.cfg.model_name}'"
        missing = sorted(self._required - feeds.keys())
        if missing:
            raise RequestError(f"{where}: missing input(s) {missing}; expected {sorted(self._expected)}")
        unknown = sorted(feeds.keys() - self._expected.keys())
        if unknown:
            raise RequestError(f"{where}: unexpected input(s) {unknown}; expected {sorted(self._expected)}")
        size = sum(a.nbytes for a in feeds.values())
        if size > self.cfg.max_request_bytes:
            raise RequestError(
                f"{where}: request of {size} bytes exceeds max_request_bytes {self.cfg.max_request_bytes}"
            )
        batch = None
        for name, arr in feeds.items():
            dtype, dims = self._expected[name]
            if arr.dtype != dtype:
                raise RequestError(
                    f"{where}, input '{name}': data type expected {wire_name(dtype)}, got {wire_name(arr.dtype)}"
                )
            shape = arr.shape[1:] if self.cfg.batched else arr.shape
            want = ([-1] if self.cfg.batched else []) + list(dims)
            if len(shape) != len(dims) or any(d >= 0 and s != d for s, d in zip(shape, dims)):
                raise RequestError(f"{where}, input '{name}': shape expected {want}, got {list(arr.shape)}")
            if self.cfg.batched:
                if arr.ndim == 0 or arr.shape[0] < 1:
                    raise RequestError(f"{where}, input '{name}': batch size must be >= 1, got shape {list(arr.shape)}")
                if arr.shape[0] > self.cfg.max_batch_size:
                    raise RequestError(
                        f"{where}, input '{name}': batch size {arr.shape[0]} exceeds max_batch_size "
                        f"{self.cfg.max_batch_size}"
                    )
                if batch is not None and arr.shape[0] != batch:
                    raise RequestError(f"{where}: inputs disagree on the batch size ({batch} vs {arr.shape[0]})")
                batch = arr.shape[0]

    def run(self, feeds: Feeds, weights: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Run one set of inputs (with the updatable weights' values, if any); returns every graph output by name.

        With buckets, the batch is padded to a bucket size (or cut into chunks of the largest) and the
        padding rows are dropped from the outputs; with a session per bucket, each chunk runs on its own.
        """
        if self._bucketed:
            return run_in_buckets(feeds, self.buckets, lambda chunk: self._run_once(chunk, weights))
        return self._run_once(feeds, weights)

    def _run_once(self, feeds: Feeds, weights: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
        session = self.session
        if self.bucket_sessions:
            session = self.bucket_sessions.get(next(iter(feeds.values())).shape[0], session)
        if self._strings:
            return self._run_strings(session, feeds, weights)
        outputs = session.run(self.output_names, {**feeds, **weights} if weights else feeds)
        return dict(zip(self.output_names, outputs))

    def _run_strings(
        self, session: OrtSession, feeds: Feeds, weights: dict[str, np.ndarray] | None
    ) -> dict[str, np.ndarray]:
        """`_run_once` for a model with string tensors: bytes as they are through the C API, or else as UTF-8 `str`."""
        if self.string_session is not None:
            outputs = self.string_session.run(self.output_names, {**feeds, **weights} if weights else feeds)
            return dict(zip(self.output_names, outputs))
        where = f"model '{self.cfg.model_name}'"
        feeds = {name: to_ort(where, name, a) if name in self._string_inputs else a for name, a in feeds.items()}
        outputs = session.run(self.output_names, {**feeds, **weights} if weights else feeds)
        return {name: from_ort(a) if name in self._string_outputs else a for name, a in zip(self.output_names, outputs)}

    def execute(self, requests: list[Feeds]) -> list[Result]:
        """Validate and run a batch of requests; one result (outputs or error) per request, in order.

        The updatable weights are read once, so every request of the batch sees the same version.
        """
        weights = self.weights.snapshot().arrays if self.weights is not None else None
        if len(requests) == 1 or not self.merge:  # CPU: each request runs alone, so no grouping (once per request)
            out: list[Result] = []
            for feeds in requests:
                try:
                    self.validate(feeds)
                    out.append(self.run(feeds, weights))
                except BackendError as e:
                    out.append(e)
            return out
        results: list[Result | None] = [None] * len(requests)
        valid: list[int] = []
        for i, feeds in enumerate(requests):
            try:
                self.validate(feeds)
                valid.append(i)
            except RequestError as e:
                results[i] = e
        ran = run_batched([requests[i] for i in valid], lambda f: self.run(f, weights), merge=self.merge)
        for i, r in zip(valid, ran):
            results[i] = r
        return [r for r in results if r is not None]

    def update_weights(self, manifest: str, data: Any = None, *, file: str | None = None) -> int:
        """Publish new values of updatable weights to every worker of the model; returns the new version.

        Args:
            manifest: JSON list of the tensors (name, dtype, shape) of the update.
            data: their values back to back, or None with `file`.
            file: name of an update file a client on this host wrote (`WeightStore.adopt`).

        Raises:
            RequestError: the model has no updatable weights, or the update does not fit them (nothing changed).
            InferenceFailure: the new version could not be written (nothing changed).
        """
        if self.weights is None:
            raise RequestError(
                f"model '{self.cfg.model_name}' declares no updatable weights (variable_weights_list is empty)"
            )
        return self.weights.update(manifest, data) if file is None else self.weights.adopt(manifest, file)

    def close(self, *, failed_load: bool = False) -> None:
        """Leave the weights store (the last worker removes it; see `WeightStore.close`). Safe to call twice."""
        if self.string_session is not None:
            self.string_session.close()
        if self.weights is not None:
            self.weights.close(failed_load=failed_load)


def layout(feeds: Feeds) -> tuple:
    """What `ModelRuntime.validate` checks of a request besides BOOL values: its inputs' names, dtypes, shapes."""
    return tuple([(name, arr.dtype, arr.shape) for name, arr in feeds.items()])


def input_layout(cfg: BackendConfig, io: GraphIO) -> Layout:
    """Each config input's dtype and dims (without the batch), the graph's fixed sizes filled in."""
    graph_dims = {t.name: t.dims for t in io.inputs}
    return {s.name: (_numpy_dtype(cfg, s), _merged_dims(cfg, s, graph_dims[s.name])) for s in cfg.inputs}


def output_layout(io: GraphIO) -> Layout:
    """Each graph output's dtype and dims without the batch (-1: dynamic; object: not a numeric type)."""
    return {t.name: (TRITON_TO_NUMPY.get(t.data_type, np.dtype(object)), t.dims[1:]) for t in io.outputs}


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


def _numpy_dtype(cfg: BackendConfig, spec: TensorSpec) -> np.dtype:
    if spec.data_type not in TRITON_TO_NUMPY:
        raise ModelLoadError(f"model '{cfg.model_name}', input '{spec.name}': data type {spec.data_type} is not served")
    return TRITON_TO_NUMPY[spec.data_type]


def _merged_dims(cfg: BackendConfig, spec: TensorSpec, graph_dims: tuple[int, ...]) -> tuple[int, ...]:
    """Config dims, with any -1 the graph pins to a fixed size replaced by that size."""
    gd = graph_dims[1:] if cfg.batched else graph_dims
    return tuple(c if c >= 0 else g for c, g in zip(spec.dims, gd))
