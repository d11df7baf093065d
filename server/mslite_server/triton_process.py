"""The tritonserver child process, `TritonProcess`: started and waited for until ready, stopped, started again.

The server is the real `tritonserver` 2.51 from the nvidia-pytriton wheel, or another installation's binary
(the Triton image's `/opt/tritonserver/bin/tritonserver`), run with the backend directory composed in the
launcher's workspace (`workspace.py`) and model control `explicit`. This module also writes its command line
and environment, and reads its log.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from mslite_contract.protocol import ADMIN_KEY_HEADER
from mslite_contract.settings import ADMIN_KEY_ENV, WEIGHTS_OWNER_ENV
from mslite_server.config import ServerConfig
from mslite_server.errors import ServerStartError
from mslite_server.parent_death import dies_with_parent
from mslite_server.ports import listening_ports, listening_unix_paths
from mslite_server.shm_private import with_private_shm
from mslite_server.triton_api import TritonApi
from mslite_server.triton_endpoints import TritonEndpoints
from mslite_server.workers import state_of, workers_of
from mslite_server.workspace import Workspace, triton_dir, wheel_libs

log = logging.getLogger(__name__)

EXIT_POLL_S = 0.25  # how often a stop looks at an exiting tritonserver's log
READY_POLL_S = 0.2  # how often a start asks whether tritonserver is ready
_ERROR_LINE = re.compile(r"^E\d{4} |unrecognized option|error:", re.I)
# What Triton logs once a second while its exit waits for models to finish unloading
_EXIT_WAIT = re.compile(rb"Timeout \d+: Found (\d+) live models and (\d+) in-flight non-inference requests")
STALLED_EXIT_LINES = 3  # seconds of Triton's exit countdown without progress before a stop calls it stalled


class TritonProcess:
    """One launcher's tritonserver: one process at a time, on the same workspace and shm prefix each start."""

    def __init__(self, config: ServerConfig, workspace: Workspace) -> None:
        self.config = config
        self.workspace = workspace
        self.binary: Path | None = None  # composed into the workspace at the first start
        # where it listens: Unix sockets in a private folder behind a gateway, else the public ports
        self.endpoints = TritonEndpoints()
        self.metrics_port = 0
        self.popen: subprocess.Popen[bytes] | None = None
        self._stop_lock = threading.Lock()

    def start(
        self,
        endpoints: TritonEndpoints,
        metrics_port: int,
        *,
        admin_key: str | None,
        load_models: tuple[str, ...],
        die_with_parent: bool,
    ) -> None:
        """Start tritonserver and wait until it is ready: live, done loading `load_models`, on every endpoint.

        `endpoints` are cleared of a killed server's socket files first, or replaced by new ones where their
        folder is no longer private (`TritonEndpoints.ready_for_start`). With `die_with_parent`, it gets
        SIGTERM when the calling thread ends (`parent_death`).

        Raises:
            ServerStartError: it exited or timed out (its log's tail included); `terminate` stops what is left.
        """
        if self.binary is None:
            self.binary = self.workspace.compose(self.config.tritonserver)
        self.endpoints, self.metrics_port = endpoints.ready_for_start(), metrics_port
        args = command_line(
            str(self.binary),
            self.config,
            workspace=self.workspace,
            endpoints=self.endpoints,
            metrics_port=metrics_port,
            admin_key=admin_key,
            load_models=load_models,
        )
        env = environment(self.binary, admin_key=admin_key, weights_owner=self.workspace.weights_owner)
        env = with_private_shm(env)  # the python backend's regions 0600 from their creation
        shown = " ".join(args)
        log.info("starting tritonserver: %s", shown.replace(admin_key, "<key>") if admin_key else shown)
        self.popen = spawn(args, env, self.workspace.log_path, die_with_parent=die_with_parent)
        self._wait_ready()

    def _wait_ready(self) -> None:
        api = TritonApi(self.endpoints)
        deadline = time.monotonic() + self.config.startup_timeout_s
        while time.monotonic() < deadline:
            proc = self.popen
            if proc is None or proc.poll() is not None:
                code = None if proc is None else proc.returncode
                raise ServerStartError(
                    f"tritonserver exited during start-up (code {code}); log tail:\n{self.log_tail()}"
                )
            if api.answers_ready() and self._holds_endpoints(proc.pid):
                return
            time.sleep(READY_POLL_S)
        raise ServerStartError(
            f"tritonserver not ready after {self.config.startup_timeout_s:.0f} s; log tail:\n{self.log_tail()}"
        )

    def _holds_endpoints(self, pid: int) -> bool:
        """Whether process `pid` listens on every endpoint of the server: an answer may come from another process.

        A TCP port picked free can be taken by someone else before tritonserver binds it; a socket file in
        the private folder can only be this user's, but a leftover of an earlier server must not count.
        """
        sockets = {str(p) for p in (self.endpoints.http_socket, self.endpoints.grpc_socket) if p is not None}
        return set(self.tcp_ports()) <= listening_ports(pid) and sockets <= listening_unix_paths(pid)

    def tcp_ports(self) -> list[int]:
        """The TCP ports it listens on: metrics (none for a private server), HTTP and gRPC unless on Unix sockets."""
        public = [] if self.endpoints.socket_dir is not None else [self.endpoints.http_port, self.endpoints.grpc_port]
        return public if self.config.private else [self.metrics_port, *public]

    def is_running(self) -> bool:
        """True while the process is alive."""
        return self.popen is not None and self.popen.poll() is None

    def terminate(self, timeout_s: float | None = None) -> int | None:
        """Stop it: SIGTERM, then SIGKILL after `timeout_s` (default: its exit timeout and 5 s); SIGKILL at once at 0.

        Then removes what it leaves: its workers (the stubs, in its session), the upload copies they ran from,
        and the shm regions. Returns its exit code, None when none was running.
        """
        with self._stop_lock:
            proc, self.popen = self.popen, None
            code = None
            if proc is not None:
                wait_s = timeout_s if timeout_s is not None else self.config.exit_timeout_s + 5
                if proc.poll() is None:
                    self.workspace.note_model_dirs(w.model_dir for w in workers_of(proc.pid))
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
                self.workspace.remove_upload_copies()
            self.workspace.remove_shm()
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
                if exit_stalled(self.workspace.log_path) and not workers_of(proc.pid):
                    # a normal stop can end this way too (the last workers gone, Triton still counting): not a warning
                    log.debug(
                        "tritonserver's exit keeps counting live models that have no worker left (Triton keeps "
                        "some failed loads among them); stopping it now instead of after its exit timeout"
                    )
                    raise

    def log_tail(self, lines: int = 30) -> str:
        """Its log's error lines (up to 10), then its last lines."""
        return log_tail(self.workspace.log_path, lines)


def command_line(
    binary: str,
    cfg: ServerConfig,
    *,
    workspace: Workspace,
    endpoints: TritonEndpoints,
    metrics_port: int,
    admin_key: str | None,
    load_models: tuple[str, ...],
) -> list[str]:
    """The server's arguments: Triton's own endpoints (private Unix sockets behind a gateway), and the rest."""
    flags = [
        f"--model-repository={Path(cfg.model_repository).resolve()}",
        f"--backend-directory={workspace.backends}",
        f"--cache-directory={workspace.caches}",
        "--model-control-mode=explicit",
        # One bad model must not stop the server, nor keep /v2/health/ready at 400:
        # per-model state is reported from the repository index instead.
        "--exit-on-error=false",
        "--strict-readiness=false",
        f"--exit-timeout-secs={cfg.exit_timeout_s}",
        *endpoints.flags(),
        *([] if cfg.private else [f"--metrics-address={cfg.host}", f"--metrics-port={metrics_port}"]),
        *(["--allow-metrics=false"] if cfg.private else []),
        f"--log-verbose={cfg.log_verbose}",
        f"--backend-config=python,shm-region-prefix-name={workspace.shm_prefix}",
        f"--backend-config=python,shm-default-byte-size={cfg.shm_default_byte_size}",
        f"--backend-config=python,shm-growth-byte-size={cfg.shm_growth_byte_size}",
    ]
    flags += [f"--load-model={m}" for m in load_models]
    # Behind a gateway Triton's endpoints are private sockets and the gateway checks the key (its
    # `access` allow-list): the key stays off this command line, which every local account can read.
    # Without one, Triton must check it itself, and only its flags can say so.
    if admin_key and endpoints.socket_dir is None:
        flags += restricted_api_flags(admin_key)
    return [binary, *flags, *cfg.extra_args]


def environment(binary: Path, *, admin_key: str | None, weights_owner: str) -> dict[str, str]:
    """The server's environment: this interpreter's tools (and the wheel's libraries) first, the key, the owner."""
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    # the python backend starts each worker's stub through `bash`, found on PATH: the system's folders always
    # (a caller's PATH without them left every model LOADING for good, its stub never started)
    folders = [bindir, *(d for d in env.get("PATH", "").split(os.pathsep) if d)]
    env["PATH"] = os.pathsep.join(folders + [d for d in os.defpath.split(os.pathsep) if d and d not in folders])
    if _of_the_wheel(binary):  # another installation finds its own libraries
        libs = str(wheel_libs())
        env["LD_LIBRARY_PATH"] = libs + (os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    # The workers inherit it and refuse weights updates that do not prove it; the same key on every
    # (re)start, so clients keep working across heals. Without a key, none (not one of the caller's).
    env.pop(ADMIN_KEY_ENV, None)
    if admin_key:
        env[ADMIN_KEY_ENV] = admin_key
    env[WEIGHTS_OWNER_ENV] = weights_owner
    return env


def _of_the_wheel(binary: Path) -> bool:
    try:
        return binary.resolve().is_relative_to(triton_dir().resolve())
    except ServerStartError:  # the wheel is not installed: another installation's binary
        return False


SERVER_UMASK = 0o077  # what tritonserver and its workers create is this user's alone (`spawn`)


def spawn(args: list[str], env: dict[str, str], log_path: Path, *, die_with_parent: bool) -> subprocess.Popen[bytes]:
    """Start the server in a session of its own (its workers with it), its output appended to `log_path`.

    With `die_with_parent`, the server gets SIGTERM when the calling thread ends (`parent_death`).

    Its umask is `SERVER_UMASK`: the python backend creates each worker's shared-memory region (every request's
    and answer's tensors) with mode 0666 less the umask, so under the usual 022 any local account could read
    them; its workers inherit it, and so do the files and sockets they make (all this user's alone).
    """
    with open(log_path, "ab") as logf:
        return subprocess.Popen(
            dies_with_parent(args) if die_with_parent else args,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            umask=SERVER_UMASK,
        )


def log_tail(log_path: Path, lines: int = 30) -> str:
    """The server log's error lines (up to 10), then its last lines."""
    try:
        text = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    errors = [line for line in text if _ERROR_LINE.search(line)][:10]
    tail = [line for line in text[-lines:] if line not in errors]
    return "\n".join(errors + (["..."] if errors and tail else []) + tail)


def exit_stalled(log_path: Path) -> bool:
    """Whether Triton's exit is waiting on models that will not finish unloading.

    Triton 2.51 keeps some failed loads among its live models for good (a reload of a model that was
    serving, with a config override that does not load, for one; a failed upload with an override too):
    its exit then counts them every second until the exit timeout runs out, although nothing is left to
    unload. True when the last
    `STALLED_EXIT_LINES` lines of that countdown all count the same number of live models (not 0) and no
    request in flight; the caller also checks that no worker process is left, and may then kill the server.
    """
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            counts = _EXIT_WAIT.findall(f.read())[-STALLED_EXIT_LINES:]
    except OSError:
        return False
    return len(counts) == STALLED_EXIT_LINES and len(set(counts)) == 1 and counts[0][0] != b"0" and counts[0][1] == b"0"


RESTRICTED = "model-repository,shared-memory,logging,trace"  # the APIs only the admin key may call


def restricted_api_flags(key: str) -> list[str]:
    """Tritonserver flags restricting the admin APIs on both protocols (each protocol needs its own flag)."""
    return [
        f"--http-restricted-api={RESTRICTED}:{ADMIN_KEY_HEADER}={key}",
        f"--grpc-restricted-protocol={RESTRICTED}:{ADMIN_KEY_HEADER}={key}",
    ]
