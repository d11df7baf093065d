"""Wire encoding: how a case's tensors become an HTTP request (JSON or binary-data extension) or gRPC bytes.

Nothing here checks anything: the builders write whatever they are given (wrong shapes, cut payloads, bad
header lengths), which is what a malformed case needs.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2 as pb

NUMPY: dict[str, Any] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
}
ELEMENT_SIZE = {**{k: np.dtype(v).itemsize for k, v in NUMPY.items()}, "BF16": 2}
#: The most a generated JSON request may make Triton allocate for its declared shape (it does, before parsing).
JSON_ALLOC_LIMIT = 16 << 20


@dataclass
class Tensor:
    name: str
    datatype: str
    shape: list[int]
    data: bytes
    values: Any = None  # the JSON "data" field; None when the datatype has no JSON form (FP16, BF16)


def make_tensor(name: str, datatype: str, shape: Sequence[int], arr: np.ndarray) -> Tensor:
    arr = np.ascontiguousarray(arr, dtype=NUMPY[datatype])
    values = None if datatype == "FP16" else arr.reshape(-1).tolist()
    return Tensor(name, datatype, list(shape), arr.tobytes(), values)


@dataclass(frozen=True)
class HttpRequest:
    path: str
    body: bytes
    headers: dict[str, str]
    method: str = "POST"


@dataclass(frozen=True)
class RawHttp:
    """Bytes written to a fresh socket as they are, then a half-close (EOF) so the server sees the end."""

    data: bytes


Request = HttpRequest | RawHttp | bytes  # bytes: a serialized (or corrupt) gRPC ModelInferRequest


def infer_path(model: str, version: str | None = None) -> str:
    m = urllib.parse.quote(model, safe="")
    if version is None:
        return f"/v2/models/{m}/infer"
    return f"/v2/models/{m}/versions/{urllib.parse.quote(version, safe='')}/infer"


def http_json(model: str, tensors: Sequence[Tensor], *, version: str | None = None, **extra: Any) -> HttpRequest:
    doc = {"inputs": [{"name": t.name, "shape": t.shape, "datatype": t.datatype, "data": t.values} for t in tensors]}
    doc.update(extra)
    body = json.dumps(doc, separators=(",", ":")).encode()
    return HttpRequest(infer_path(model, version), body, {"Content-Type": "application/json"})


def http_binary(
    model: str,
    tensors: Sequence[Tensor],
    *,
    version: str | None = None,
    sizes: Sequence[int] | None = None,
    payload: bytes | None = None,
    header_length: str | None = None,
    **extra: Any,
) -> HttpRequest:
    """The binary-data extension: a JSON header of `Inference-Header-Content-Length` bytes, then the tensors."""
    sizes = [len(t.data) for t in tensors] if sizes is None else sizes
    doc = {
        "inputs": [
            {"name": t.name, "shape": t.shape, "datatype": t.datatype, "parameters": {"binary_data_size": s}}
            for t, s in zip(tensors, sizes)
        ]
    }
    doc.update(extra)
    header = json.dumps(doc, separators=(",", ":")).encode()
    body = header + (b"".join(t.data for t in tensors) if payload is None else payload)
    length = str(len(header)) if header_length is None else header_length
    return HttpRequest(infer_path(model, version), body, {"Inference-Header-Content-Length": length})


def grpc_request(
    model: str,
    tensors: Sequence[Tensor],
    *,
    version: str = "",
    raw: Sequence[bytes] | None = None,
    outputs: Sequence[str] = (),
    parameters: dict[str, pb.InferParameter] | None = None,
) -> bytes:
    req = pb.ModelInferRequest(model_name=model, model_version=version)
    for t in tensors:
        req.inputs.add(name=t.name, datatype=t.datatype, shape=t.shape)
    req.raw_input_contents.extend([t.data for t in tensors] if raw is None else raw)
    for name in outputs:
        req.outputs.add(name=name)
    for key, value in (parameters or {}).items():
        req.parameters[key].CopyFrom(value)
    return req.SerializeToString()


def varint(v: int) -> bytes:
    """`v` as a protobuf base-128 varint (for hand-made corrupt messages)."""
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def json_declared_bytes(shape: Sequence[int], datatype: str) -> int:
    """What Triton 2.51's JSON parser allocates for `shape`: int64 products that wrap, read as signed."""
    count = 1
    for d in shape:
        count = _int64(count * d)
    return _int64(count * ELEMENT_SIZE.get(datatype, 8))


def _int64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


def json_safe(tensors: Sequence[Tensor]) -> bool:
    """True when no tensor's declared shape makes the JSON path allocate more than `JSON_ALLOC_LIMIT`."""
    for t in tensors:
        if any(not isinstance(d, int) or d < 0 or d >= 1 << 64 for d in t.shape):
            continue  # Triton fails to parse such a shape before it allocates anything
        if not 0 <= json_declared_bytes(t.shape, t.datatype) <= JSON_ALLOC_LIMIT:
            return False
    return True


def describe(request: Request, limit: int = 400) -> str:
    """The exact request, shortened to `limit` bytes of payload."""
    r = request
    if isinstance(r, HttpRequest):
        head = " ".join(f"{k}: {v}" for k, v in r.headers.items())
        return f"HTTP {r.method} {r.path} [{head}] body({len(r.body)} B)={clip(r.body, limit)}"
    if isinstance(r, RawHttp):
        return f"HTTP raw socket ({len(r.data)} B)={clip(r.data, limit)}"
    try:
        text = str(pb.ModelInferRequest.FromString(r)).replace("\n", " ")
        return f"gRPC ModelInfer ({len(r)} B) {text[:limit]}"
    except Exception:  # noqa: BLE001  (a corrupt message is the point of the case)
        return f"gRPC ModelInfer, unparsable ({len(r)} B)={clip(r, limit)}"


def clip(data: bytes, limit: int) -> str:
    return repr(data[:limit]) + ("..." if len(data) > limit else "")
