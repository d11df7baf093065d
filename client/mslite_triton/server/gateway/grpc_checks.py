"""The gateway's gRPC checks: what a `inference.GRPCInferenceService` request must be before Triton reads it.

Triton 2.51 answers INTERNAL for bytes that are not a ModelInferRequest, serves batch dims read modulo 2^32
and versions like '1abc', and takes messages of any size. The relay (`grpc_relay`) hands every ModelInfer
message to `check_model_infer` (parsed with `tritonclient.grpc.service_pb2` and checked with the shared
rules) and the model-level calls' messages to their version check, before Triton has the whole message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb

from mslite_triton._onnx_io import read_varint
from mslite_triton.server.gateway.rules import (
    Refusal,
    SizeBudget,
    byte_size_mismatch,
    check_bool_bytes,
    check_datatype,
    check_version,
    element_count,
)

log = logging.getLogger(__name__)

SERVICE = "inference.GRPCInferenceService"
_CONTENT_FIELDS = (
    "bool_contents",
    "int_contents",
    "int64_contents",
    "uint_contents",
    "uint64_contents",
    "fp32_contents",
    "fp64_contents",
    "bytes_contents",
)
# Requests that name a model version: (message type, field).
VERSIONED: dict[str, tuple[Any, str]] = {
    "ModelReady": (pb.ModelReadyRequest, "version"),
    "ModelMetadata": (pb.ModelMetadataRequest, "version"),
    "ModelConfig": (pb.ModelConfigRequest, "version"),
    "ModelStatistics": (pb.ModelStatisticsRequest, "version"),
}
_RAW_INPUT_CONTENTS = 7  # ModelInferRequest field number (grpc_service.proto)


def _parse(kind: Any, data: bytes) -> Any:
    try:
        return kind.FromString(data)
    except (DecodeError, ValueError) as e:  # ValueError: invalid UTF-8 in a string field, on some runtimes
        raise Refusal(f"the request is not a valid {kind.__name__} protobuf message: {e}") from None


def _split_raw_contents(data: bytes) -> tuple[bytes, list[memoryview]]:
    """The message without its raw_input_contents, and views of those (no copy of the tensor bytes).

    Raises:
        ValueError, IndexError: framing the scan does not take (groups, bad wire types, truncation).
    """
    view = memoryview(data)
    head: list[bytes] = []
    raw: list[memoryview] = []
    pos, end = 0, len(data)
    while pos < end:
        key, start = read_varint(data, pos)
        wire = key & 7
        if wire == 0:
            stop = read_varint(data, start)[1]
        elif wire == 1:
            stop = start + 8
        elif wire == 5:
            stop = start + 4
        elif wire == 2:
            length, start = read_varint(data, start)
            stop = start + length
        else:
            raise ValueError(f"wire type {wire}")
        if stop > end:
            raise ValueError("field past the end")
        if key >> 3 == _RAW_INPUT_CONTENTS and wire == 2:
            raw.append(view[start:stop])
        else:
            head.append(data[pos:stop])
        pos = stop
    return b"".join(head), raw


def check_model_infer(data: bytes, cap: int) -> str:
    """Check a serialized ModelInferRequest as Triton will read it.

    The tensor bytes are not copied: a scan of the top-level fields sets raw_input_contents aside and
    protobuf parses the rest; anything the scan does not take is parsed whole, so protobuf alone decides
    what is valid.

    Returns:
        The model's name.

    Raises:
        Refusal: unparsable bytes, a bad version, datatype or dim, raw contents not matching the inputs'
            shapes, BOOL bytes other than 0/1, or more tensor data than `cap` (too_large).
    """
    raw: Sequence[bytes | memoryview]
    try:
        head, raw = _split_raw_contents(data)
        req = _parse(pb.ModelInferRequest, head)
    except (ValueError, IndexError):
        req = _parse(pb.ModelInferRequest, data)
        raw = req.raw_input_contents
    check_version(req.model_version, allow_empty=True)
    budget = SizeBudget(cap)
    used = 0
    for inp in req.inputs:
        name, datatype, shape = inp.name, inp.datatype, list(inp.shape)
        size = check_datatype(name, datatype)
        count = element_count(name, shape)
        params = inp.parameters
        if "shared_memory_region" in params:
            byte_size = params["shared_memory_byte_size"] if "shared_memory_byte_size" in params else None
            if byte_size is None or byte_size.WhichOneof("parameter_choice") != "int64_param":
                raise Refusal(f"input '{name}' uses shared memory but has no integer shared_memory_byte_size")
            nbytes = byte_size.int64_param
            budget.add(name, shape, datatype, max(nbytes, 0))
            if datatype != "BYTES" and nbytes != count * size:
                raise byte_size_mismatch(name, req.model_name, count * size, nbytes)
        elif inp.HasField("contents"):
            if raw:
                raise Refusal(f"input '{name}': 'contents' cannot be given together with raw_input_contents")
            budget.add(name, shape, datatype, count * size)
            values = sum(len(getattr(inp.contents, f)) for f in _CONTENT_FIELDS)
            if values != count:
                raise Refusal(f"input '{name}': 'contents' hold {values} values, shape {shape} needs {count}")
        else:
            if used >= len(raw):
                raise Refusal(
                    f"input '{name}' has no data: the request holds {len(raw)} raw_input_contents, and each input "
                    "needs its bytes there (or 'contents', or shared memory)"
                )
            tensor = raw[used]
            used += 1
            budget.add(name, shape, datatype, len(tensor))
            if datatype != "BYTES" and len(tensor) != count * size:
                raise byte_size_mismatch(name, req.model_name, count * size, len(tensor))
            if datatype == "BOOL":
                check_bool_bytes(name, tensor)
    if used != len(raw):
        raise Refusal(
            f"the request holds {len(raw)} raw_input_contents for {used} inputs: "
            f"{len(raw) - used} of them (bytes) belong to no input"
        )
    return str(req.model_name)


def check_versioned(kind: Any, field: str) -> Callable[[bytes], None]:
    """The check of a model-level call's message: a valid message of `kind` whose `field` is a valid version."""

    def check(data: bytes) -> None:
        check_version(getattr(_parse(kind, data), field), allow_empty=True)
        return None

    return check
