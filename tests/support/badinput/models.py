"""The models a campaign sends to, and seeded draws of valid inputs for them: what every case starts from."""

from __future__ import annotations

import json
import math
import struct
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tests.support.badinput.encoding import (
    NUMPY,
    Request,
    Tensor,
    grpc_request,
    http_binary,
    http_json,
    json_safe,
    make_tensor,
)

MODELS = ("tiny", "mobilenetv2", "multi_io", "mixed_dtypes", "no_batch", "variable_seq", "odd_names")
MODEL_WEIGHTS = {"tiny": 4, "multi_io": 2, "mixed_dtypes": 2, "variable_seq": 2, "no_batch": 1, "odd_names": 1}
MODEL_WEIGHTS["mobilenetv2"] = 1


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


def pick(rng: np.random.Generator, seq: Sequence[Any]) -> Any:
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


def foreign_tensor(rng: np.random.Generator, name: str, datatype: str, shape: list[int]) -> Tensor:
    """A tensor of any datatype (BYTES and BF16 too) holding exactly `prod(shape)` elements."""
    n = math.prod(shape)
    if datatype == "BYTES":
        return Tensor(name, datatype, shape, b"".join(struct.pack("<I", 1) + b"a" for _ in range(n)), ["a"] * n)
    if datatype == "BF16":
        return Tensor(name, datatype, shape, bytes(2 * n), None)
    return make_tensor(name, datatype, shape, random_array(rng, datatype, n))


class Draw:
    """Seeded draws over the served models: a model (by `MODEL_WEIGHTS`), valid tensors for it, a request."""

    def __init__(self, specs: dict[str, ModelSpec]) -> None:
        self.specs = specs
        self.models = [m for m in MODEL_WEIGHTS if m in specs]
        weights = np.array([MODEL_WEIGHTS[m] for m in self.models], dtype=float)
        self.model_p = weights / weights.sum()

    def model(self, rng: np.random.Generator, eligible: Callable[[ModelSpec], bool] | None = None) -> ModelSpec:
        while True:
            spec = self.specs[self.models[int(rng.choice(len(self.models), p=self.model_p))]]
            if eligible is None or eligible(spec):
                return spec

    @staticmethod
    def _shape(spec: ModelSpec, inp: InputSpec, batch: int, free: int) -> list[int]:
        dims = [d if d >= 0 else free for d in inp.dims]
        return [batch, *dims] if spec.batched else dims

    def tensors(self, rng: np.random.Generator, spec: ModelSpec, *, batch: int | None = None) -> list[Tensor]:
        """A valid set of inputs: batch 1-3 (1 for MobileNetV2), free dims 1-6."""
        big = spec.name == "mobilenetv2"
        batch = (1 if big else int(rng.integers(1, 4))) if batch is None else batch
        free = int(rng.integers(1, 7))
        out = []
        for inp in spec.inputs:
            shape = self._shape(spec, inp, batch, free)
            out.append(make_tensor(inp.name, inp.datatype, shape, random_array(rng, inp.datatype, math.prod(shape))))
        return out

    def request(
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
