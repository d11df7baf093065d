"""The backend's typed configuration, parsed once from Triton's model config.

Parameters come from `parameters { key: "..." value { string_value: "..." } }` in config.pbtxt.
Two vocabularies are accepted: ONNX Runtime backend names (`intra_op_thread_count`, ...) and
MindSpore Lite names (`thread_num`, ...). Rule when both name the same setting: equal values are
fine, different values fail the load naming both keys.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from mslite_contract.protocol import (
    ASCEND_DEVICE_IDS_PARAMETER,
    ASCEND_PRECISION_MODE_PARAMETER,
    ASCEND_PROVIDER_PARAMETER,
    DEFAULT_GPU_BUCKETS,
    INTER_OP_PARALLEL_NUM_PARAMETER,
    PRECISION_MODE_PARAMETER,
    RESIZED_INPUTS_PARAMETER,
    SECTION_SEPARATOR,
    THREAD_AFFINITY_CORE_LIST_PARAMETER,
    THREAD_AFFINITY_MODE_PARAMETER,
    THREAD_NUM_PARAMETER,
    VARIABLE_WEIGHTS_KEYS,
    WEIGHTS_INPUT,  # the optional input of weights updates: not one of the model's inputs
    capped_buckets,
)
from mslite_contract.settings import MODEL_MAX_REQUEST_BYTES

from .errors import ConfigError
from .parameter_values import (
    Parameters,
    auto_boolean,
    boolean,
    bucket_sessions,
    buckets,
    execution_mode,
    int_list,
    opt_level,
    param_value,
)
from .resized import Shapes, declared_resized

# setting -> (ONNX Runtime backend name, MindSpore Lite name or None)
_ALIASES = {
    "intra_op_threads": ("intra_op_thread_count", THREAD_NUM_PARAMETER),
    "inter_op_threads": ("inter_op_thread_count", INTER_OP_PARALLEL_NUM_PARAMETER),
}
BATCH_BUCKETS_KEY = "batch_buckets"  # also read by auto-complete (graph.py)
_SINGLE_KEYS = (
    "execution_mode",
    "enable_mem_arena",
    "graph_optimization_level",
    THREAD_AFFINITY_MODE_PARAMETER,
    THREAD_AFFINITY_CORE_LIST_PARAMETER,
    PRECISION_MODE_PARAMETER,
    "warmup",
    BATCH_BUCKETS_KEY,
    "merge_requests",
    "io_binding",
    "cuda_graphs",
    "bucket_sessions",
    "max_request_bytes",
    "metrics",
    "execute_deadline_s",
    ASCEND_DEVICE_IDS_PARAMETER,
    ASCEND_PROVIDER_PARAMETER,
    ASCEND_PRECISION_MODE_PARAMETER,
    RESIZED_INPUTS_PARAMETER,
)
DEVICE_KEYS = (ASCEND_DEVICE_IDS_PARAMETER, ASCEND_PROVIDER_PARAMETER, ASCEND_PRECISION_MODE_PARAMETER)
KNOWN_KEYS = frozenset(k for pair in _ALIASES.values() for k in pair) | frozenset(_SINGLE_KEYS)
# Weights: sharing (bool) under either name; the updatable tensors under any of protocol.VARIABLE_WEIGHTS_KEYS.
SHARE_WEIGHTS_KEYS = ("share_weights", "weights.share")
WEIGHT_KEYS = frozenset({SHARE_WEIGHTS_KEYS[0], VARIABLE_WEIGHTS_KEYS[0]})

PRECISION_MODES = ("enforce_fp32", "preferred_fp16")


@dataclass(frozen=True)
class TensorSpec:
    """One input or output as the model config declares it (dims exclude the batch dimension)."""

    name: str
    data_type: str
    dims: tuple[int, ...]
    optional: bool = False


@dataclass(frozen=True)
class InstanceInfo:
    """What Triton tells one instance about itself in `initialize(args)`."""

    name: str
    kind: str  # "CPU", "GPU" or "MODEL"
    device_id: int
    index: int = 0  # position among the model's instances (worker i of N)

    @classmethod
    def from_args(cls, args: dict[str, str], index: int = 0) -> InstanceInfo:
        """Build from the `args` dict Triton passes to `initialize` (all values are strings)."""
        return cls(
            name=args.get("model_instance_name", ""),
            kind=args.get("model_instance_kind", "CPU").upper(),
            device_id=int(args.get("model_instance_device_id", "0") or 0),
            index=index,
        )


@dataclass(frozen=True)
class BackendConfig:
    """Everything the runtime needs, validated once at load."""

    model_name: str
    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    model_filename: str = "model.onnx"
    workers: int = 1
    intra_op_threads: int = 1
    inter_op_threads: int = 1
    execution_mode: str = "sequential"
    enable_mem_arena: bool = True
    graph_optimization_level: int = 99
    allow_spinning: bool = True
    thread_affinity_mode: int = 0
    thread_affinity_core_list: tuple[int, ...] = ()
    precision_mode: str = "enforce_fp32"
    warmup: bool = True
    share_weights: bool = True
    variable_weights: tuple[str, ...] = ()
    batch_buckets: tuple[int, ...] = ()  # empty: GPU workers use DEFAULT_GPU_BUCKETS, CPU workers none
    merge_requests: bool | None = None  # None ("auto"): merge on accelerators, one run per request on CPU
    io_binding: bool | None = None  # None ("auto"): bound buffers per bucket on GPU, plain runs on CPU (`bound`)
    cuda_graphs: bool = True  # GPU bound buckets capture and replay a CUDA graph; false: bound runs only
    # "auto": a GPU worker opens one session per bucket; "one": one session for every bucket, each bucket's
    # CUDA graph captured under its own graph id (one copy of the weights; unmeasured on a GPU, hence opt-in)
    bucket_sessions: str = "auto"
    max_request_bytes: int = MODEL_MAX_REQUEST_BYTES
    metrics: bool = True
    # a worker whose one `execute` runs longer than this ends itself, and the supervisor starts a new one
    # (`deadline.ExecuteWatch`); 0: no deadline
    execute_deadline_s: float = 0.0
    device_params: tuple[tuple[str, str], ...] = ()  # ascend_* keys, for the provider choice
    resized_inputs: Shapes = ()  # inputs whose fixed dims the load makes symbolic (resized.free_dims)
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.max_batch_size < 0:
            raise ConfigError(self._msg("max_batch_size", ">= 0", self.max_batch_size))
        if self.intra_op_threads < 1:
            raise ConfigError(self._msg("intra_op_thread_count", ">= 1", self.intra_op_threads))
        if self.inter_op_threads < 1:
            raise ConfigError(self._msg("inter_op_thread_count", ">= 1", self.inter_op_threads))
        if self.thread_affinity_mode not in (0, 1, 2):
            raise ConfigError(self._msg(THREAD_AFFINITY_MODE_PARAMETER, "0, 1 or 2", self.thread_affinity_mode))
        if not 0 <= self.execute_deadline_s < float("inf"):  # NaN fails this too
            raise ConfigError(self._msg("execute_deadline_s", "a number of seconds >= 0", self.execute_deadline_s))

    def _msg(self, key: str, expected: str, actual: object) -> str:
        return f"model '{self.model_name}': parameter '{key}' must be {expected}, got {actual!r}"

    @property
    def batched(self) -> bool:
        """True when the first dimension of every tensor is Triton's batch dimension."""
        return self.max_batch_size > 0

    @classmethod
    def from_model_config(cls, model_config: dict[str, Any], *, cores: int | None = None) -> BackendConfig:
        """Parse Triton's model config (the JSON dict) into a validated config.

        Args:
            model_config: `json.loads(args["model_config"])`.
            cores: CPU cores this process may use; defaults to the scheduler affinity.

        Raises:
            ConfigError: a parameter has a bad value, or two aliases disagree.
        """
        name = str(model_config.get("name", "?"))
        params = {k: param_value(v) for k, v in (model_config.get("parameters") or {}).items()}
        warnings = tuple(
            f"model '{name}': unknown parameter '{k}' ignored (known: {', '.join(sorted(KNOWN_KEYS | WEIGHT_KEYS))})"
            for k in sorted(params)
            # `section.key` entries are MindSpore Lite config-file sections forwarded by the client
            if k not in KNOWN_KEYS and k not in WEIGHT_KEYS and SECTION_SEPARATOR not in k
        )
        cores = cores or len(os.sched_getaffinity(0))
        workers = worker_count(model_config)
        get = Parameters(name, params)

        intra = get.same(_ALIASES["intra_op_threads"], int, None) or 0
        if intra == 0:
            intra = max(1, cores // workers)
        inter = get.same(_ALIASES["inter_op_threads"], int, None) or 1
        mode = get.one("execution_mode", execution_mode, "sequential")
        precision = get.one(PRECISION_MODE_PARAMETER, str, "enforce_fp32").lower()
        if precision not in PRECISION_MODES:
            raise ConfigError(
                f"model '{name}': parameter '{PRECISION_MODE_PARAMETER}' must be one of {list(PRECISION_MODES)}, "
                f"got '{precision}'"
            )
        affinity = get.one(THREAD_AFFINITY_MODE_PARAMETER, int, 0)
        if affinity == 2:
            warnings += (f"model '{name}': thread_affinity_mode 2 (middle cores first) is not supported; not pinned",)
        return cls(
            model_name=name,
            max_batch_size=int(model_config.get("max_batch_size", 0) or 0),
            inputs=tuple(_tensor_spec(t) for t in model_config.get("input") or [] if t.get("name") != WEIGHTS_INPUT),
            outputs=tuple(_tensor_spec(t) for t in model_config.get("output") or []),
            model_filename=str(model_config.get("default_model_filename") or "model.onnx"),
            workers=workers,
            intra_op_threads=intra,
            inter_op_threads=inter,
            execution_mode=mode,
            enable_mem_arena=get.one("enable_mem_arena", boolean, True),
            graph_optimization_level=get.one("graph_optimization_level", opt_level, 99),
            allow_spinning=workers * intra <= cores,
            thread_affinity_mode=affinity,
            thread_affinity_core_list=get.one(THREAD_AFFINITY_CORE_LIST_PARAMETER, int_list, ()),
            precision_mode=precision,
            warmup=get.one("warmup", boolean, True),
            share_weights=get.same(SHARE_WEIGHTS_KEYS, boolean, True),
            variable_weights=variable_weights(name, params),
            batch_buckets=get.one(BATCH_BUCKETS_KEY, buckets, ()),
            merge_requests=get.one("merge_requests", auto_boolean, None),
            io_binding=get.one("io_binding", auto_boolean, None),
            cuda_graphs=get.one("cuda_graphs", boolean, True),
            bucket_sessions=get.one("bucket_sessions", bucket_sessions, "auto"),
            max_request_bytes=get.one("max_request_bytes", int, MODEL_MAX_REQUEST_BYTES),
            metrics=get.one("metrics", boolean, True),
            execute_deadline_s=get.one("execute_deadline_s", float, 0.0),
            device_params=tuple((k, params[k]) for k in DEVICE_KEYS if k in params),
            resized_inputs=declared_resized(name, params.get(RESIZED_INPUTS_PARAMETER)),
            warnings=warnings,
        )

    def merges_for(self, kind: str) -> bool:
        """Whether the requests of one `execute` are concatenated into one run on a worker of `kind`.

        On CPU, ONNX Runtime's cost per image does not fall with the batch (on the reference machine batch 8
        was 15 % slower per image than batch 1), so by default each request runs alone; accelerators merge.
        """
        if not self.batched:
            return False
        return self.merge_requests if self.merge_requests is not None else kind != "CPU"

    def binds_for(self, kind: str) -> bool:
        """Whether a worker of `kind` runs its buckets on pre-allocated bound buffers (`bound.BoundBucket`).

        Fixed shapes are what binding needs, so only batched models; by default GPU workers do, CPU workers
        only when `io_binding` asks (their plain run is already the cheapest path for a small model).
        """
        if not self.batched:
            return False
        return self.io_binding if self.io_binding is not None else kind == "GPU"

    def buckets_for(self, kind: str) -> tuple[int, ...]:
        """Fixed batch sizes a worker of `kind` runs at (none: any size), capped by max_batch_size.

        GPU workers, and any worker asked to bind its buffers, default to DEFAULT_GPU_BUCKETS.
        """
        if not self.batched:
            return ()
        sizes = self.batch_buckets or (DEFAULT_GPU_BUCKETS if kind == "GPU" or self.binds_for(kind) else ())
        return capped_buckets(sizes, self.max_batch_size)


def group_instances(group: dict[str, Any]) -> int:
    """Instances Triton creates for one instance group: `count` on each GPU the group lists."""
    return int(group.get("count", 1) or 1) * max(1, len(group.get("gpus") or []))


def worker_count(model_config: dict[str, Any]) -> int:
    """Instances of the model (Triton makes one when the config has no instance groups)."""
    return max(1, sum(group_instances(g) for g in model_config.get("instance_group") or []))


def declared_variable_weights(model_config: dict[str, Any]) -> tuple[str, ...]:
    """The updatable weights a raw model config declares (for auto-complete, before the full parse).

    Raises:
        ConfigError: see `variable_weights`.
    """
    params = {k: param_value(v) for k, v in (model_config.get("parameters") or {}).items()}
    return variable_weights(str(model_config.get("name", "?")), params)


def declared_resized_inputs(model_config: dict[str, Any]) -> Shapes:
    """The resized inputs a raw model config declares (for auto-complete, before the full parse).

    Raises:
        ConfigError: see `resized.declared_resized`.
    """
    raw = (model_config.get("parameters") or {}).get(RESIZED_INPUTS_PARAMETER)
    return declared_resized(str(model_config.get("name", "?")), None if raw is None else param_value(raw))


def variable_weights(model: str, params: dict[str, str]) -> tuple[str, ...]:
    """The updatable tensors named by any of `VARIABLE_WEIGHTS_KEYS` (comma-separated, order kept).

    Raises:
        ConfigError: two keys name different lists, or a name is repeated.
    """
    lists = {
        k: tuple(n.strip() for n in params[k].split(",") if n.strip()) for k in VARIABLE_WEIGHTS_KEYS if k in params
    }
    if len(set(lists.values())) > 1:
        shown = " and ".join(f"'{k}'={','.join(v)!r}" for k, v in lists.items())
        raise ConfigError(f"model '{model}': {shown} name different updatable weights")
    names = next(iter(lists.values()), ())
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"model '{model}': updatable weights {repeated} are listed more than once")
    return names


def _tensor_spec(t: dict[str, Any]) -> TensorSpec:
    dims = t.get("dims") or []
    if isinstance(t.get("reshape"), dict):
        raise ConfigError(f"tensor '{t.get('name')}': 'reshape' is not supported by the mslite backend")
    return TensorSpec(
        name=str(t["name"]),
        data_type=str(t.get("data_type", "TYPE_INVALID")),
        dims=tuple(int(d) for d in dims),
        optional=bool(t.get("optional", False)),
    )
