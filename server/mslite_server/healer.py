"""The heals: a dead worker's models loaded again, tritonserver or the gateway started again.

Triton 2.51 neither restarts a killed python-backend worker nor reports it: requests routed to it fail
with "Stub process ... is not healthy", and the dead instance stays until the server exits. So a dead
worker's model is loaded again with a config that differs in one parameter, so that Triton replaces every
instance (a plain load of an unchanged config is a no-op). The old version's unload never completes (it
waits on the dead instance), so the old workers that still live are killed once the new ones serve;
Triton holds the dead instances until it exits, and after `max_leaked` of them the next heal restarts
tritonserver instead, which sweeps them. A restarted tritonserver gets the same ports and admin key, and
the catalog's models (`model_catalog.py`). Clients retry idempotent predicts meanwhile (`_transport.py`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from mslite_server.errors import TritonUnavailableError
from mslite_server.model_catalog import ModelCatalog, Snapshot, read_files
from mslite_server.ports import PortTakenError
from mslite_server.supervised_server import SupervisedServer
from mslite_server.workers import state_of, workers_of

log = logging.getLogger(__name__)

# A parameter that only the supervisor sets (a `section.key` name, which the backend ignores): changing it
# makes Triton load every instance of the model again.
RELOAD_PARAMETER = "mslite_triton.reload"
LOAD_DEADLINE_S = 60.0  # one model's load, including waiting for a fresh server's gRPC endpoint
RETIRE_GRACE_S = 1.0  # how long an old worker of a reloaded model may finish what it was given
SERVER_TRIES = 3  # failed restarts of tritonserver in one heal before the supervisor gives up (not a port taken)
PORT_RETRY_S = (1.0, 30.0)  # the first and the longest wait before another start while someone holds a public port


@dataclass(frozen=True)
class Heal:
    """One heal, for logs, tests and the chaos benchmark."""

    what: str  # "worker", "tritonserver" or "gateway"
    cause: str
    seconds: float  # from detection until serving again
    models: tuple[str, ...]  # the models loaded again
    ok: bool


class Healer:
    """Carries out the heals of one local server and records them (see the module docstring)."""

    def __init__(
        self, server: SupervisedServer, catalog: ModelCatalog, halted: threading.Event, *, max_leaked: int = 8
    ) -> None:
        self.server = server
        self.catalog = catalog
        self.max_leaked = max_leaked
        self.heals: list[Heal] = []
        self.gave_up = False  # tritonserver could not be started again: the service is gone
        self.leaked = 0  # dead instances the running tritonserver still holds
        self._halted = halted
        self._reloads = 0
        self._gateway_retry = _Backoff()

    def heal_models(self, names: list[str], how: str, serving: list[int]) -> Heal | None:
        """Load the models of dead workers again, each with all new instances (or restart the server).

        `how` the worker ended, for the logs: "died (its exit status)", or "was stopped and killed";
        `serving` the pids of their models' workers still alive, killed once the new ones serve.
        """
        started = time.monotonic()
        self.leaked += len(names)
        refused = [n for n in names if n in self.catalog.refused]  # names never made a path (`model_catalog`)
        if refused:
            log.warning("a worker of model(s) %.200s %s; not loaded again: their names break the rule", refused, how)
            names = [n for n in names if n not in refused]
            if not names:
                return self._record("worker", f"a worker of {refused} {how}", started, [], False)
        snapshots = self.catalog.snapshots()
        missing = [n for n in names if n not in snapshots]
        if missing or self.leaked > self.max_leaked:
            why = f"model(s) {missing} not in the catalog" if missing else f"{self.leaked} dead instances held"
            return self.heal_server(f"worker of {names} {how}; {why}")
        log.warning("a worker of model(s) %s %s; loading them again", names, how)
        self._reloads += 1
        ok = self._load_all([snapshots[n] for n in names], reload=True)
        self._retire(serving)
        return self._record("worker", f"a worker of {names} {how}", started, names, ok)

    def _retire(self, pids: list[int]) -> None:
        """Kill the old workers of reloaded models: Triton never ends them, as their unload waits on the dead one.

        The new workers serve every request by now; one in progress on an old worker fails and is retried.
        """
        time.sleep(RETIRE_GRACE_S)
        server_pid = self.server.process.pid if self.server.process is not None else -1
        for pid in pids:
            if any(w.pid == pid and w.state != "Z" for w in workers_of(server_pid)):  # still ours, still alive
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                self.leaked += 1

    def end_orphans(self, orphans: Mapping[int, str], why: str) -> None:
        """Kill workers of instances Triton no longer serves (`FaultDetector` found them still running).

        A request it was running fails with Triton's "Stub process ... is not healthy"; Triton keeps the
        dead instance registered, as after any killed worker, so each counts as a leaked one.
        """
        for pid, instance in sorted(orphans.items()):
            log.warning("worker '%s' (pid %d): %s; killing it", instance, pid, why)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self.leaked += 1

    def heal_server(self, cause: str) -> Heal | None:
        """Kill tritonserver and its workers, start it again on the same ports, load the catalog's models.

        Up to `SERVER_TRIES` tries (e.g. a worker dies while the models load); then the supervisor gives up.
        A start that fails because another process holds a public port (the metrics port) is no try: it
        is made again, with a growing wait, until the port is free. None when the supervisor was halted meanwhile.
        """
        started = time.monotonic()
        snaps = list(self.catalog.snapshots().values())
        log.warning("%s: restarting it and loading its %d model(s) again", cause, len(snaps))
        # With the catalog known, tritonserver starts with no model and every model loads at once (the
        # repository's included, with the config they had): faster than its start loading the repository's
        # first and ours after. Otherwise its start loads the configured ones, as the first start did.
        at_start = () if self.catalog.known else None
        tries, backoff = 0, _Backoff()
        while tries < SERVER_TRIES:
            if self._halted.is_set():
                return None
            try:
                self.server.restart(load_models=at_start)
            except PortTakenError as e:  # someone holds a public port: never a reason to give up
                log.error("restarting tritonserver failed, trying again in %.0f s: %s", backoff.delay_s, e)
                if self._halted.wait(backoff.next_delay()):
                    return None
                continue
            except Exception as e:
                tries += 1
                log.error("restarting tritonserver failed (try %d of %d): %s", tries, SERVER_TRIES, e)
                time.sleep(1.0)
                continue
            tries += 1
            self.leaked = 0
            try:
                ready = set(self.server.loaded_models())
            except TritonUnavailableError:  # it died again right after its start: the next try restarts it
                log.warning(
                    "tritonserver died again while healing (try %d of %d); restarting again", tries, SERVER_TRIES
                )
                continue
            log.warning(
                "tritonserver up again in %.1f s with %d model(s); loading %d more",
                time.monotonic() - started, len(ready), len([s for s in snaps if s.name not in ready]),
            )  # fmt: skip
            if self._load_all([s for s in snaps if s.name not in ready], reload=False):
                return self._record("tritonserver", cause, started, [s.name for s in snaps], True)
            log.warning("some models did not come back (try %d of %d); restarting again", tries, SERVER_TRIES)
        self.gave_up = True
        heal = self._record("tritonserver", cause, started, [s.name for s in snaps], False)
        log.error("tritonserver could not be restarted; giving up (log: %s)", self.server.log_path)
        return heal

    def heal_gateway(self, cause: str, hung_pid: int | None = None, hang_s: float = 0.0) -> Heal | None:
        """Start the gateway again on the same ports; a hung one (`hung_pid`) is killed first.

        A start that fails is made again at a later poll, after a wait that grows while it keeps failing
        (someone holding a public port); None while that wait lasts.
        """
        if hung_pid is not None:
            kill_hung(hung_pid, "the gateway", hang_s)
        if not self._gateway_retry.due():
            return None
        started = time.monotonic()
        log.warning("%s; starting it again", cause)
        ok = True
        try:
            self.server.restart_gateway()
            self._gateway_retry = _Backoff()
        except Exception as e:  # noqa: BLE001 - tried again at a later poll
            log.error("restarting the gateway failed, trying again in %.0f s: %s", self._gateway_retry.delay_s, e)
            self._gateway_retry.wait_from_now()
            ok = False
        return self._record("gateway", cause, started, [], ok)

    def _record(self, what: str, cause: str, started: float, models: list[str], ok: bool) -> Heal:
        heal = Heal(what, cause, time.monotonic() - started, tuple(models), ok)
        self.heals.append(heal)
        log.warning("%s healed in %.1f s (%d model(s) loaded again)%s", what, heal.seconds, len(models),
                    "" if ok else "; some failed")  # fmt: skip
        return heal

    def _load_all(self, snaps: list[Snapshot], *, reload: bool) -> bool:
        if not snaps:
            return True
        with ThreadPoolExecutor(max(1, min(4, len(snaps)))) as pool:
            return all(pool.map(lambda s: self._load(s, reload=reload), snaps))

    def _load(self, snap: Snapshot, *, reload: bool) -> bool:
        # the config it had (an override the admin loaded it with included)
        config = json.loads(json.dumps(snap.config))
        params = config.setdefault("parameters", {})
        if reload:
            params[RELOAD_PARAMETER] = {"string_value": str(self._reloads)}
        else:
            params.pop(RELOAD_PARAMETER, None)
        files = {} if snap.files_dir is None else read_files(snap.files_dir)
        # Over gRPC (Triton 2.51's HTTP load API crashes the server on bodies of a few MiB), to Triton's own
        # endpoint: the gateway in front of it may be the process being healed.
        api = self.server.triton_api()
        deadline = time.monotonic() + LOAD_DEADLINE_S
        while True:
            try:  # a new connection each try
                api.load_model(snap.name, config, {f"file:{k}": v for k, v in files.items()})
                return True
            except TritonUnavailableError as e:  # the fresh server's gRPC endpoint may lag its HTTP one
                if not self._server_alive():  # died during the heal: no point waiting out the deadline
                    log.error("loading model '%s' again failed: tritonserver died meanwhile", snap.name)
                    return False
                if time.monotonic() > deadline or self._halted.is_set():
                    log.error("loading model '%s' again failed: %s", snap.name, e)
                    return False
            except Exception as e:  # one model failing to come back must not stop the others
                log.error("loading model '%s' again failed: %s", snap.name, e)
                return False
            time.sleep(0.2)

    def _server_alive(self) -> bool:
        process = self.server.process
        return process is not None and process.poll() is None


class _Backoff:
    """Waits between failed starts that double from `PORT_RETRY_S[0]` up to `PORT_RETRY_S[1]`."""

    def __init__(self) -> None:
        self.delay_s = PORT_RETRY_S[0]
        self._due = 0.0

    def next_delay(self) -> float:
        """The wait to make now; the next one is twice as long (up to the longest)."""
        delay, self.delay_s = self.delay_s, min(self.delay_s * 2, PORT_RETRY_S[1])
        return delay

    def wait_from_now(self) -> None:
        """Start the next wait now (`due` is False until it has passed)."""
        self._due = time.monotonic() + self.next_delay()

    def due(self) -> bool:
        """Whether the current wait has passed."""
        return time.monotonic() >= self._due


def kill_hung(pid: int, what: str, hang_s: float) -> None:
    """SIGKILL a hung process (it ends even while stopped, and never runs again), and wait until it is gone."""
    log.warning("%s (pid %d) hung for %.0f s (stopped or not answering); killing it", what, pid, hang_s)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while state_of(pid) not in ("", "Z") and time.monotonic() < deadline:
        time.sleep(0.01)
