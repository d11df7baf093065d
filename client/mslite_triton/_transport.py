"""Where the client uses tritonclient: connection pooling, requests, retries, timeouts and error mapping.

One connection of the pool and its shared-memory input region are `_connection`'s; the two are the only
modules that import tritonclient.

Every server error is classified here, by status code and message, in one table (`_RULES`), into the
library's own exceptions (which subclass the builtins MindSpore Lite users catch).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as sysshm
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from mslite_contract import settings
from mslite_contract.protocol import (
    ADMIN_KEY_GRPC_HEADER,
    ADMIN_KEY_HEADER,
    UNIX_ADDRESS_PREFIX,
)
from mslite_contract.scrub import load_reason

from ._connection import Connection
from ._error_table import classify, clean_message
from .errors import (
    ExecutionTimeoutError,
    InferenceError,
    InvalidInputError,
    ModelLoadError,
    MSLiteError,
    NotFoundError,
    ServerUnavailableError,
    WorkerUnavailableError,
)

__all__ = ["ModelInfo", "TensorInfo", "Transport", "classify", "clean_message"]

SHM_MIN_BYTES = 64 * 1024  # smaller requests are cheaper inline than through a region
HTTP_UPLOAD_LIMIT = 2 * 1024 * 1024  # measured: a 3.5 MiB file through the HTTP load API segfaults Triton 2.51
# Worth retrying a predict on: the server restarting, a dead worker, the model being reloaded.
RETRYABLE = (ServerUnavailableError, WorkerUnavailableError, NotFoundError)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TensorInfo:
    """A model input or output as the server's metadata reports it (shape includes the batch dim)."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ModelInfo:
    """What the client needs to know about a loaded model."""

    name: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    max_batch_size: int
    parameters: dict[str, str] = field(default_factory=dict)  # the model config's string parameters


class Transport:
    """A pool of tritonclient connections to one server; every method is safe to call from many threads."""

    def __init__(
        self, url: str, *, key: str | None = None, timeout_s: float | None = None, retry_s: float | None = None
    ) -> None:
        """Parse `grpc://host:port`, `http://host:port`, `https://...`, or `unix:PATH` (gRPC on a local socket).

        Args:
            url: the server.
            key: the admin key, sent with every call as the `mslite-key` header.
            timeout_s: execution timeout of one call (`settings.TIMEOUT_S_ENV`, default `settings.DEFAULT_TIMEOUT_S`).
            retry_s: how long a predict is retried while the server recovers (`settings.RETRY_S_ENV`,
                default `settings.DEFAULT_RETRY_S`).

        Raises:
            ValueError: unsupported scheme or missing host; a timeout variable that is not a number.
        """
        parsed = urlparse(url)
        # gRPC's own form for a Unix socket (tritonserver's own endpoint behind the gateway), passed on as it is
        unix = url.startswith(UNIX_ADDRESS_PREFIX) and len(url) > len(UNIX_ADDRESS_PREFIX)
        if not unix and (parsed.scheme not in ("grpc", "http", "https") or not parsed.hostname):
            raise ValueError(f"server url must look like grpc://host:port or http://host:port, got '{url}'")
        self.url = url
        self.key = key  # also signs weights updates (the backend checks their proof of it)
        self.protocol = "grpc" if unix or parsed.scheme == "grpc" else "http"
        self.host = "localhost" if unix else str(parsed.hostname)
        self._address = url if unix else parsed.netloc
        self._ssl = parsed.scheme == "https"
        self._timeout_s = timeout_s if timeout_s is not None else settings.timeout_s()
        self._retry_s = retry_s if retry_s is not None else settings.retry_s()
        header = ADMIN_KEY_HEADER if self.protocol == "http" else ADMIN_KEY_GRPC_HEADER
        self._headers = {header: key} if key else None
        self._idle: queue.LifoQueue[Connection] = queue.LifoQueue()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._http_conns: list[Connection] = []
        self._module: Any = grpcclient if self.protocol == "grpc" else httpclient
        # Inputs go through system shared memory only to a server on this host (`settings.SHM_ENV`=0: never).
        self.use_shm = _is_loopback(self.host) and settings.shm_allowed()

    # -- connection pool -------------------------------------------------------------------------
    def _connect(self) -> Connection:
        if self.protocol == "grpc":
            return Connection(grpcclient.InferenceServerClient(url=self._address))
        return Connection(
            httpclient.InferenceServerClient(
                url=self._address, ssl=self._ssl, connection_timeout=self._timeout_s, network_timeout=self._timeout_s
            )
        )

    def _call(
        self,
        fn: Callable[[Connection], Any],
        *,
        default: type[MSLiteError] = InferenceError,
        invalid: type[MSLiteError] = InvalidInputError,
    ) -> Any:
        conn = self._checkout()
        try:
            result = fn(conn)
        except InferenceServerException as e:
            self._checkin(conn)
            raise classify(e, self.url, default=default, invalid=invalid) from None
        except TimeoutError as e:  # HTTP: no answer in time (gRPC says DEADLINE_EXCEEDED instead)
            self._discard(conn)
            raise ExecutionTimeoutError(f"no answer from {self.url} within {self._timeout_s:.0f} s") from e
        except (ConnectionError, OSError) as e:  # HTTP transport errors surface raw
            self._discard(conn)
            raise ServerUnavailableError(self.url, str(e)) from None
        self._checkin(conn)
        return result

    # gRPC connections are shared through a pool; tritonclient's HTTP client (gevent) only works in the
    # thread that created it, so each thread keeps its own HTTP connection.
    def _checkout(self) -> Connection:
        if self.protocol == "http":
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = self._connect()
                with self._lock:
                    self._http_conns.append(conn)
            return conn
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return self._connect()

    def _checkin(self, conn: Connection) -> None:
        if self.protocol == "grpc":
            self._idle.put(conn)

    def _discard(self, conn: Connection) -> None:
        conn.close(self._headers)
        if self.protocol == "http":
            self._local.conn = None
            with self._lock:
                if conn in self._http_conns:
                    self._http_conns.remove(conn)

    def close(self) -> None:
        """Close every connection and release its shared memory (safe to call twice)."""
        with self._lock:
            conns, self._http_conns = self._http_conns, []
        for conn in conns:
            conn.close(self._headers)
        while True:
            try:
                self._idle.get_nowait().close(self._headers)
            except queue.Empty:
                return

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- server and model control ----------------------------------------------------------------
    def check_live(self) -> None:
        """Raises ServerUnavailableError unless the server answers and is live."""
        if not self._call(lambda c: c.client.is_server_live(headers=self._headers), default=ServerUnavailableError):
            raise ServerUnavailableError(self.url, "server is not live")

    def is_model_ready(self, name: str) -> bool:
        """True when the server has `name` loaded and ready."""
        try:
            return bool(self._call(lambda c: c.client.is_model_ready(name, headers=self._headers)))
        except NotFoundError:
            return False

    def load_model(self, name: str, config: dict[str, Any] | None, files: dict[str, bytes]) -> None:
        """Upload a model's files and config and (re)load it (Triton's model repository API).

        Raises:
            ModelLoadError: the server could not load it; the message is the server's, without paths.
        """
        size = sum(len(v) for v in files.values())
        if self.protocol == "http" and size > HTTP_UPLOAD_LIMIT:
            raise ModelLoadError(
                f"cannot upload {size / 2**20:.1f} MiB over HTTP: Triton 2.51's HTTP load API crashes the server on "
                f"bodies of a few MiB; use a grpc:// URL, or put the model in the server's repository and bind it "
                f"with build_from_file('triton://<name>')"
            )
        body = None if config is None else json.dumps(config)
        self._call(
            lambda c: c.client.load_model(name, config=body, files=files or None, headers=self._headers),
            default=ModelLoadError,
            invalid=ModelLoadError,
        )

    def unload_model(self, name: str) -> None:
        """Unload a model."""
        self._call(lambda c: c.client.unload_model(name, headers=self._headers))

    def load_failure(self, name: str) -> str:
        """Why the server's repository model `name` failed to load ("" when it did not, or cannot be told).

        The repository index says, and it is an admin API: without the admin key the answer is "".
        """

        def index(conn: Connection) -> Any:
            if self.protocol == "grpc":
                return conn.client.get_model_repository_index(headers=self._headers, as_json=True).get("models", [])
            return conn.client.get_model_repository_index(headers=self._headers)

        try:
            rows = self._call(index)
        except MSLiteError:  # no key, or an older server: the caller says what it knows without the reason
            return ""
        for row in rows or []:
            if row.get("name") == name and row.get("state") == "UNAVAILABLE" and row.get("reason"):
                return load_reason(clean_message(str(row["reason"])))
        return ""

    def model_info(self, name: str) -> ModelInfo:
        """Inputs, outputs and max_batch_size of a loaded model."""

        def fetch(conn: Connection) -> tuple[dict[str, Any], dict[str, Any]]:
            c = conn.client
            if self.protocol == "grpc":
                meta = c.get_model_metadata(name, headers=self._headers, as_json=True)
                conf = c.get_model_config(name, headers=self._headers, as_json=True)["config"]
            else:
                meta = c.get_model_metadata(name, headers=self._headers)
                conf = c.get_model_config(name, headers=self._headers)
            return meta, conf

        meta, conf = self._call(fetch, default=NotFoundError)

        def tensors(items: list[dict[str, Any]]) -> tuple[TensorInfo, ...]:
            return tuple(TensorInfo(t["name"], t["datatype"], tuple(int(d) for d in t["shape"])) for t in items)

        return ModelInfo(
            name=name,
            inputs=tensors(meta.get("inputs", [])),
            outputs=tensors(meta.get("outputs", [])),
            max_batch_size=int(conf.get("max_batch_size", 0) or 0),
            parameters={
                str(k): str(v.get("string_value", "")) if isinstance(v, dict) else str(v)
                for k, v in (conf.get("parameters") or {}).items()
            },
        )

    # -- inference -------------------------------------------------------------------------------
    def infer(
        self,
        model: str,
        inputs: list[tuple[str, np.ndarray]],
        outputs: list[str],
        *,
        parameters: dict[str, str] | None = None,
    ) -> dict[str, np.ndarray]:
        """Run one request (with optional request parameters); returns the named outputs as numpy arrays.

        Raises:
            InvalidInputError, ServiceDenyError, NotFoundError, InferenceError, ServerUnavailableError.
        """
        mod = self._module
        infer_inputs = [mod.InferInput(name, list(a.shape), np_to_triton_dtype(a.dtype)) for name, a in inputs]
        arrays = [a for _, a in inputs]
        size = sum(a.nbytes for a in arrays)
        requested = [mod.InferRequestedOutput(name) for name in outputs]

        def run(conn: Connection) -> Any:
            region = conn.region_for(size, self._headers) if self.use_shm and size >= SHM_MIN_BYTES else None
            if region is None:
                for item, array in zip(infer_inputs, arrays):
                    item.set_data_from_numpy(array)
            else:
                sysshm.set_shared_memory_region(region.handle, arrays)
                offset = 0
                for item, array in zip(infer_inputs, arrays):
                    item.set_shared_memory(region.name, array.nbytes, offset)
                    offset += array.nbytes
            timeout = {"client_timeout": self._timeout_s} if self.protocol == "grpc" else {}
            try:
                return conn.client.infer(
                    model, infer_inputs, outputs=requested, headers=self._headers, parameters=parameters, **timeout
                )
            except InferenceServerException as e:
                if region is not None and "shared memory region" in str(e.message() or ""):
                    conn.forget_region()  # the server restarted and lost our registration: register again
                    raise WorkerUnavailableError("shared memory registration lost") from None
                raise

        deadline = time.monotonic() + self._retry_s
        delay = 0.05
        while True:
            try:
                result = self._call(run)
                break
            except RETRYABLE as e:  # idempotent: safe to send again; overload and bad input never are
                if time.monotonic() + delay > deadline:
                    raise
                log.info("predict retried after %s: %s", type(e).__name__, e)
                time.sleep(delay)
                delay = min(1.0, delay * 2)
        return {name: result.as_numpy(name) for name in outputs}


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")
