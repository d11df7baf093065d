"""Every `MSLITE_TRITON_*` environment variable, and the defaults more than one process relies on.

The client, the launcher, the gateway and the backend's workers read their settings through this module
only, so each name, its default and its meaning are written once (docs/configuration.md has the table,
and a unit test keeps it in step with `VARIABLES`). Messages and docstrings elsewhere name a variable
through its constant here. Imports only the standard library; Python 3.10 compatible.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Variable:
    """One environment variable: its name, the default when unset, which process reads it, what it does."""

    name: str
    default: str
    read_by: str
    meaning: str


# -- where the server is, and how the client talks to it ---------------------------------------------------
URL_ENV = "MSLITE_TRITON_URL"
AUTOSTART_ENV = "MSLITE_TRITON_AUTOSTART"
SERVE_CMD_ENV = "MSLITE_TRITON_SERVE_CMD"
TIMEOUT_S_ENV = "MSLITE_TRITON_TIMEOUT_S"
RETRY_S_ENV = "MSLITE_TRITON_RETRY_S"
SHM_ENV = "MSLITE_TRITON_SHM"
LOG_ENV = "MSLITE_TRITON_LOG"
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_RETRY_S = 30.0

# -- the admin key ------------------------------------------------------------------------------------------
# Hands the admin key to tritonserver and, by inheritance, to its workers (the launcher sets it; the container
# entrypoint gets it from the deployment). Clients read it too.
ADMIN_KEY_ENV = "MSLITE_TRITON_KEY"
KEY_DIR_ENV = "MSLITE_TRITON_KEY_DIR"

# -- the workers' files -------------------------------------------------------------------------------------
# The launcher names itself to tritonserver's workers in this variable (`<launcher pid>_<random hex>`): their
# models' weights stores are then the launcher's (`protocol.WEIGHTS_STORE_PREFIX`), outlive any worker or
# tritonserver (a healed server's workers adopt the last published weights) and are removed by the launcher
# when it stops. Without it a store belongs to one tritonserver process.
WEIGHTS_OWNER_ENV = "MSLITE_TRITON_WEIGHTS_OWNER"
WEIGHTS_CACHE_ENV = "MSLITE_TRITON_WEIGHTS_CACHE"
CACHE_MAX_BYTES_ENV = "MSLITE_TRITON_CACHE_MAX_BYTES"
DEFAULT_CACHE_MAX_BYTES = 2 << 30

# -- which tritonserver the launcher starts (the container: the image's own; default: the wheel's) -------------
SERVER_BIN_ENV = "MSLITE_TRITON_SERVER_BIN"
SHM_PRELOAD_ENV = "MSLITE_TRITON_SHM_PRELOAD"

# -- tools --------------------------------------------------------------------------------------------------
MODEL_ANALYZER_ENV = "MSLITE_TRITON_MODEL_ANALYZER"

# -- request size caps: two different limits ----------------------------------------------------------------
# The gateway's cap on one request's body, server-wide (`mslite-triton serve --max-request-mib`).
GATEWAY_MAX_REQUEST_BYTES = 64 << 20
# The backend's per-model default of `max_request_bytes` (a model's config may set its own).
MODEL_MAX_REQUEST_BYTES = 256 << 20

# -- the gateway's defaults, shared by `serve`'s options, the launcher's handle and the gateway process ----------
GATEWAY_MAX_INFLIGHT_PER_MODEL = 1000  # as MindSpore Lite's task queue, and the runner's bound
GATEWAY_MAX_INFLIGHT_BYTES = 256 << 20
# One client connection's share: gRPC multiplexes many calls on one connection, so without it a single
# connection could hold the whole budget with a few dozen stalled calls.
GATEWAY_MAX_INFLIGHT_BYTES_PER_CONNECTION = 64 << 20
GATEWAY_BODY_STALL_TIMEOUT_S = 10.0  # a request body or gRPC message with no new byte for this long is dropped
GATEWAY_GRACE_S = 30.0  # how long requests in progress may finish when the gateway is stopped
GATEWAY_UPSTREAM_RETRY_S = 15.0  # how long a request is offered again to a Triton that is coming back
# How long the gateway waits for Triton's answer to one request; then the client gets 504 / DEADLINE_EXCEEDED
# and the request's admission slot is free again. Well above a slow model's run (seconds), well under the
# minutes a request Triton never answers would otherwise hold its slot.
GATEWAY_UPSTREAM_TIMEOUT_S = 120.0
# Open client connections, both ports together. Each gRPC connection also holds one of Triton's (the relay is
# one to one), so this bounds Triton's descriptors too. At the cap a new client is still served: the connection
# idle the longest (no call in flight) is dropped for it; only when none is idle is the new one refused.
GATEWAY_MAX_CONNECTIONS = 1024
# A connection with no call in flight and no byte either way for this long is closed (gRPC: GOAWAY first).
GATEWAY_IDLE_TIMEOUT_S = 75.0
# Streams one gRPC connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS, as HTTP/2 servers set
# it): each open stream costs tritonserver memory. More are refused with REFUSED_STREAM (clients retry them).
GATEWAY_MAX_STREAMS_PER_CONNECTION = 128
# Bytes of the gateway's own answers (a stream's error answers) that one gRPC connection's client has not read
# yet, all its streams together; past it the stream that adds more ends (RESOURCE_EXHAUSTED).
GATEWAY_MAX_UNREAD_BYTES_PER_CONNECTION = 4 << 20
# String (BYTES) elements one request may declare, over all its inputs: each costs the worker a few
# microseconds and a few hundred bytes, so 10 million cost a minute and gigabytes.
GATEWAY_MAX_STRING_ELEMENTS = 1_000_000

VARIABLES = (
    Variable(
        URL_ENV,
        "",
        "client",
        "the server's URL (`grpc://host:port` or `http://host:port`) when the "
        "context names none; unset: a local server is started on first use",
    ),
    Variable(AUTOSTART_ENV, "1", "client", "`0`: never start a local server; a build with no URL fails"),
    Variable(
        SERVE_CMD_ENV,
        "",
        "clients",
        "the command that runs `mslite-triton` (words split on spaces; `serve --private` is appended) "
        "when the client starts a server of its own; unset: `mslite-triton` beside the Python interpreter "
        "(Python client), on `PATH`, or in `.venv/bin/` of the current folder or one above it",
    ),
    Variable(TIMEOUT_S_ENV, f"{DEFAULT_TIMEOUT_S:g}", "client", "execution timeout of one call, in seconds"),
    Variable(
        RETRY_S_ENV,
        f"{DEFAULT_RETRY_S:g}",
        "client",
        "how long a predict is retried while the server recovers, in seconds",
    ),
    Variable(SHM_ENV, "1", "client", "`0`: never pass tensors through shared memory, even to a server on this host"),
    Variable(LOG_ENV, "", "client", "a logging level (`info`, `debug`): the library says what it does for you"),
    Variable(
        ADMIN_KEY_ENV,
        "",
        "client, launcher, container, workers",
        "the admin key: sent by clients; given to tritonserver and its workers (weights-update proofs)",
    ),
    Variable(KEY_DIR_ENV, "~/.mslite-triton/keys", "client, launcher", "where the key files of served ports live"),
    Variable(
        WEIGHTS_OWNER_ENV,
        "",
        "launcher -> workers",
        "set by the launcher: its weights stores outlive workers and tritonserver",
    ),
    Variable(
        WEIGHTS_CACHE_ENV,
        "",
        "workers, launcher",
        "directory of built models (prepacked, converted) and the launcher's `shm_private` library; unset: beside "
        "the model when writable, else `<tmp>/mslite-triton-cache-<uid>`",
    ),
    Variable(
        CACHE_MAX_BYTES_ENV,
        str(DEFAULT_CACHE_MAX_BYTES),
        "workers",
        "bound of the shared build cache in bytes (least recently used first); 0: unbounded",
    ),
    Variable(
        SERVER_BIN_ENV,
        "",
        "launcher",
        "the `tritonserver` binary `mslite-triton serve` starts (`--tritonserver`); unset: the one of the "
        "nvidia-pytriton wheel",
    ),
    Variable(
        SHM_PRELOAD_ENV,
        "",
        "launcher",
        "a built `shm_private` library for tritonserver's LD_PRELOAD (its shared memory 0600 from the start); "
        "unset: compiled with `cc` into the build cache",
    ),
    Variable(MODEL_ANALYZER_ENV, "", "tests", "the `model-analyzer` command `mslite-triton tune`'s test runs"),
)


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def _seconds(name: str, default: float, environ: Mapping[str, str] | None) -> float:
    raw = _env(environ).get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, not '{raw[:40]}'") from None


def server_url(environ: Mapping[str, str] | None = None) -> str | None:
    """`MSLITE_TRITON_URL`, or None when unset or empty."""
    return _env(environ).get(URL_ENV) or None


def autostart(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the client may start a local server (everything but `0`)."""
    return _env(environ).get(AUTOSTART_ENV, "1") != "0"


def timeout_s(environ: Mapping[str, str] | None = None) -> float:
    """The client's execution timeout of one call.

    Raises:
        ValueError: the variable is not a number.
    """
    return _seconds(TIMEOUT_S_ENV, DEFAULT_TIMEOUT_S, environ)


def retry_s(environ: Mapping[str, str] | None = None) -> float:
    """How long the client retries a predict while the server recovers.

    Raises:
        ValueError: the variable is not a number.
    """
    return _seconds(RETRY_S_ENV, DEFAULT_RETRY_S, environ)


def shm_allowed(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the client may use shared memory with a server on its host (everything but `0`)."""
    return _env(environ).get(SHM_ENV, "1") != "0"


def log_level(environ: Mapping[str, str] | None = None) -> str | None:
    """The client library's logging level (upper case), or None: the library stays quiet."""
    raw = _env(environ).get(LOG_ENV)
    return raw.upper() if raw else None


def admin_key(environ: Mapping[str, str] | None = None) -> str | None:
    """The admin key from the environment, or None when unset or empty."""
    return _env(environ).get(ADMIN_KEY_ENV) or None


def server_bin(environ: Mapping[str, str] | None = None) -> Path | None:
    """The `tritonserver` binary to start, or None for the wheel's."""
    raw = _env(environ).get(SERVER_BIN_ENV)
    return Path(raw) if raw else None


def key_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where key files live: `MSLITE_TRITON_KEY_DIR`, else `~/.mslite-triton/keys`."""
    return Path(_env(environ).get(KEY_DIR_ENV) or Path.home() / ".mslite-triton" / "keys")


def weights_owner(environ: Mapping[str, str] | None = None) -> str:
    """The launcher's name as the workers see it; empty when no launcher set it."""
    return _env(environ).get(WEIGHTS_OWNER_ENV, "")


def weights_cache(environ: Mapping[str, str] | None = None) -> str | None:
    """The build cache directory chosen by the user, or None: the backend picks one."""
    return _env(environ).get(WEIGHTS_CACHE_ENV) or None


def shared_cache_root(environ: Mapping[str, str] | None = None) -> str:
    """`MSLITE_TRITON_WEIGHTS_CACHE` when set, else the per-user directory under the temporary directory."""
    return weights_cache(environ) or os.path.join(tempfile.gettempdir(), f"mslite-triton-cache-{os.getuid()}")


def cache_max_bytes(environ: Mapping[str, str] | None = None) -> int:
    """The build cache's bound in bytes (0 or less: unbounded).

    Raises:
        ValueError: the variable is not an integer.
    """
    raw = _env(environ).get(CACHE_MAX_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_CACHE_MAX_BYTES
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{CACHE_MAX_BYTES_ENV} must be a number of bytes, not '{raw[:40]}'") from None


def model_analyzer(environ: Mapping[str, str] | None = None) -> str | None:
    """The `model-analyzer` command to use, when the environment names one."""
    return _env(environ).get(MODEL_ANALYZER_ENV) or None
