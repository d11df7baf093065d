"""`LocalServer`: a Triton server run by this process on ports of this machine; start it, inspect it, stop it.

Used by `mslite-triton serve` (so by the clients' own servers, `serve --private`), the tests and the
benchmarks. Not Triton's in-process ("embedded") server: tritonserver is a child process, and so is the
validating gateway in front of it when configured. The handle picks the ports (`ports.py`), starts the parts
and stops them in order:

- `Workspace` (`workspace.py`): the folder, key files, shm regions, weights stores and upload copies that a
  server leaves on this machine, and their removal;
- `TritonProcess` (`triton_process.py`): the tritonserver child, started and waited for until ready, stopped;
- `GatewayProcess` (`gateway_process.py`): the gateway child, on the public ports;
- `Supervisor` (`supervisor.py`): the thread that heals what dies or hangs, when configured;
- `TritonApi` (`triton_api.py`): tritonserver's own HTTP API, which the inspection calls below go through.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mslite_contract.admin_key import new_key
from mslite_contract.gateway_options import GatewayOptions
from mslite_server.config import ModelState, ServerConfig
from mslite_server.errors import ServerStartError
from mslite_server.gateway_process import GatewayError, GatewayProcess, answers_probe, bind_public
from mslite_server.ports import LOOPBACK, PortTakenError, holders, pick_ports
from mslite_server.triton_api import TritonApi
from mslite_server.triton_endpoints import TritonEndpoints, make_socket_dir
from mslite_server.triton_process import TritonProcess
from mslite_server.workers import state_of
from mslite_server.workspace import Workspace

if TYPE_CHECKING:  # started only by servers that are supervised, imported then
    from mslite_server.supervisor import Supervisor

__all__ = ["LOOPBACK", "LocalServer", "ModelState", "PortTakenError", "ServerConfig", "ServerStartError"]

log = logging.getLogger(__name__)

LEAKED_GRACE_S = 5.0  # how long a stop waits for a server holding dead instances (see supervisor.py)
HUNG_GRACE_S = 1.0  # how long a stop lets the gateway drain when tritonserver behind it is hung
START_ATTEMPTS = 3  # starts on newly picked ports, when one picked was taken before the server bound it
PORT_TAKEN = "already in use"  # how tritonserver's and the gateway's start failures say so


class LocalServer:
    """tritonserver (and its gateway) as child processes on this machine; a context manager that stops them."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.workspace = Workspace()
        self.tritonserver = TritonProcess(config, self.workspace)
        self.http_port = 0
        self.grpc_port = 0
        self.metrics_port = 0
        self.gateway: GatewayProcess | None = None
        self.listeners: list[socket.socket] = []  # the gateway's public ports, held here across its restarts
        self.admin_key: str | None = None
        self.restarts = 0
        self._supervisor: Supervisor | None = None

    # -- addresses and parts ---------------------------------------------------------------------
    @property
    def http_url(self) -> str:
        """`http://host:port` of the HTTP/REST endpoint."""
        return f"http://{self.config.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """`grpc://host:port` of the gRPC endpoint."""
        return f"grpc://{self.config.host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        """URL of the Prometheus metrics page."""
        return f"http://{self.config.host}:{self.metrics_port}/metrics"

    @property
    def log_path(self) -> Path:
        """Tritonserver's log (its workers' output included)."""
        return self.workspace.log_path

    # Three views of tritonserver: `tritonserver` (its `TritonProcess` handle: start, terminate, log), `process`
    # (that child's `Popen` now), `triton_endpoints` (where it listens); `gateway` is the gateway's handle.
    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """Tritonserver's process (`subprocess.Popen`), None before a start, after a stop and during a restart."""
        return self.tritonserver.popen

    @property
    def triton_endpoints(self) -> TritonEndpoints:
        """Tritonserver's own endpoints: Unix sockets in a private folder behind a gateway, else the public ports."""
        return self.tritonserver.endpoints

    @property
    def supervisor(self) -> Supervisor | None:
        """The thread that heals the server (its `heals`, its `catalog`), None when not supervised or stopped."""
        return self._supervisor

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> LocalServer:
        """Start the server and wait until it is live and has finished loading its models.

        Raises:
            ServerStartError: port in use, missing binary, or the process died or timed out (log tail included).
        """
        cfg = self.config
        if not Path(cfg.model_repository).is_dir():
            raise ServerStartError(f"model repository '{cfg.model_repository}' is not a directory")
        if cfg.private and not (cfg.gateway and cfg.restrict_admin):
            raise ServerStartError("a private server needs its gateway and its admin key (they keep others out)")
        wanted = [(cfg.host, cfg.http_port, "http"), (cfg.host, cfg.grpc_port, "grpc")]
        wanted += [(cfg.host, cfg.metrics_port, "metrics")]
        # Triton's own endpoints behind a gateway: Unix sockets only this user can reach
        sockets = TritonEndpoints(socket_dir=make_socket_dir(self.workspace.path)) if cfg.gateway else None
        if cfg.restrict_admin:
            self.admin_key = cfg.admin_key or new_key()
        for attempt in range(1, START_ATTEMPTS + 1):
            self.http_port, self.grpc_port, self.metrics_port = pick_ports(wanted)
            public = TritonEndpoints(host=cfg.host, http_port=self.http_port, grpc_port=self.grpc_port)
            try:
                self._launch(sockets or public)
                if cfg.gateway:
                    self._start_gateway()
                break
            except ServerStartError as e:
                # a free port is picked, then bound by the server: another process can take it in between
                if attempt == START_ATTEMPTS or PORT_TAKEN not in str(e):
                    raise
                log.info("a port picked for the server was taken before the server bound it; picking others")
                self.log_path.unlink(missing_ok=True)  # this start's log tells of this start only
                sockets = self.triton_endpoints if cfg.gateway else None  # the folder as the failed start left it
        if self.admin_key and not cfg.private:  # once the ports are ours (a start that lost a port leaves its
            # owner's key file alone); a private server's key is its client's alone: printed to it, in no file
            self.workspace.write_keys(self.admin_key, cfg.host, [self.http_port, self.grpc_port])
        if cfg.supervise:  # its thread starts the processes of every heal (see `_child_dies_with_me`)
            from mslite_server.supervisor import Supervisor

            self._supervisor = Supervisor(self, hang_s=cfg.hang_s, orphan_grace_s=cfg.orphan_grace_s)
            self._supervisor.start()
        return self

    def _launch(
        self, endpoints: TritonEndpoints, *, stop_on_failure: bool = True, load_models: tuple[str, ...] | None = None
    ) -> None:
        """Start tritonserver on `endpoints` and wait until it is ready (also used to restart it).

        Raises:
            ServerStartError: it died or timed out (everything stopped first, unless `stop_on_failure` is False).
        """
        if self._supervisor is not None and self._supervisor.halted:
            raise ServerStartError("the server is stopping")
        try:
            self.tritonserver.start(
                endpoints,
                self.metrics_port,
                admin_key=self.admin_key,
                load_models=self.config.load_models if load_models is None else load_models,
                die_with_parent=self._child_dies_with_me(),
            )
        except BaseException as e:
            if stop_on_failure:
                self.stop()
            if isinstance(e, ServerStartError) and PORT_TAKEN in str(e):  # the metrics port, or a public one
                raise PortTakenError(f"{e}\n{self._holders(self.tritonserver.tcp_ports())}") from None
            raise

    def _holders(self, ports: list[int]) -> str:
        """Who holds each of `ports`, other than this server's own processes (`ports.holders`)."""
        processes = (self.tritonserver.popen, self.gateway.process if self.gateway is not None else None)
        return holders(ports, {p.pid for p in processes if p is not None and p.poll() is None})

    def _child_dies_with_me(self) -> bool:
        """Whether a child started now should get SIGTERM when the calling thread ends (`parent_death`).

        PR_SET_PDEATHSIG fires when the *thread* that started the child ends: the main thread, or the
        supervisor's, which lives until the server is stopped.
        """
        current = threading.current_thread()
        return current is threading.main_thread() or (self._supervisor is not None and current is self._supervisor)

    def _start_gateway(self, *, stop_on_failure: bool = True) -> None:
        cfg = self.config
        try:
            if not self.listeners:  # bound once, handed to every gateway started (`bind_public`)
                self.listeners = bind_public(cfg.host, [self.http_port, self.grpc_port])
            http_sock, grpc_sock = self.listeners
            options = GatewayOptions(
                host=cfg.host,
                http_port=self.http_port,
                grpc_port=self.grpc_port,
                upstream_http=self.triton_endpoints.http_address,
                upstream_grpc=self.triton_endpoints.grpc_address,
                grace_s=cfg.exit_timeout_s,
                key_on_every_request=cfg.private,
                limits=cfg.gateway_limits,
                http_fd=http_sock.fileno(),
                grpc_fd=grpc_sock.fileno(),
            )
            self.gateway = GatewayProcess(options, admin_key=self.admin_key, log_path=self.workspace.gateway_log_path)
            self.gateway.start(die_with_parent=self._child_dies_with_me())
        except GatewayError as e:
            if stop_on_failure:
                self.stop()
            if PORT_TAKEN in str(e).lower():
                raise PortTakenError(f"{e}\n{self._holders([self.http_port, self.grpc_port])}") from None
            raise ServerStartError(str(e)) from None

    def restart_gateway(self) -> None:
        """Start the gateway again on the same ports (the supervisor, after it died).

        Raises:
            ServerStartError: it did not start (its log's tail included).
        """
        if self.gateway is not None:
            left = self.gateway.stop(timeout_s=1)  # and what is left of its process group
            if left:
                log.error("processes %s of the old gateway's process group are still there after SIGKILL", left)
        self._start_gateway(stop_on_failure=False)

    def stop(self, timeout_s: float | None = None) -> int | None:
        """Stop the server (SIGTERM, then SIGKILL after the timeout) and remove its shm regions.

        Also stops the supervisor and the gateway (first: requests in progress finish, new ones are refused),
        and removes the key files and this launcher's weights stores. A server that does not answer its
        liveness check is killed at once instead of being given the exit timeout. Safe to call twice.
        Returns the server's exit code, or None if it never started.
        """
        supervisor, leaked = self._supervisor, 0
        if supervisor is not None:
            supervisor.halt()  # no heal from now on; its thread ends last (see Supervisor.halt)
            leaked = supervisor.leaked
        # a hung server acts on no SIGTERM (e.g. its handler deadlocked), and answers no request to drain; a
        # stopped one says so by its state. A look can miss a stop that has just begun (its threads stop when
        # next scheduled): `TritonProcess.terminate` then kills the server once it finds it stopped.
        proc, hung = self.tritonserver.popen, False
        if proc is not None and proc.poll() is None:
            state = state_of(proc.pid)
            hung = state == "T" or not self.answers_live()
            log.info("stopping tritonserver (pid %d, state %s%s)", proc.pid, state, ", hung" if hung else "")
        if self.gateway is not None:
            self.gateway.stop(HUNG_GRACE_S if hung else timeout_s)
            self.gateway = None
        for sock in self.listeners:  # the public ports go only now
            sock.close()
        self.listeners = []
        if self.admin_key:
            self.workspace.remove_keys(self.admin_key)
        if hung:
            timeout_s = 0
        elif timeout_s is None and leaked:  # Triton waits its whole exit timeout on a dead instance it holds
            timeout_s = min(self.config.exit_timeout_s + 5, LEAKED_GRACE_S)
        code = self.tritonserver.terminate(timeout_s)
        if supervisor is not None:
            supervisor.release()
            self._supervisor = None
        self.workspace.remove_weight_stores()
        return code

    def restart(self, *, load_models: tuple[str, ...] | None = None) -> None:
        """Kill the server and every worker, remove their shm regions, and start it again on the same ports.

        The same admin key and weights owner: clients keep working, and the workers adopt the weights
        published last. The models of `load_models` (default: the configured ones) load at start; the
        others are the supervisor's to load again. Where the sockets' folder had to be replaced, the gateway
        is started again on the new one.

        Raises:
            PortTakenError: another process holds one of tritonserver's public ports (its metrics port).
            ServerStartError: it did not start again.
        """
        self.tritonserver.terminate(timeout_s=0)
        self.restarts += 1
        before = self.triton_endpoints
        self._launch(before, stop_on_failure=False, load_models=load_models)
        if self.triton_endpoints != before and self.gateway is not None:
            log.warning(
                "tritonserver's sockets moved to %s; starting the gateway again", self.triton_endpoints.socket_dir
            )
            self.restart_gateway()

    def remove_workspace(self) -> None:
        """Delete the composed backend directory, the logs and the sockets' folder."""
        self.triton_endpoints.remove()
        self.workspace.remove()

    def __enter__(self) -> LocalServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.remove_workspace()

    # -- inspection ------------------------------------------------------------------------------
    def is_running(self) -> bool:
        """True while the server process is alive (and the gateway, when there is one)."""
        if self.gateway is not None and not self.gateway.is_running():
            return False
        return self.tritonserver.is_running()

    def is_serving(self) -> bool:
        """True while the server serves: its processes are alive, or the supervisor is healing them."""
        supervisor = self._supervisor
        if supervisor is not None and not supervisor.halted:
            return not supervisor.gave_up
        return self.is_running()

    def answers_live(self, timeout_s: float = 2.0) -> bool:
        """True when tritonserver answers `/v2/health/live` within `timeout_s`."""
        return self.triton_api().answers_live(timeout_s)

    def gateway_answers_live(self, timeout_s: float = 2.0) -> bool:
        """True when the gateway answers a request that it refuses itself within `timeout_s` (`answers_probe`)."""
        return answers_probe(self.config.host, self.http_port, timeout_s)

    def log_tail(self, lines: int = 30) -> str:
        """The server log's error lines (up to 10), then its last lines."""
        return self.tritonserver.log_tail(lines)

    def model_states(self) -> list[ModelState]:
        """Per-model readiness from the repository index (`TritonApi.model_states`)."""
        return self.triton_api().model_states()

    def loaded_models(self) -> list[str]:
        """Every ready model of the server, uploaded ones included (`TritonApi.loaded_models`)."""
        return self.triton_api().loaded_models()

    def http_json(self, method: str, path: str, payload: Any, timeout_s: float = 10) -> Any:
        """One JSON call to Triton's own HTTP endpoint, with the admin key.

        Raises:
            TritonUnavailableError: no answer, or an error status.
        """
        return self.triton_api().json(method, path, payload, timeout_s)

    def triton_api(self) -> TritonApi:
        """Tritonserver's own HTTP API (its Unix socket behind a gateway), with the admin key; its gRPC load."""
        return TritonApi(self.triton_endpoints, self.admin_key, self.http_url)
