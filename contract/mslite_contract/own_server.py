"""A client's own server: how the three clients find and start it, and the lines it prints that they read.

With no URL, the Python, C++ and Java clients each start `mslite-triton serve --private` as a child process
(`PRIVATE_ARGS`). Such a server is its program's alone:

- it makes a temporary model repository of its own (models are uploaded into it) and removes it, with every
  other folder it made, when it stops;
- it picks free loopback ports; its gateway answers only requests that carry the admin key (every request,
  health and inference included), so another local account reaches nothing through them; tritonserver itself
  listens on Unix sockets in a folder of mode 0700 (`TRITON_GRPC_LINE`: the Python client speaks to its gRPC
  one directly, as it spoke to its in-process server's port before; the C++ and Java clients speak HTTP to the
  gateway), and serves no metrics port;
- it makes a new key and prints it on its standard output (`KEY_LINE`), a pipe only the client reads: no key
  goes on a command line, in the environment of the client's other children, or in a key file;
- it stops once its standard input ends. The client holds the pipe's other end (never inherited by a program
  it runs), so the kernel closes it when the client's process ends, however it ends (SIGKILL included) and
  whichever thread started the server: one tie for the three languages.

Where the command is (`find_serve_command`), written once here and followed by the C++ and Java clients:
`settings.SERVE_CMD_ENV` (a command line, split at spaces) when set; else `SERVE_PROGRAM` beside the running
interpreter (the Python client's virtual environment); else on PATH; else in `CHECKOUT_VENV_BIN` of the current
folder or any folder above it (a program run from a checkout whose `.venv` holds the package).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from .settings import SERVE_CMD_ENV, URL_ENV

SERVE_PROGRAM = "mslite-triton"
PRIVATE_ARGS = ("serve", "--private")  # what a client appends to the command
CHECKOUT_VENV_BIN = ".venv/bin"  # a checkout's virtual environment, looked for upwards from the current folder
PRIVATE_EXIT_TIMEOUT_S = 5  # how long a private server's stop lets requests finish: its client has ended

# The lines `serve` prints once it serves, each starting with its word (the C++ and Java clients keep copies;
# a unit test checks them): the HTTP and gRPC URLs, the admin key (private servers print it), the end.
HTTP_LINE = "HTTP "
GRPC_LINE = "GRPC "
# a private server's own tritonserver gRPC endpoint (`unix:PATH`, in the 0700 folder): the Python client, of the
# server's account, speaks to it directly (tritonclient's gRPC reaches Unix sockets; Java's HTTP client cannot)
TRITON_GRPC_LINE = "TRITON GRPC "
METRICS_LINE = "METRICS "
LOG_LINE = "LOG "
KEY_LINE = "ADMIN KEY "
SERVING_LINE = "serving;"


def read_line(line: str, found: dict[str, str]) -> bool:
    """Note what one start-up line of `serve` says in `found` ("http", "grpc", "triton_grpc", "key").

    True at `SERVING_LINE`.
    """
    for name, prefix in (
        ("http", HTTP_LINE),
        ("grpc", GRPC_LINE),
        ("triton_grpc", TRITON_GRPC_LINE),
        ("key", KEY_LINE),
    ):
        if line.startswith(prefix):
            words = line[len(prefix) :].split()
            if words:
                found[name] = words[0]
    return line.startswith(SERVING_LINE)


def find_serve_command(
    environ: Mapping[str, str] | None = None, *, interpreter_dir: Path | None = None, cwd: Path | None = None
) -> list[str] | None:
    """The command that runs `mslite-triton` (the rule in the module's docstring); None when there is none.

    `interpreter_dir`: the running interpreter's folder (the Python client's); None for the other clients.
    """
    env = os.environ if environ is None else environ
    named = env.get(SERVE_CMD_ENV, "").split()
    if named:
        return named
    if interpreter_dir is not None and os.access(interpreter_dir / SERVE_PROGRAM, os.X_OK):
        return [str(interpreter_dir / SERVE_PROGRAM)]
    on_path = shutil.which(SERVE_PROGRAM, path=env.get("PATH", os.defpath))
    if on_path:
        return [on_path]
    here = (cwd or Path.cwd()).absolute()
    for folder in (here, *here.parents):
        candidate = folder / CHECKOUT_VENV_BIN / SERVE_PROGRAM
        if os.access(candidate, os.X_OK):
            return [str(candidate)]
    return None


def not_found_message() -> str:
    """What a client says when `find_serve_command` finds nothing: what to set."""
    return (
        f"'{SERVE_PROGRAM}', the command that starts a server, was not found (not on PATH, nor in "
        f"{CHECKOUT_VENV_BIN}/ of the current folder or one above it): install the mslite-triton package with its "
        f"server extra, name its command in {SERVE_CMD_ENV} (e.g. {SERVE_CMD_ENV}=/path/to/.venv/bin/{SERVE_PROGRAM}),"
        f" or give a running server's URL in {URL_ENV}"
    )
