"""Unregisters the shared-memory regions of client processes (and gateways) that died without unregistering them.

A client of this library registers a region per connection for its large inputs (`_transport`), named
`mslite_client_<pid>_<n>`, and unregisters it when it closes. A client killed mid-predict never does:
tritonserver keeps the registration, and with it the region mapped, for as long as it runs (four killed
clients took it from 9 to 176 MiB of shared memory). The launcher's supervisor therefore calls
`ClientRegionSweep.maybe_sweep` on each poll; every few seconds it asks Triton for the registered regions
and unregisters those whose owner process is gone (the gateway's staging regions too, named the same way),
then removes the files of every dead client or gateway from /dev/shm, registered or not
(`owned_files.sweep_dead_owners`, the one sweep the clients run too).

A pid that was reused by another process keeps its dead owner's region until that process is gone too. A
live client whose pid is not visible here (another pid namespace sharing this /dev/shm) would lose its
registration; `_transport` then registers again and retries, so it costs that client one retry.
"""

from __future__ import annotations

import logging
import time
import urllib.parse

from mslite_contract.owned_files import REGION_PREFIXES, process_alive, region_owner, sweep_dead_owners
from mslite_server.errors import TritonUnavailableError
from mslite_server.supervised_server import SupervisedServer

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 2.0  # how often Triton is asked; a dead client's region goes within this and one poll


class ClientRegionSweep:
    """Finds and unregisters dead clients' regions on one local server (`server.http_json` carries the key)."""

    def __init__(self, server: SupervisedServer, interval_s: float = SWEEP_INTERVAL_S) -> None:
        self.server = server
        self.interval_s = interval_s
        self.swept: list[str] = []  # names unregistered so far, for logs and tests
        self._next = 0.0

    def maybe_sweep(self) -> list[str]:
        """Sweep when the interval has passed since the last sweep; returns the names unregistered now."""
        now = time.monotonic()
        if now < self._next:
            return []
        self._next = now + self.interval_s
        try:
            return self.sweep()
        except TritonUnavailableError:  # being restarted: its registrations are gone with it anyway
            return []

    def sweep(self) -> list[str]:
        """Unregister every region of this library whose owner process is gone; returns their names."""
        regions = self.server.http_json("GET", "/v2/systemsharedmemory/status", None) or []
        removed = []
        for region in regions:
            name = str(region.get("name", ""))
            pid = region_owner(name)
            if pid is None or process_alive(pid):
                continue
            quoted = urllib.parse.quote(name, safe="")
            self.server.http_json("POST", f"/v2/systemsharedmemory/region/{quoted}/unregister", {})
            removed.append(name)
        # The files of every dead owner, registered or not: a gateway killed after a tritonserver restart,
        # before it registered its regions with the new server again, leaves files Triton never lists.
        # None of them is registered now (the dead ones were unregistered above), so none is in use.
        for prefix in REGION_PREFIXES:
            sweep_dead_owners(prefix)
        if removed:
            log.info("unregistered %d shared-memory region(s) of dead clients: %s", len(removed), ", ".join(removed))
            self.swept += removed
        return removed
