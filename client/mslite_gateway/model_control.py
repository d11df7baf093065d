"""Model-control loads through the gateway: a config override that names no backend keeps this server's.

A load's `config` parameter replaces the model's config.pbtxt wholly. One that names neither `backend` nor
`platform` leaves Triton to pick a backend from the model's files, and for `model.onnx` it picks
`onnxruntime`, its C++ backend, which this server does not ship: the load fails with "unable to find
backend library for backend 'onnxruntime'", and Triton 2.51 then keeps the failed reload among its live
models until its exit timeout. Triton's own client examples send such overrides (`{"max_batch_size": 16}`),
meaning "this model, with these changes". So the gateway adds `"backend": "mslite"` to an override that
names no backend and no platform; any other load (an override that names one, no override, or one that
is not a JSON object, which Triton refuses in its own words) goes through unchanged, and so does a load
message over `MAX_REWRITTEN_BYTES` (an upload's model files come in the same message: it streams through
as it arrives, and is not held whole in the gateway to be read).
"""

from __future__ import annotations

import json
import re
from typing import Any

from tritonclient.grpc import service_pb2 as pb

from mslite_backend.protocol import BACKEND_NAME

CONFIG_PARAMETER = "config"  # the load parameter that carries the override (KServe repository extension)
LOAD_ROUTE = re.compile(rb"/v2/repository/models/[^/?]+/load")
MAX_REWRITTEN_BYTES = 1 << 20  # an override alone is a few hundred bytes


def keep_backend(override: str) -> str | None:
    """The override with this server's backend added; None when it names a backend or platform, or is no object."""
    try:
        config = json.loads(override)
    except ValueError:
        return None
    if not isinstance(config, dict) or config.get("backend") or config.get("platform"):
        return None
    return json.dumps({**config, "backend": BACKEND_NAME})


def http_load_body(body: bytes) -> bytes | None:
    """The body of `POST /v2/repository/models/NAME/load` to send instead, or None to send it as it is."""
    if len(body) > MAX_REWRITTEN_BYTES:
        return None
    try:
        doc: Any = json.loads(body)
    except ValueError:
        return None
    params = doc.get("parameters") if isinstance(doc, dict) else None
    if not isinstance(params, dict) or not isinstance(params.get(CONFIG_PARAMETER), str):
        return None
    config = keep_backend(params[CONFIG_PARAMETER])
    if config is None:
        return None
    return json.dumps({**doc, "parameters": {**params, CONFIG_PARAMETER: config}}).encode()


def grpc_load_message(message: bytes) -> bytes | None:
    """The `RepositoryModelLoadRequest` to send instead, or None to send it as it is."""
    req = pb.RepositoryModelLoadRequest()
    try:
        req.ParseFromString(message)
    except Exception:  # not a valid message: Triton answers it
        return None
    if CONFIG_PARAMETER not in req.parameters:
        return None
    param = req.parameters[CONFIG_PARAMETER]
    if param.WhichOneof("parameter_choice") != "string_param":
        return None
    config = keep_backend(param.string_param)
    if config is None:
        return None
    param.string_param = config
    return req.SerializeToString()
