"""The server of this program's own: `mslite-triton serve --private`, a child process, as the other clients start it.

`mslite_contract.own_server` says what such a server is, how the command is found, and what it prints.

The child stops once its standard input ends: this process holds the pipe's only writing end (not inherited by
the programs it runs), so the child stops when this process ends, however it ends and whichever thread started
it, and removes every folder it made. Nothing of the start is left on disk by this side: the child's error
output goes to an anonymous temporary file, read back only to say why a start failed.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO

from mslite_contract import settings
from mslite_contract.own_server import PRIVATE_ARGS, find_serve_command, not_found_message, read_line

from .errors import ServerUnavailableError

START_TIMEOUT_S = 300.0  # tritonserver's cold start on a loaded two-core machine, with room
STOP_TIMEOUT_S = 60.0  # the child stops its gateway, tritonserver and workers
_END = None  # the reader's mark: the child closed its output


class OwnServer:
    """A started `serve --private` child: its URLs and key, and `stop`."""

    def __init__(self, popen: subprocess.Popen[bytes], found: dict[str, str], errors: IO[bytes]) -> None:
        self.popen = popen
        self.pid = popen.pid
        # tritonserver's own gRPC socket (this account's alone), not the gateway's port: the hop the client had
        self.grpc_url = found["triton_grpc"]
        self.http_url = found.get("http", "")
        self.key = found["key"]
        self._errors = errors

    def is_running(self) -> bool:
        """True while the child runs (it heals its own tritonserver and gateway meanwhile)."""
        return self.popen.poll() is None

    def stop(self) -> None:
        """End the child's input and SIGTERM it, then wait (SIGKILL after `STOP_TIMEOUT_S`)."""
        _close(self.popen.stdin)
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        self._errors.close()


def start_own_server() -> OwnServer:
    """Start the child and wait until it serves.

    Raises:
        ServerUnavailableError: the command is not found, or the child exited or did not serve in time (the
            last lines of its error output included).
    """
    command = find_serve_command(interpreter_dir=Path(sys.executable).parent)
    if command is None:
        raise ServerUnavailableError("(local)", not_found_message())
    # the child makes its own key and prints it: a key in the environment is another server's
    env = {k: v for k, v in os.environ.items() if k != settings.ADMIN_KEY_ENV}
    errors = tempfile.TemporaryFile(prefix="mslite-triton-serve-")  # unlinked at once: nothing left on disk
    try:
        popen = subprocess.Popen(
            [*command, *PRIVATE_ARGS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, env=env
        )
    except OSError as e:
        errors.close()
        raise ServerUnavailableError("(local)", f"'{command[0]}' could not be run ({e}); {not_found_message()}") from e
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_read_lines, args=(popen, lines), name="mslite-triton-serve-output", daemon=True).start()
    found: dict[str, str] = {}
    why = f"did not serve within {START_TIMEOUT_S:.0f} s"
    try:
        while True:
            line = lines.get(timeout=START_TIMEOUT_S)
            if line is _END:
                why = "exited before it served"
                break
            if read_line(line, found) and "triton_grpc" in found and "key" in found:
                return OwnServer(popen, found, errors)
    except queue.Empty:
        pass
    server = OwnServer(popen, {"triton_grpc": "", "key": ""}, errors)
    errors.seek(0)
    tail = errors.read().decode(errors="replace").strip().splitlines()[-15:]
    server.stop()
    raise ServerUnavailableError("(local)", f"the server '{' '.join(command)} serve' {why}: " + "\n".join(tail))


def _read_lines(popen: subprocess.Popen[bytes], lines: queue.Queue[str | None]) -> None:
    """Every line the child prints, then `_END`; reads on, so the child never blocks on a full pipe."""
    assert popen.stdout is not None
    for raw in popen.stdout:
        lines.put(raw.decode(errors="replace").rstrip("\n"))
    lines.put(_END)


def _close(stream: IO[bytes] | None) -> None:
    if stream is not None:
        try:
            stream.close()
        except OSError:  # the child has gone: its end is closed already
            pass
