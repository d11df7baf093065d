"""An ONNX model's protobuf read from its wire format, and the size `protocol.is_light` judges it by.

The client's base install has no `onnx` package, and the backend must judge a model exactly as the client
does: both take a model's size from `graph_size` here (operators of the main graph, bytes of weights), and the
client reads its inputs and outputs with the same walker (`fields`, `sub`, `varints`, `text`). Weights are
skipped without copying them. Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterator

from mslite_contract.protobuf_varint import read_varint

# field numbers in onnx.proto
MODEL_GRAPH = 7
GRAPH_NODE, GRAPH_INITIALIZER, GRAPH_INPUT, GRAPH_OUTPUT = 1, 5, 11, 12
NODE_INPUT, NODE_OP_TYPE, NODE_ATTRIBUTE = 1, 4, 5
ATTRIBUTE_NAME, ATTRIBUTE_TENSOR, ATTRIBUTE_INTS = 1, 5, 8
TENSOR_DIMS, TENSOR_DATA_TYPE, TENSOR_NAME = 1, 2, 8
# bytes per value of each TensorProto.DataType; strings and unknown types count one byte a value
_ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 14: 8, 15: 16, 16: 2}


def fields(buf: memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """(field number, wire type, value) of each field of one message: an int, or a view of the bytes.

    Raises:
        ValueError: a wire type it does not take (groups).
        IndexError: the bytes end inside a varint.
    """
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


def sub(buf: memoryview, number: int) -> list[memoryview]:
    """The length-delimited fields `number` of a message (sub-messages, strings), in order."""
    return [v for n, w, v in fields(buf) if n == number and w == 2 and isinstance(v, memoryview)]


def varints(buf: memoryview, number: int) -> list[int]:
    """A repeated integer field, packed or not."""
    out = []
    for n, w, v in fields(buf):
        if n == number and w == 0 and isinstance(v, int):
            out.append(v)
        elif n == number and w == 2 and isinstance(v, memoryview):
            pos = 0
            while pos < len(v):
                value, pos = read_varint(v, pos)
                out.append(value)
    return out


def text(buf: memoryview, number: int) -> str:
    """The first string field `number` of a message ("" without one).

    Raises:
        UnicodeDecodeError: not UTF-8.
    """
    return next((bytes(v).decode() for n, w, v in fields(buf) if n == number and w == 2), "")


def tensor_bytes(tensor: memoryview) -> int:
    """Bytes of a TensorProto's values, from its dims and type (its data may be in an external file)."""
    dtype = next((v for n, w, v in fields(tensor) if n == TENSOR_DATA_TYPE and w == 0), 0)
    count = 1
    for d in varints(tensor, TENSOR_DIMS):
        count *= d
    return count * _ITEMSIZE.get(int(dtype), 1)


def graph_size(data: bytes | memoryview) -> tuple[int, int]:
    """(operators of the main graph, bytes of its weights: initializers and Constants' values) of an ONNX model.

    Raises:
        ValueError, IndexError, UnicodeDecodeError: not an ONNX model (no graph, or bytes it cannot read).
    """
    graphs = sub(memoryview(data), MODEL_GRAPH)
    if not graphs:
        raise ValueError("no graph")
    graph = graphs[0]
    nodes = sub(graph, GRAPH_NODE)
    constants = [
        tensor
        for node in nodes
        if text(node, NODE_OP_TYPE) == "Constant"
        for attribute in sub(node, NODE_ATTRIBUTE)
        for tensor in sub(attribute, ATTRIBUTE_TENSOR)
    ]
    return len(nodes), sum(tensor_bytes(t) for t in (*sub(graph, GRAPH_INITIALIZER), *constants))
