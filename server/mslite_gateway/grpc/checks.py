"""The gateway's gRPC checks: what a `inference.GRPCInferenceService` request must be before Triton reads it.

Triton 2.51 answers INTERNAL for bytes that are not a ModelInferRequest, serves batch dims read modulo 2^32
and versions like '1abc', and takes messages of any size. The relay (`grpc.relay`) hands every ModelInfer
message to `check_model_infer` (parsed with `tritonclient.grpc.service_pb2` and checked with the shared
rules), the model-level calls' messages to their version check and the shared-memory register and
unregister calls' to their region check, before Triton has the whole message.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb

from mslite_contract.protobuf_varint import field_spans
from mslite_contract.settings import GATEWAY_MAX_STRING_ELEMENTS
from mslite_gateway.rules import (
    Refusal,
    SizeBudget,
    byte_size_mismatch,
    check_bool_bytes,
    check_datatype,
    check_grpc_version,
    check_own_region,
    check_region_name,
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
# Messages up to this size are parsed whole: protobuf copies their few tensor bytes faster (0.3 us for a
# small request) than the top-level scan sets them aside (3 us).
_WHOLE_PARSE_BYTES = 16 << 10


def _parse(kind: Any, data: bytes) -> Any:
    try:
        return kind.FromString(data)
    except (DecodeError, ValueError) as e:  # ValueError: invalid UTF-8 in a string field, on some runtimes
        raise Refusal(f"the request is not a valid {kind.__name__} protobuf message: {e}") from None


class Pieces:
    """A message held as the pieces it arrived in (views of the bytes read), read where it lies.

    The relay keeps a request's DATA as the reads delivered it; joining 600 KB of tensor bytes only to check
    the few hundred bytes around them would copy every request once more.
    """

    __slots__ = ("parts", "starts", "size")

    def __init__(self, parts: Sequence[Any], start: int = 0) -> None:
        self.parts: list[memoryview] = []
        self.starts: list[int] = []
        self.size = 0
        for part in parts:
            view = memoryview(part)
            if start >= len(view):
                start -= len(view)
                continue
            if start:
                view, start = view[start:], 0
            self.parts.append(view)
            self.starts.append(self.size)
            self.size += len(view)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, pos: int) -> int:
        if not 0 <= pos < self.size:
            raise IndexError(pos)
        i = bisect.bisect_right(self.starts, pos) - 1
        return int(self.parts[i][pos - self.starts[i]])

    def views(self, a: int, b: int) -> list[memoryview]:
        """Views of bytes a to b (b within the message)."""
        i = bisect.bisect_right(self.starts, a) - 1
        out = []
        while a < b:
            part, start = self.parts[i], self.starts[i]
            stop = min(b, start + len(part))
            out.append(part[a - start : stop - start])
            a, i = stop, i + 1
        return out

    def join(self) -> bytes:
        """The whole message, copied into one bytes object."""
        return b"".join(self.parts)


def whole(data: bytes | Pieces) -> bytes:
    """A message in one bytes object: `Pieces` joined, bytes as they are."""
    return data.join() if isinstance(data, Pieces) else data


class Spread:
    """A tensor's bytes over several pieces: their length, and the bytes themselves only when asked."""

    __slots__ = ("views",)

    def __init__(self, views: list[memoryview]) -> None:
        self.views = views

    def __len__(self) -> int:
        return sum(len(v) for v in self.views)

    def __bytes__(self) -> bytes:
        return b"".join(self.views)


def _split_raw_contents(data: Pieces) -> tuple[bytes, list[memoryview | Spread]]:
    """The message without its raw_input_contents, and those set aside (no copy of the tensor bytes).

    Raises:
        ValueError, IndexError: framing the scan does not take (groups, bad wire types, truncation).
    """
    head: list[memoryview] = []
    raw: list[memoryview | Spread] = []
    buf: Any = data.parts[0] if len(data.parts) == 1 else data  # Pieces index like bytes, more slowly
    tag = 0
    for number, wire, start, stop in field_spans(buf, 0, len(data)):
        if number == _RAW_INPUT_CONTENTS and wire == 2:
            views = data.views(start, stop)
            raw.append(views[0] if len(views) == 1 else Spread(views) if views else memoryview(b""))
        else:
            head += data.views(tag, stop)
        tag = stop
    return b"".join(head), raw


def check_model_infer(
    data: bytes | memoryview | Pieces, cap: int, *, keyed: bool = False, max_strings: int = GATEWAY_MAX_STRING_ELEMENTS
) -> str:
    """Check a serialized ModelInferRequest as Triton will read it; returns the model's name (`read_model_infer`)."""
    return str(read_model_infer(data, cap, keyed=keyed, max_strings=max_strings)[0].model_name)


def staged_model_infer(req: Any, raw: Sequence[bytes | memoryview | Spread], region: str, view: memoryview) -> bytes:
    """The request that points Triton at its raw_input_contents, copied to `view` (of `region`) in order.

    `req` and `raw` are `read_model_infer`'s: the request without its raw contents, and those contents.
    """
    offset, used = 0, 0
    for inp in req.inputs:
        params = inp.parameters
        if "shared_memory_region" in params or inp.HasField("contents"):
            continue
        tensor = raw[used]
        used += 1
        for piece in tensor.views if isinstance(tensor, Spread) else (tensor,):
            view[offset : offset + len(piece)] = piece
            offset += len(piece)
        nbytes = len(tensor)
        params["shared_memory_region"].string_param = region
        params["shared_memory_offset"].int64_param = offset - nbytes
        params["shared_memory_byte_size"].int64_param = nbytes
    req.ClearField("raw_input_contents")  # there when the scan gave way to a whole parse
    return bytes(req.SerializeToString())


def read_model_infer(
    data: bytes | memoryview | Pieces, cap: int, *, keyed: bool = False, max_strings: int = GATEWAY_MAX_STRING_ELEMENTS
) -> tuple[Any, Sequence[bytes | memoryview | Spread]]:
    """Check a serialized ModelInferRequest as Triton will read it (`keyed`: it came with the admin key).

    `data` may be the pieces it arrived in (`Pieces`). The tensor bytes of a large message are not copied: a
    scan of the top-level fields sets raw_input_contents aside and protobuf parses the rest; a small message,
    and anything the scan does not take, is parsed whole, so protobuf alone decides what is valid.

    Returns:
        The request without its raw_input_contents, and those (views of `data`, not copied).

    Raises:
        Refusal: unparsable bytes, a bad version, datatype or dim, raw contents not matching the inputs'
            shapes, BOOL bytes other than 0/1, more tensor data than `cap` or more string elements than
            `max_strings` (too_large), or a shared-memory
            region named without the key (`check_region_name`).
    """
    raw: Sequence[bytes | memoryview | Spread]
    message = data if isinstance(data, Pieces) else Pieces([data])
    split = None
    if len(message) > _WHOLE_PARSE_BYTES:
        with contextlib.suppress(ValueError, IndexError):
            split = _split_raw_contents(message)
    if split is not None:
        req = _parse(pb.ModelInferRequest, split[0])
        raw = split[1]
    else:
        req = _parse(pb.ModelInferRequest, message.join())
        raw = req.raw_input_contents
    check_grpc_version(req.model_version)
    budget = SizeBudget(cap, max_strings)
    used = 0
    for inp in req.inputs:
        name, datatype, shape = inp.name, inp.datatype, list(inp.shape)
        size = check_datatype(name, datatype)
        count = element_count(name, shape)
        if datatype == "BYTES":
            budget.add_strings(name, shape, count)
        params = inp.parameters
        if "shared_memory_region" in params:
            check_region_name(f"input '{name}'", params["shared_memory_region"].string_param, keyed=keyed)
            byte_size = params["shared_memory_byte_size"] if "shared_memory_byte_size" in params else None
            if byte_size is None or byte_size.WhichOneof("parameter_choice") != "int64_param":
                raise Refusal(f"input '{name}' uses shared memory but has no integer shared_memory_byte_size")
            nbytes = byte_size.int64_param
            budget.add(name, shape, datatype, max(nbytes, 0))
            if datatype != "BYTES" and nbytes != count * size:
                raise byte_size_mismatch(name, req.model_name, count * size, nbytes)
        elif inp.HasField("contents"):
            if raw:
                raise Refusal(  # Triton's own words
                    f"contents field must not be specified when using raw_input_contents for '{name[:200]}' for "
                    f"model '{req.model_name[:200]}'"
                )
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
                check_bool_bytes(name, bytes(tensor))
    for out in req.outputs:
        if "shared_memory_region" in out.parameters:
            region = out.parameters["shared_memory_region"].string_param
            check_region_name(f"output '{out.name}'", region, keyed=keyed)
    if used != len(raw):
        raise Refusal(
            f"the request holds {len(raw)} raw_input_contents for {used} inputs: "
            f"{len(raw) - used} of them (bytes) belong to no input"
        )
    return req, raw


def check_versioned(kind: Any, field: str) -> Callable[[bytes | Pieces, bool], None]:
    """The check of a model-level call's message: a valid message of `kind` whose `field` is a valid version."""

    def check(data: bytes | Pieces, keyed: bool) -> None:
        check_grpc_version(getattr(_parse(kind, whole(data)), field))
        return None

    return check


def check_region_call(kind: Any, what: str) -> Callable[[bytes | Pieces, bool], None]:
    """The check of a shared-memory call: a valid message of `kind` whose `name` is none of the gateway's regions.

    Raises (the check):
        Refusal: a name with the gateway's prefix (the call would have it `what`), or bytes that are no `kind`.
    """

    def check(data: bytes | Pieces, keyed: bool) -> None:
        check_own_region(_parse(kind, whole(data)).name, what)

    return check


# An unregister call without a name unregisters all others; a registered one would have Triton read its tensors there.
check_unregister = check_region_call(pb.SystemSharedMemoryUnregisterRequest, "unregistered")
check_register = check_region_call(pb.SystemSharedMemoryRegisterRequest, "registered")
