"""Just enough of the ONNX protobuf to tell whether a model has a dynamic batch dimension, and whether it is light.

The client's base install has no `onnx` package; this walks the wire format directly with the contract's
reader (`mslite_contract.onnx_wire`, which also gives the model's size to the backend), skipping weights
without copying them.
"""

from __future__ import annotations

from mslite_contract.onnx_wire import (
    ATTRIBUTE_INTS,
    ATTRIBUTE_NAME,
    GRAPH_INITIALIZER,
    GRAPH_INPUT,
    GRAPH_NODE,
    GRAPH_OUTPUT,
    MODEL_GRAPH,
    NODE_ATTRIBUTE,
    NODE_INPUT,
    NODE_OP_TYPE,
    TENSOR_NAME,
    fields,
    graph_size,
    sub,
    text,
    varints,
)
from mslite_contract.protocol import is_light, sample_values

# field numbers in onnx.proto, of the inputs' and outputs' declarations
_VALUE_NAME, _VALUE_TYPE = 1, 2
_TYPE_TENSOR, _TENSOR_SHAPE, _SHAPE_DIM, _DIM_VALUE = 1, 2, 1, 1


def _dims(value_info: memoryview) -> list[int] | None:
    """The dimensions of a graph input/output, -1 for each dynamic one; None when it declares no shape."""
    for tensor in (t for ty in sub(value_info, _VALUE_TYPE) for t in sub(ty, _TYPE_TENSOR)):
        for shape in sub(tensor, _TENSOR_SHAPE):
            out = []
            for dim in sub(shape, _SHAPE_DIM):
                sizes = [v for n, w, v in fields(dim) if n == _DIM_VALUE and w == 0]
                size = sizes[0] if sizes and isinstance(sizes[0], int) else -1
                # int64 on the wire: MindSpore's exporter writes a dynamic dimension as the value -1
                out.append(size - (1 << 64) if size >= 1 << 63 else size)
            return out
    return None


def _first_dim(value_info: memoryview) -> int | None:
    """The first dimension of a graph input/output: its size, -1 when dynamic, None when it has no dims."""
    dims = _dims(value_info)
    return dims[0] if dims else None


def has_dynamic_batch(data: bytes) -> bool:
    """True when every graph input and output of the ONNX model starts with a dynamic dimension.

    Returns False for anything it cannot read (the server's auto-complete then decides alone).
    """
    try:
        graphs = sub(memoryview(data), MODEL_GRAPH)
        if not graphs:
            return False
        graph = graphs[0]
        weights = {text(t, TENSOR_NAME) for t in sub(graph, GRAPH_INITIALIZER)}
        tensors = [v for v in sub(graph, GRAPH_INPUT) if text(v, _VALUE_NAME) not in weights]
        tensors += sub(graph, GRAPH_OUTPUT)
        return bool(tensors) and all(_first_dim(t) == -1 for t in tensors)
    except (ValueError, IndexError, UnicodeDecodeError):
        return False


def is_light_model(data: bytes, *, batched: bool) -> bool:
    """Whether the ONNX model is light (`protocol.is_light`, the backend's rule); False for what it cannot read.

    `batched`: the first dimension of every input is the batch, not part of a sample. The model's size is
    `onnx_wire.graph_size`'s, as the backend's.
    """
    try:
        nodes, weight_bytes = graph_size(data)
        graph = sub(memoryview(data), MODEL_GRAPH)[0]
        weights = {text(t, TENSOR_NAME) for t in sub(graph, GRAPH_INITIALIZER)}
        inputs = [v for v in sub(graph, GRAPH_INPUT) if text(v, _VALUE_NAME) not in weights]
        values = sample_values((_dims(v) for v in inputs), batched=batched)
        return bool(inputs) and is_light(nodes, weight_bytes, values)
    except (ValueError, IndexError, UnicodeDecodeError):
        return False


_MODEL_METADATA = 14  # ModelProto.metadata_props: repeated StringStringEntryProto {key = 1, value = 2}


def metadata_props(data: bytes) -> dict[str, str]:
    """The ONNX model's `metadata_props` (key -> value); {} for none or for anything it cannot read."""
    try:
        props = {}
        for entry in sub(memoryview(data), _MODEL_METADATA):
            entry_fields = {n: bytes(v).decode() for n, w, v in fields(entry) if w == 2 and isinstance(v, memoryview)}
            props[entry_fields.get(1, "")] = entry_fields.get(2, "")
        return props
    except (ValueError, IndexError, UnicodeDecodeError):
        return {}


# ONNX defines these operators on channels-first (NCHW) data: a 4-D graph input they read directly is NCHW
_CHANNELS_FIRST = frozenset(
    {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool",
     "BatchNormalization", "InstanceNormalization", "LRN", "SpaceToDepth", "DepthToSpace"}
)  # fmt: skip
_NHWC_TO_NCHW = [0, 3, 1, 2]  # the Transpose an NHWC model starts with, to feed those operators


def input_layouts(data: bytes) -> dict[str, str]:
    """`NCHW` or `NHWC` for each 4-D graph input whose layout the graph tells; inputs it does not tell are left out.

    An input read directly by a channels-first operator (Conv, pooling, ...) is NCHW; one read by a
    Transpose with perm [0, 3, 1, 2] is NHWC. Anything unreadable gives {}.
    """
    try:
        graph = sub(memoryview(data), MODEL_GRAPH)[0]
        weights = {text(t, TENSOR_NAME) for t in sub(graph, GRAPH_INITIALIZER)}
        images = {
            text(v, _VALUE_NAME)
            for v in sub(graph, GRAPH_INPUT)
            if text(v, _VALUE_NAME) not in weights and len(_dims(v) or ()) == 4
        }
        found: dict[str, str] = {}
        for node in sub(graph, GRAPH_NODE):
            op = text(node, NODE_OP_TYPE)
            for value in sub(node, NODE_INPUT):
                name = bytes(value).decode()
                if name not in images or name in found:
                    continue
                if op in _CHANNELS_FIRST:
                    found[name] = "NCHW"
                elif op == "Transpose" and _perm(node) == _NHWC_TO_NCHW:
                    found[name] = "NHWC"
        return found
    except (ValueError, IndexError, UnicodeDecodeError):
        return {}


def _perm(node: memoryview) -> list[int]:
    for attribute in sub(node, NODE_ATTRIBUTE):
        if text(attribute, ATTRIBUTE_NAME) == "perm":
            return varints(attribute, ATTRIBUTE_INTS)
    return []
