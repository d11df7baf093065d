"""The launcher's own errors: a server that did not start, and tritonserver's own API not answering."""

from __future__ import annotations


class ServerStartError(RuntimeError):
    """A local server could not start: a port is taken, the binary is missing, or it died during start-up."""


class TritonUnavailableError(RuntimeError):
    """tritonserver's own API gave no answer, or an error status.

    Args:
        url: The server that was asked.
        reason: What the call got.
    """

    def __init__(self, url: str, reason: str = "") -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"tritonserver at {url} did not answer as expected" + (f" ({reason})" if reason else ""))
