"""Heals a local server: a dead worker, a dead or hung tritonserver, a dead or hung gateway.

Nothing restarts a dead process of the server otherwise (Triton does not even report a dead worker), so a
thread of the launcher looks at all three every `interval_s` and heals what is dead or hung. It is made
of parts, each testable alone:

- `SupervisedServer` (`supervised_server.py`): what it needs from the server, typed.
- `FaultDetector` (`fault_detector.py`): what one poll sees -> events (which process died or hangs, and
  the rules that decide it); `ServerLook` below is what it sees: `/proc` and the server's answers.
- `ModelCatalog` (`model_catalog.py`): what it takes to load each model again.
- `Healer` (`healer.py`): kills what hangs, loads models again, restarts tritonserver or the gateway.

This thread acts on the detector's events and tells the detector what each heal made stale. It also asks
`ClientRegionSweep` to unregister the shared memory of dead clients.
"""

from __future__ import annotations

import logging
import threading
import time

from mslite_server.config import ORPHAN_GRACE_S
from mslite_server.errors import TritonUnavailableError
from mslite_server.fault_detector import (
    Event,
    FaultDetector,
    GatewayDown,
    GatewaySeen,
    ServerDown,
    WorkersChanged,
    WorkersLost,
    WorkersOrphaned,
)
from mslite_server.healer import Heal, Healer, kill_hung
from mslite_server.model_catalog import ModelCatalog, Snapshot
from mslite_server.shm_sweep import ClientRegionSweep
from mslite_server.supervised_server import SupervisedServer
from mslite_server.workers import Worker, state_of, workers_of

__all__ = ["Heal", "ServerLook", "Supervisor"]

log = logging.getLogger(__name__)


class ServerLook:
    """The detector's `Observer` of a real server: /proc and its answers, asked at most once per poll each.

    Reading the workers also tells the launcher and the catalog where their models run from.
    """

    def __init__(self, server: SupervisedServer, catalog: ModelCatalog, live_timeout_s: float) -> None:
        self.server = server
        self.catalog = catalog
        self.live_timeout_s = live_timeout_s

    def now(self) -> float:
        """`time.monotonic()`."""
        return time.monotonic()

    def server_exit(self) -> tuple[bool, int | None]:
        """Whether tritonserver exited, and its code."""
        process = self.server.process
        if process is None or process.poll() is not None:
            return True, None if process is None else process.returncode
        return False, None

    def server_answers(self) -> bool:
        """The liveness check of tritonserver."""
        return self.server.answers_live(self.live_timeout_s)

    def gateway(self) -> GatewaySeen | None:
        """The gateway's process."""
        gateway = self.server.gateway
        if gateway is None:
            return None
        code = gateway.process.returncode if gateway.process is not None else None
        return GatewaySeen(gateway.pid, gateway.is_running(), code)

    def gateway_state(self, pid: int) -> str:
        """The gateway's state letter."""
        return state_of(pid)

    def gateway_answers(self) -> bool:
        """The gateway's probe."""
        return self.server.gateway_answers_live(self.live_timeout_s)

    def workers(self) -> list[Worker]:
        """The workers of tritonserver, noted by the launcher and the catalog."""
        process = self.server.process
        workers = workers_of(process.pid) if process is not None else []
        self.server.workspace.note_model_dirs(w.model_dir for w in workers if w.state != "Z")
        self.catalog.note_workers(workers)
        return workers

    def ready_models(self) -> set[str] | None:
        """The models Triton's statistics list: those with a version ready (an unloading one is not listed)."""
        try:
            stats = self.server.http_json("GET", "/v2/models/stats", None, timeout_s=self.live_timeout_s) or {}
        except TritonUnavailableError:
            return None
        return {str(m.get("name")) for m in stats.get("model_stats", [])}


class Supervisor(threading.Thread):
    """Watches the server's processes and heals them (see the module docstring)."""

    def __init__(
        self,
        server: SupervisedServer,
        interval_s: float = 0.5,
        *,
        live_timeout_s: float = 3.0,
        live_failures: int = 3,
        max_leaked: int = 8,
        hang_s: float = 10.0,
        orphan_grace_s: float = ORPHAN_GRACE_S,
    ) -> None:
        super().__init__(name="mslite-supervisor", daemon=True)
        self.server = server
        self.interval_s = interval_s
        self.hang_s = hang_s
        self.client_regions = ClientRegionSweep(server)  # shm registrations of clients that died
        self.detector = FaultDetector(live_failures=live_failures, hang_s=hang_s, orphan_grace_s=orphan_grace_s)
        self._catalog = ModelCatalog(server)
        self._look = ServerLook(server, self._catalog, live_timeout_s)
        self._halt = threading.Event()
        self._release = threading.Event()
        self._busy = threading.Lock()  # held for each poll; `halt` waits for it
        self.healer = Healer(server, self._catalog, self._halt, max_leaked=max_leaked)

    @property
    def heals(self) -> list[Heal]:
        """Every heal so far, in order."""
        return self.healer.heals

    @property
    def catalog(self) -> dict[str, Snapshot]:
        """The models that a heal loads again, by name."""
        return self._catalog.snapshots()

    @property
    def gave_up(self) -> bool:
        """True once tritonserver could not be started again: the service is gone."""
        return self.healer.gave_up

    @property
    def leaked(self) -> int:
        """Dead instances the running tritonserver still holds (its exit waits on them)."""
        return self.healer.leaked

    # -- thread ---------------------------------------------------------------------------------
    def halt(self, timeout_s: float = 60.0) -> None:
        """Stop watching; waits (up to `timeout_s`) for a heal in progress to end. The thread lives on.

        It lives until `release`: a process started from a thread with PR_SET_PDEATHSIG gets its signal
        when that thread ends, and the launcher stops the gateway before tritonserver.
        """
        self._halt.set()
        if threading.current_thread() is not self and self._busy.acquire(timeout=timeout_s):
            self._busy.release()

    def release(self) -> None:
        """Let the halted thread end (once the processes it started are stopped)."""
        self._halt.set()
        self._release.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=10)

    @property
    def halted(self) -> bool:
        """True once `halt` was called."""
        return self._halt.is_set()

    def run(self) -> None:
        """The supervisor thread: one check of every process per interval until halted."""
        while not self._halt.wait(self.interval_s):
            with self._busy:
                if self._halt.is_set():
                    break
                try:
                    self.poll()
                    if self.detector.server_answering:  # not while the server hangs: its calls would wait too
                        self.client_regions.maybe_sweep()
                except Exception:  # the supervisor must outlive any one bad poll
                    log.exception("supervisor poll failed")
        self._release.wait()

    # -- one look -------------------------------------------------------------------------------
    def poll(self) -> None:
        """One look at tritonserver, the gateway and the workers; heal what is dead or hung."""
        if self.gave_up:
            return
        for event in self.detector.look(self._look, self._catalog.instances()):
            if self._act(event):
                break  # what the detector saw next was seen before this heal

    def _act(self, event: Event) -> bool:
        """Heal what `event` reports; True when tritonserver or workers were healed."""
        if isinstance(event, ServerDown):
            self._healed(self.healer.heal_server(event.cause))
            return True
        if isinstance(event, GatewayDown):
            self._healed(self.healer.heal_gateway(event.cause, event.hung_pid, self.hang_s))
            return False
        if isinstance(event, WorkersLost):
            return self._heal_workers(event)
        if isinstance(event, WorkersOrphaned):
            self.healer.end_orphans(event.orphans, event.why)
            return False
        if isinstance(event, WorkersChanged) and self._catalog.refresh(set(event.instances)):
            self.detector.learnt(event.alive)
        return False

    def _heal_workers(self, lost: WorkersLost) -> bool:
        for pid in sorted(lost.stopped):  # dead now, and never let run again
            kill_hung(pid, f"worker '{lost.dead[pid]}'", self.hang_s)
        models = set(self._catalog.ready_models_of(set(lost.dead.values()))) if lost.dead else set()
        models |= lost.short & set(self.server.loaded_models())  # not one unloaded on purpose
        if not models:  # e.g. the short-lived stub that auto-completes a config: no worker of a ready model
            return False
        names = sorted(models)
        wanted = self._catalog.instances()
        instances: set[str] = set().union(*(wanted.get(n, set()) for n in names))
        survivors = self.detector.serving(instances)
        self._healed(self.healer.heal_models(names, lost.how, survivors), survivors)
        return True

    def _healed(self, heal: Heal | None, retired: list[int] | None = None) -> None:
        if heal is not None:
            self.detector.healed(heal.what, retired or [])
