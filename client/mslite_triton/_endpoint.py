"""Where the server is: `Context.server_url`, `settings.URL_ENV`, or an embedded server started on demand."""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from mslite_contract import settings

from ._admin_key import key_for
from ._transport import Transport
from .errors import ServerUnavailableError

log = logging.getLogger(__name__)

_lock = threading.Lock()
_embedded: Any = None
_transports: dict[tuple[str, str | None], Transport] = {}


def server_url(explicit: str | None) -> str:
    """The URL to use: the context's, else `settings.URL_ENV`, else an auto-started embedded server.

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
    embedded = _embedded
    if embedded is not None and url == str(embedded.grpc_url):
        return str(embedded.admin_key) if embedded.admin_key else None
    return key_for(url)


def _autostart() -> str:
    global _embedded
    with _lock:
        if _embedded is not None and _embedded.is_serving():  # healing counts: same URL, clients retry
            return str(_embedded.grpc_url)
        if not settings.autostart():
            raise ServerUnavailableError(
                "(no URL)", f"{settings.URL_ENV} is not set and {settings.AUTOSTART_ENV}=0 turns auto-start off"
            )
        from mslite_server import EmbeddedServer, ServerConfig  # the launcher's public handle, loaded on demand

        repo = Path(tempfile.mkdtemp(prefix="mslite-triton-repo-"))
        server = EmbeddedServer(ServerConfig(model_repository=repo, load_models=()))
        try:
            server.start()
        except Exception as e:
            shutil.rmtree(repo, ignore_errors=True)
            raise ServerUnavailableError("(embedded)", f"the embedded server did not start: {e}") from e
        log.info("started an embedded Triton server at %s (log: %s); it stops when this process exits",
                 server.grpc_url, server.log_path)  # fmt: skip
        _embedded = server
        atexit.register(_stop_embedded, server, repo)
        return str(server.grpc_url)


def _close_transports() -> None:
    """Release every pooled connection and its shared-memory region (registered at import: runs last)."""
    for t in list(_transports.values()):
        t.close()


atexit.register(_close_transports)


def _stop_embedded(server: Any, repo: Path) -> None:
    _close_transports()
    server.stop()
    server.remove_workspace()
    shutil.rmtree(repo, ignore_errors=True)
