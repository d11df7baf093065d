"""What the supervisor needs from the server it watches: the typed handle `SupervisedServer`.

`LocalServer` (`local_server.py`) is the one implementation; naming the members here keeps the supervisor's
reach into the launcher visible and checked by mypy, and lets the supervisor's parts be read without it.
Members are read-only properties so that a plain attribute of the launcher satisfies them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Protocol

from mslite_server.config import ServerConfig
from mslite_server.triton_api import TritonApi
from mslite_server.triton_endpoints import TritonEndpoints
from mslite_server.workspace import Workspace


class SupervisedGateway(Protocol):
    """The launcher's handle of the gateway process."""

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The gateway's process (None once stopped)."""

    @property
    def pid(self) -> int | None:
        """Its pid, None once stopped."""

    def is_running(self) -> bool:
        """True while its process is alive."""


class SupervisedServer(Protocol):
    """The local server as the supervisor sees it: its processes, a few calls, and how to restart them."""

    @property
    def config(self) -> ServerConfig:
        """The server's settings (host, gateway on or off)."""

    @property
    def workspace(self) -> Workspace:
        """What the server leaves on this machine, which heals add to.

        The catalog keeps uploaded models' files in its folder; the upload copies workers run from are noted
        there (removed once tritonserver exits).
        """

    @property
    def log_path(self) -> Path:
        """The log of tritonserver, named when the supervisor gives up."""

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The process of tritonserver (None between a kill and a start)."""

    @property
    def gateway(self) -> SupervisedGateway | None:
        """The gateway in front of tritonserver, None without one."""

    @property
    def triton_endpoints(self) -> TritonEndpoints:
        """Triton's own endpoints (the gateway's upstream), which heals load models through."""

    @property
    def admin_key(self) -> str | None:
        """The key a model load needs."""

    def answers_live(self, timeout_s: float = 2.0) -> bool:
        """True when tritonserver answers its liveness check in time."""

    def gateway_answers_live(self, timeout_s: float = 2.0) -> bool:
        """True when the gateway answers a probe it handles itself in time."""

    def loaded_models(self) -> list[str]:
        """Every ready model, uploaded ones included."""

    def triton_api(self) -> TritonApi:
        """Tritonserver's own API, with the admin key (the healer loads models again through it)."""

    def http_json(self, method: str, path: str, payload: Any, timeout_s: float = 10) -> Any:
        """One JSON call to Triton's own HTTP port, with the admin key.

        Raises:
            TritonUnavailableError: no answer.
        """

    def restart(self, *, load_models: tuple[str, ...] | None = None) -> None:
        """Kill tritonserver and start it again on the same ports.

        Raises:
            ServerStartError: it did not start.
        """

    def restart_gateway(self) -> None:
        """Start the gateway again on the same ports.

        Raises:
            ServerStartError: it did not start.
        """
