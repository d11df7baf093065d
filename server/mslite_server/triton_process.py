"""The tritonserver child process: its backend directory, command line and environment, and its log.

The server is the real `tritonserver` 2.51 from the nvidia-pytriton wheel, or another installation's binary
(the Triton image's `/opt/tritonserver/bin/tritonserver`). Each launcher composes a backend directory of its
own (that installation's python backend and the stub matching this interpreter, copied, plus
`backend/mslite`) and starts the server with model control `explicit`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

from mslite_contract.settings import ADMIN_KEY_ENV, WEIGHTS_OWNER_ENV
from mslite_server.config import ServerConfig
from mslite_server.parent_death import dies_with_parent
from mslite_server.triton_endpoints import TritonEndpoints
from mslite_triton._admin_key import restricted_api_flags
from mslite_triton.errors import ServerStartError

_STUB = "triton_python_backend_stub"
_ERROR_LINE = re.compile(r"^E\d{4} |unrecognized option|error:", re.I)
# What Triton logs once a second while its exit waits for models to finish unloading
_EXIT_WAIT = re.compile(rb"Timeout \d+: Found (\d+) live models and (\d+) in-flight non-inference requests")
STALLED_EXIT_LINES = 3  # seconds of Triton's exit countdown without progress before a stop calls it stalled


def triton_dir() -> Path:
    """The `tritonserver` folder of the nvidia-pytriton wheel.

    Raises:
        ServerStartError: the wheel (the `[server]` extra) is not installed.
    """
    try:
        import pytriton  # noqa: F401  (only to locate the wheel's files)
    except ImportError as e:
        raise ServerStartError(
            "the embedded server needs the [server] extra: pip install 'mslite-triton[server]'"
        ) from e
    return Path(pytriton.__file__).parent / "tritonserver"


def wheel_libs() -> Path:
    """The shared libraries the wheel's `tritonserver` needs on `LD_LIBRARY_PATH`."""
    return triton_dir().parent.parent / "nvidia_pytriton.libs"


def compose_workspace(workspace: Path, binary: Path | None = None) -> Path:
    """Fill `workspace` with the backend and cache directories; returns the `tritonserver` binary.

    `binary`: another installation's tritonserver, whose folder (`<root>/bin/tritonserver`) holds the python
    backend and the cache beside it, as the Triton image's `/opt/tritonserver` does; None: the wheel's.

    Raises:
        ServerStartError: no such binary, or its installation has no python backend stub for this interpreter.
    """
    if binary is None:
        src = triton_dir()
        binary = src / "bin" / "tritonserver"
    elif not binary.is_file():
        raise ServerStartError(f"the tritonserver binary '{binary}' does not exist")
    else:
        src = binary.resolve().parent.parent
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    # the wheel keeps one stub per Python version; an image's python backend holds the one of its Python
    stubs = [src / "python_backend_stubs" / ver / _STUB, src / "backends" / "python" / _STUB]
    stub = next((s for s in stubs if s.exists()), None)
    if stub is None:
        raise ServerStartError(f"the tritonserver in {src} has no python backend stub for Python {ver}")
    backends = workspace / "backends"
    python_dir = backends / "python"
    python_dir.mkdir(parents=True)
    # Copies, not symlinks: Triton rejects backend files that resolve outside the backend directory.
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        shutil.copy2(src / "backends" / "python" / name, python_dir / name)
    shutil.copy2(stub, python_dir / _STUB)
    # backend/mslite is model.py (package `mslite_triton_backend`) beside the runtime package `mslite_backend`,
    # each located where it is installed; an editable install's backend/mslite already holds the runtime.
    adapter = Path(str(resources.files("mslite_triton_backend")))
    runtime = Path(str(resources.files("mslite_backend")))
    shutil.copytree(adapter, backends / "mslite", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", runtime.name))
    shutil.copytree(runtime, backends / "mslite" / runtime.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    caches = workspace / "caches" / "local"
    caches.mkdir(parents=True)
    shutil.copy2(src / "caches" / "local" / "libtritoncache_local.so", caches)
    return binary


def command_line(
    binary: str,
    cfg: ServerConfig,
    *,
    workspace: Path,
    endpoints: TritonEndpoints,
    metrics_port: int,
    shm_prefix: str,
    admin_key: str | None,
    load_models: tuple[str, ...],
) -> list[str]:
    """The server's arguments: Triton's own endpoints (private Unix sockets behind a gateway), and the rest."""
    flags = [
        f"--model-repository={Path(cfg.model_repository).resolve()}",
        f"--backend-directory={workspace / 'backends'}",
        f"--cache-directory={workspace / 'caches'}",
        "--model-control-mode=explicit",
        # One bad model must not stop the server, nor keep /v2/health/ready at 400:
        # per-model state is reported from the repository index instead.
        "--exit-on-error=false",
        "--strict-readiness=false",
        f"--exit-timeout-secs={cfg.exit_timeout_s}",
        *endpoints.flags(),
        f"--metrics-address={cfg.host}",
        f"--metrics-port={metrics_port}",
        f"--log-verbose={cfg.log_verbose}",
        f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
        f"--backend-config=python,shm-default-byte-size={cfg.shm_default_byte_size}",
        f"--backend-config=python,shm-growth-byte-size={cfg.shm_growth_byte_size}",
    ]
    flags += [f"--load-model={m}" for m in load_models]
    if admin_key:
        flags += restricted_api_flags(admin_key)
    return [binary, *flags, *cfg.extra_args]


def environment(binary: Path, *, admin_key: str | None, weights_owner: str) -> dict[str, str]:
    """The server's environment: this interpreter's tools (and the wheel's libraries) first, the key, the owner."""
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
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


def spawn(args: list[str], env: dict[str, str], log_path: Path, *, die_with_parent: bool) -> subprocess.Popen[bytes]:
    """Start the server in a session of its own (its workers with it), its output appended to `log_path`.

    With `die_with_parent`, the server gets SIGTERM when the calling thread ends (`parent_death`).
    """
    with open(log_path, "ab") as logf:
        return subprocess.Popen(
            dies_with_parent(args) if die_with_parent else args,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
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
