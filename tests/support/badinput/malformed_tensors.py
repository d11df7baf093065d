"""Malformed tensors: the case builders whose inputs are wrong (datatype, shape, dims, count, bytes, BOOL values).

Each builder takes the `Draw`, the case's generator and its protocol, and returns (model, what, request[, Case
options]); `cases.BUILDERS` maps each category to its builder. The order of the draws from `rng` is part of a
case's identity: change it and case `i` of a seed is another request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tests.support.badinput.encoding import (
    ELEMENT_SIZE,
    NUMPY,
    Request,
    grpc_request,
    http_binary,
    http_json,
    make_tensor,
)
from tests.support.badinput.models import Draw, foreign_tensor, pick, random_array


def dtype_wrong(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    spec = draw.model(rng)
    tensors = draw.tensors(rng, spec)
    i = int(rng.integers(len(tensors)))
    t = tensors[i]
    dtype = pick(rng, [d for d in (*NUMPY, "BF16", "BYTES") if d != t.datatype])
    n = math.prod(t.shape)
    if n > 16384:
        t.shape = [1] * (len(t.shape) - 1) + [4]  # keep MobileNetV2 cases small; the dtype is checked first
    tensors[i] = foreign_tensor(rng, t.name, dtype, t.shape)
    return (
        spec.name,
        f"input '{t.name}' sent as {dtype}, model expects {t.datatype}",
        draw.request(rng, protocol, spec, tensors),
    )


def dtype_invalid(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    spec = draw.model(rng, lambda s: s.name != "mobilenetv2")
    tensors = draw.tensors(rng, spec)
    t = pick(rng, tensors)
    t.datatype = pick(rng, ["FOO", "", "fp32", "FLOAT", "FP128", "INT4", "TYPE_FP32", "FP32 ", "\u03a9", "null"])
    return spec.name, f"input '{t.name}' has datatype {t.datatype!r}", draw.request(rng, protocol, spec, tensors)


def shape_wrong(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    spec = draw.model(rng, lambda s: s.name != "mobilenetv2" or rng.random() < 0.5)
    tensors = draw.tensors(rng, spec)
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
    how = pick(rng, choices)
    if how == "fixed_dim":
        k = offset + pick(rng, fixed)
        shape[k] = pick(rng, [d for d in (shape[k] - 1, shape[k] + 1, shape[k] + 3, 1) if d != shape[k] and d > 0])
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
    return spec.name, what, draw.request(rng, protocol, spec, tensors, binary=cut)


def _bad_dim(draw: Draw, rng: np.random.Generator, protocol: str, values: Sequence[int], label: str) -> tuple:
    spec = draw.model(rng)
    tensors = draw.tensors(rng, spec, batch=1)
    t = pick(rng, tensors)
    if len(t.data) > 4096:  # MobileNetV2: a few bytes are enough, the shape is checked first
        t.data, t.values = t.data[:16], None
    k = int(rng.integers(len(t.shape)))
    t.shape[k] = int(pick(rng, values))
    where = "batch dim" if k == 0 and spec.batched else f"dim {k}"
    what = f"input '{t.name}' shape {t.shape} ({label} as {where}), {len(t.data)} bytes sent"
    return spec.name, what, draw.request(rng, protocol, spec, tensors)


def dims_negative(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    return _bad_dim(draw, rng, protocol, [-1, -2, -3, -1000, -(2**31), -(2**62), -(2**63)], "negative dim")


def dims_huge(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    values = [2**31, 2**32, 2**32 + 1, 2**40, 2**53, 2**63 - 1, int(rng.integers(2**20, 2**62))]
    return _bad_dim(draw, rng, protocol, values, "huge dim")


def dims_overflow(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    """A batch of b + k*2^62: the byte size wraps to the bytes sent and a uint32 batch size reads b."""
    spec = draw.model(
        rng,
        lambda s: s.batched and s.name != "mobilenetv2" and all(ELEMENT_SIZE[i.datatype] % 4 == 0 for i in s.inputs),
    )
    tensors = draw.tensors(rng, spec)
    k = 1 if protocol == "grpc" else int(rng.integers(1, 3))  # gRPC dims are int64, JSON's are uint64
    for t in tensors:
        t.shape[0] += k << 62
    request = grpc_request(spec.name, tensors) if protocol == "grpc" else http_binary(spec.name, tensors)
    return spec.name, f"batch dim {tensors[0].shape[0]} (its byte size wraps to the bytes sent)", request


def input_missing(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    spec = draw.model(rng, lambda s: s.name != "mobilenetv2")
    tensors = draw.tensors(rng, spec)
    gone = tensors.pop(int(rng.integers(len(tensors))))
    return spec.name, f"input '{gone.name}' missing", draw.request(rng, protocol, spec, tensors)


def input_extra(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    spec = draw.model(rng, lambda s: s.name != "mobilenetv2")
    tensors = draw.tensors(rng, spec)
    names = {i.name for i in spec.inputs}
    name = pick(rng, [n for n in ("z", "x2", "extra", "input_1", "", "X", "x ", spec.outputs[0]) if n not in names])
    src = pick(rng, tensors)
    extra = make_tensor(name, src.datatype, src.shape, random_array(rng, src.datatype, math.prod(src.shape)))
    tensors.insert(int(rng.integers(len(tensors) + 1)), extra)
    return spec.name, f"extra input {name!r}", draw.request(rng, protocol, spec, tensors)


def input_duplicate(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    spec = draw.model(rng, lambda s: s.name != "mobilenetv2")
    tensors = draw.tensors(rng, spec)
    src = pick(rng, tensors)
    twin = make_tensor(src.name, src.datatype, src.shape, random_array(rng, src.datatype, math.prod(src.shape)))
    tensors.insert(int(rng.integers(len(tensors) + 1)), twin)
    return spec.name, f"input '{src.name}' given twice", draw.request(rng, protocol, spec, tensors)


def size_mismatch(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    spec = draw.model(rng)
    tensors = draw.tensors(rng, spec)
    t = pick(rng, tensors)
    size = ELEMENT_SIZE[t.datatype]
    as_json = protocol == "http" and t.values is not None and len(t.data) <= 65536 and rng.random() < 0.4
    delta = int(pick(rng, [-3, -2, -1, 1, 2, 3])) * (size if as_json or rng.random() < 0.5 else 1)
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


def truncated(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    spec = draw.model(rng, lambda s: s.name != "mobilenetv2" or rng.random() < 0.3)
    tensors = draw.tensors(rng, spec)
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
    how = pick(rng, ["body_cut", "header_long", "header_short", "header_negative", "header_garbage"])
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
        "header_garbage": pick(rng, ["abc", "", "0x10", "12.5", " ", "1e3", "99999999999999999999"]),
    }[how]
    request = http_binary(spec.name, tensors, header_length=length)
    return spec.name, f"Inference-Header-Content-Length {length!r} for a {header_len}-byte header", request


def empty_batch(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    spec = draw.model(rng)
    tensors = draw.tensors(rng, spec, batch=0)
    if not spec.batched:
        for t in tensors:
            t.shape[0], t.data, t.values = 0, b"", []
    return spec.name, f"shapes {[t.shape for t in tensors]}, no data", draw.request(rng, protocol, spec, tensors)


def bool_values(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    spec = draw.specs["mixed_dtypes"]
    tensors = draw.tensors(rng, spec)
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
