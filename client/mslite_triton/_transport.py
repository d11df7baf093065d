"""The only module that imports tritonclient: connection pooling, requests, and error mapping.

Every server error is classified here, by status code and message, in one table (`_RULES`), into the
library's own exceptions (which subclass the builtins MindSpore Lite users catch).
"""

from __future__ import annotations

import json
import queue
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from .errors import (
    InferenceError,
    InvalidInputError,
    ModelLoadError,
    MSLiteError,
    NotFoundError,
    PermissionDeniedError,
    ServerUnavailableError,
    ServiceDenyError,
)

KEY_HEADER = "mslite-key"


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


# (grpc status or http code, message pattern, exception class); first match wins.
_RULES: list[tuple[set[str], re.Pattern[str] | None, type[MSLiteError]]] = [
    ({"StatusCode.UNAVAILABLE", "503"}, re.compile(r"maximum queue size|queue.*full", re.I), ServiceDenyError),
    ({"StatusCode.PERMISSION_DENIED", "403"}, None, PermissionDeniedError),
    ({"StatusCode.NOT_FOUND", "404"}, None, NotFoundError),
    (set(), re.compile(r"unknown model|is not found|not ready", re.I), NotFoundError),
    ({"StatusCode.UNAVAILABLE"}, None, ServerUnavailableError),
    ({"StatusCode.INVALID_ARGUMENT", "400"}, None, InvalidInputError),
]
_TRACEBACK = re.compile(r"\n\s*At:\n.*", re.S)
_PATH = re.compile(r"(?<![\w.\-:])(?:/[\w.\-+@]+){2,}/?")  # not inside names like "enc/layer_0/w:0"


def clean_message(text: str) -> str:
    """Strip what Triton appends to load errors (a traceback with server paths) from a message."""
    text = _TRACEBACK.sub("", text or "").strip()
    text = re.sub(r"^\[request id: [^\]]*\]\s*", "", text)
    return _PATH.sub("<path>", text)


def classify(
    e: InferenceServerException,
    url: str,
    *,
    default: type[MSLiteError] = InferenceError,
    invalid: type[MSLiteError] = InvalidInputError,
) -> MSLiteError:
    """Map a tritonclient exception to the library's exception (see `_RULES`).

    `invalid` replaces InvalidInputError for calls where INVALID_ARGUMENT does not mean a bad input
    (a failed model load answers 400 too).
    """
    status = str(e.status() or "")
    message = clean_message(str(e.message() or e))
    for statuses, pattern, cls in _RULES:
        if statuses and status not in statuses:
            continue
        if pattern is not None and not pattern.search(message):
            continue
        return _make(invalid if cls is InvalidInputError else cls, url, message)
    if status in ("", "None") and re.search(r"connect|refused|unavailable|timed out", message, re.I):
        return ServerUnavailableError(url, message)
    return _make(default, url, message)


def _make(cls: type[MSLiteError], url: str, message: str) -> MSLiteError:
    if cls is ServerUnavailableError:
        return ServerUnavailableError(url, message)
    if cls is ServiceDenyError:
        return ServiceDenyError(message)
    return cls(message)


class Transport:
    """A pool of tritonclient connections to one server; every method is safe to call from many threads."""

    def __init__(self, url: str, *, key: str | None = None, timeout_s: float = 60.0) -> None:
        """Parse `grpc://host:port`, `http://host:port` or `https://...`.

        Raises:
            ValueError: unsupported scheme or missing host.
        """
        parsed = urlparse(url)
        if parsed.scheme not in ("grpc", "http", "https") or not parsed.hostname:
            raise ValueError(f"server url must look like grpc://host:port or http://host:port, got '{url}'")
        self.url = url
        self.protocol = "grpc" if parsed.scheme == "grpc" else "http"
        self.host = parsed.hostname
        self._address = parsed.netloc
        self._ssl = parsed.scheme == "https"
        self._timeout_s = timeout_s
        self._headers = {KEY_HEADER: key} if key else None
        self._idle: queue.LifoQueue[Any] = queue.LifoQueue()
        self._module: Any = grpcclient if self.protocol == "grpc" else httpclient

    # -- connection pool -------------------------------------------------------------------------
    def _connect(self) -> Any:
        if self.protocol == "grpc":
            return grpcclient.InferenceServerClient(url=self._address)
        return httpclient.InferenceServerClient(
            url=self._address, ssl=self._ssl, connection_timeout=self._timeout_s, network_timeout=self._timeout_s
        )

    def _call(
        self,
        fn: Callable[[Any], Any],
        *,
        default: type[MSLiteError] = InferenceError,
        invalid: type[MSLiteError] = InvalidInputError,
    ) -> Any:
        try:
            client = self._idle.get_nowait()
        except queue.Empty:
            client = self._connect()
        try:
            result = fn(client)
        except InferenceServerException as e:
            self._idle.put(client)
            raise classify(e, self.url, default=default, invalid=invalid) from None
        except (ConnectionError, OSError, TimeoutError) as e:  # HTTP transport errors surface raw
            _close(client)
            raise ServerUnavailableError(self.url, str(e)) from None
        self._idle.put(client)
        return result

    def close(self) -> None:
        """Close every pooled connection (safe to call twice)."""
        while True:
            try:
                _close(self._idle.get_nowait())
            except queue.Empty:
                return

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- server and model control ----------------------------------------------------------------
    def check_live(self) -> None:
        """Raises ServerUnavailableError unless the server answers and is live."""
        if not self._call(lambda c: c.is_server_live(headers=self._headers), default=ServerUnavailableError):
            raise ServerUnavailableError(self.url, "server is not live")

    def is_model_ready(self, name: str) -> bool:
        """True when the server has `name` loaded and ready."""
        try:
            return bool(self._call(lambda c: c.is_model_ready(name, headers=self._headers)))
        except NotFoundError:
            return False

    def load_model(self, name: str, config: dict[str, Any], files: dict[str, bytes]) -> None:
        """Upload a model's files and config and (re)load it (Triton's model repository API).

        Raises:
            ModelLoadError: the server could not load it; the message is the server's, without paths.
        """
        body = json.dumps(config)
        self._call(
            lambda c: c.load_model(name, config=body, files=files, headers=self._headers),
            default=ModelLoadError,
            invalid=ModelLoadError,
        )

    def unload_model(self, name: str) -> None:
        """Unload a model."""
        self._call(lambda c: c.unload_model(name, headers=self._headers))

    def model_info(self, name: str) -> ModelInfo:
        """Inputs, outputs and max_batch_size of a loaded model."""

        def fetch(c: Any) -> tuple[dict[str, Any], dict[str, Any]]:
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
        )

    # -- inference -------------------------------------------------------------------------------
    def infer(self, model: str, inputs: list[tuple[str, np.ndarray]], outputs: list[str]) -> dict[str, np.ndarray]:
        """Run one request; returns the named outputs as numpy arrays.

        Raises:
            InvalidInputError, ServiceDenyError, NotFoundError, InferenceError, ServerUnavailableError.
        """
        mod = self._module
        infer_inputs = []
        for name, array in inputs:
            item = mod.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            item.set_data_from_numpy(array)
            infer_inputs.append(item)
        requested = [mod.InferRequestedOutput(name) for name in outputs]

        def run(c: Any) -> Any:
            return c.infer(model, infer_inputs, outputs=requested, headers=self._headers)

        result = self._call(run)
        return {name: result.as_numpy(name) for name in outputs}


def _close(client: Any) -> None:
    try:
        client.close()
    except Exception:  # closing a broken connection may raise anything; it is being dropped anyway
        pass
