"""Triton's wire format of a BYTES tensor (each element: its length, 4 bytes little-endian, then its bytes), fast.

Triton's python stub converts every BYTES tensor between that format and an object array of `bytes` by
calling two functions of its utility module, `deserialize_bytes_tensor` and `serialize_byte_tensor`, looked
up on the module at each call. Both are Python loops that build a format string or a packed prefix object
per element (about 1 us per element each way); a request of millions of strings spent more time there
than in ONNX Runtime. These two do the same work with one loop of slices in, and numpy out, and give the
same result byte for byte; `model.py` puts them in place of the module's own in its worker.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

_LENGTH = struct.Struct("<I")
_MAX_LENGTH = 2**32 - 1  # what a 4-byte length holds


def deserialize(encoded: np.ndarray) -> np.ndarray:
    """The 1-D object array of `bytes` that a BYTES tensor's wire data (a uint8 array) holds, in order.

    Raises:
        ValueError: the data ends inside an element or its length.
    """
    data = encoded.tobytes()
    unpack, end = _LENGTH.unpack_from, len(data)
    elements: list[bytes] = []
    append = elements.append
    at = 0
    while at < end:
        if at + 4 > end:
            raise ValueError(f"BYTES tensor data ends inside an element's length (at byte {at} of {end})")
        (size,) = unpack(data, at)
        at += 4
        if at + size > end:
            raise ValueError(f"BYTES tensor element of {size} bytes at byte {at} runs past the data's {end} bytes")
        append(data[at : at + size])
        at += size
    out = np.empty(len(elements), dtype=np.object_)
    out[:] = elements
    return out


def serializer(original: Callable[[np.ndarray], Any]) -> Callable[[np.ndarray], Any]:
    """`serialize(tensor)`: the wire data of an object array of `bytes`; anything else goes to `original`.

    The data comes as a uint8 array (Triton's stub takes any array: its own function returns `bytes`, which
    it turns into one). `original` (Triton's) keeps what only it defines: empty tensors, `np.bytes_` arrays,
    and elements that are not `bytes` (which it writes as their `str()` in UTF-8).
    """

    def serialize(tensor: np.ndarray) -> Any:
        if tensor.size == 0 or tensor.dtype != np.object_:
            return original(tensor)
        elements = tensor.ravel(order="C").tolist()
        if set(map(type, elements)) != {bytes}:
            return original(tensor)
        count = len(elements)
        sizes = np.fromiter(map(len, elements), dtype=np.int64, count=count)
        if int(sizes.max()) > _MAX_LENGTH:
            return original(tensor)  # it fails as it always did
        prefix_at = np.cumsum(sizes + 4)  # where each element ends in the wire data, then where it starts
        out = np.empty(int(prefix_at[-1]), dtype=np.uint8)
        prefix_at -= sizes + 4
        is_data = np.ones(len(out), dtype=bool)
        prefixes = sizes.astype("<u4").view(np.uint8).reshape(count, 4)
        del sizes
        for k in range(4):
            out[prefix_at + k] = prefixes[:, k]
            is_data[prefix_at + k] = False
        del prefix_at, prefixes
        out[is_data] = np.frombuffer(b"".join(elements), dtype=np.uint8)
        return out

    return serialize
