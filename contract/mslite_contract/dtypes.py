"""Element types: ONNX <-> Triton config strings <-> numpy, in one table.

The client derives its own from it too: MindSpore Lite's `DataType` names the Triton type of each
(`mslite_triton/tensor.py`), and the numpy dtype comes from here.
"""

from __future__ import annotations

import numpy as np

# (ONNX TensorProto data type, Triton config type, numpy dtype)
_TABLE = [
    (1, "TYPE_FP32", np.float32),
    (2, "TYPE_UINT8", np.uint8),
    (3, "TYPE_INT8", np.int8),
    (4, "TYPE_UINT16", np.uint16),
    (5, "TYPE_INT16", np.int16),
    (6, "TYPE_INT32", np.int32),
    (7, "TYPE_INT64", np.int64),
    (8, "TYPE_STRING", np.object_),
    (9, "TYPE_BOOL", np.bool_),
    (10, "TYPE_FP16", np.float16),
    (11, "TYPE_FP64", np.float64),
    (12, "TYPE_UINT32", np.uint32),
    (13, "TYPE_UINT64", np.uint64),
]

ONNX_TO_TRITON = {onnx_t: triton_t for onnx_t, triton_t, _ in _TABLE}
TRITON_TO_NUMPY = {triton_t: np.dtype(np_t) for _, triton_t, np_t in _TABLE}
# By the names Triton uses on the wire (`FP32`), for every type but strings (which travel as `BYTES`)
WIRE_TO_NUMPY = {triton_t[5:]: np.dtype(np_t) for _, triton_t, np_t in _TABLE if np_t is not np.object_}


def triton_type_of_onnx(elem_type: int) -> str:
    """Triton config type for an ONNX element type; `TYPE_INVALID` when Triton has none we serve."""
    return ONNX_TO_TRITON.get(elem_type, "TYPE_INVALID")


def short_name(triton_type: str) -> str:
    """`TYPE_FP32` -> `FP32`, the form Triton uses on the wire and in messages."""
    return triton_type[5:] if triton_type.startswith("TYPE_") else triton_type


def wire_name(dtype: np.dtype) -> str:
    """`FP32` for float32: a numpy dtype as Triton names it in messages (its numpy name when it has none)."""
    for triton_t, np_t in TRITON_TO_NUMPY.items():
        if np_t == dtype:
            return short_name(triton_t)
    return str(dtype)
