"""What the ONNX file declares: its inputs and outputs, the auto-completed config, and load-time checks."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from mslite_contract import protocol
from mslite_contract.dtypes import short_name, triton_type_of_onnx
from mslite_contract.onnx_wire import graph_size
from mslite_contract.protocol import (
    BATCHING_SECTION,
    DEFAULT_GPU_BUCKETS,
    DEFAULT_MAX_BATCH_SIZE,
    capped_buckets,
    sample_values,
)

from . import buckets
from .config import BATCH_BUCKETS_KEY, BackendConfig, TensorSpec
from .errors import ConfigError, ModelLoadError
from .resized import Shapes, free_dims


@dataclass(frozen=True)
class GraphTensor:
    """A graph input or output: `dims` holds -1 for every dynamic (symbolic or unknown) dimension."""

    name: str
    data_type: str
    dims: tuple[int, ...]

    @property
    def batchable(self) -> bool:
        """True when the first dimension exists and is dynamic."""
        return bool(self.dims) and self.dims[0] == -1


@dataclass(frozen=True)
class GraphIO:
    """The inputs and outputs of one ONNX graph, and its size (None: not known)."""

    inputs: tuple[GraphTensor, ...]
    outputs: tuple[GraphTensor, ...]
    # the size, not part of what the graph declares (the cache's copy of the I/O has none): left out of ==
    nodes: int | None = field(default=None, compare=False)  # operators of the main graph
    weight_bytes: int | None = field(default=None, compare=False)  # initializers and Constants, external or not


def is_light(io: GraphIO, batched: bool) -> bool:
    """Whether the graph is light (`protocol.is_light`): its size, and its input values per sample."""
    values = sample_values((t.dims for t in io.inputs), batched=batched)
    return bool(io.inputs) and protocol.is_light(io.nodes, io.weight_bytes, values)


def read_graph_io(path: str, resized: Shapes = (), model_name: str = "") -> GraphIO:
    """Read the I/O declarations of an ONNX file without loading external weights.

    With `resized`, as the graph declares them once `resized.free_dims` has made those inputs resizable.

    Raises:
        ModelLoadError: the file is missing or is not a valid ONNX model; a resize it cannot take.
    """
    import onnx  # lazily: only the auto-complete stub and tests need it

    name = os.path.basename(path)
    if not os.path.isfile(path):
        raise ModelLoadError(f"model file '{name}' not found in the model version directory")
    try:
        with open(path, "rb") as f:
            data = f.read()
        model = onnx.load_model_from_string(data)  # external weights stay where they are
        nodes, weight_bytes = graph_size(data)  # the client's reading of the size, exactly
    except Exception as e:  # onnx raises DecodeError, ValueError, ... depending on the damage
        raise ModelLoadError(f"model file '{name}' is not a valid ONNX model ({type(e).__name__})") from e
    if resized:
        free_dims(model, resized, model_name)
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    return GraphIO(
        inputs=tuple(_tensor(v) for v in graph.input if v.name not in initializers),
        outputs=tuple(_tensor(v) for v in graph.output),
        nodes=nodes,
        weight_bytes=weight_bytes,
    )


def _tensor(value_info: Any) -> GraphTensor:
    tt = value_info.type.tensor_type
    dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim)
    return GraphTensor(value_info.name, triton_type_of_onnx(tt.elem_type), dims)


@dataclass(frozen=True)
class AutoCompletePlan:
    """What `auto_complete_config` should add to a model config."""

    max_batch_size: int | None
    dynamic_batching: bool
    inputs: tuple[dict[str, Any], ...]
    outputs: tuple[dict[str, Any], ...]
    batcher_defaults: dict[str, Any] = field(default_factory=dict)  # missing dynamic_batching fields to fill


def plan_auto_complete(model_config: dict[str, Any], io: GraphIO) -> AutoCompletePlan:
    """Decide the fields a minimal config (`backend: "mslite"` only) is missing.

    Batching is turned on (max_batch_size DEFAULT_MAX_BATCH_SIZE, dynamic batching) when the config
    declares no tensors and no max_batch_size, and every graph tensor has a dynamic first dimension.
    """
    declared = bool(model_config.get("input") or model_config.get("output"))
    mbs = int(model_config.get("max_batch_size", 0) or 0)
    everything = io.inputs + io.outputs
    can_batch = bool(everything) and all(t.batchable for t in everything)
    if mbs == 0 and not declared and can_batch:
        mbs_new: int | None = DEFAULT_MAX_BATCH_SIZE
    else:
        mbs_new = None
    batched = (mbs_new or mbs) > 0
    have_in = {t["name"] for t in model_config.get("input") or []}
    have_out = {t["name"] for t in model_config.get("output") or []}

    def entry(t: GraphTensor) -> dict[str, Any]:
        dims = list(t.dims[1:] if batched else t.dims)
        return {"name": t.name, "data_type": t.data_type, "dims": dims}

    dynamic = batched and "sequence_batching" not in model_config
    return AutoCompletePlan(
        max_batch_size=mbs_new,
        dynamic_batching=dynamic,
        batcher_defaults=batcher_defaults(model_config, mbs_new or mbs, light=is_light(io, batched)) if dynamic else {},
        inputs=tuple(entry(t) for t in io.inputs if t.name not in have_in),
        outputs=tuple(entry(t) for t in io.outputs if t.name not in have_out),
    )


def batcher_defaults(model_config: dict[str, Any], max_batch_size: int, *, light: bool = False) -> dict[str, Any]:
    """The dynamic batcher fields the config leaves out that auto-complete fills (`protocol.batcher_defaults`).

    CPU-only means every instance group is KIND_CPU (a config without groups gets one CPU instance here).
    A `light` model (`is_light`) gets no CPU cap. When every group is KIND_GPU, the GPU defaults follow
    from the buckets the workers will run (`batch_buckets`, else DEFAULT_GPU_BUCKETS).

    Raises:
        ConfigError: `batch_buckets` is not a list of positive integers.
    """
    groups = model_config.get("instance_group") or []
    cpu_only = all(g.get("kind", "KIND_CPU") == "KIND_CPU" for g in groups)
    gpu_only = bool(groups) and all(g.get("kind") == "KIND_GPU" for g in groups)
    current = model_config.get(BATCHING_SECTION) or {}
    gpu_buckets: tuple[int, ...] = ()
    if gpu_only:
        raw = (model_config.get("parameters") or {}).get(BATCH_BUCKETS_KEY)
        try:
            sizes = buckets.parse(raw.get("string_value", "") if isinstance(raw, dict) else str(raw)) if raw else ()
        except ValueError as e:
            raise ConfigError(
                f"model '{model_config.get('name', '?')}': parameter '{BATCH_BUCKETS_KEY}': {e}"
            ) from None
        gpu_buckets = capped_buckets(sizes or DEFAULT_GPU_BUCKETS, max_batch_size)
    return protocol.batcher_defaults(
        current, max_batch_size=max_batch_size, cpu_only=cpu_only, light=light, gpu_buckets=gpu_buckets
    )


def check_config_against_graph(cfg: BackendConfig, io: GraphIO) -> None:
    """Fail the load when the config's tensors disagree with the ONNX graph.

    Raises:
        ModelLoadError: naming the model, the tensor, the field, what the graph has and what the config says.
    """
    where = f"model '{cfg.model_name}'"
    graph_in = {t.name: t for t in io.inputs}
    graph_out = {t.name: t for t in io.outputs}
    for kind, specs, graph in (("input", cfg.inputs, graph_in), ("output", cfg.outputs, graph_out)):
        for spec in specs:
            if spec.name not in graph:
                raise ModelLoadError(
                    f"{where}: config {kind} '{spec.name}' is not in the ONNX graph; "
                    f"the graph's {kind}s are {sorted(graph)}"
                )
            _check_tensor(where, kind, spec, graph[spec.name], cfg.batched)
    missing = sorted(set(graph_in) - {s.name for s in cfg.inputs})
    if missing:
        raise ModelLoadError(f"{where}: ONNX graph inputs {missing} are missing from the config's inputs")


def _check_tensor(where: str, kind: str, spec: TensorSpec, t: GraphTensor, batched: bool) -> None:
    if spec.data_type != t.data_type:
        raise ModelLoadError(
            f"{where}, {kind} '{spec.name}': data_type expected {t.data_type} (from the ONNX graph), "
            f"config says {spec.data_type}"
        )
    graph_dims = t.dims
    if batched:
        if graph_dims and graph_dims[0] not in (-1,):
            raise ModelLoadError(
                f"{where}, {kind} '{spec.name}': max_batch_size > 0 needs a dynamic first dimension, "
                f"the ONNX graph has {list(graph_dims)}"
            )
        graph_dims = graph_dims[1:]
    if len(graph_dims) != len(spec.dims) or any(g != -1 and c != -1 and g != c for g, c in zip(graph_dims, spec.dims)):
        raise ModelLoadError(
            f"{where}, {kind} '{spec.name}': dims expected {list(graph_dims)} (from the ONNX graph"
            f"{', batch dimension excluded' if batched else ''}), config says {list(spec.dims)}"
        )


def describe(spec: TensorSpec, batched: bool) -> str:
    """`FP32[-1,3,224,224]`: how a tensor appears in request-error messages."""
    dims = ([-1] if batched else []) + list(spec.dims)
    return f"{short_name(spec.data_type)}{dims}"
