"""Just enough of the ONNX protobuf to tell whether a model has a dynamic batch dimension.

The client's base install has no `onnx` package; this walks the wire format directly (varints and
length-delimited fields), skipping weights without copying them.
"""

from __future__ import annotations

from collections.abc import Iterator

# field numbers in onnx.proto
_MODEL_GRAPH = 7
_GRAPH_INITIALIZER, _GRAPH_INPUT, _GRAPH_OUTPUT = 5, 11, 12
_VALUE_NAME, _VALUE_TYPE = 1, 2
_TYPE_TENSOR, _TENSOR_SHAPE, _SHAPE_DIM, _DIM_VALUE = 1, 2, 1, 1
_TENSOR_NAME = 8


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A protobuf varint at `pos`: (value, position after it).

    Raises:
        ValueError: longer than 10 bytes.
        IndexError: the buffer ends inside it.
    """
    value = shift = 0
    while shift < 70:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise ValueError("varint longer than 10 bytes")


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


def _first_dim(value_info: memoryview) -> int | None:
    """The first dimension of a graph input/output: its size, -1 when dynamic, None when it has no dims."""
    for tensor in (t for ty in _sub(value_info, _VALUE_TYPE) for t in _sub(ty, _TYPE_TENSOR)):
        for shape in _sub(tensor, _TENSOR_SHAPE):
            dims = _sub(shape, _SHAPE_DIM)
            if not dims:
                return None
            sizes = [v for n, w, v in _fields(dims[0]) if n == _DIM_VALUE and w == 0]
            if not sizes or not isinstance(sizes[0], int):
                return -1
            # int64 on the wire: MindSpore's exporter writes a dynamic dimension as the value -1
            return sizes[0] - (1 << 64) if sizes[0] >= 1 << 63 else sizes[0]
    return None


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
