"""Issue 7's bad-input campaign: seeded malformed requests over HTTP and gRPC, and the bar every answer must meet.

    .venv/bin/python -m benchmarks.badinput_campaign [--duration-s 300] [--requests N] [--seed 7] [--threads 4]
    .venv/bin/python -m benchmarks.badinput_campaign --replay 1234 [--seed 7]    # one case, sent and printed

Without `--http`/`--grpc` it starts its own embedded tritonserver on 127.0.0.1, serving the test repository
(`tiny`, `mobilenetv2` and the model zoo of tests/support/repository.py), and stops it at the end. Case `i`
of a seed depends on nothing else, so every failure can be replayed alone. The test suite's fast version
(tests/integration/test_bad_input.py) runs the same generator on ~11,000 cases.

The bar (issue 7): every malformed request gets a 4xx-class answer (HTTP 4xx; gRPC INVALID_ARGUMENT,
NOT_FOUND, OUT_OF_RANGE, RESOURCE_EXHAUSTED or UNIMPLEMENTED) whose message names the problem and carries no
path or traceback. A connection may close without an answer only where HTTP allows nothing else: the client
sent an incomplete request (a body shorter than its Content-Length, unterminated headers) and then EOF.
NaN and Inf are valid floats and must be served. `KNOWN_GAPS` lists what Triton 2.51 does instead, found by
this campaign, with where a fix could live.

Never generated, because one such request aborts Triton 2.51 (`std::bad_alloc`, see `crash_probe`): a JSON
body whose declared shape needs more than `JSON_ALLOC_LIMIT` bytes. The HTTP frontend allocates the
declared size before it reads `data`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import re
import socket
import struct
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from tritonclient.grpc import service_pb2 as pb

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("tiny", "mobilenetv2", "multi_io", "mixed_dtypes", "no_batch", "variable_seq", "odd_names")
MODEL_WEIGHTS = {"tiny": 4, "multi_io": 2, "mixed_dtypes": 2, "variable_seq": 2, "no_batch": 1, "odd_names": 1}
MODEL_WEIGHTS["mobilenetv2"] = 1
GRPC_CLIENT_ERRORS = frozenset({"INVALID_ARGUMENT", "NOT_FOUND", "OUT_OF_RANGE", "RESOURCE_EXHAUSTED", "UNIMPLEMENTED"})
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
#: The most a generated JSON request may make Triton allocate for its declared shape (it does, before parsing).
JSON_ALLOC_LIMIT = 16 << 20
_LEAK = re.compile(r"Traceback|File \"|\.py\b|site-packages|(?<![\w.:])/(?:[\w.@+-]+/)+[\w.@+-]+")
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
OK_STATUSES = ("200", "OK")


# -- what the server serves --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class InputSpec:
    name: str
    datatype: str  # "FP32", ...
    dims: tuple[int, ...]  # without the batch dimension; -1 = any


@dataclass(frozen=True)
class ModelSpec:
    name: str
    max_batch_size: int
    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...]

    @property
    def batched(self) -> bool:
        return self.max_batch_size > 0


def fetch_specs(http_url: str, names: Iterable[str] = MODELS) -> dict[str, ModelSpec]:
    """Every model's inputs and outputs, from the server's own config (`GET /v2/models/<name>/config`)."""
    specs = {}
    for name in names:
        with urllib.request.urlopen(
            f"{http_url}/v2/models/{urllib.parse.quote(name, safe='')}/config", timeout=10
        ) as r:
            cfg = json.load(r)
        inputs = tuple(
            InputSpec(i["name"], i["data_type"].removeprefix("TYPE_").replace("STRING", "BYTES"), tuple(i["dims"]))
            for i in cfg["input"]
        )
        specs[name] = ModelSpec(
            name, int(cfg.get("max_batch_size", 0)), inputs, tuple(o["name"] for o in cfg["output"])
        )
    return specs


# -- requests ------------------------------------------------------------------------------------------------------
@dataclass
class Tensor:
    name: str
    datatype: str
    shape: list[int]
    data: bytes
    values: Any = None  # the JSON "data" field; None when the datatype has no JSON form (FP16, BF16)


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


@dataclass
class Case:
    index: int
    protocol: str  # "http" or "grpc"
    category: str
    model: str
    what: str  # what is wrong with it, one line
    request: Request
    pattern: str = ""  # the error message must match it (case-insensitive): it names the problem
    valid: bool = False
    check: Callable[[dict[str, np.ndarray]], str | None] | None = None  # valid cases: None when outputs are right
    no_answer_ok: bool = False

    def describe(self, limit: int = 400) -> str:
        """The exact request, shortened to `limit` bytes of payload."""
        r = self.request
        if isinstance(r, HttpRequest):
            head = " ".join(f"{k}: {v}" for k, v in r.headers.items())
            return f"HTTP {r.method} {r.path} [{head}] body({len(r.body)} B)={_clip(r.body, limit)}"
        if isinstance(r, RawHttp):
            return f"HTTP raw socket ({len(r.data)} B)={_clip(r.data, limit)}"
        try:
            text = str(pb.ModelInferRequest.FromString(r)).replace("\n", " ")
            return f"gRPC ModelInfer ({len(r)} B) {text[:limit]}"
        except Exception:  # noqa: BLE001  (a corrupt message is the point of the case)
            return f"gRPC ModelInfer, unparsable ({len(r)} B)={_clip(r, limit)}"


def _clip(data: bytes, limit: int) -> str:
    return repr(data[:limit]) + ("..." if len(data) > limit else "")


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


# -- the generator ------------------------------------------------------------------------------------------------
HTTP_CATEGORIES = (
    "dtype_wrong",
    "dtype_invalid",
    "shape_wrong",
    "dims_negative",
    "dims_huge",
    "dims_overflow",
    "input_missing",
    "input_extra",
    "input_duplicate",
    "size_mismatch",
    "truncated",
    "empty_batch",
    "unknown_model",
    "unknown_version",
    "bad_output",
    "bad_parameters",
    "bool_values",
    "json_malformed",
    "http_framing",
)
GRPC_CATEGORIES = tuple(c for c in HTTP_CATEGORIES if c not in ("json_malformed", "http_framing")) + (
    "protobuf_malformed",
)
PATTERNS = {
    "dtype_wrong": r"data-?type|datatype|FP16|BF16|BYTES",
    "dtype_invalid": r"data-?type|datatype",
    "shape_wrong": r"shape|batch|dim|byte size",
    "dims_negative": r"shape|batch|dim|size",
    "dims_huge": r"shape|batch|dim|size",
    "dims_overflow": r"shape|batch|dim|size",
    "input_missing": r"missing|expected \d+ inputs",
    "input_extra": r"unexpected|expected \d+ inputs",
    "input_duplicate": r"already exists|duplicate",
    "size_mismatch": r"byte size|size|shape|expecting|additional",
    "truncated": r"size|bytes|additional|header|parse|unable to find data|expecting",
    "empty_batch": r"batch|byte size|shape|size",
    "unknown_model": r"unknown model|not found|no available versions",
    "unknown_version": r"version|not found",
    "bad_output": r"output",
    "bad_parameters": r"priority|timeout|param|binary_data",
    "bool_values": r"bool|mask",
    "json_malformed": r"pars|json|invalid|expect|missing|must|type|shape|data|not supported|unexpected",
    "http_framing": r"\S",
    "protobuf_malformed": r"pars|invalid|malformed|proto|unknown model|input|version",
}


def _pick(rng: np.random.Generator, seq: Sequence[Any]) -> Any:
    return seq[int(rng.integers(len(seq)))]


def random_array(rng: np.random.Generator, datatype: str, n: int, special: float = 0.0) -> np.ndarray:
    """`n` values of `datatype`; floats get NaN/+Inf/-Inf with probability `special` each element."""
    if datatype == "BOOL":
        return rng.random(n) < 0.5
    if datatype.startswith("FP"):
        a = (rng.standard_normal(n) * 10).astype(NUMPY[datatype])
        if special:
            mask = rng.random(n) < special
            a[mask] = rng.choice(np.array([np.nan, np.inf, -np.inf], dtype=NUMPY[datatype]), int(mask.sum()))
        return a
    info = np.iinfo(NUMPY[datatype])
    return rng.integers(max(int(info.min), -1000), min(int(info.max), 1000), n, dtype=NUMPY[datatype])


def make_tensor(name: str, datatype: str, shape: Sequence[int], arr: np.ndarray) -> Tensor:
    arr = np.ascontiguousarray(arr, dtype=NUMPY[datatype])
    values = None if datatype == "FP16" else arr.reshape(-1).tolist()
    return Tensor(name, datatype, list(shape), arr.tobytes(), values)


def _foreign_tensor(rng: np.random.Generator, name: str, datatype: str, shape: list[int]) -> Tensor:
    """A tensor of any datatype (BYTES and BF16 too) holding exactly `prod(shape)` elements."""
    n = math.prod(shape)
    if datatype == "BYTES":
        return Tensor(name, datatype, shape, b"".join(struct.pack("<I", 1) + b"a" for _ in range(n)), ["a"] * n)
    if datatype == "BF16":
        return Tensor(name, datatype, shape, bytes(2 * n), None)
    return make_tensor(name, datatype, shape, random_array(rng, datatype, n))


class CaseGenerator:
    """Case `index` of `seed`: deterministic, independent of every other case. Even indexes HTTP, odd gRPC."""

    def __init__(self, specs: dict[str, ModelSpec], seed: int, *, valid_share: float = 0.03) -> None:
        self.specs = specs
        self.seed = seed
        self.valid_share = valid_share
        self.models = [m for m in MODEL_WEIGHTS if m in specs]
        weights = np.array([MODEL_WEIGHTS[m] for m in self.models], dtype=float)
        self.model_p = weights / weights.sum()

    # -- entry points ---------------------------------------------------------------------------------------------
    def case(self, index: int) -> Case:
        rng = np.random.default_rng([self.seed, 0, index])
        protocol = "http" if index % 2 == 0 else "grpc"
        if rng.random() < self.valid_share:
            return self._valid_nan_inf(rng, index, protocol)
        category = _pick(rng, HTTP_CATEGORIES if protocol == "http" else GRPC_CATEGORIES)
        made = getattr(self, "_" + category)(rng, protocol)
        model, what, request = made[:3]
        options = made[3] if len(made) > 3 else {}
        return Case(index, protocol, category, model, what, request, PATTERNS[category], **options)

    def cases(self, indexes: Iterable[int]) -> Iterable[Case]:
        return (self.case(i) for i in indexes)

    def valid(self, index: int) -> Case:
        """A valid request (any model, either protocol) whose outputs are checked: the warm-up traffic."""
        rng = np.random.default_rng([self.seed, 1, index])
        protocol = "http" if index % 2 == 0 else "grpc"
        spec = self.specs[self.models[index % len(self.models)]]
        tensors = self._tensors(rng, spec)
        names = list(spec.outputs)
        request: Request
        if protocol == "grpc":
            request = grpc_request(spec.name, tensors)
        else:
            outputs = [{"name": n, "parameters": {"binary_data": True}} for n in names]
            request = http_binary(spec.name, tensors, outputs=outputs)

        def check(out: dict[str, np.ndarray]) -> str | None:
            return None if sorted(out) == sorted(names) else f"outputs {sorted(out)}, expected {sorted(names)}"

        return Case(index, protocol, "valid", spec.name, "valid request", request, valid=True, check=check)

    # -- helpers --------------------------------------------------------------------------------------------------
    def _model(self, rng: np.random.Generator, eligible: Callable[[ModelSpec], bool] | None = None) -> ModelSpec:
        while True:
            spec = self.specs[self.models[int(rng.choice(len(self.models), p=self.model_p))]]
            if eligible is None or eligible(spec):
                return spec

    @staticmethod
    def _shape(spec: ModelSpec, inp: InputSpec, batch: int, free: int) -> list[int]:
        dims = [d if d >= 0 else free for d in inp.dims]
        return [batch, *dims] if spec.batched else dims

    def _tensors(self, rng: np.random.Generator, spec: ModelSpec, *, batch: int | None = None) -> list[Tensor]:
        """A valid set of inputs: batch 1-3 (1 for MobileNetV2), free dims 1-6."""
        big = spec.name == "mobilenetv2"
        batch = (1 if big else int(rng.integers(1, 4))) if batch is None else batch
        free = int(rng.integers(1, 7))
        out = []
        for inp in spec.inputs:
            shape = self._shape(spec, inp, batch, free)
            out.append(make_tensor(inp.name, inp.datatype, shape, random_array(rng, inp.datatype, math.prod(shape))))
        return out

    def _encode(
        self,
        rng: np.random.Generator,
        protocol: str,
        spec: ModelSpec | str,
        tensors: Sequence[Tensor],
        *,
        binary: bool = False,
        **kw: Any,
    ) -> Request:
        """gRPC, or HTTP as JSON or binary (binary when asked, when JSON cannot carry the tensors or is unsafe)."""
        name = spec if isinstance(spec, str) else spec.name
        if protocol == "grpc":
            return grpc_request(name, tensors, **{k: v for k, v in kw.items() if k in ("version", "raw", "outputs")})
        kw.pop("raw", None)
        outputs = kw.pop("outputs", None)
        if outputs is not None:
            kw["outputs"] = [{"name": o} for o in outputs]
        elif name == "mixed_dtypes":  # FP16 outputs have no JSON form: ask for binary, or a served case answers 400
            kw["outputs"] = [{"name": o, "parameters": {"binary_data": True}} for o in self.specs[name].outputs]
        small = sum(len(t.data) for t in tensors) <= 64 << 10
        jsonable = all(t.values is not None for t in tensors) and json_safe(tensors)
        if not binary and small and jsonable and rng.random() < 0.5:
            return http_json(name, tensors, **kw)
        return http_binary(name, tensors, **kw)

    # -- categories: each returns (model, what, request[, Case options]) -------------------------------------------
    def _dtype_wrong(self, rng: np.random.Generator, protocol: str) -> tuple:
        spec = self._model(rng)
        tensors = self._tensors(rng, spec)
        i = int(rng.integers(len(tensors)))
        t = tensors[i]
        dtype = _pick(rng, [d for d in (*NUMPY, "BF16", "BYTES") if d != t.datatype])
        n = math.prod(t.shape)
        if n > 16384:
            t.shape = [1] * (len(t.shape) - 1) + [4]  # keep MobileNetV2 cases small; the dtype is checked first
        tensors[i] = _foreign_tensor(rng, t.name, dtype, t.shape)
        return (
            spec.name,
            f"input '{t.name}' sent as {dtype}, model expects {t.datatype}",
            self._encode(rng, protocol, spec, tensors),
        )

    def _dtype_invalid(self, rng: np.random.Generator, protocol: str) -> tuple:
        spec = self._model(rng, lambda s: s.name != "mobilenetv2")
        tensors = self._tensors(rng, spec)
        t = _pick(rng, tensors)
        t.datatype = _pick(rng, ["FOO", "", "fp32", "FLOAT", "FP128", "INT4", "TYPE_FP32", "FP32 ", "\u03a9", "null"])
        return spec.name, f"input '{t.name}' has datatype {t.datatype!r}", self._encode(rng, protocol, spec, tensors)

    def _shape_wrong(self, rng: np.random.Generator, protocol: str) -> tuple:
        spec = self._model(rng, lambda s: s.name != "mobilenetv2" or rng.random() < 0.5)
        tensors = self._tensors(rng, spec)
        i = int(rng.integers(len(tensors)))
        t, inp = tensors[i], spec.inputs[i]
        shape = list(t.shape)
        offset = 1 if spec.batched else 0
        fixed = [k for k, d in enumerate(inp.dims) if d >= 0]
        choices = ["extra_dim", "missing_dim", "rank0"]
        if fixed:
            choices.append("fixed_dim")
        if spec.batched and math.prod(shape[1:]) <= 1024:
            choices.append("batch_over_max")
        if not spec.batched:
            choices.append("batch_dim_added")
        how = _pick(rng, choices)
        if how == "fixed_dim":
            k = offset + _pick(rng, fixed)
            shape[k] = _pick(rng, [d for d in (shape[k] - 1, shape[k] + 1, shape[k] + 3, 1) if d != shape[k] and d > 0])
        elif how == "extra_dim":
            shape.append(int(rng.integers(1, 4)))
        elif how == "missing_dim":
            shape.pop()
        elif how == "rank0":
            shape = []
        elif how == "batch_over_max":
            shape[0] = spec.max_batch_size + int(rng.integers(1, 100))
        else:
            shape = [1, *shape]
        n = math.prod(shape)
        cut = n > 65536  # MobileNetV2: a few bytes (the shape is checked before the size), and never as JSON
        tensors[i] = make_tensor(t.name, t.datatype, shape, random_array(rng, t.datatype, 4 if cut else n))
        what = f"input '{t.name}' shape {shape} ({how}), model expects {list(inp.dims)}"
        return spec.name, what, self._encode(rng, protocol, spec, tensors, binary=cut)

    def _bad_dim(self, rng: np.random.Generator, protocol: str, values: Sequence[int], label: str) -> tuple:
        spec = self._model(rng)
        tensors = self._tensors(rng, spec, batch=1)
        t = _pick(rng, tensors)
        if len(t.data) > 4096:  # MobileNetV2: a few bytes are enough, the shape is checked first
            t.data, t.values = t.data[:16], None
        k = int(rng.integers(len(t.shape)))
        t.shape[k] = int(_pick(rng, values))
        where = "batch dim" if k == 0 and spec.batched else f"dim {k}"
        what = f"input '{t.name}' shape {t.shape} ({label} as {where}), {len(t.data)} bytes sent"
        return spec.name, what, self._encode(rng, protocol, spec, tensors)

    def _dims_negative(self, rng: np.random.Generator, protocol: str) -> tuple:
        return self._bad_dim(rng, protocol, [-1, -2, -3, -1000, -(2**31), -(2**62), -(2**63)], "negative dim")

    def _dims_huge(self, rng: np.random.Generator, protocol: str) -> tuple:
        values = [2**31, 2**32, 2**32 + 1, 2**40, 2**53, 2**63 - 1, int(rng.integers(2**20, 2**62))]
        return self._bad_dim(rng, protocol, values, "huge dim")

    def _dims_overflow(self, rng: np.random.Generator, protocol: str) -> tuple:
        """A batch of b + k*2^62: the byte size wraps to the bytes sent and a uint32 batch size reads b."""
        spec = self._model(
            rng,
            lambda s: (
                s.batched and s.name != "mobilenetv2" and all(ELEMENT_SIZE[i.datatype] % 4 == 0 for i in s.inputs)
            ),
        )
        tensors = self._tensors(rng, spec)
        k = 1 if protocol == "grpc" else int(rng.integers(1, 3))  # gRPC dims are int64, JSON's are uint64
        for t in tensors:
            t.shape[0] += k << 62
        request = grpc_request(spec.name, tensors) if protocol == "grpc" else http_binary(spec.name, tensors)
        return spec.name, f"batch dim {tensors[0].shape[0]} (its byte size wraps to the bytes sent)", request

    def _input_missing(self, rng: np.random.Generator, protocol: str) -> tuple:
        spec = self._model(rng, lambda s: s.name != "mobilenetv2")
        tensors = self._tensors(rng, spec)
        gone = tensors.pop(int(rng.integers(len(tensors))))
        return spec.name, f"input '{gone.name}' missing", self._encode(rng, protocol, spec, tensors)

    def _input_extra(self, rng: np.random.Generator, protocol: str) -> tuple:
        spec = self._model(rng, lambda s: s.name != "mobilenetv2")
        tensors = self._tensors(rng, spec)
        names = {i.name for i in spec.inputs}
        name = _pick(
            rng, [n for n in ("z", "x2", "extra", "input_1", "", "X", "x ", spec.outputs[0]) if n not in names]
        )
        src = _pick(rng, tensors)
        extra = make_tensor(name, src.datatype, src.shape, random_array(rng, src.datatype, math.prod(src.shape)))
        tensors.insert(int(rng.integers(len(tensors) + 1)), extra)
        return spec.name, f"extra input {name!r}", self._encode(rng, protocol, spec, tensors)

    def _input_duplicate(self, rng: np.random.Generator, protocol: str) -> tuple:
        spec = self._model(rng, lambda s: s.name != "mobilenetv2")
        tensors = self._tensors(rng, spec)
        src = _pick(rng, tensors)
        twin = make_tensor(src.name, src.datatype, src.shape, random_array(rng, src.datatype, math.prod(src.shape)))
        tensors.insert(int(rng.integers(len(tensors) + 1)), twin)
        return spec.name, f"input '{src.name}' given twice", self._encode(rng, protocol, spec, tensors)

    def _size_mismatch(self, rng: np.random.Generator, protocol: str) -> tuple:
        spec = self._model(rng)
        tensors = self._tensors(rng, spec)
        t = _pick(rng, tensors)
        size = ELEMENT_SIZE[t.datatype]
        as_json = protocol == "http" and t.values is not None and len(t.data) <= 65536 and rng.random() < 0.4
        delta = int(_pick(rng, [-3, -2, -1, 1, 2, 3])) * (size if as_json or rng.random() < 0.5 else 1)
        delta = max(delta, -len(t.data))
        t.data = t.data + bytes(delta) if delta > 0 else t.data[: len(t.data) + delta]
        if as_json:
            n = len(t.data) // size
            t.values = (t.values + [0] * n)[:n]
            request: Request = http_json(spec.name, tensors)
        elif protocol == "http":
            request = http_binary(spec.name, tensors)
        else:
            request = grpc_request(spec.name, tensors)
        return spec.name, f"input '{t.name}' shape {t.shape} with {delta:+d} bytes", request

    def _truncated(self, rng: np.random.Generator, protocol: str) -> tuple:
        spec = self._model(rng, lambda s: s.name != "mobilenetv2" or rng.random() < 0.3)
        tensors = self._tensors(rng, spec)
        if protocol == "grpc":
            raw = [t.data for t in tensors]
            if rng.random() < 0.5:
                raw.pop()
                what = f"{len(tensors)} inputs, {len(raw)} raw_input_contents"
            else:
                k = int(rng.integers(len(raw)))
                raw[k] = raw[k][: int(rng.integers(len(raw[k])))]
                what = f"raw_input_contents[{k}] cut to {len(raw[k])} bytes"
            return spec.name, what, grpc_request(spec.name, tensors, raw=raw)
        payload = b"".join(t.data for t in tensors)
        how = _pick(rng, ["body_cut", "header_long", "header_short", "header_negative", "header_garbage"])
        if how == "body_cut":
            cut = int(rng.integers(len(payload)))
            return (
                spec.name,
                f"binary body cut to {cut} of {len(payload)} bytes",
                http_binary(spec.name, tensors, payload=payload[:cut]),
            )
        header_len = len(http_binary(spec.name, tensors).body) - len(payload)
        length = {
            "header_long": str(header_len + int(rng.integers(1, len(payload) + 200))),
            "header_short": str(int(rng.integers(1, header_len))),
            "header_negative": str(-int(rng.integers(1, 1000))),
            "header_garbage": _pick(rng, ["abc", "", "0x10", "12.5", " ", "1e3", "99999999999999999999"]),
        }[how]
        request = http_binary(spec.name, tensors, header_length=length)
        return spec.name, f"Inference-Header-Content-Length {length!r} for a {header_len}-byte header", request

    def _empty_batch(self, rng: np.random.Generator, protocol: str) -> tuple:
        spec = self._model(rng)
        tensors = self._tensors(rng, spec, batch=0)
        if not spec.batched:
            for t in tensors:
                t.shape[0], t.data, t.values = 0, b"", []
        return spec.name, f"shapes {[t.shape for t in tensors]}, no data", self._encode(rng, protocol, spec, tensors)

    def _unknown_model(self, rng: np.random.Generator, protocol: str) -> tuple:
        names = [
            "nope",
            "tiny2",
            "TINY",
            "tiny ",
            " tiny",
            "corrupt",
            "mismatch",
            "..",
            "a" * 300,
            "mod\u00e8le",
            "t;x",
        ]
        name = _pick(rng, [*names, f"m{int(rng.integers(1 << 30)):x}"])
        tensors = self._tensors(rng, self.specs["tiny"])
        return name, f"model {name[:40]!r} is not served", self._encode(rng, protocol, name, tensors)

    def _unknown_version(self, rng: np.random.Generator, protocol: str) -> tuple:
        spec = self._model(rng, lambda s: s.name != "mobilenetv2")
        tensors = self._tensors(rng, spec)
        version = _pick(rng, ["2", "7", "0", "-1", "abc", "99999999999999999999", "1.0", "1abc", "+1", " 1", "1e3"])
        return spec.name, f"model version {version!r}", self._encode(rng, protocol, spec, tensors, version=version)

    def _bad_output(self, rng: np.random.Generator, protocol: str) -> tuple:
        spec = self._model(rng, lambda s: s.name not in ("mobilenetv2", "mixed_dtypes"))
        tensors = self._tensors(rng, spec)
        wanted = [_pick(rng, ["nope", "", "Y", "y ", spec.inputs[0].name, "out"])]
        if rng.random() < 0.5:
            wanted.insert(int(rng.integers(2)), spec.outputs[0])
        return spec.name, f"outputs requested {wanted}", self._encode(rng, protocol, spec, tensors, outputs=wanted)

    def _bad_parameters(self, rng: np.random.Generator, protocol: str) -> tuple:
        spec = self._model(rng, lambda s: s.name not in ("mobilenetv2", "mixed_dtypes"))
        tensors = self._tensors(rng, spec)
        if protocol == "grpc":
            key, param = _pick(
                rng,
                [
                    ("priority", pb.InferParameter(string_param="high")),
                    ("priority", pb.InferParameter(bool_param=True)),
                    ("priority", pb.InferParameter(int64_param=-int(rng.integers(1, 1 << 40)))),
                    ("priority", pb.InferParameter(double_param=0.5)),
                    ("timeout", pb.InferParameter(string_param="1s")),
                    ("timeout", pb.InferParameter(double_param=1.5)),
                    ("timeout", pb.InferParameter(bool_param=False)),
                ],
            )
            what = f"parameter {key}={str(param).strip()}"
            return spec.name, what, grpc_request(spec.name, tensors, parameters={key: param})
        params = _pick(
            rng,
            [
                {"priority": "high"},
                {"priority": -1},
                {"priority": 1.5},
                {"priority": None},
                {"timeout": "1s"},
                {"timeout": -5},
                {"timeout": [1]},
                {"binary_data_output": "yes"},
                {"binary_data_output": 1},
            ],
        )
        if rng.random() < 0.2:
            params = _pick(rng, [[1], "x", 3])
        return spec.name, f"parameters {params!r}", self._encode(rng, protocol, spec, tensors, parameters=params)

    def _bool_values(self, rng: np.random.Generator, protocol: str) -> tuple:
        spec = self.specs["mixed_dtypes"]
        tensors = self._tensors(rng, spec)
        mask = next(t for t in tensors if t.datatype == "BOOL")
        raw = bytearray(mask.data)
        for k in rng.choice(len(raw), size=int(rng.integers(1, len(raw) + 1)), replace=False):
            raw[int(k)] = int(rng.integers(2, 256))
        mask.data = bytes(raw)
        wanted = list(spec.outputs)
        if protocol == "grpc":
            request: Request = grpc_request(spec.name, tensors)
        else:
            outputs = [{"name": n, "parameters": {"binary_data": True}} for n in wanted]
            request = http_binary(spec.name, tensors, outputs=outputs)
        return spec.name, f"BOOL input 'mask' holds bytes {list(raw)}", request

    def _json_malformed(self, rng: np.random.Generator, protocol: str) -> tuple:
        spec = self._model(rng, lambda s: s.name not in ("mobilenetv2", "mixed_dtypes"))
        tensors = self._tensors(rng, spec)
        good = http_json(spec.name, tensors)
        doc = json.loads(good.body)
        inp = doc["inputs"][0]
        how = _pick(
            rng,
            [
                "truncate",
                "flip",
                "inputs_type",
                "inputs_missing",
                "input_type",
                "field_missing",
                "shape_type",
                "shape_elem",
                "datatype_type",
                "name_type",
                "data_type",
                "data_elem",
                "out_of_range",
                "top_level",
                "utf8",
                "deep",
                "ragged",
            ],
        )
        body: bytes | None = None
        if how == "truncate":
            body = good.body[: int(rng.integers(1, len(good.body)))]
        elif how == "flip":
            raw = bytearray(good.body)
            raw[int(rng.integers(len(raw)))] = ord(_pick(rng, list('{}[],:"x\x00\xff\\')))
            body = bytes(raw)
        elif how == "inputs_type":
            doc["inputs"] = _pick(rng, [{}, "x", 3, None, True, {"name": "x"}])
        elif how == "inputs_missing":
            doc = {_pick(rng, ["input", "Inputs", "data"]): doc["inputs"]}
        elif how == "input_type":
            doc["inputs"][0] = _pick(rng, [1, "x", [], None, [inp]])
        elif how == "field_missing":
            del inp[_pick(rng, ["name", "shape", "datatype", "data"])]
        elif how == "shape_type":
            inp["shape"] = _pick(rng, ["1,4", {"0": 1}, 4, None, True])
        elif how == "shape_elem":
            inp["shape"] = list(inp["shape"])
            inp["shape"][int(rng.integers(len(inp["shape"])))] = _pick(rng, [1.5, "1", None, True, [1], 2**64 + 1])
        elif how == "datatype_type":
            inp["datatype"] = _pick(rng, [32, None, ["FP32"], {"t": "FP32"}, True])
        elif how == "name_type":
            inp["name"] = _pick(rng, [0, None, ["x"], {"n": "x"}, False])
        elif how == "data_type":
            inp["data"] = _pick(rng, ["abcd", {"0": 1}, 7, True, None])
        elif how == "data_elem":
            k = int(rng.integers(len(inp["data"])))
            inp["data"][k] = _pick(rng, ["1.0", None, {}, "NaN", "true"])
        elif how == "out_of_range":
            fp = inp["datatype"].startswith("FP")
            body = good.body.replace(b'"data":[', b'"data":[' + (b"1e999," if fp else b"99999999999999999999999,"), 1)
            inp["shape"] = inp["shape"]  # the element count is now one too many as well; the value fails first
        elif how == "top_level":
            body = _pick(rng, [b"", b" ", b"null", b"[]", b"[1,2]", b'"inputs"', b"42", b"\xef\xbb\xbf{}", b"{}"])
        elif how == "utf8":
            body = good.body.replace(f'"name":{json.dumps(inp["name"])}'.encode(), b'"name":"x\xff\xfe"', 1)
        elif how == "deep":
            depth = int(rng.integers(100, 5000))
            body = good.body.replace(b'"data":[', b'"data":' + b"[" * depth, 1) + b"]" * depth
        else:  # ragged nested data
            inp["data"] = [inp["data"][:1], inp["data"][1:3] or [0, 0]]
        if body is None:
            body = json.dumps(doc, separators=(",", ":")).encode()
        request = HttpRequest(good.path, body, {"Content-Type": "application/json"})
        return spec.name, f"JSON body: {how}" + (f" {body!r}" if how == "top_level" else ""), request

    def _http_framing(self, rng: np.random.Generator, protocol: str) -> tuple:
        body = http_json("tiny", self._tensors(rng, self.specs["tiny"])).body
        start = b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        cl = b"Content-Length: %d\r\n" % len(body)
        incomplete = {
            "body shorter than Content-Length": start + b"Content-Length: %d\r\n\r\n" % (len(body) + 100) + body,
            "headers never terminated": start + cl,
            "chunked body cut": start + b"Transfer-Encoding: chunked\r\n\r\n100\r\nabc",
        }
        broken = {
            "garbage request line": bytes(rng.integers(0, 256, int(rng.integers(1, 300)), dtype=np.uint8))
            + b"\r\n\r\n",
            "no method": b"/v2/models/tiny/infer HTTP/1.1\r\n\r\n",
            "bad HTTP version": b"POST /v2/models/tiny/infer HTTP/9.9\r\nHost: x\r\n" + cl + b"\r\n" + body,
            "Content-Length not a number": start + b"Content-Length: abc\r\n\r\n" + body,
            "Content-Length negative": start + b"Content-Length: -5\r\n\r\n" + body,
            "Content-Length over 2^64": start + b"Content-Length: 99999999999999999999999\r\n\r\n" + body,
            "two Content-Lengths": start + b"Content-Length: 5\r\n" + cl + b"\r\n" + body,
            "bad chunk size": start + b"Transfer-Encoding: chunked\r\n\r\nZZ\r\nabc\r\n0\r\n\r\n",
            "chunked and Content-Length": start + b"Transfer-Encoding: chunked\r\n" + cl + b"\r\nZZ\r\n",
            "header without colon": start + b"NoColonHere\r\n" + cl + b"\r\n" + body,
            "NUL in header": start + b"X-A: a\x00b\r\n" + cl + b"\r\n" + body,
            "200 KB header line": start + b"X-Big: " + b"a" * 200_000 + b"\r\n" + cl + b"\r\n" + body,
            "100 KB URL": b"POST /v2/models/"
            + b"a" * 100_000
            + b"/infer HTTP/1.1\r\nHost: x\r\n"
            + cl
            + b"\r\n"
            + body,
            "HTTP/0.9 request": b"GET /v2/health/ready\r\n\r\n",
            "HTTP/2 preface on HTTP/1": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            "NUL in path": b"POST /v2/models/ti\x00ny/infer HTTP/1.1\r\nHost: x\r\n" + cl + b"\r\n" + body,
        }
        name = _pick(rng, [*incomplete, *broken])
        raw = incomplete.get(name, broken.get(name, b""))
        return "tiny", f"HTTP framing: {name}", RawHttp(raw), {"no_answer_ok": name in incomplete}

    def _protobuf_malformed(self, rng: np.random.Generator, protocol: str) -> tuple:
        spec = self._model(rng, lambda s: s.name != "mobilenetv2")
        good = grpc_request(spec.name, self._tensors(rng, spec))
        last = len(good) - len(pb.ModelInferRequest.FromString(good).raw_input_contents[-1])
        how = _pick(
            rng,
            [
                "cut_inside_last_field",
                "garbage",
                "bad_wire_type",
                "utf8_model_name",
                "long_varint",
                "length_past_end",
                "utf8_tensor_name",
            ],
        )
        if how == "cut_inside_last_field":
            data = good[: int(rng.integers(last, len(good)))]
        elif how == "garbage":
            data = bytes(rng.integers(0, 256, int(rng.integers(1, 200)), dtype=np.uint8))
        elif how == "bad_wire_type":
            data = _pick(rng, [good + b"\x0f\x01", b"\x0e" + good, good[:2] + b"\x07" + good[2:]])
        elif how == "utf8_model_name":
            data = b"\x0a\x03\xff\xfe\xfd" + good
        elif how == "long_varint":
            data = good + b"\x08" + b"\xff" * 11
        elif how == "length_past_end":
            data = good + b"\x3a" + _varint(int(rng.integers(1 << 20, 1 << 31))) + b"abc"
        else:
            bad = pb.ModelInferRequest.InferInputTensor(name="x", datatype="FP32", shape=[1]).SerializeToString()
            bad = bad.replace(b"\x0a\x01x", b"\x0a\x02\xc3\x28", 1)
            data = good + b"\x2a" + _varint(len(bad)) + bad
        return spec.name, f"protobuf: {how}", data

    def _valid_nan_inf(self, rng: np.random.Generator, index: int, protocol: str) -> Case:
        """A valid request whose floats include NaN, +Inf and -Inf: it must be served, with the right values."""
        spec = self.specs["mixed_dtypes" if rng.random() < 0.3 else "tiny"]
        tensors = []
        batch = int(rng.integers(1, 5))
        for inp in spec.inputs:
            shape = [batch, *inp.dims]
            arr = random_array(rng, inp.datatype, math.prod(shape), special=0.5)
            if inp.datatype.startswith("FP"):
                arr[:3] = [np.nan, np.inf, -np.inf]
            tensors.append(make_tensor(inp.name, inp.datatype, shape, arr.reshape(shape)))
        feeds = {t.name: np.frombuffer(t.data, NUMPY[t.datatype]).reshape(t.shape) for t in tensors}
        names = list(spec.outputs)
        if spec.name == "tiny":
            expected = {"y": feeds["x"] * np.float32(2) + np.float32(1)}
        else:
            expected = {"ids_out": feeds["ids"] + 1, "mask_out": ~feeds["mask"], "h_out": feeds["h"] * np.float16(2)}
        request: Request
        if protocol == "grpc":
            request = grpc_request(spec.name, tensors)
        elif spec.name == "tiny" and rng.random() < 0.5:
            request = http_json(spec.name, tensors)  # NaN / Infinity / -Infinity literals, which Triton accepts
        else:
            request = http_binary(
                spec.name, tensors, outputs=[{"name": n, "parameters": {"binary_data": True}} for n in names]
            )

        def check(out: dict[str, np.ndarray]) -> str | None:
            for name, want in expected.items():
                got = out.get(name)
                if got is None or got.shape != want.shape or not np.array_equal(got, want, equal_nan=True):
                    return f"output {name}: got {got!r}, expected {want!r}"
            return None

        what = "valid: floats include NaN, +Inf, -Inf"
        return Case(index, protocol, "valid_nan_inf", spec.name, what, request, valid=True, check=check)


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


# -- sending ------------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    case: Case
    status: str  # HTTP "400"...; gRPC "OK", "INVALID_ARGUMENT"...; "NO_ANSWER"; "TIMEOUT"
    message: str
    seconds: float
    problem: str | None = None  # a valid case whose outputs were wrong


def _error_text(body: bytes) -> str:
    try:
        doc = json.loads(body)
        if isinstance(doc, dict) and "error" in doc:
            return str(doc["error"])
    except ValueError:
        pass
    return body.decode("utf-8", "replace")[:1000]


def _http_outputs(body: bytes, header_length: str | None) -> dict[str, np.ndarray]:
    n = int(header_length) if header_length else len(body)
    doc = json.loads(body[:n])
    out, offset = {}, n
    for o in doc["outputs"]:
        dtype = NUMPY[o["datatype"]]
        if "data" in o:
            out[o["name"]] = np.array(o["data"], dtype=dtype).reshape(o["shape"])
        else:
            size = int(o["parameters"]["binary_data_size"])
            out[o["name"]] = np.frombuffer(body[offset : offset + size], dtype=dtype).reshape(o["shape"])
            offset += size
    return out


def _grpc_outputs(data: bytes) -> dict[str, np.ndarray]:
    resp = pb.ModelInferResponse.FromString(data)
    return {
        o.name: np.frombuffer(raw, dtype=NUMPY[o.datatype]).reshape(list(o.shape))
        for o, raw in zip(resp.outputs, resp.raw_output_contents)
    }


class Sender:
    """One worker's connections: a keep-alive HTTP connection, a gRPC channel, fresh sockets for raw HTTP."""

    def __init__(self, http_url: str, grpc_url: str, *, timeout_s: float = 30.0) -> None:
        host, port = urllib.parse.urlsplit(http_url).netloc.rsplit(":", 1)
        self.http_addr = (host, int(port))
        self.timeout_s = timeout_s
        self.conn: http.client.HTTPConnection | None = None
        self.reused = False
        target = grpc_url.split("://", 1)[-1]
        options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        self.channel = grpc.insecure_channel(target, options=options)
        self.infer = self.channel.unary_unary(MODEL_INFER)  # bytes in, bytes out: corrupt messages go through

    def close(self) -> None:
        self._drop()
        self.channel.close()

    def _drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn, self.reused = None, False

    def send(self, case: Case) -> Outcome:
        t0 = time.monotonic()
        r = case.request
        outputs: dict[str, np.ndarray] | None = None
        if isinstance(r, HttpRequest):
            status, body, header_length = self._http(r)
            message = "" if status in OK_STATUSES else _error_text(body)
            if case.valid and status == "200":
                outputs = _http_outputs(body, header_length)
        elif isinstance(r, RawHttp):
            status, message = self._raw(r)
        else:
            status, message, data = self._grpc(r)
            if case.valid and data is not None:
                outputs = _grpc_outputs(data)
        outcome = Outcome(case, status, message, time.monotonic() - t0)
        if case.valid and outputs is not None and case.check is not None:
            outcome.problem = case.check(outputs)
        return outcome

    def _http(self, r: HttpRequest) -> tuple[str, bytes, str | None]:
        for _ in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(*self.http_addr, timeout=self.timeout_s)
            reused, self.reused = self.reused, True
            try:
                self.conn.request(r.method, r.path, body=r.body, headers=r.headers)
                resp = self.conn.getresponse()
                body = resp.read()
            except TimeoutError:
                self._drop()
                return "TIMEOUT", b"", None
            except (http.client.RemoteDisconnected, ConnectionError, http.client.BadStatusLine) as e:
                self._drop()
                if reused:  # the server may close an idle keep-alive connection: try once on a fresh one
                    continue
                return "NO_ANSWER", repr(e).encode(), None
            if resp.will_close:
                self._drop()
            return str(resp.status), body, resp.getheader("Inference-Header-Content-Length")
        return "NO_ANSWER", b"", None

    def _raw(self, r: RawHttp) -> tuple[str, str]:
        data = b""
        with socket.create_connection(self.http_addr, timeout=10) as s:
            try:
                s.sendall(r.data)
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the server may stop reading and close first: what it answered is still read below
            try:
                while chunk := s.recv(65536):
                    data += chunk
            except TimeoutError:
                if not data:
                    return "TIMEOUT", ""
            except OSError:
                pass
        m = re.match(rb"HTTP/\d\.\d (\d{3}) ?([^\r\n]*)\r\n", data)
        if not m:
            return "NO_ANSWER", _clip(data, 200) if data else ""
        body = data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else b""
        return m.group(1).decode(), _error_text(body) or m.group(2).decode(errors="replace")

    def _grpc(self, data: bytes) -> tuple[str, str, bytes | None]:
        try:
            return "OK", "", self.infer(data, timeout=self.timeout_s)
        except grpc.RpcError as e:
            code = e.code()  # type: ignore[attr-defined]
            status = "TIMEOUT" if code == grpc.StatusCode.DEADLINE_EXCEEDED else code.name
            return status, e.details() or "", None  # type: ignore[attr-defined]


# -- the bar and the known gaps -----------------------------------------------------------------------------------
def violation(o: Outcome) -> str | None:
    """Why this answer misses issue 7's bar, or None."""
    c = o.case
    if c.valid:
        if o.status not in OK_STATUSES:
            return f"valid request refused ({o.status})"
        return o.problem
    if o.status in OK_STATUSES:
        return "malformed request served"
    if o.status == "NO_ANSWER":
        return None if c.no_answer_ok else "connection closed without an answer"
    if o.status == "TIMEOUT":
        return "no answer before the timeout"
    if c.protocol == "http" and not (o.status.isdigit() and 400 <= int(o.status) < 500):
        return f"HTTP {o.status}, not 4xx"
    if c.protocol == "grpc" and o.status not in GRPC_CLIENT_ERRORS:
        return f"gRPC {o.status}, not a client error"
    if not o.message.strip():
        return "empty message"
    if _LEAK.search(o.message):
        return "message carries a path or a traceback"
    if c.pattern and not re.search(c.pattern, o.message, re.I):
        return f"message does not name the problem (/{c.pattern}/)"
    return None


@dataclass(frozen=True)
class Gap:
    """A way Triton 2.51 (or our backend) misses the bar that this campaign found, and where a fix could live."""

    key: str
    summary: str
    fix: str
    matches: Callable[[Outcome], bool]


def _http_500_parse(o: Outcome) -> bool:
    parse = re.match(
        r"(Unable to parse|failed to parse the request JSON buffer|failed to get request params)", o.message
    )
    return o.case.protocol == "http" and o.status == "500" and parse is not None


def _served(o: Outcome) -> bool:
    return o.status in OK_STATUSES


KNOWN_GAPS = (
    Gap(
        "http-parse-500",
        "HTTP 500 for a body Triton cannot parse: broken JSON, wrong JSON types, negative or >= 2^64 dims (JSON or "
        "binary header), JSON data not matching the shape or out of range for the datatype, bad parameters, an "
        "Inference-Header-Content-Length that cuts the JSON header",
        "Triton 2.51 http_server.cc reports TritonJson errors as TRITONSERVER_ERROR_INTERNAL (upstream "
        "server#8762, PR #8773 open); ours: an HTTP front (proxy) that validates before Triton, or HTTP served by us",
        _http_500_parse,
    ),
    Gap(
        "http-framing-closed",
        "HTTP framing errors (bad request line, bad Content-Length, bad chunk size, header line without colon, "
        "200 KB header line, 100 KB URL, HTTP/0.9, HTTP/2 preface, chunked + Content-Length) get no answer at all",
        "libevhtp inside Triton 2.51 drops the connection; only an HTTP front of ours could answer 400/414/431",
        lambda o: o.case.category == "http_framing" and o.status == "NO_ANSWER",
    ),
    Gap(
        "http-framing-lenient",
        "HTTP/9.9 requests are served (answered 'HTTP/9.9 200 OK'), so are NUL bytes inside a header value",
        "libevhtp inside Triton 2.51; an HTTP front of ours",
        lambda o: o.case.category == "http_framing" and _served(o),
    ),
    Gap(
        "grpc-unparsable-internal",
        "gRPC INTERNAL 'Unable to parse request' for bytes that are not a ModelInferRequest (truncated, bad wire "
        "type, invalid UTF-8 in a string field, over-long varint, length past the end)",
        "grpc++'s status for a failed deserialization in Triton 2.51's gRPC frontend; out of the backend's reach",
        lambda o: o.case.protocol == "grpc" and o.status == "INTERNAL" and o.message == "Unable to parse request",
    ),
    Gap(
        "batch-dim-wraps",
        "a batch dim outside [0, 2^32) (b + 2^32*k, b + 2^62*k, or negative over gRPC) is served as batch "
        "(dim mod 2^32): Triton keeps the batch size as uint32 and checks the byte size against that",
        "Triton core (inference_request.cc); the backend only sees the wrapped shape. Ours: an HTTP/gRPC front "
        "that refuses dims outside [0, 2^31), or a Triton newer than 2.51",
        lambda o: "batch dim" in o.case.what and _served(o),
    ),
    Gap(
        "grpc-version-lenient",
        "gRPC model_version '1.0', '1abc', '+1', ' 1', '1e3' are read as version 1 and served (HTTP answers 404)",
        "Triton 2.51's gRPC frontend parses the version with std::stol and ignores what follows",
        lambda o: o.case.category == "unknown_version" and o.case.protocol == "grpc" and _served(o),
    ),
    Gap(
        "json-ragged-served",
        "JSON data nested raggedly ([[a], [b, c]] for shape [1, 3]) is flattened and served",
        "Triton 2.51 http_server.cc flattens any nesting and only counts elements",
        lambda o: o.case.what == "JSON body: ragged" and _served(o),
    ),
    Gap(
        "http-raw-fallback",
        "an empty body, or an empty or non-numeric Inference-Header-Content-Length, makes Triton take the whole "
        "body as the model's one raw input: an empty body is served to variable_seq as shape [1, 0], and the "
        "other answers (400) talk about 'raw_input' or 'Raw request' instead of the header",
        "Triton 2.51 http_server.cc (raw binary request extension); an HTTP front could refuse them",
        lambda o: (
            (o.case.category == "truncated" and re.search(r"raw_input|Raw request", o.message) is not None)
            or (o.case.what == "JSON body: top_level b''" and _served(o))
        ),
    ),
)


def known_gap(o: Outcome) -> Gap | None:
    return next((g for g in KNOWN_GAPS if g.matches(o)), None)


class Tally:
    """Counts per protocol x category x status, and a few examples of every kind of violation."""

    def __init__(self, examples: int = 3) -> None:
        self.lock = threading.Lock()
        self.examples = examples
        self.counts: Counter[tuple[str, str, str]] = Counter()
        self.violations: Counter[tuple[str, str, str, str, str]] = Counter()  # gap, protocol, category, status, why
        self.samples: dict[tuple[str, str, str, str, str], list[Outcome]] = {}
        # answers carrying a path or a traceback, whatever their status (a 500 that leaks counts too)
        self.leaks: Counter[tuple[str, str, str]] = Counter()  # protocol, category, status
        self.leak_samples: list[Outcome] = []
        self.seconds = 0.0

    def add(self, o: Outcome) -> None:
        why = violation(o)
        with self.lock:
            self.counts[(o.case.protocol, o.case.category, o.status)] += 1
            if _LEAK.search(o.message):
                self.leaks[(o.case.protocol, o.case.category, o.status)] += 1
                if len(self.leak_samples) < self.examples:
                    self.leak_samples.append(o)
            if why is not None:
                gap = known_gap(o)
                key = (gap.key if gap else "NEW", o.case.protocol, o.case.category, o.status, why)
                self.violations[key] += 1
                kept = self.samples.setdefault(key, [])
                if len(kept) < self.examples:
                    kept.append(o)

    def malformed(self, protocol: str | None = None) -> int:
        return sum(n for (p, c, _), n in self.counts.items() if not c.startswith("valid") and protocol in (None, p))

    def count(self, protocol: str | None = None, category: str | None = None) -> int:
        return sum(n for (p, c, _), n in self.counts.items() if protocol in (None, p) and category in (None, c))

    def new_violations(self) -> dict[tuple[str, ...], int]:
        return {k: n for k, n in self.violations.items() if k[0] == "NEW"}

    def report(self, *, only_new: bool = False) -> str:
        lines = []
        for key, n in sorted(self.violations.items()):
            if only_new and key[0] != "NEW":
                continue
            gap, protocol, category, status, why = key
            lines.append(f"[{gap}] {protocol} {category}: {n} x {status}: {why}")
            for o in self.samples[key]:
                lines.append(f"    case {o.case.index} ({o.case.what}): {o.case.describe(300)}")
                lines.append(f"      -> {o.status} {o.message[:300]!r}")
        return "\n".join(lines)

    def table(self) -> str:
        rows: dict[tuple[str, str], Counter[str]] = {}
        for (p, c, s), n in self.counts.items():
            rows.setdefault((c, p), Counter())[s] += n
        out = [f"{'category':20s} {'proto':5s} {'n':>6s}  statuses"]
        for (c, p), statuses in sorted(rows.items()):
            text = ", ".join(f"{s}:{n}" for s, n in statuses.most_common())
            out.append(f"{c:20s} {p:5s} {sum(statuses.values()):6d}  {text}")
        return "\n".join(out)


def run_cases(
    cases: Iterable[Case],
    http_url: str,
    grpc_url: str,
    *,
    threads: int = 4,
    tally: Tally | None = None,
    deadline: float | None = None,
) -> Tally:
    """Send every case from `threads` workers (each with its own connections); stops early at `deadline`."""
    tally = tally or Tally()
    source = iter(cases)
    lock = threading.Lock()
    errors: list[BaseException] = []
    t0 = time.monotonic()

    def worker() -> None:
        sender = Sender(http_url, grpc_url)
        try:
            while deadline is None or time.monotonic() < deadline:
                with lock:
                    case = next(source, None)
                if case is None:
                    return
                tally.add(sender.send(case))
        except BaseException as e:  # noqa: BLE001  (re-raised in the caller's thread)
            errors.append(e)
        finally:
            sender.close()

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    tally.seconds += time.monotonic() - t0
    if errors:
        raise errors[0]
    return tally


# -- memory and the process tree ----------------------------------------------------------------------------------
def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants (from /proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo.extend(int(c) for c in task.read_text().split())
            except OSError:
                pass
    return out


def tree_rss_kb(pid: int) -> dict[int, int]:
    """VmRSS in KiB of `pid` and of each descendant (the server and its python-backend workers)."""
    rss = {}
    for p in process_tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss[p] = int(line.split()[1])
        except OSError:
            pass
    return rss


# -- the one request that kills Triton 2.51 -------------------------------------------------------------------------
def crash_probe(http_url: str, timeout_s: float = 30.0) -> tuple[str, str]:
    """POST a 90-byte JSON request to `tiny` declaring shape [2^40, 4]: Triton 2.51 tries to allocate 16 TiB first.

    Returns (status, message): today ("NO_ANSWER", ...) and the server has aborted with std::bad_alloc.
    Only ever run it against a server of your own.
    """
    doc = {"inputs": [{"name": "x", "shape": [2**40, 4], "datatype": "FP32", "data": [1.0]}]}
    request = HttpRequest(infer_path("tiny"), json.dumps(doc).encode(), {"Content-Type": "application/json"})
    sender = Sender(http_url, "127.0.0.1:9", timeout_s=timeout_s)  # the gRPC channel is never used
    try:
        o = sender.send(Case(0, "http", "crash_probe", "tiny", "declares 16 TiB of JSON data", request))
    finally:
        sender.close()
    return o.status, o.message


# -- the script ---------------------------------------------------------------------------------------------------
@dataclass
class Served:
    http_url: str
    grpc_url: str
    pid: int | None
    stop: Callable[[], None] = field(default=lambda: None)


def start_server(*, gateway: bool = False) -> Served:
    """An embedded server on loopback serving the test repository (built in a temporary directory).

    With `gateway`, the validating gateway fronts it (ServerConfig.gateway) and the URLs are the gateway's.
    """
    import tempfile

    from mslite_triton.server import EmbeddedServer, ServerConfig
    from tests.support.repository import build_repository  # the same models the test suite serves

    tmp = tempfile.TemporaryDirectory(prefix="mslite-badinput-")
    repo = Path(tmp.name) / "repo"
    repo.mkdir()
    build_repository(repo)
    srv = EmbeddedServer(ServerConfig(model_repository=repo, startup_timeout_s=240, gateway=gateway)).start()
    assert srv.process is not None

    def stop() -> None:
        srv.stop()
        srv.remove_workspace()
        tmp.cleanup()

    return Served(srv.http_url, srv.grpc_url, srv.process.pid, stop)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration-s", type=float, default=300.0, help="stop sending after this long (default 300)")
    ap.add_argument("--requests", type=int, default=1_000_000, help="at most this many cases (default 1,000,000)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--first", type=int, default=0, help="index of the first case (default 0)")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--http", help="an existing server's HTTP URL (loopback); default: start one")
    ap.add_argument("--grpc", help="an existing server's gRPC URL, e.g. grpc://127.0.0.1:8001")
    ap.add_argument("--server-pid", type=int, help="with --http/--grpc: the server's pid, for the RSS figures")
    ap.add_argument("--replay", type=int, help="send only case REPLAY and print it with its answer")
    ap.add_argument("--no-crash-probe", action="store_true", help="skip the last step (it kills our own server)")
    ap.add_argument("--gateway", action="store_true", help="start the server with the validating gateway in front")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="where badinput.json goes")
    args = ap.parse_args(argv)
    if bool(args.http) != bool(args.grpc):
        ap.error("give both --http and --grpc, or neither")
    for url in filter(None, (args.http, args.grpc)):
        host = urllib.parse.urlsplit(url if "://" in url else "x://" + url).hostname
        if host not in ("127.0.0.1", "localhost", "::1"):
            ap.error(f"{url}: loopback only")
    t0 = time.monotonic()
    served = Served(args.http, args.grpc, args.server_pid) if args.http else start_server(gateway=args.gateway)
    try:
        gen = CaseGenerator(fetch_specs(served.http_url), args.seed)
        if args.replay is not None:
            case = gen.case(args.replay)
            sender = Sender(served.http_url, served.grpc_url)
            o = sender.send(case)
            sender.close()
            print(f"case {case.index} [{case.protocol} {case.category}] {case.what}\n  {case.describe(2000)}")
            print(f"  -> {o.status} {o.message!r}\n  bar: {violation(o) or 'met'}")
            return 0
        print(f"[{time.monotonic() - t0:6.1f}s] server ready: {served.http_url} {served.grpc_url}", flush=True)
        run_cases((gen.valid(i) for i in range(300)), served.http_url, served.grpc_url, threads=args.threads)
        before = tree_rss_kb(served.pid) if served.pid else {}
        print(f"[{time.monotonic() - t0:6.1f}s] warm-up done; RSS {sum(before.values()) / 1024:.0f} MiB", flush=True)
        tally = Tally()
        deadline = time.monotonic() + args.duration_s
        chunk = 5000
        for start in range(args.first, args.first + args.requests, chunk):
            stop = min(start + chunk, args.first + args.requests)
            run_cases(
                gen.cases(range(start, stop)),
                served.http_url,
                served.grpc_url,
                threads=args.threads,
                tally=tally,
                deadline=deadline,
            )
            rss = sum(tree_rss_kb(served.pid).values()) / 1024 if served.pid else float("nan")
            print(
                f"[{time.monotonic() - t0:6.1f}s] {tally.count()} cases ({tally.malformed()} malformed), "
                f"{sum(tally.violations.values())} violations, RSS {rss:.0f} MiB",
                flush=True,
            )
            if time.monotonic() >= deadline:
                break
        after = tree_rss_kb(served.pid) if served.pid else {}
        print("\n" + tally.table())
        print(f"\nmalformed: {tally.malformed('http')} HTTP + {tally.malformed('grpc')} gRPC in {tally.seconds:.0f} s")
        if before and after:
            growth = sum(after.values()) / sum(before.values()) - 1
            print(
                f"RSS server + workers: {sum(before.values()) / 1024:.0f} -> {sum(after.values()) / 1024:.0f} MiB "
                f"({growth:+.1%}; bar < +10%)"
            )
        print("\nviolations (known gaps by key; NEW = not explained):\n" + (tally.report() or "none"))
        for gap in KNOWN_GAPS:
            print(f"\n[{gap.key}] {gap.summary}\n    fix: {gap.fix}")
        failed = bool(tally.new_violations())
        probe = None
        if not args.no_crash_probe and not args.http:
            status, message = crash_probe(served.http_url)
            alive = _alive(served.http_url)
            probe = {"status": status, "message": message[:500], "server_alive": alive}
            print(f"\ncrash probe (JSON shape [2^40, 4] to tiny): {status} {message[:200]!r}; server alive: {alive}")
            failed = failed or not alive
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "badinput.json"
        path.write_text(json.dumps(_summary(args, tally, before, after, probe), indent=2))
        print(f"\nwritten: {path}")
        return 1 if failed else 0
    finally:
        served.stop()


def _summary(
    args: argparse.Namespace, tally: Tally, before: dict[int, int], after: dict[int, int], probe: dict[str, Any] | None
) -> dict[str, Any]:
    """Everything the run found, for benchmarks/results/badinput.json."""
    violations = []
    for (gap, protocol, category, status, why), n in sorted(tally.violations.items()):
        examples = [
            {
                "index": o.case.index,
                "what": o.case.what,
                "request": o.case.describe(1000),
                "status": o.status,
                "message": o.message[:1000],
            }
            for o in tally.samples[(gap, protocol, category, status, why)]
        ]
        violations.append(
            {
                "gap": gap,
                "protocol": protocol,
                "category": category,
                "status": status,
                "why": why,
                "count": n,
                "examples": examples,
            }
        )
    return {
        "seed": args.seed,
        "first_case": args.first,
        "cases": tally.count(),
        "malformed": {"http": tally.malformed("http"), "grpc": tally.malformed("grpc")},
        "seconds": round(tally.seconds, 1),
        "counts": [
            {"protocol": p, "category": c, "status": s, "n": n} for (p, c, s), n in sorted(tally.counts.items())
        ],
        "rss_kib": {"after_warmup": sum(before.values()), "end": sum(after.values()), "processes": len(after)},
        "violations": violations,
        "known_gaps": [{"key": g.key, "summary": g.summary, "fix": g.fix} for g in KNOWN_GAPS],
        "crash_probe": probe,
    }


def _alive(http_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{http_url}/v2/health/live", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
