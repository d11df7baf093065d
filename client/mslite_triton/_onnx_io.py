"""Just enough of the ONNX protobuf to tell whether a model has a dynamic batch dimension, and whether it is light.

The client's base install has no `onnx` package; this walks the wire format directly (varints and
length-delimited fields), skipping weights without copying them.
"""

from __future__ import annotations

from collections.abc import Iterator

from mslite_contract.protobuf_varint import read_varint
from mslite_contract.protocol import is_light, sample_values

# field numbers in onnx.proto
_MODEL_GRAPH = 7
_GRAPH_NODE, _GRAPH_INITIALIZER, _GRAPH_INPUT, _GRAPH_OUTPUT = 1, 5, 11, 12
_NODE_INPUT, _NODE_OP_TYPE, _NODE_ATTRIBUTE, _ATTRIBUTE_TENSOR = 1, 4, 5, 5
_ATTRIBUTE_NAME, _ATTRIBUTE_INTS = 1, 8
_VALUE_NAME, _VALUE_TYPE = 1, 2
_TYPE_TENSOR, _TENSOR_SHAPE, _SHAPE_DIM, _DIM_VALUE = 1, 2, 1, 1
_TENSOR_DIMS, _TENSOR_DATA_TYPE, _TENSOR_NAME = 1, 2, 8
# bytes per value of TensorProto.DataType; strings and unknown types count one byte a value
_ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}


def _fields(buf: memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """(field number, wire type, value) of each field of one message."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
            yield number, wire, value
        elif wire == 2:
            length, pos = read_varint(buf, pos)
            yield number, wire, buf[pos : pos + length]
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


def _sub(buf: memoryview, number: int) -> list[memoryview]:
    return [v for n, w, v in _fields(buf) if n == number and w == 2 and isinstance(v, memoryview)]


def _dims(value_info: memoryview) -> list[int] | None:
    """The dimensions of a graph input/output, -1 for each dynamic one; None when it declares no shape."""
    for tensor in (t for ty in _sub(value_info, _VALUE_TYPE) for t in _sub(ty, _TYPE_TENSOR)):
        for shape in _sub(tensor, _TENSOR_SHAPE):
            out = []
            for dim in _sub(shape, _SHAPE_DIM):
                sizes = [v for n, w, v in _fields(dim) if n == _DIM_VALUE and w == 0]
                size = sizes[0] if sizes and isinstance(sizes[0], int) else -1
                # int64 on the wire: MindSpore's exporter writes a dynamic dimension as the value -1
                out.append(size - (1 << 64) if size >= 1 << 63 else size)
            return out
    return None


def _first_dim(value_info: memoryview) -> int | None:
    """The first dimension of a graph input/output: its size, -1 when dynamic, None when it has no dims."""
    dims = _dims(value_info)
    return dims[0] if dims else None


def _name(value_info: memoryview, field: int) -> str:
    return next((bytes(v).decode() for n, w, v in _fields(value_info) if n == field and w == 2), "")


def has_dynamic_batch(data: bytes) -> bool:
    """True when every graph input and output of the ONNX model starts with a dynamic dimension.

    Returns False for anything it cannot read (the server's auto-complete then decides alone).
    """
    try:
        graphs = _sub(memoryview(data), _MODEL_GRAPH)
        if not graphs:
            return False
        graph = graphs[0]
        weights = {_name(t, _TENSOR_NAME) for t in _sub(graph, _GRAPH_INITIALIZER)}
        tensors = [v for v in _sub(graph, _GRAPH_INPUT) if _name(v, _VALUE_NAME) not in weights]
        tensors += _sub(graph, _GRAPH_OUTPUT)
        return bool(tensors) and all(_first_dim(t) == -1 for t in tensors)
    except (ValueError, IndexError, UnicodeDecodeError):
        return False


def _varints(buf: memoryview, number: int) -> list[int]:
    """A repeated integer field, packed or not."""
    out = []
    for n, w, v in _fields(buf):
        if n == number and w == 0 and isinstance(v, int):
            out.append(v)
        elif n == number and w == 2 and isinstance(v, memoryview):
            pos = 0
            while pos < len(v):
                value, pos = read_varint(v, pos)
                out.append(value)
    return out


def _tensor_bytes(tensor: memoryview) -> int:
    """Bytes of a TensorProto's values, from its dims and type (its data may be in an external file)."""
    dtype = next((v for n, w, v in _fields(tensor) if n == _TENSOR_DATA_TYPE and w == 0), 0)
    count = 1
    for d in _varints(tensor, _TENSOR_DIMS):
        count *= d
    return count * _ITEMSIZE.get(int(dtype), 1)


def is_light_model(data: bytes, *, batched: bool) -> bool:
    """Whether the ONNX model is light (`protocol.is_light`, the backend's rule); False for what it cannot read.

    `batched`: the first dimension of every input is the batch, not part of a sample.
    """
    try:
        graph = _sub(memoryview(data), _MODEL_GRAPH)[0]
        nodes = _sub(graph, _GRAPH_NODE)
        initializers = _sub(graph, _GRAPH_INITIALIZER)
        constants = [
            t
            for node in nodes
            if _name(node, _NODE_OP_TYPE) == "Constant"
            for attribute in _sub(node, _NODE_ATTRIBUTE)
            for t in _sub(attribute, _ATTRIBUTE_TENSOR)
        ]
        weights = {_name(t, _TENSOR_NAME) for t in initializers}
        inputs = [v for v in _sub(graph, _GRAPH_INPUT) if _name(v, _VALUE_NAME) not in weights]
        values = sample_values((_dims(v) for v in inputs), batched=batched)
        weight_bytes = sum(_tensor_bytes(t) for t in (*initializers, *constants))
        return bool(inputs) and is_light(len(nodes), weight_bytes, values)
    except (ValueError, IndexError, UnicodeDecodeError):
        return False


_MODEL_METADATA = 14  # ModelProto.metadata_props: repeated StringStringEntryProto {key = 1, value = 2}


def metadata_props(data: bytes) -> dict[str, str]:
    """The ONNX model's `metadata_props` (key -> value); {} for none or for anything it cannot read."""
    try:
        props = {}
        for entry in _sub(memoryview(data), _MODEL_METADATA):
            fields = {n: bytes(v).decode() for n, w, v in _fields(entry) if w == 2 and isinstance(v, memoryview)}
            props[fields.get(1, "")] = fields.get(2, "")
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
        graph = _sub(memoryview(data), _MODEL_GRAPH)[0]
        weights = {_name(t, _TENSOR_NAME) for t in _sub(graph, _GRAPH_INITIALIZER)}
        images = {
            _name(v, _VALUE_NAME)
            for v in _sub(graph, _GRAPH_INPUT)
            if _name(v, _VALUE_NAME) not in weights and len(_dims(v) or ()) == 4
        }
        found: dict[str, str] = {}
        for node in _sub(graph, _GRAPH_NODE):
            op = _name(node, _NODE_OP_TYPE)
            for value in _sub(node, _NODE_INPUT):
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
    for attribute in _sub(node, _NODE_ATTRIBUTE):
        if _name(attribute, _ATTRIBUTE_NAME) == "perm":
            return _varints(attribute, _ATTRIBUTE_INTS)
    return []
