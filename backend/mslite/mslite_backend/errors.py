"""Error classes of the backend runtime (a client sees their text through `scrub.client_message`)."""

from __future__ import annotations


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
