"""Malformed requests: the case builders whose envelope is wrong (model, version, outputs, JSON, framing...).

Each builder takes the `Draw`, the case's generator and its protocol, and returns (model, what, request[, Case
options]); `cases.BUILDERS` maps each category to its builder. The order of the draws from `rng` is part of a
case's identity: change it and case `i` of a seed is another request.
"""

from __future__ import annotations

import json

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from tests.support.badinput.encoding import HttpRequest, RawHttp, grpc_request, http_json, varint
from tests.support.badinput.models import Draw, pick


def unknown_model(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
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
    name = pick(rng, [*names, f"m{int(rng.integers(1 << 30)):x}"])
    tensors = draw.tensors(rng, draw.specs["tiny"])
    return name, f"model {name[:40]!r} is not served", draw.request(rng, protocol, name, tensors)


def unknown_version(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    spec = draw.model(rng, lambda s: s.name != "mobilenetv2")
    tensors = draw.tensors(rng, spec)
    version = pick(rng, ["2", "7", "0", "-1", "abc", "99999999999999999999", "1.0", "1abc", "+1", " 1", "1e3"])
    return spec.name, f"model version {version!r}", draw.request(rng, protocol, spec, tensors, version=version)


def bad_output(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    spec = draw.model(rng, lambda s: s.name not in ("mobilenetv2", "mixed_dtypes"))
    tensors = draw.tensors(rng, spec)
    wanted = [pick(rng, ["nope", "", "Y", "y ", spec.inputs[0].name, "out"])]
    if rng.random() < 0.5:
        wanted.insert(int(rng.integers(2)), spec.outputs[0])
    return spec.name, f"outputs requested {wanted}", draw.request(rng, protocol, spec, tensors, outputs=wanted)


def bad_parameters(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    spec = draw.model(rng, lambda s: s.name not in ("mobilenetv2", "mixed_dtypes"))
    tensors = draw.tensors(rng, spec)
    if protocol == "grpc":
        key, param = pick(
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
    params = pick(
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
        params = pick(rng, [[1], "x", 3])
    return spec.name, f"parameters {params!r}", draw.request(rng, protocol, spec, tensors, parameters=params)


def json_malformed(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    spec = draw.model(rng, lambda s: s.name not in ("mobilenetv2", "mixed_dtypes"))
    tensors = draw.tensors(rng, spec)
    good = http_json(spec.name, tensors)
    doc = json.loads(good.body)
    inp = doc["inputs"][0]
    how = pick(
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
        raw[int(rng.integers(len(raw)))] = ord(pick(rng, list('{}[],:"x\x00\xff\\')))
        body = bytes(raw)
    elif how == "inputs_type":
        doc["inputs"] = pick(rng, [{}, "x", 3, None, True, {"name": "x"}])
    elif how == "inputs_missing":
        doc = {pick(rng, ["input", "Inputs", "data"]): doc["inputs"]}
    elif how == "input_type":
        doc["inputs"][0] = pick(rng, [1, "x", [], None, [inp]])
    elif how == "field_missing":
        del inp[pick(rng, ["name", "shape", "datatype", "data"])]
    elif how == "shape_type":
        inp["shape"] = pick(rng, ["1,4", {"0": 1}, 4, None, True])
    elif how == "shape_elem":
        inp["shape"] = list(inp["shape"])
        inp["shape"][int(rng.integers(len(inp["shape"])))] = pick(rng, [1.5, "1", None, True, [1], 2**64 + 1])
    elif how == "datatype_type":
        inp["datatype"] = pick(rng, [32, None, ["FP32"], {"t": "FP32"}, True])
    elif how == "name_type":
        inp["name"] = pick(rng, [0, None, ["x"], {"n": "x"}, False])
    elif how == "data_type":
        inp["data"] = pick(rng, ["abcd", {"0": 1}, 7, True, None])
    elif how == "data_elem":
        k = int(rng.integers(len(inp["data"])))
        inp["data"][k] = pick(rng, ["1.0", None, {}, "NaN", "true"])
    elif how == "out_of_range":
        fp = inp["datatype"].startswith("FP")
        body = good.body.replace(b'"data":[', b'"data":[' + (b"1e999," if fp else b"99999999999999999999999,"), 1)
        inp["shape"] = inp["shape"]  # the element count is now one too many as well; the value fails first
    elif how == "top_level":
        body = pick(rng, [b"", b" ", b"null", b"[]", b"[1,2]", b'"inputs"', b"42", b"\xef\xbb\xbf{}", b"{}"])
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


def http_framing(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    body = http_json("tiny", draw.tensors(rng, draw.specs["tiny"])).body
    start = b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    cl = b"Content-Length: %d\r\n" % len(body)
    incomplete = {
        "body shorter than Content-Length": start + b"Content-Length: %d\r\n\r\n" % (len(body) + 100) + body,
        "headers never terminated": start + cl,
        "chunked body cut": start + b"Transfer-Encoding: chunked\r\n\r\n100\r\nabc",
    }
    broken = {
        "garbage request line": bytes(rng.integers(0, 256, int(rng.integers(1, 300)), dtype=np.uint8)) + b"\r\n\r\n",
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
        "100 KB URL": b"POST /v2/models/" + b"a" * 100_000 + b"/infer HTTP/1.1\r\nHost: x\r\n" + cl + b"\r\n" + body,
        "HTTP/0.9 request": b"GET /v2/health/ready\r\n\r\n",
        "HTTP/2 preface on HTTP/1": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "NUL in path": b"POST /v2/models/ti\x00ny/infer HTTP/1.1\r\nHost: x\r\n" + cl + b"\r\n" + body,
    }
    name = pick(rng, [*incomplete, *broken])
    raw = incomplete.get(name, broken.get(name, b""))
    return "tiny", f"HTTP framing: {name}", RawHttp(raw), {"no_answer_ok": name in incomplete}


def protobuf_malformed(draw: Draw, rng: np.random.Generator, protocol: str) -> tuple:
    spec = draw.model(rng, lambda s: s.name != "mobilenetv2")
    good = grpc_request(spec.name, draw.tensors(rng, spec))
    last = len(good) - len(pb.ModelInferRequest.FromString(good).raw_input_contents[-1])
    how = pick(
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
        data = pick(rng, [good + b"\x0f\x01", b"\x0e" + good, good[:2] + b"\x07" + good[2:]])
    elif how == "utf8_model_name":
        data = b"\x0a\x03\xff\xfe\xfd" + good
    elif how == "long_varint":
        data = good + b"\x08" + b"\xff" * 11
    elif how == "length_past_end":
        data = good + b"\x3a" + varint(int(rng.integers(1 << 20, 1 << 31))) + b"abc"
    else:
        bad = pb.ModelInferRequest.InferInputTensor(name="x", datatype="FP32", shape=[1]).SerializeToString()
        bad = bad.replace(b"\x0a\x01x", b"\x0a\x02\xc3\x28", 1)
        data = good + b"\x2a" + varint(len(bad)) + bad
    return spec.name, f"protobuf: {how}", data
