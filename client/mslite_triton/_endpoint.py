"""Where the server is: `Context.server_url`, `settings.URL_ENV`, or a server of this program's own (`_own_server`)."""

from __future__ import annotations

import atexit
import logging
import threading

from mslite_contract import settings
from mslite_contract.admin_key import key_for

from ._own_server import OwnServer, start_own_server
from ._transport import Transport
from .errors import ServerUnavailableError

log = logging.getLogger(__name__)

_lock = threading.Lock()
_started: OwnServer | None = None  # the server this process started, once it has
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
        return started.key
    return key_for(url)


def started_server() -> OwnServer | None:
    """The server this process started (`_autostart`), if it has started one."""
    return _started


def _autostart() -> str:
    global _started
    with _lock:
        if _started is not None and _started.is_running():  # it heals its own parts: same URL, clients retry
            return _started.grpc_url
        if not settings.autostart():
            raise ServerUnavailableError(
                "(no URL)", f"{settings.URL_ENV} is not set and {settings.AUTOSTART_ENV}=0 turns auto-start off"
            )
        server = start_own_server()
        log.info("started a server of this program's own at %s (pid %d); it stops when this program ends",
                 server.grpc_url, server.pid)  # fmt: skip
        _started = server
        atexit.register(_stop_started, server)
        return server.grpc_url


def _close_transports() -> None:
    """Release every pooled connection and its shared-memory region (registered at import: runs last)."""
    for t in list(_transports.values()):
        t.close()


atexit.register(_close_transports)


def _stop_started(server: OwnServer) -> None:
    _close_transports()
    server.stop()
