"""Which calls need the admin key, on both protocols: an allow-list of what anyone may call; all else needs it.

Behind the gateway tritonserver runs without its own restricted-API flags (they would put the key on its
command line, which every local account reads), so the gateway is the one place the key is checked. The
rule is default-deny: inference, health, server and model metadata, model configuration and statistics are
open (what Triton's restricted-API groups left open before); every other route and method (model control,
the repository index, shared memory, logging, trace, and any spelling of a route that is not exactly one of
the open ones: `//`, `%2F`, a trailing slash, another method) is refused here without the key, before
anything reaches Triton. Both fronts ask `http_refusal` / `grpc_refusal` first.
"""

from __future__ import annotations

import hmac
import re

from mslite_contract.protocol import ADMIN_KEY_GRPC_HEADER, ADMIN_KEY_HEADER
from mslite_contract.settings import ADMIN_KEY_ENV, KEY_DIR_ENV
from mslite_gateway.rules import Refusal

# a model name, and its version (empty too: Triton answers that 404 itself, as the checks of `rules` expect);
# one path segment each (%2F is refused apart)
_MODEL = rb"/v2/models/[^/]+(?:/versions/[^/]*)?"
#: (method, path) pairs anyone may call over HTTP, the path without its query; the rest needs the key.
KEYLESS_HTTP: tuple[tuple[bytes, re.Pattern[bytes]], ...] = (
    (b"GET", re.compile(rb"/v2|/v2/health/(?:live|ready)|/v2/models/stats")),
    (b"GET", re.compile(_MODEL + rb"(?:/ready|/config|/stats)?")),
    (b"POST", re.compile(_MODEL + rb"/(?:infer|generate|generate_stream)")),
)
_SERVICE = "inference.GRPCInferenceService"
#: gRPC methods (`:path`, exactly) anyone may call; the rest needs the key.
KEYLESS_GRPC: frozenset[bytes] = frozenset(
    f"/{_SERVICE}/{name}".encode()
    for name in (
        "ServerLive",
        "ServerReady",
        "ModelReady",
        "ServerMetadata",
        "ModelMetadata",
        "ModelConfig",
        "ModelStatistics",
        "ModelInfer",
        "ModelStreamInfer",
    )
) | {b"/grpc.health.v1.Health/Check"}
# An escaped slash or backslash. (A dot segment needs no rule: every open route ends in a fixed suffix, so
# none resolves to a restricted one, and `/v2/models/../infer` is an unknown model's, Triton's to answer.)
_ODD_SPELLING = re.compile(rb"%2f|%5c", re.I)
WHERE_THE_KEY_IS = (
    f"the server's key is the {ADMIN_KEY_ENV} it was started with, else in its key file <host>_<port>.key "
    f"(the server's host and port) in the folder {KEY_DIR_ENV} names (by default .mslite-triton/keys in the "
    f"home of the account that runs the server); clients on that account read both themselves"
)


def key_state(sent: bytes | None, admin_key: str | None) -> str:
    """'open' (the server has no key), 'held' (`sent` is the key), 'missing' (none sent) or 'wrong'."""
    if not admin_key:
        return "open"
    if not sent:
        return "missing"
    return "held" if hmac.compare_digest(sent, admin_key.encode()) else "wrong"


def key_refusal(what: str, state: str, header: str) -> Refusal:
    """The 403 refusal of `what` for a request whose key is `state` ('missing' or 'wrong'), sent in `header`."""
    if state == "wrong":
        return Refusal(
            f"{what}: the admin key sent ({header}) is not this server's key; {WHERE_THE_KEY_IS}", status=403
        )
    return Refusal(f"{what} needs the admin key, sent as {header}; {WHERE_THE_KEY_IS}", status=403)


def open_http(method: bytes, target: bytes) -> bool:
    """Whether anyone may call `method` `target` over HTTP (`KEYLESS_HTTP`).

    The answers for the first `_KNOWN_TARGETS` requests seen are kept: clients send the same few targets again
    and again, and matching them costs a few microseconds a request.
    """
    known = _known.get((method, target))
    if known is not None:
        return known
    path = target.split(b"?", 1)[0]
    answer = not _ODD_SPELLING.search(path) and any(
        method == m and route.fullmatch(path) is not None for m, route in KEYLESS_HTTP
    )
    if len(_known) < _KNOWN_TARGETS:
        _known[(method, target)] = answer
    return answer


_KNOWN_TARGETS = 1024
_known: dict[tuple[bytes, bytes], bool] = {}


def http_refusal(method: bytes, target: bytes, sent: bytes | None, admin_key: str | None) -> Refusal | None:
    """The refusal of an HTTP request that needs the key and came without it (None: it may go on)."""
    if not admin_key or open_http(method, target):
        return None
    state = key_state(sent, admin_key)
    if state == "held":
        return None
    shown = target.split(b"?", 1)[0].lstrip(b"/")[:120].decode("latin-1")  # named, not shown as a path
    return key_refusal(f"{method.decode('latin-1')[:16]} {shown}", state, f"HTTP header '{ADMIN_KEY_HEADER}'")


def grpc_refusal(path: bytes, sent: bytes | None, admin_key: str | None) -> Refusal | None:
    """The refusal of a gRPC call that needs the key and came without it (None: it may go on)."""
    if not admin_key or path in KEYLESS_GRPC:
        return None
    state = key_state(sent, admin_key)
    if state == "held":
        return None
    shown = path.lstrip(b"/")[:120].decode("latin-1")
    return key_refusal(f"gRPC method {shown}", state, f"gRPC metadata '{ADMIN_KEY_GRPC_HEADER}'")
