"""The embedded Triton server, `EmbeddedServer`: start, wait for readiness, inspect, restart and stop.

Used by the `mslite-triton serve` command, the tests and the client's auto-start. It picks the ports
(`ports.py`), composes and starts the tritonserver process (`triton_process.py`), waits for readiness with
a deadline, reports each model's state, starts the gateway and the supervisor when configured, and on stop
removes what the server leaves behind: the python backend's regions and the weights stores, both named
after this launcher (`owned_files.remove_prefixed`), and Triton's copies of uploaded models (`workers.py`).
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mslite_contract.gateway_options import GatewayOptions
from mslite_contract.owned_files import remove_prefixed, sweep_dead_owners
from mslite_contract.protocol import ADMIN_KEY_HEADER, GATEWAY_REGION_PREFIX, WEIGHTS_STORE_PREFIX
from mslite_server.config import ModelState, ServerConfig
from mslite_server.gateway_process import GatewayError, GatewayProcess
from mslite_server.ports import (
    LOOPBACK,
    PortTakenError,
    holder_of,
    listening_ports,
    listening_unix_paths,
    pick_ports,
)
from mslite_server.triton_endpoints import TritonEndpoints, make_socket_dir
from mslite_server.triton_process import (
    command_line,
    compose_workspace,
    environment,
    exit_stalled,
    log_tail,
    spawn,
)
from mslite_server.workers import remove_upload_copies, state_of, upload_copies, workers_of
from mslite_triton._admin_key import new_key, remove_key, write_key
from mslite_triton.errors import ServerStartError, ServerUnavailableError

if TYPE_CHECKING:  # started only by servers that are supervised, imported then
    from mslite_server.supervisor import Supervisor

__all__ = ["LOOPBACK", "EmbeddedServer", "ModelState", "PortTakenError", "ServerConfig", "ServerStartError"]

log = logging.getLogger(__name__)

LEAKED_GRACE_S = 5.0  # how long a stop waits for a server holding dead instances (see supervisor.py)
HUNG_GRACE_S = 1.0  # how long a stop lets the gateway drain when tritonserver behind it is hung
EXIT_POLL_S = 0.25  # how often a stop looks at an exiting tritonserver's log
START_ATTEMPTS = 3  # starts on newly picked ports, when one picked was taken before the server bound it
PORT_TAKEN = "already in use"  # how tritonserver's and the gateway's start failures say so
# A request line with no target and no version: the gateway answers it itself (400, malformed request
# line) and sends nothing on to tritonserver.
GATEWAY_PROBE = b"PROBE\r\n\r\n"


class EmbeddedServer:
    """A `tritonserver` child process; a context manager that stops it and cleans up."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.workspace = Path(tempfile.mkdtemp(prefix="mslite-triton-"))
        self.log_path = self.workspace / "tritonserver.log"
        self.shm_prefix = f"mslite{os.getpid()}_{secrets.token_hex(4)}_"
        self.http_port = 0
        self.grpc_port = 0
        self.metrics_port = 0
        # where tritonserver itself listens: Unix sockets in a private folder behind a gateway, else the public ports
        self.triton = TritonEndpoints()
        self.process: subprocess.Popen[bytes] | None = None
        self.gateway: GatewayProcess | None = None
        self.admin_key: str | None = None
        self.key_files: list[Path] = []
        self.restarts = 0
        self._binary: Path | None = None
        self._supervisor: Supervisor | None = None
        self._stop_lock = threading.Lock()
        self._upload_copies: set[str] = set()  # Triton's copies of uploaded models our workers ran from
        # Names this launcher to the workers: their models' weights stores are ours, outlive any worker and
        # tritonserver (a heal adopts the last published weights), and go when we stop.
        self.weights_owner = f"{os.getpid()}_{secrets.token_hex(8)}"

    # -- addresses -------------------------------------------------------------------------------
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

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> EmbeddedServer:
        """Start the server and wait until it is live and has finished loading its models.

        Raises:
            ServerStartError: port in use, missing binary, or the process died or timed out (log tail included).
        """
        cfg = self.config
        if not Path(cfg.model_repository).is_dir():
            raise ServerStartError(f"model repository '{cfg.model_repository}' is not a directory")
        wanted = [(cfg.host, cfg.http_port, "http"), (cfg.host, cfg.grpc_port, "grpc")]
        wanted += [(cfg.host, cfg.metrics_port, "metrics")]
        self._binary = self._compose_workspace()
        if cfg.gateway:  # Triton's own endpoints are Unix sockets only this user can reach
            self.triton = TritonEndpoints(socket_dir=make_socket_dir(self.workspace))
        if cfg.restrict_admin:
            self.admin_key = cfg.admin_key or new_key()
        for attempt in range(1, START_ATTEMPTS + 1):
            self.http_port, self.grpc_port, self.metrics_port = pick_ports(wanted)
            if not cfg.gateway:
                self.triton = TritonEndpoints(host=cfg.host, http_port=self.http_port, grpc_port=self.grpc_port)
            try:
                self._launch()
                if cfg.gateway:
                    self._start_gateway()
                break
            except ServerStartError as e:
                # a free port is picked, then bound by the server: another process can take it in between
                if attempt == START_ATTEMPTS or PORT_TAKEN not in str(e):
                    raise
                log.info("a port picked for the server was taken before the server bound it; picking others")
                self.log_path.unlink(missing_ok=True)  # this start's log tells of this start only
        if self.admin_key:  # once the ports are ours: a start that lost a port leaves its owner's key file alone
            self.key_files = write_key(self.admin_key, cfg.host, [self.http_port, self.grpc_port])
        if cfg.supervise:  # its thread starts the processes of every heal (see `_child_dies_with_me`)
            from mslite_server.supervisor import Supervisor

            self._supervisor = Supervisor(self, hang_s=cfg.hang_s, orphan_grace_s=cfg.orphan_grace_s)
            self._supervisor.start()
        return self

    def _launch(self, *, stop_on_failure: bool = True, load_models: tuple[str, ...] | None = None) -> None:
        """Start the tritonserver process and wait until it is ready (also used to restart it).

        Raises:
            ServerStartError: it died or timed out (everything stopped first, unless `stop_on_failure` is False).
        """
        if self._supervisor is not None and self._supervisor.halted:
            raise ServerStartError("the server is stopping")
        self.triton = self.triton.ready_for_start()
        args = command_line(
            str(self._binary),
            self.config,
            workspace=self.workspace,
            endpoints=self.triton,
            metrics_port=self.metrics_port,
            shm_prefix=self.shm_prefix,
            admin_key=self.admin_key,
            load_models=self.config.load_models if load_models is None else load_models,
        )
        assert self._binary is not None
        env = environment(self._binary, admin_key=self.admin_key, weights_owner=self.weights_owner)
        shown = " ".join(args).replace(self.admin_key, "<key>") if self.admin_key else " ".join(args)
        log.info("starting tritonserver: %s", shown)
        self.process = spawn(args, env, self.log_path, die_with_parent=self._child_dies_with_me())
        try:
            self._wait_ready()
        except BaseException as e:
            if stop_on_failure:
                self.stop()
            if isinstance(e, ServerStartError) and PORT_TAKEN in str(e):  # the metrics port, or a public one
                holders = self._holders([self.metrics_port, *self._public_triton_ports()])
                raise PortTakenError(f"{e}\n{holders}") from None
            raise

    def _public_triton_ports(self) -> list[int]:
        return [] if self.triton.socket_dir is not None else [self.triton.http_port, self.triton.grpc_port]

    def _holders(self, ports: list[int]) -> str:
        """Who holds each of `ports` that someone listens on (`ports.holder_of`), for a failed start's message."""
        held = [f"port {p} on this host is held by {holder_of(p)}" for p in ports if p and p not in self._own_ports()]
        return "; ".join(held) or "(no listener on the server's public ports now)"

    def _own_ports(self) -> set[int]:
        """TCP ports this server's own processes listen on (a holder found there is no squatter)."""
        ours = listening_ports(self.process.pid) if self.process is not None and self.process.poll() is None else set()
        gateway = self.gateway.pid if self.gateway is not None else None
        return ours | (listening_ports(gateway) if gateway else set())

    def _child_dies_with_me(self) -> bool:
        """Whether a child started now should get SIGTERM when the calling thread ends (`parent_death`).

        PR_SET_PDEATHSIG fires when the *thread* that started the child ends: the main thread, or the
        supervisor's, which lives until the server is stopped.
        """
        current = threading.current_thread()
        return current is threading.main_thread() or (self._supervisor is not None and current is self._supervisor)

    def _start_gateway(self, *, stop_on_failure: bool = True) -> None:
        cfg = self.config
        options = GatewayOptions(
            host=cfg.host,
            http_port=self.http_port,
            grpc_port=self.grpc_port,
            upstream_http=self.triton.http_address,
            upstream_grpc=self.triton.grpc_address,
            grace_s=cfg.exit_timeout_s,
            limits=cfg.gateway_limits,
        )
        self.gateway = GatewayProcess(options, admin_key=self.admin_key, log_path=self.workspace / "gateway.log")
        try:
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
            self.gateway.stop(timeout_s=1)
        self._start_gateway(stop_on_failure=False)

    def _compose_workspace(self) -> Path:
        return compose_workspace(self.workspace, self.config.tritonserver)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise ServerStartError(
                    f"tritonserver exited during start-up (code {code}); log tail:\n{self.log_tail()}"
                )
            if self._http_status("GET", "/v2/health/ready") == 200 and self._holds_endpoints(self.process.pid):
                return
            time.sleep(0.2)
        raise ServerStartError(
            f"tritonserver not ready after {self.config.startup_timeout_s:.0f} s; log tail:\n{self.log_tail()}"
        )

    def _holds_endpoints(self, pid: int) -> bool:
        """Whether process `pid` listens on every endpoint of the server: an answer may come from another process.

        A TCP port picked free can be taken by someone else before tritonserver binds it; a socket file in
        the private folder can only be this user's, but a leftover of an earlier server must not count.
        """
        tcp = {self.metrics_port, *self._public_triton_ports()}
        sockets = {str(p) for p in (self.triton.http_socket, self.triton.grpc_socket) if p is not None}
        return tcp <= listening_ports(pid) and sockets <= listening_unix_paths(pid)

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
        # next scheduled): `_wait_exit` then kills the server once it finds it stopped.
        proc, hung = self.process, False
        if proc is not None and proc.poll() is None:
            state = state_of(proc.pid)
            hung = state == "T" or not self.answers_live()
            log.info("stopping tritonserver (pid %d, state %s%s)", proc.pid, state, ", hung" if hung else "")
        if self.gateway is not None:
            self.gateway.stop(HUNG_GRACE_S if hung else timeout_s)
            self.gateway = None
        if self.admin_key:
            remove_key(self.key_files, self.admin_key)
        self.key_files = []
        if hung:
            timeout_s = 0
        elif timeout_s is None and leaked:  # Triton waits its whole exit timeout on a dead instance it holds
            timeout_s = min(self.config.exit_timeout_s + 5, LEAKED_GRACE_S)
        code = self._terminate(timeout_s)
        if supervisor is not None:
            supervisor.release()
            self._supervisor = None
        self.remove_weight_stores()
        return code

    def remove_weight_stores(self) -> list[str]:
        """Remove this launcher's weights stores (call once its server has exited); returns their names."""
        prefix = f"{WEIGHTS_STORE_PREFIX}{self.weights_owner}_"
        return [name for root in {"/dev/shm", tempfile.gettempdir()} for name in remove_prefixed(prefix, root=root)]

    def _terminate(self, timeout_s: float | None = None) -> int | None:
        """Stop tritonserver: SIGTERM, then SIGKILL after `timeout_s`; SIGKILL at once when it is 0."""
        with self._stop_lock:
            proc, self.process = self.process, None
            code = None
            if proc is not None:
                wait_s = timeout_s if timeout_s is not None else self.config.exit_timeout_s + 5
                if proc.poll() is None:
                    self.note_model_dirs(w.model_dir for w in workers_of(proc.pid))
                    if wait_s > 0:
                        proc.send_signal(signal.SIGTERM)
                try:
                    code = self._wait_exit(proc, wait_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    code = proc.wait()
                try:  # the stubs live in the server's session: make sure none outlives it
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                # a clean stop removes them, a killed server (or an upload over HTTP) leaves them in /tmp
                remove_upload_copies(self._upload_copies)
                self._upload_copies.clear()
            self.cleanup_shm()
            return code

    def _wait_exit(self, proc: subprocess.Popen[bytes], wait_s: float) -> int:
        """`proc.wait(wait_s)`, given up early when the server is stopped or its exit waits on nothing.

        Raises:
            subprocess.TimeoutExpired: the server is still running.
        """
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return proc.wait(timeout=max(0.0, min(EXIT_POLL_S, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    raise
                # stopped (SIGSTOP, a debugger): it acts on no SIGTERM until it is continued, so waiting is in vain
                if state_of(proc.pid) == "T":
                    log.warning("tritonserver (pid %d) is stopped and cannot exit; killing it", proc.pid)
                    raise
                # every worker is gone, and Triton still counts live models: those never unload
                if exit_stalled(self.log_path) and not workers_of(proc.pid):
                    # a normal stop can end this way too (the last workers gone, Triton still counting): not a warning
                    log.debug(
                        "tritonserver's exit keeps counting live models that have no worker left (Triton keeps "
                        "some failed loads among them); stopping it now instead of after its exit timeout"
                    )
                    raise

    def note_model_dirs(self, model_dirs: Iterable[str]) -> None:
        """Remember the upload copies among the model directories of this server's workers (removed after it exits)."""
        self._upload_copies |= upload_copies(model_dirs)

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
        self._terminate(timeout_s=0)
        self.restarts += 1
        before = self.triton
        self._launch(stop_on_failure=False, load_models=load_models)
        if self.triton != before and self.gateway is not None:
            log.warning("tritonserver's sockets moved to %s; starting the gateway again", self.triton.socket_dir)
            self.restart_gateway()

    def cleanup_shm(self) -> list[str]:
        """Remove every `/dev/shm` region with this server's prefix, and dead gateways' regions; returns their names.

        Called once tritonserver has exited: no registration of a dead gateway's region is left to mind.
        """
        return remove_prefixed(self.shm_prefix) + sweep_dead_owners(GATEWAY_REGION_PREFIX)

    def remove_workspace(self) -> None:
        """Delete the composed backend directory, the log and the sockets' folder."""
        self.triton.remove()
        shutil.rmtree(self.workspace, ignore_errors=True)

    def __enter__(self) -> EmbeddedServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.remove_workspace()

    # -- inspection ------------------------------------------------------------------------------
    def is_running(self) -> bool:
        """True while the server process is alive (and the gateway, when there is one)."""
        if self.gateway is not None and not self.gateway.is_running():
            return False
        return self.process is not None and self.process.poll() is None

    def is_serving(self) -> bool:
        """True while the server serves: its processes are alive, or the supervisor is healing them."""
        supervisor = self._supervisor
        if supervisor is not None and not supervisor.halted:
            return not supervisor.gave_up
        return self.is_running()

    def answers_live(self, timeout_s: float = 2.0) -> bool:
        """True when tritonserver answers `/v2/health/live` within `timeout_s`."""
        return self._http_status("GET", "/v2/health/live", timeout_s) == 200

    def gateway_answers_live(self, timeout_s: float = 2.0) -> bool:
        """True when the gateway's HTTP port answers a request that the gateway itself refuses, within `timeout_s`.

        Not one it relays: an answer must prove the gateway's loop runs whatever tritonserver does, and a
        relayed probe left in flight to a hung tritonserver would hold the gateway's drain at a stop.
        """
        # a gateway bound to every address is asked on loopback (a wildcard is no address to connect to)
        host = LOOPBACK if self.config.host in ("0.0.0.0", "::", "") else self.config.host
        try:
            with socket.create_connection((host, self.http_port), timeout=timeout_s) as conn:
                conn.sendall(GATEWAY_PROBE)
                return conn.recv(5) == b"HTTP/"
        except OSError:
            return False

    def log_tail(self, lines: int = 30) -> str:
        """The server log's error lines (up to 10), then its last lines."""
        return log_tail(self.log_path, lines)

    def model_states(self) -> list[ModelState]:
        """Per-model readiness from the repository index (`POST /v2/repository/index`)."""
        body = self.http_json("POST", "/v2/repository/index", {})
        return [
            ModelState(str(m.get("name")), str(m.get("version", "")), str(m.get("state", "")), str(m.get("reason", "")))
            for m in body or []
        ]

    def loaded_models(self) -> list[str]:
        """Every ready model of the server, uploaded ones included.

        The repository index lists only the models found in the repository directory.
        """
        stats = self.http_json("GET", "/v2/models/stats", None) or {}
        names = {str(m.get("name")) for m in stats.get("model_stats", [])}
        return sorted(n for n in names if self._http_status("GET", f"/v2/models/{n}/ready") == 200)

    def _http_status(self, method: str, path: str, timeout_s: float = 2.0) -> int:
        """The status of one call to Triton's own HTTP endpoint without the key; 0 when it does not answer."""
        try:
            return self.triton_http(method, path, None, timeout_s=timeout_s, key=False)[0]
        except (OSError, http.client.HTTPException):
            return 0

    def triton_http(
        self, method: str, path: str, body: bytes | None, *, timeout_s: float = 10, key: bool = True
    ) -> tuple[int, bytes]:
        """One call to Triton's own HTTP endpoint (its Unix socket behind a gateway): (status, body).

        Raises:
            OSError, http.client.HTTPException: no answer.
        """
        conn = self.triton.http_connection(timeout_s)
        headers = {ADMIN_KEY_HEADER: self.admin_key} if key and self.admin_key else {}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return int(resp.status), resp.read()
        finally:
            conn.close()

    def http_json(self, method: str, path: str, payload: Any, timeout_s: float = 10) -> Any:
        """One JSON call to the server's HTTP API (Triton's own endpoint), with the admin key.

        Raises:
            ServerUnavailableError: no answer, or an error status.
        """
        data = None if payload is None else json.dumps(payload).encode()
        try:
            status, body = self.triton_http(method, path, data, timeout_s=timeout_s)
        except (OSError, http.client.HTTPException) as e:
            raise ServerUnavailableError(self.http_url, f"no answer to {path}: {e}") from e
        if status >= 400:
            raise ServerUnavailableError(self.http_url, f"{path} answered {status}: {body[:200]!r}")
        return json.loads(body or b"null")
