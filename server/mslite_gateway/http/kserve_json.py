"""The KServe v2 JSON inference request, checked the way Triton 2.51 will read it, before it reaches Triton.

Triton answers HTTP 500 for whatever its JSON reader cannot take (wrong JSON types, negative dims, bad
parameters, data that does not fit the shape), flattens ragged `data`, and allocates a JSON input's declared
size before reading it. Here the header is parsed strictly (UTF-8, no duplicate keys, no numbers out of a
double's range) and every field Triton reads is checked for type and value, so what passes is what Triton
parses without error; what does not gets a `Refusal` naming the field.
"""

from __future__ import annotations

import json
import math
import re
from itertools import chain
from typing import Any

from mslite_contract.settings import GATEWAY_MAX_STRING_ELEMENTS
from mslite_gateway.rules import (
    ELEMENT_SIZE,
    Refusal,
    SizeBudget,
    byte_size_mismatch,
    check_bool_bytes,
    check_datatype,
    check_region_name,
    element_count,
)

_UINT64 = (1 << 64) - 1
_INT_RANGE = {
    "UINT8": (0, 0xFF),
    "UINT16": (0, 0xFFFF),
    "UINT32": (0, 0xFFFFFFFF),
    "UINT64": (0, _UINT64),
    "INT8": (-(1 << 7), (1 << 7) - 1),
    "INT16": (-(1 << 15), (1 << 15) - 1),
    "INT32": (-(1 << 31), (1 << 31) - 1),
    "INT64": (-(1 << 63), (1 << 63) - 1),
}
# A number that may overflow a double: a 3-digit exponent or 300+ digits. Only then is the body re-read slowly.
_MAYBE_HUGE = re.compile(r"[eE][+]?0*[1-9][0-9]{2}|[0-9]{300}")
# Request parameters Triton reads with a fixed type (http_server.cc ParseJsonTritonParams).
_UINT_PARAMS = ("priority", "timeout")
_BOOL_PARAMS = ("sequence_start", "sequence_end", "binary_data_output")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc = dict(pairs)
    if len(doc) != len(pairs):  # Triton's reader takes the first, Python's the last: refuse rather than guess
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"key '{key[:40]}' appears twice in one object")
            seen.add(key)
    return doc


def _strict_number(text: str) -> float | int:
    value = float(text) if any(c in text for c in ".eE") else int(text)
    if math.isinf(value) or (isinstance(value, int) and abs(value) > 1.8e308):
        raise ValueError(f"number {text[:24]}... is out of range")
    return value


# Built once (json.loads with hooks builds a decoder each call).
_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates)
_STRICT_DECODER = json.JSONDecoder(
    object_pairs_hook=_no_duplicates, parse_float=_strict_number, parse_int=_strict_number
)


def parse_header(raw: bytes) -> dict[str, Any]:
    """The JSON header as a dict.

    Raises:
        Refusal: not UTF-8, not JSON, nested too deeply, a duplicate key, a number out of range, not an object.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Refusal(
            f"the request's JSON header is not valid UTF-8 (byte {e.start}); is Inference-Header-Content-Length right?"
        ) from None
    try:
        doc = (_STRICT_DECODER if _MAYBE_HUGE.search(text) else _DECODER).decode(text)
    except RecursionError:
        raise Refusal("request JSON is nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, and the hooks' own errors
        raise Refusal(f"request JSON could not be parsed: {str(e)[:200]}") from None
    if not isinstance(doc, dict):
        raise Refusal(f"request JSON must be an object, got {type(doc).__name__}")
    return doc


def _uint(where: str, value: Any) -> int:
    if type(value) is not int or not 0 <= value <= _UINT64:
        raise Refusal(f"{where} must be an unsigned integer, got {json.dumps(value)[:40]}")
    return value


def _typed(where: str, value: Any, kind: type) -> Any:
    if type(value) is not kind:
        wanted = {str: "a string", bool: "a boolean", dict: "an object", list: "an array"}[kind]
        raise Refusal(f"{where} must be {wanted}, got {json.dumps(value)[:40]}")
    return value


def check_infer_request(
    header: bytes,
    model: str,
    *,
    payload: memoryview | None,
    cap: int,
    keyed: bool = False,
    max_strings: int = GATEWAY_MAX_STRING_ELEMENTS,
) -> dict[str, Any]:
    """Check an inference request's JSON header (and, for binary data, what follows it).

    A client sends the same header again and again (binary data keeps the tensors out of it): a short one
    that passed is remembered, and only what follows it is checked the next time.

    Args:
        header: the JSON part of the body.
        model: the model name from the URL, for messages.
        payload: the binary tensor data after the header, or None without Inference-Header-Content-Length.
        cap: the most bytes of tensor data one request may declare.
        keyed: the request came with the admin key (it may name shared-memory regions).
        max_strings: the most string (BYTES) elements one request may declare.

    Returns:
        The parsed header, shared with later requests that send the same: not to be changed.

    Raises:
        Refusal: the first problem found, named.
    """
    key = (header, payload is not None, cap, keyed, max_strings) if len(header) <= _KNOWN_HEADER_BYTES else None
    known = _known_headers.get(key) if key is not None else None
    if known is None:
        budget = SizeBudget(cap, max_strings)
        known = _check_header(header, model, has_payload=payload is not None, budget=budget, keyed=keyed)
        if key is not None:
            if len(_known_headers) >= _KNOWN_HEADERS:
                del _known_headers[next(iter(_known_headers))]  # the oldest
            _known_headers[key] = known
    doc, binary_total, bools = known
    if payload is not None:
        if binary_total != len(payload):
            raise Refusal(
                f"the body holds {len(payload)} bytes of binary data after the JSON header, but the inputs' "
                f"binary_data_size add up to {binary_total}"
            )
        for name, offset, nbytes in bools:
            check_bool_bytes(name, payload[offset : offset + nbytes])
    return doc


# Checked headers remembered (`check_infer_request`): how many, and the longest (JSON tensor values, which
# change with every request, make a header longer).
_KNOWN_HEADERS = 256
_KNOWN_HEADER_BYTES = 4096
_Checked = tuple[dict[str, Any], int, tuple[tuple[str, int, int], ...]]
_known_headers: dict[tuple[bytes, bool, int, bool, int], _Checked] = {}


def _check_header(header: bytes, model: str, *, has_payload: bool, budget: SizeBudget, keyed: bool) -> _Checked:
    """The header parsed and checked; the binary data's total size, and where BOOL inputs lie in it."""
    doc = parse_header(header)
    if "id" in doc:
        _typed("request 'id'", doc["id"], str)
    if "parameters" in doc:
        _check_request_parameters(_typed("request 'parameters'", doc["parameters"], dict))
    inputs = _typed("request 'inputs'", doc.get("inputs"), list) if "inputs" in doc else None
    if inputs is None:
        raise Refusal("request JSON is missing its 'inputs' array")
    binary_total = 0
    bools: list[tuple[str, int, int]] = []  # BOOL inputs in the binary part: name, offset, size
    for i, item in enumerate(inputs):
        nbytes = _check_input(i, item, model, budget, has_payload, keyed)
        if nbytes and item["datatype"] == "BOOL":
            bools.append((item["name"], binary_total, nbytes))
        binary_total += nbytes
    if "outputs" in doc:
        for j, out in enumerate(_typed("request 'outputs'", doc["outputs"], list)):
            _check_output(j, out, keyed)
    return doc, binary_total, tuple(bools)


def _check_request_parameters(params: dict[str, Any]) -> None:
    for key, value in params.items():
        where = f"request parameter '{key[:40]}'"
        if key in _UINT_PARAMS:
            _uint(where, value)
        elif key in _BOOL_PARAMS:
            _typed(where, value, bool)
        elif key == "sequence_id":
            if type(value) is not str:
                _uint(where, value)
        elif key.startswith("triton_"):
            raise Refusal(f"{where}: parameter keys starting with 'triton_' are reserved")
        elif not (type(value) in (str, bool) or (type(value) is int and -(1 << 63) <= value < 1 << 63)):
            raise Refusal(f"{where} must be a string, an integer or a boolean, got {json.dumps(value)[:40]}")


def _check_input(i: int, item: Any, model: str, budget: SizeBudget, has_payload: bool, keyed: bool) -> int:
    """Check one input; returns its binary_data_size (0 when its data is not in the binary part)."""
    if type(item) is not dict:
        raise Refusal(f"request 'inputs'[{i}] must be an object, got {json.dumps(item)[:40]}")
    name = _typed(f"'name' of inputs[{i}]", item.get("name"), str) if "name" in item else None
    if name is None:
        raise Refusal(f"inputs[{i}] is missing its 'name'")
    if "datatype" not in item:
        raise Refusal(f"input '{name}' is missing its 'datatype'")
    datatype = _typed(f"'datatype' of input '{name}'", item["datatype"], str)
    size = check_datatype(name, datatype)
    if "shape" not in item:
        raise Refusal(f"input '{name}' is missing its 'shape'")
    shape = _typed(f"'shape' of input '{name}'", item["shape"], list)
    count = element_count(name, shape)
    if datatype == "BYTES":
        budget.add_strings(name, shape, count)
    params = _typed(f"'parameters' of input '{name}'", item.get("parameters", {}), dict)
    binary = params.get("binary_data_size")
    region = params.get("shared_memory_region")
    sources = [
        k for k, v in (("data", item.get("data")), ("binary_data_size", binary), ("shm", region)) if v is not None
    ]
    if not sources:
        raise Refusal(
            f"input '{name}' has no data: give 'data', parameters.binary_data_size or parameters.shared_memory_region"
        )
    if len(sources) > 1:
        raise Refusal(f"input '{name}' gives its data more than one way ({', '.join(sources)})")
    needed = count * size
    if binary is not None:
        nbytes = _uint(f"binary_data_size of input '{name}'", binary)
        if not has_payload:
            raise Refusal(
                f"input '{name}' has binary_data_size but the request has no Inference-Header-Content-Length header"
            )
        budget.add(name, shape, datatype, nbytes)
        if datatype != "BYTES" and nbytes != needed:
            raise byte_size_mismatch(name, model, needed, nbytes)
        return nbytes
    if region is not None:
        region = _typed(f"shared_memory_region of input '{name}'", region, str)
        check_region_name(f"input '{name}'", region, keyed=keyed)
        if "shared_memory_byte_size" not in params:
            raise Refusal(f"input '{name}' uses shared memory but has no shared_memory_byte_size")
        nbytes = _uint(f"shared_memory_byte_size of input '{name}'", params["shared_memory_byte_size"])
        if "shared_memory_offset" in params:
            _uint(f"shared_memory_offset of input '{name}'", params["shared_memory_offset"])
        budget.add(name, shape, datatype, nbytes)
        if datatype != "BYTES" and nbytes != needed:
            raise byte_size_mismatch(name, model, needed, nbytes)
        return 0
    budget.add(name, shape, datatype, needed)  # before the data is walked: [2^30, 2^30] stops here
    _check_json_data(name, datatype, shape, count, item["data"])
    return 0


def _check_json_data(name: str, datatype: str, shape: list[int], count: int, data: Any) -> None:
    """`data` is flat, or nested exactly as `shape`; its values have the datatype's JSON type and range."""
    if datatype in ("FP16", "BF16"):
        raise Refusal(f"input '{name}': datatype {datatype} has no JSON form; send it as binary data")
    items = _typed(f"'data' of input '{name}'", data, list)
    nesting = [len(items)]
    kinds = set(map(type, items))
    while list in kinds:
        lengths = set(map(len, items))
        if kinds != {list} or len(lengths) != 1:
            raise Refusal(f"input '{name}': 'data' is ragged; it must be flat or nested as the shape {shape}")
        nesting.append(lengths.pop())
        items = list(chain.from_iterable(items))
        kinds = set(map(type, items))
    if len(nesting) > 1 and nesting != shape:
        raise Refusal(f"input '{name}': 'data' is nested as {nesting}, which is not the shape {shape}")
    if len(items) != count:
        raise Refusal(f"input '{name}': 'data' holds {len(items)} value(s), shape {shape} needs {count}")
    if not items:
        return
    if datatype == "BOOL":
        allowed: set[type] = {bool}
    elif datatype == "BYTES":
        allowed = {str}
    elif datatype.startswith("FP"):
        allowed = {float, int}
    else:
        allowed = {int}
    if not kinds <= allowed:
        wrong = sorted(k.__name__ for k in kinds - allowed)
        raise Refusal(f"input '{name}': 'data' holds {', '.join(wrong)} values, which {datatype} cannot take")
    if datatype in _INT_RANGE:
        low, high = _INT_RANGE[datatype]
        if min(items) < low or max(items) > high:
            raise Refusal(f"input '{name}': a value in 'data' is out of range for {datatype} [{low}, {high}]")


def _check_output(j: int, out: Any, keyed: bool) -> None:
    if type(out) is not dict:
        raise Refusal(f"request 'outputs'[{j}] must be an object, got {json.dumps(out)[:40]}")
    if "name" not in out:
        raise Refusal(f"outputs[{j}] is missing its 'name'")
    name = _typed(f"'name' of outputs[{j}]", out["name"], str)
    params = _typed(f"'parameters' of output '{name}'", out.get("parameters", {}), dict)
    for key, value in params.items():
        where = f"parameter '{key[:40]}' of output '{name}'"
        if key == "binary_data":
            _typed(where, value, bool)
        elif key in ("classification", "shared_memory_byte_size", "shared_memory_offset"):
            _uint(where, value)
        elif key == "shared_memory_region":
            check_region_name(f"output '{name}'", _typed(where, value, str), keyed=keyed)


__all__ = ["ELEMENT_SIZE", "check_infer_request", "parse_header"]
