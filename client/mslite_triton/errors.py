"""Exceptions raised by mslite_triton.

Each one also subclasses the builtin MindSpore Lite raises in the same situation
(``RuntimeError`` for a failed build or predict, ``ValueError`` for a bad argument), so code
written for ``mindspore_lite`` that catches those keeps working; new code can catch
``MSLiteError`` or a specific class. An input the server rejects is both: a ``ValueError`` by what
it is, and a ``RuntimeError`` because that is what MindSpore Lite raises for a failed predict.
"""

from __future__ import annotations

from typing import Any

from mslite_contract.protocol import SERVICE_DENY


class MSLiteError(Exception):
    """Base (mixin) of every error of this library.

    Attributes:
        status: Name of the MindSpore Lite ``StatusCode`` closest to the failure.
        code: Its value as an int32 (MindSpore Lite codes read as ``-n``).
    """

    status: str = "kLiteError"
    code: int = -1


class ServerUnavailableError(MSLiteError, RuntimeError):
    """Raised when the Triton server cannot be reached (refused, timed out, not ready).

    Args:
        url: The server URL that was tried.
        reason: What the transport reported, if anything.
    """

    def __init__(self, url: str, reason: str = "") -> None:
        self.url = url
        self.reason = reason
        detail = f" ({reason})" if reason else ""
        super().__init__(
            f"cannot reach the Triton server at {url}{detail}. Start one with `mslite-triton serve` "
            f"(`.venv/bin/mslite-triton serve` in a checkout of mslite-triton), "
            f"or set Context.server_url to the URL of a running server."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.url, self.reason)


class ServiceDenyError(MSLiteError, RuntimeError):
    """Raised when a predict is refused for overload: it was not run and may be retried later.

    MindSpore Lite returns ``kLiteServiceDeny`` when more than 1000 tasks are waiting. Here a
    ``Model`` or ``ModelParallelRunner`` refuses a predict itself, without asking the server, when
    it already has that many in flight (``[runner] max_pending_predicts``); a server whose queue
    or admission limit is full refuses with it too.

    Args:
        detail: What the server reported.
    """

    status = SERVICE_DENY
    code = -11

    def __init__(self, detail: str = "The number of waiting tasks in the queue exceeds the limit") -> None:
        self.detail = detail
        super().__init__(f"predict failed! Error is {SERVICE_DENY}: {detail}. Retry later.")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.detail,)


class InferenceError(MSLiteError, RuntimeError):
    """Raised when the server failed to run one request (model error, internal error)."""

    status = "kLiteError"
    code = -1


class InvalidInputError(MSLiteError, ValueError, RuntimeError):
    """Raised when the server rejected a request's inputs or weights (Triton ``INVALID_ARG``).

    The message names the problem (input name, expected and actual shape or type). Catchable as
    ``ValueError`` and, as MindSpore Lite's failed predicts and weight updates are, ``RuntimeError``.
    """

    status = "kLiteInputParamInvalid"
    code = -600


class ModelLoadError(MSLiteError, RuntimeError):
    """Raised when the server could not load or build a model."""


class DeviceNotAvailableError(ModelLoadError):
    """Raised when a build asks for a device the server does not have (a GPU id it cannot use)."""

    status = "kLiteNotSupport"


class NotFoundError(MSLiteError, RuntimeError):
    """Raised when the server does not know the requested model (or version)."""


class PermissionDeniedError(MSLiteError, RuntimeError):
    """Raised when the server refuses an operation, e.g. model control is disabled."""


class WorkerUnavailableError(MSLiteError, RuntimeError):
    """Raised when the worker process a request reached has died (Triton: "Stub process ... is not healthy").

    The client retries such requests while the server recovers; this surfaces only when the retry
    budget (`settings.RETRY_S_ENV`) is spent.
    """


class ExecutionTimeoutError(MSLiteError, RuntimeError):
    """Raised when a request got no answer within the execution timeout (`settings.TIMEOUT_S_ENV`)."""

    status = "kLiteTimeout"
