"""What a launcher leaves on this machine, named and removed in one place: `Workspace`.

- its folder (`mslite-triton-*` in the temp dir): the backend directory composed for tritonserver (that
  installation's python backend and the stub matching this interpreter, copied, plus `backend/mslite`), the
  cache directory, tritonserver's and the gateway's logs, and the sockets' folder when its path is short enough;
- the key files of its ports (`mslite_contract.admin_key`);
- the python backend's shared memory regions, named after `shm_prefix`, and dead gateways' regions;
- the workers' weights stores, named after `weights_owner`: they outlive any worker and tritonserver (a heal
  adopts the weights published last), and go when the launcher stops its server;
- Triton's copies of models uploaded through its load API that our workers ran from (`workers.py`).
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from mslite_contract.admin_key import remove_key, write_key
from mslite_contract.owned_files import remove_prefixed, sweep_dead_owners
from mslite_contract.protocol import GATEWAY_REGION_PREFIX, WEIGHTS_STORE_PREFIX
from mslite_server.errors import ServerStartError
from mslite_server.workers import remove_upload_copies, upload_copies

_STUB = "triton_python_backend_stub"


class Workspace:
    """One launcher's folder and the names of everything else its server leaves; `remove_*` cleans up."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="mslite-triton-"))
        self.log_path = self.path / "tritonserver.log"
        self.gateway_log_path = self.path / "gateway.log"
        self.shm_prefix = f"mslite{os.getpid()}_{secrets.token_hex(4)}_"
        # Names this launcher to the workers (`settings.WEIGHTS_OWNER_ENV`): their models' weights stores are ours.
        self.weights_owner = f"{os.getpid()}_{secrets.token_hex(8)}"
        self.key_files: list[Path] = []
        self._upload_copies: set[str] = set()  # Triton's copies of uploaded models our workers ran from

    def compose(self, binary: Path | None = None) -> Path:
        """Fill the folder with the backend and cache directories; returns the `tritonserver` binary.

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
        python_dir = self.backends / "python"
        python_dir.mkdir(parents=True)
        # Copies, not symlinks: Triton rejects backend files that resolve outside the backend directory.
        for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
            shutil.copy2(src / "backends" / "python" / name, python_dir / name)
        shutil.copy2(stub, python_dir / _STUB)
        # backend/mslite is model.py (package `mslite_triton_backend`) beside the runtime package `mslite_backend`,
        # each located where it is installed; an editable install's backend/mslite already holds the runtime.
        adapter = Path(str(resources.files("mslite_triton_backend")))
        runtime = Path(str(resources.files("mslite_backend")))
        mslite = self.backends / "mslite"
        shutil.copytree(adapter, mslite, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", runtime.name))
        shutil.copytree(runtime, mslite / runtime.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        local = self.caches / "local"
        local.mkdir(parents=True)
        shutil.copy2(src / "caches" / "local" / "libtritoncache_local.so", local)
        return binary

    @property
    def backends(self) -> Path:
        """Tritonserver's `--backend-directory`."""
        return self.path / "backends"

    @property
    def caches(self) -> Path:
        """Tritonserver's `--cache-directory`."""
        return self.path / "caches"

    def write_keys(self, key: str, host: str, ports: list[int]) -> None:
        """Write the key files of `ports` (removed by `remove_keys`)."""
        self.key_files = write_key(key, host, ports)

    def remove_keys(self, key: str) -> None:
        """Remove the key files written, those that still hold `key` (another server may have the port now)."""
        remove_key(self.key_files, key)
        self.key_files = []

    def note_model_dirs(self, model_dirs: Iterable[str]) -> None:
        """Remember the upload copies among the model directories of this server's workers."""
        self._upload_copies |= upload_copies(model_dirs)

    def remove_upload_copies(self) -> list[str]:
        """Delete the upload copies noted; returns them.

        Call once tritonserver has exited: a clean stop removes them itself, a killed server (or an upload over
        HTTP) leaves them in /tmp.
        """
        removed = remove_upload_copies(self._upload_copies)
        self._upload_copies.clear()
        return removed

    def remove_shm(self) -> list[str]:
        """Remove every `/dev/shm` region with this server's prefix, and dead gateways' regions; returns their names.

        Call once tritonserver has exited: no registration of a dead gateway's region is left to mind.
        """
        return remove_prefixed(self.shm_prefix) + sweep_dead_owners(GATEWAY_REGION_PREFIX)

    def remove_weight_stores(self) -> list[str]:
        """Remove this launcher's weights stores (call once its server has exited); returns their names."""
        prefix = f"{WEIGHTS_STORE_PREFIX}{self.weights_owner}_"
        return [name for root in {"/dev/shm", tempfile.gettempdir()} for name in remove_prefixed(prefix, root=root)]

    def remove(self) -> None:
        """Delete the folder: the composed directories and the logs."""
        shutil.rmtree(self.path, ignore_errors=True)


def triton_dir() -> Path:
    """The `tritonserver` folder of the nvidia-pytriton wheel.

    Raises:
        ServerStartError: the wheel (the `[server]` extra) is not installed.
    """
    try:
        import pytriton  # noqa: F401  (only to locate the wheel's files)
    except ImportError as e:
        raise ServerStartError(
            "a local server needs the [server] extra (in a checkout: `make demo`, or .venv/bin/python -m pip install "
            "-e '.[server]')"
        ) from e
    return Path(pytriton.__file__).parent / "tritonserver"


def wheel_libs() -> Path:
    """The shared libraries the wheel's `tritonserver` needs on `LD_LIBRARY_PATH`."""
    return triton_dir().parent.parent / "nvidia_pytriton.libs"
