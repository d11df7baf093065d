"""The launcher's handle of the gateway process (`mslite_gateway`): start it, watch it, stop it.

The gateway is a package of its own, run as `python -m mslite_gateway` in a child process; this module only
builds its command line and environment and never imports it, so the launcher does not load uvloop, hpack or
the relay.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from mslite_contract.gateway_options import GatewayOptions
from mslite_contract.protocol import GATEWAY_MODULE, GATEWAY_READY_LINE
from mslite_contract.settings import ADMIN_KEY_ENV
from mslite_server.parent_death import dies_with_parent, end_group
from mslite_server.ports import LOOPBACK

__all__ = ["GatewayError", "GatewayProcess", "answers_probe"]

# A request line with no target and no version: the gateway answers it itself (400, malformed request
# line) and sends nothing on to tritonserver.
GATEWAY_PROBE = b"PROBE\r\n\r\n"


class GatewayError(RuntimeError):
    """The gateway process could not start (a port in use, or it died)."""


class GatewayProcess:
    """A gateway child process in front of one Triton server; `stop()` is safe to call twice."""

    def __init__(self, options: GatewayOptions, *, log_path: Path, admin_key: str | None = None) -> None:
        self.options = options
        # The key registers the gateway's staging regions (`staging`); passed in the environment, not argv.
        self.env = {k: v for k, v in os.environ.items() if k != ADMIN_KEY_ENV}
        if admin_key:
            self.env[ADMIN_KEY_ENV] = admin_key
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *, timeout_s: float = 30.0, die_with_parent: bool = False) -> None:
        """Start the process and wait for its `ready` line.

        With `die_with_parent`, it gets SIGTERM when the calling thread ends (`parent_death`).

        Raises:
            GatewayError: it exited or said nothing within `timeout_s` (its log's tail included).
        """
        with open(self.log_path, "ab") as logf:
            args = [sys.executable, "-m", GATEWAY_MODULE, *self.options.to_argv()]
            self.process = subprocess.Popen(
                dies_with_parent(args) if die_with_parent else args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=logf,
                env=self.env,
                start_new_session=True,  # Ctrl-C in the launcher's terminal goes to the launcher, which stops us
            )
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout_s
        line = b""
        while time.monotonic() < deadline and self.process.poll() is None:
            if select.select([self.process.stdout], [], [], 0.2)[0]:
                line = self.process.stdout.readline()
                break
        if line.strip() != GATEWAY_READY_LINE.encode():
            self.stop(timeout_s=1)
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-8:]
            raise GatewayError("the gateway did not start:\n" + "\n".join(tail))

    def is_running(self) -> bool:
        """True while the process is alive."""
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        """The process id, while started."""
        return None if self.process is None else self.process.pid

    def stop(self, timeout_s: float | None = None) -> list[int]:
        """SIGTERM (requests in progress finish), then SIGKILL after the grace period; then its helpers.

        The gateway leads its own process group (`start_new_session`), which its offload workers and
        multiprocessing's resource tracker join: whatever of the group is left once it is gone is killed
        (`end_group`). Returns the pids of the group still there after that (none, normally).
        """
        proc, self.process = self.process, None
        if proc is None:
            return []
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=self.options.grace_s + 5 if timeout_s is None else timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        return end_group(proc.pid)


def answers_probe(host: str, http_port: int, timeout_s: float = 2.0) -> bool:
    """True when the gateway on `host:http_port` answers, within `timeout_s`, a request that it refuses itself.

    Not one it relays: an answer must prove the gateway's loop runs whatever tritonserver does, and a
    relayed probe left in flight to a hung tritonserver would hold the gateway's drain at a stop.
    """
    # a gateway bound to every address is asked on loopback (a wildcard is no address to connect to)
    host = LOOPBACK if host in ("0.0.0.0", "::", "") else host
    try:
        with socket.create_connection((host, http_port), timeout=timeout_s) as conn:
            conn.sendall(GATEWAY_PROBE)
            return conn.recv(5) == b"HTTP/"
    except OSError:
        return False
