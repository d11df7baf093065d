"""Model-control loads through the gateway: a config override that names no backend keeps this server's.

A load's `config` parameter replaces the model's config.pbtxt wholly. One that names neither `backend` nor
`platform` leaves Triton to pick a backend from the model's files, and for `model.onnx` it picks
`onnxruntime`, its C++ backend, which this server does not ship: the load fails with "unable to find
backend library for backend 'onnxruntime'", and Triton 2.51 then keeps the failed reload among its live
models until its exit timeout. Triton's own client examples send such overrides (`{"max_batch_size": 16}`),
meaning "this model, with these changes". So the gateway adds `"backend": "mslite"` to an override that
names no backend and no platform; any other load (an override that names one, no override, or one that
is not a JSON object, which Triton refuses in its own words) goes through unchanged, and so does an HTTP
load body over `MAX_REWRITTEN_BYTES` (an upload's model files come in the same body: not parsed twice on
the event loop). A gRPC load message is held whole anyway (below), and rewritten at any size.

An upload's `file:PATH` parameter is written by Triton 2.51 at PATH under its temporary directory
(`/tmp/folderXXXXXX/`), and a PATH the file system cannot take (a component over NAME_MAX bytes, or the
whole over PATH_MAX) throws an exception nobody catches there: tritonserver aborts, leaving its upload
copy behind. So the gateway refuses such a load itself, in the words later Triton releases use ("Invalid
file path"), for every caller. A PATH that leaves the directory (`..`, a symlink) Triton 2.51 already
refuses (the load fails: "must stay within model directory"), and an absolute one it writes under the
directory: those go on. Checking the keys needs the whole message: a gRPC load is held until whole (up
to the request cap and counted against the admission budget, as an HTTP body is), then parsed; a large
HTTP body is parsed off the event loop (`offload`).
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

from tritonclient.grpc import service_pb2 as pb

from mslite_contract.model_names import MODEL_NAME_RULE, model_name_problem
from mslite_contract.protocol import BACKEND_NAME
from mslite_gateway.http.checks import decoded_body
from mslite_gateway.http.messages import Request
from mslite_gateway.rules import Refusal

CONFIG_PARAMETER = "config"  # the load parameter that carries the override (KServe repository extension)
LOAD_ROUTE = re.compile(rb"/v2/repository/models/[^/?]+/load")
# a load or an unload names its model in the path (percent-encoded)
REPOSITORY_ROUTE = re.compile(rb"/v2/repository/models/([^/?]*)/(?:load|unload)")
MAX_REWRITTEN_BYTES = 1 << 20  # an override alone is a few hundred bytes
FILE_PREFIX = "file:"  # a load parameter that carries one model file, at the path after it
NAME_MAX = 255  # bytes of one path component (Linux file systems)
# bytes of the whole path under Triton's temporary directory: PATH_MAX (4096, with its NUL) less that prefix
MAX_FILE_PATH_BYTES = 4096 - 1 - len("/tmp/folderXXXXXX/")


def check_file_path(key: str) -> None:
    """Refuse a `file:PATH` load parameter whose PATH Triton 2.51 cannot create (it aborts on it).

    Raises:
        Refusal: a path component over NAME_MAX bytes, or the path over MAX_FILE_PATH_BYTES.
    """
    if not key.startswith(FILE_PREFIX):
        return
    path = key[len(FILE_PREFIX) :].encode("utf-8", "surrogatepass")
    if len(path) > MAX_FILE_PATH_BYTES:
        raise Refusal(f"Invalid file path: {len(path)} bytes, over this server's limit of {MAX_FILE_PATH_BYTES}")
    longest = max((len(part) for part in path.split(b"/")), default=0)
    if longest > NAME_MAX:
        raise Refusal(f"Invalid file path: a component of {longest} bytes, over the limit of {NAME_MAX}")


def check_name(name: str) -> None:
    """Refuse a load or unload of a model whose name breaks the contract's rule (`model_names`).

    Raises:
        Refusal: 400 naming the rule.
    """
    problem = model_name_problem(name)
    if problem is not None:
        raise Refusal(f"invalid model name {name[:64]!r}: {problem}; {MODEL_NAME_RULE}")


def check_http_name(target: bytes) -> None:
    """`check_name` for the model an HTTP load or unload names in its path; other paths pass.

    Raises:
        Refusal: the name, raw or percent-decoded, breaks the rule.
    """
    match = REPOSITORY_ROUTE.fullmatch(target.split(b"?", 1)[0])
    if match is not None:
        raw = match.group(1).decode("utf-8", "surrogateescape")
        check_name(raw)
        check_name(urllib.parse.unquote(raw, errors="surrogateescape"))


def check_http_load(req: Request, cap: int) -> None:
    """Refuse an HTTP load whose `file:` parameters name a path Triton cannot create (`check_file_path`).

    A body that is not a JSON object with a `parameters` object is left to Triton, which refuses it itself.

    Raises:
        Refusal: an invalid file path; a compressed body invalid or over `cap` inflated.
    """
    try:
        doc: Any = json.loads(decoded_body(req, cap))
    except (ValueError, RecursionError):
        return
    params = doc.get("parameters") if isinstance(doc, dict) else None
    if isinstance(params, dict):
        for key in params:
            check_file_path(key)


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
    """The `RepositoryModelLoadRequest` to send instead, or None to send it as it is.

    Raises:
        Refusal: a `file:` parameter names a path Triton cannot create (`check_file_path`), or the model's
            name breaks the rule (`check_name`).
    """
    req = pb.RepositoryModelLoadRequest()
    try:
        req.ParseFromString(message)
    except Exception:  # not a valid message: Triton answers it
        return None
    check_name(req.model_name)
    for key in req.parameters:
        check_file_path(key)
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


def grpc_unload_message(message: bytes) -> None:
    """A `RepositoryModelUnloadRequest` goes as it is (None), once its model's name passed `check_name`.

    Raises:
        Refusal: the name breaks the rule.
    """
    req = pb.RepositoryModelUnloadRequest()
    try:
        req.ParseFromString(message)
    except Exception:  # not a valid message: Triton answers it
        return
    check_name(req.model_name)
