"""The gateway process's options, and its command line both ways: the launcher writes it, the gateway reads it.

Each option is one dataclass field: its name is the flag (`max_inflight_per_model` is
`--max-inflight-per-model`), its default is the default on both sides, its help is `python -m mslite_gateway
--help`'s. `GatewayLimits` is the part a server's user sets (`ServerConfig.gateway_limits`, `mslite-triton
serve`'s options); `GatewayOptions` adds what the launcher decides at each start (addresses, grace period).
`GatewayOptions.from_argv(options.to_argv()) == options` for every options value.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .protocol import GATEWAY_MODULE
from .settings import (
    GATEWAY_BODY_STALL_TIMEOUT_S,
    GATEWAY_GRACE_S,
    GATEWAY_IDLE_TIMEOUT_S,
    GATEWAY_MAX_CONNECTIONS,
    GATEWAY_MAX_INFLIGHT_BYTES,
    GATEWAY_MAX_INFLIGHT_BYTES_PER_CONNECTION,
    GATEWAY_MAX_INFLIGHT_PER_MODEL,
    GATEWAY_MAX_REQUEST_BYTES,
    GATEWAY_MAX_STREAMS_PER_CONNECTION,
    GATEWAY_MAX_STRING_ELEMENTS,
    GATEWAY_MAX_UNREAD_BYTES_PER_CONNECTION,
    GATEWAY_UPSTREAM_RETRY_S,
    GATEWAY_UPSTREAM_TIMEOUT_S,
)


def _option(default: Any = dataclasses.MISSING, help_text: str = "") -> Any:
    """A field whose `help_text` is its flag's help."""
    return field(default=default, metadata={"help": help_text})


@dataclass(frozen=True, kw_only=True)
class GatewayLimits:
    """What the gateway lets through, and how long it waits (`mslite_gateway.admission` says how they act).

    Raises:
        ValueError: a bound below 1 or a time that is not above 0 (naming the field).
    """

    max_request_bytes: int = _option(
        GATEWAY_MAX_REQUEST_BYTES, "the largest request body; larger ones are refused (413 / RESOURCE_EXHAUSTED)"
    )
    max_inflight_per_model: int = _option(
        GATEWAY_MAX_INFLIGHT_PER_MODEL,
        "inference requests one model may have in flight; more are refused (503 / UNAVAILABLE)",
    )
    max_inflight_bytes: int = _option(
        GATEWAY_MAX_INFLIGHT_BYTES,
        "request bytes in flight across all connections; more are refused (503 / UNAVAILABLE)",
    )
    max_inflight_bytes_per_connection: int = _option(
        GATEWAY_MAX_INFLIGHT_BYTES_PER_CONNECTION, "the same, for one client connection (one request alone always fits)"
    )
    body_stall_timeout_s: float = _option(
        GATEWAY_BODY_STALL_TIMEOUT_S,
        "a request body or gRPC message with no new byte for this long is dropped (408 / DEADLINE_EXCEEDED)",
    )
    upstream_timeout_s: float = _option(
        GATEWAY_UPSTREAM_TIMEOUT_S,
        "how long a request waits for Triton's answer (then 504 / DEADLINE_EXCEEDED, its slot given back)",
    )
    upstream_retry_s: float = _option(
        GATEWAY_UPSTREAM_RETRY_S, "how long an HTTP request waits for Triton to come back"
    )
    max_string_elements: int = _option(
        GATEWAY_MAX_STRING_ELEMENTS,
        "string (BYTES) elements one request may declare; more are refused (413 / RESOURCE_EXHAUSTED)",
    )
    max_connections: int = _option(
        GATEWAY_MAX_CONNECTIONS,
        "open client connections, both ports together; at the cap the longest idle one is dropped for a new client",
    )
    idle_timeout_s: float = _option(
        GATEWAY_IDLE_TIMEOUT_S, "a client connection with no call in flight and no byte for this long is closed"
    )
    max_streams_per_connection: int = _option(
        GATEWAY_MAX_STREAMS_PER_CONNECTION,
        "gRPC streams one connection may have open at once; more are refused (REFUSED_STREAM)",
    )
    max_unread_bytes_per_connection: int = _option(
        GATEWAY_MAX_UNREAD_BYTES_PER_CONNECTION,
        "bytes of the gateway's own gRPC answers one connection's client may leave unread (then RESOURCE_EXHAUSTED)",
    )

    def __post_init__(self) -> None:
        # every field is a count or bytes (at least 1), or, named `*_s`, a number of seconds (above 0)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_s") and not 0 < value < float("inf"):  # NaN fails this too
                raise ValueError(f"gateway option {f.name} must be a number of seconds > 0, not {value!r}")
            if not f.name.endswith("_s") and value < 1:
                raise ValueError(f"gateway option {f.name} must be >= 1, not {value!r}")


@dataclass(frozen=True, kw_only=True)
class GatewayOptions:
    """Everything one gateway process is started with (`to_argv`), and reads back (`from_argv`)."""

    http_port: int = _option(help_text="the public HTTP port")
    grpc_port: int = _option(help_text="the public gRPC port")
    upstream_http: str = _option(help_text="Triton's HTTP endpoint, unix:PATH or host:port")
    upstream_grpc: str = _option(help_text="Triton's gRPC endpoint, unix:PATH or host:port")
    host: str = _option("127.0.0.1", "the address both public ports listen on")
    grace_s: float = _option(GATEWAY_GRACE_S, "how long requests in progress may finish once SIGTERM arrives")
    staging: bool = _option(
        True, "hand large tensors to Triton through shared memory (staging.py), not over TCP as they came"
    )
    http_fd: int = _option(
        -1, "an inherited descriptor of a socket listening on the HTTP port, served instead of binding it (-1: bind)"
    )
    grpc_fd: int = _option(
        -1, "an inherited descriptor of a socket listening on the gRPC port, served instead of binding it (-1: bind)"
    )
    key_on_every_request: bool = _option(
        False,
        "answer only requests that carry the admin key, health and inference included (a client's private server)",
    )
    limits: GatewayLimits = GatewayLimits()

    def to_argv(self) -> list[str]:
        """The command-line arguments that `from_argv` reads back into these options."""
        limits = {f.name for f in dataclasses.fields(GatewayLimits)}
        return [_flag(f.name, getattr(self.limits if f.name in limits else self, f.name)) for f in _fields()]

    @classmethod
    def from_argv(cls, argv: Sequence[str] | None = None, *, description: str | None = None) -> GatewayOptions:
        """Parse the gateway's command line (`to_argv`'s output, or a person's).

        Raises:
            SystemExit: argparse's exit, with its message on stderr, for a bad or missing argument.
        """
        ap = argparse.ArgumentParser(prog=f"python -m {GATEWAY_MODULE}", description=description)
        # the annotations are strings (`from __future__ import annotations`): their types, for argparse
        types = {**typing.get_type_hints(GatewayOptions), **typing.get_type_hints(GatewayLimits)}
        for f in _fields():
            flag, kind, help_text = "--" + f.name.replace("_", "-"), types[f.name], f.metadata["help"]
            if kind is bool:
                ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=help_text)
            elif f.default is dataclasses.MISSING:
                ap.add_argument(flag, type=kind, required=True, help=help_text)
            else:
                ap.add_argument(flag, type=kind, default=f.default, help=help_text + " (default %(default)s)")
        args = vars(ap.parse_args(argv))
        limits = {f.name: args.pop(f.name) for f in dataclasses.fields(GatewayLimits)}
        try:
            return cls(**args, limits=GatewayLimits(**limits))
        except ValueError as e:
            ap.error(str(e))


def _fields() -> list[dataclasses.Field[Any]]:
    """Every option, in command-line order: GatewayOptions' own fields, then its limits' (names never repeat)."""
    own = [f for f in dataclasses.fields(GatewayOptions) if f.name != "limits"]
    return own + list(dataclasses.fields(GatewayLimits))


def _flag(name: str, value: Any) -> str:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else f"--no-{flag[2:]}"
    return f"{flag}={value}"  # a float's str() reads back as the same float
