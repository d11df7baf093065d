"""Error classes of the backend runtime and the sanitizer applied before anything reaches a client."""

from __future__ import annotations

import re


class BackendError(Exception):
    """Base of the errors raised by the runtime."""


class ConfigError(BackendError):
    """A model configuration or parameter value is invalid (the model fails to load)."""


class ModelLoadError(BackendError):
    """The model file is missing, corrupt, or disagrees with the configuration."""


class RequestError(BackendError):
    """One request is malformed; only that request fails (Triton INVALID_ARG)."""


class UpdateDenied(BackendError):
    """A weights update does not prove the admin key; nothing changed (the client's PermissionDeniedError)."""


class InferenceFailure(BackendError):
    """ONNX Runtime failed while running a valid-looking request (Triton INTERNAL)."""


# an absolute path: not preceded by a name character, so tensor names like "enc/layer_0/w:0" survive
_PATH = re.compile(r"(?<![\w.\-:])(?:[A-Za-z]:)?(?:/[\w.\-+@]+){2,}/?")
_ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*")


def client_message(text: str, limit: int = 400) -> str:
    """Return `text` made safe for a client: no file paths, no traceback, bounded length."""
    text = text.split("\n\nAt:", 1)[0].split("Traceback (most recent call last)", 1)[0]
    text = _ORT_PREFIX.sub("", text.strip())
    text = _PATH.sub("<path>", text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
