"""Where the server is: `Context.server_url`, `settings.URL_ENV`, or a local server started on demand."""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from mslite_contract import settings
from mslite_contract.admin_key import key_for

from ._transport import Transport
from .errors import ServerUnavailableError

if TYPE_CHECKING:  # the launcher is imported only when a server is started (`_autostart`)
    from mslite_server import LocalServer

log = logging.getLogger(__name__)

_lock = threading.Lock()
_started: LocalServer | None = None  # the server this process started, once it has
_transports: dict[tuple[str, str | None], Transport] = {}


def server_url(explicit: str | None) -> str:
    """The URL to use: the context's, else `settings.URL_ENV`, else a local server started here.

    Raises:
        ServerUnavailableError: no URL, and auto-start is off or impossible.
    """
    url = explicit or settings.server_url()
    return url if url else _autostart()


def transport_for(explicit_url: str | None) -> Transport:
    """A shared, live-checked transport to the server (one pool per URL and key)."""
    url = server_url(explicit_url)
    key = _key(url)
    with _lock:
        found = _transports.get((url, key))
    if found is not None:
        return found
    created = Transport(url, key=key)
    created.check_live()
    with _lock:
        return _transports.setdefault((url, key), created)


def _key(url: str) -> str | None:
    """The admin key for `url`: for the auto-started server's own URL the key it made, else `key_for`.

    A `settings.ADMIN_KEY_ENV` set for another server must not be sent to the one started here (403).
    """
    started = _started
    if started is not None and url == started.grpc_url:
        return started.admin_key
    return key_for(url)


def started_server() -> LocalServer | None:
    """The server this process started (`_autostart`), if it has started one."""
    return _started


def _autostart() -> str:
    global _started
    with _lock:
        if _started is not None and _started.is_serving():  # healing counts: same URL, clients retry
            return _started.grpc_url
        if not settings.autostart():
            raise ServerUnavailableError(
                "(no URL)", f"{settings.URL_ENV} is not set and {settings.AUTOSTART_ENV}=0 turns auto-start off"
            )
        from mslite_server import LocalServer, ServerConfig  # the launcher's public handle, loaded on demand

        repo = Path(tempfile.mkdtemp(prefix="mslite-triton-repo-"))
        server = LocalServer(ServerConfig(model_repository=repo, load_models=()))
        try:
            server.start()
        except Exception as e:
            shutil.rmtree(repo, ignore_errors=True)
            raise ServerUnavailableError("(local)", f"the local server did not start: {e}") from e
        log.info("started a Triton server at %s (log: %s); it stops when this process exits",
                 server.grpc_url, server.log_path)  # fmt: skip
        _started = server
        atexit.register(_stop_started, server, repo)
        return server.grpc_url


def _close_transports() -> None:
    """Release every pooled connection and its shared-memory region (registered at import: runs last)."""
    for t in list(_transports.values()):
        t.close()


atexit.register(_close_transports)


def _stop_started(server: LocalServer, repo: Path) -> None:
    _close_transports()
    server.stop()
    server.remove_workspace()
    shutil.rmtree(repo, ignore_errors=True)
