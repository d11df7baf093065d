"""The server metadata answer (`GET /v2`, gRPC `ServerMetadata`) as this server serves it.

Triton lists every protocol extension it was built with; through the gateway, the ones this server does not
serve are left out of the list, so a client that reads it (to pick a feature) is not sent to one that fails.
"""

from __future__ import annotations

import json

from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb

from mslite_gateway.grpc.checks import SERVICE

# not served here (docs/clients.md): no sequence batching; no CUDA shared memory (system shared memory only)
UNSERVED_EXTENSIONS = frozenset({"sequence", "cuda_shared_memory"})
HTTP_PATH = b"/v2"
GRPC_PATH = f"/{SERVICE}/ServerMetadata".encode()


def served_json(body: bytes) -> bytes:
    """Triton's HTTP answer without the extensions not served; any other body (an error) unchanged."""
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        return body
    if not isinstance(doc, dict) or not isinstance(doc.get("extensions"), list):
        return body
    doc["extensions"] = [e for e in doc["extensions"] if e not in UNSERVED_EXTENSIONS]
    return json.dumps(doc, separators=(",", ":")).encode()  # as Triton writes it


def served_message(message: bytes) -> bytes:
    """Triton's `ServerMetadataResponse` without the extensions not served; a message that does not parse unchanged."""
    answer = pb.ServerMetadataResponse()
    try:
        answer.ParseFromString(message)
    except DecodeError:
        return message
    served = [e for e in answer.extensions if e not in UNSERVED_EXTENSIONS]
    if len(served) == len(answer.extensions):
        return message
    del answer.extensions[:]
    answer.extensions.extend(served)
    return answer.SerializeToString()
