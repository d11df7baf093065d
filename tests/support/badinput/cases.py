"""The bad-input case catalogue: the categories, what each answer's message must name, and `CaseGenerator`.

Case `i` of a seed depends on nothing else (its generator is seeded with `[seed, 0, i]`), so every failure
can be replayed alone. Even indexes are HTTP, odd ones gRPC; about 3 % are valid requests whose floats
include NaN and Inf, which must be served with the right values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from tests.support.badinput import malformed_requests, malformed_tensors
from tests.support.badinput.encoding import NUMPY, Request, describe, grpc_request, http_binary, http_json, make_tensor
from tests.support.badinput.models import Draw, ModelSpec, pick, random_array

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
#: category -> builder(draw, rng, protocol) -> (model, what, request[, Case options])
BUILDERS: dict[str, Callable[[Draw, np.random.Generator, str], tuple]] = {
    "dtype_wrong": malformed_tensors.dtype_wrong,
    "dtype_invalid": malformed_tensors.dtype_invalid,
    "shape_wrong": malformed_tensors.shape_wrong,
    "dims_negative": malformed_tensors.dims_negative,
    "dims_huge": malformed_tensors.dims_huge,
    "dims_overflow": malformed_tensors.dims_overflow,
    "input_missing": malformed_tensors.input_missing,
    "input_extra": malformed_tensors.input_extra,
    "input_duplicate": malformed_tensors.input_duplicate,
    "size_mismatch": malformed_tensors.size_mismatch,
    "truncated": malformed_tensors.truncated,
    "empty_batch": malformed_tensors.empty_batch,
    "bool_values": malformed_tensors.bool_values,
    "unknown_model": malformed_requests.unknown_model,
    "unknown_version": malformed_requests.unknown_version,
    "bad_output": malformed_requests.bad_output,
    "bad_parameters": malformed_requests.bad_parameters,
    "json_malformed": malformed_requests.json_malformed,
    "http_framing": malformed_requests.http_framing,
    "protobuf_malformed": malformed_requests.protobuf_malformed,
}


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
        return describe(self.request, limit)


class CaseGenerator:
    """Case `index` of `seed`: deterministic, independent of every other case. Even indexes HTTP, odd gRPC."""

    def __init__(self, specs: dict[str, ModelSpec], seed: int, *, valid_share: float = 0.03) -> None:
        self.specs = specs
        self.seed = seed
        self.valid_share = valid_share
        self.draw = Draw(specs)

    def case(self, index: int) -> Case:
        rng = np.random.default_rng([self.seed, 0, index])
        protocol = "http" if index % 2 == 0 else "grpc"
        if rng.random() < self.valid_share:
            return self._valid_nan_inf(rng, index, protocol)
        category = pick(rng, HTTP_CATEGORIES if protocol == "http" else GRPC_CATEGORIES)
        made = BUILDERS[category](self.draw, rng, protocol)
        model, what, request = made[:3]
        options = made[3] if len(made) > 3 else {}
        return Case(index, protocol, category, model, what, request, PATTERNS[category], **options)

    def cases(self, indexes: Iterable[int]) -> Iterable[Case]:
        return (self.case(i) for i in indexes)

    def valid(self, index: int) -> Case:
        """A valid request (any model, either protocol) whose outputs are checked: the warm-up traffic."""
        rng = np.random.default_rng([self.seed, 1, index])
        protocol = "http" if index % 2 == 0 else "grpc"
        models = self.draw.models
        spec = self.specs[models[index % len(models)]]
        tensors = self.draw.tensors(rng, spec)
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
        expected: dict[str, np.ndarray]
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
