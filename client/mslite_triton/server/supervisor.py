"""Heals the embedded server: a dead worker, a dead or hung tritonserver, a dead gateway.

Triton 2.51 neither restarts a killed python-backend worker nor reports it: requests routed to it fail
with "Stub process ... is not healthy", and the dead instance stays until the server exits. Nothing
restarts tritonserver or the gateway either. So a thread of the launcher watches all three, every
`interval_s`:

- tritonserver exited, or did not answer `/v2/health/live` within `live_timeout_s` `live_failures` times
  in a row (hung, e.g. a deadlocked signal handler): its process group is killed and it is started again
  on the same ports with the same admin key; the models it had are loaded again from the catalog below.
- the gateway exited, or was stopped (state T) or did not answer a probe on its HTTP port (one it answers
  itself) for `hang_s`: a hung one is killed, and it is started again on the same ports (tritonserver
  keeps running).
- a worker was stopped (state T) for `hang_s`: it is killed while stopped, then healed as a dead one below.
  Let run again, a worker that Triton found unhealthy meanwhile crashes tritonserver (`SIGCONT` -> a
  `boost::interprocess::lock_exception` in the python backend's execute, about 3 s later).
- a worker died (a zombie for two polls in a row): only its model is loaded again, with a config that
  differs in one parameter, so that Triton replaces every instance (a plain load of an unchanged config
  is a no-op). The old version's unload never completes (it waits on the dead instance), so the old
  workers that still live are killed once the new ones serve; Triton holds the dead instances until it
  exits, and after `max_leaked` of them the next heal restarts tritonserver instead, which sweeps them.

The catalog is what it takes to load each model again, kept by the launcher while the server runs: the
config, and for a model uploaded through the load API a hard-linked copy of its files in the launcher's
workspace (Triton's own copy goes with the model or the server). Weights updated at run time live in
stores the launcher owns (`mslite_backend/weight_store.py`), which the new workers adopt. Clients retry
idempotent predicts meanwhile (`_transport.py`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mslite_triton._transport import Transport
from mslite_triton.errors import ServerUnavailableError
from mslite_triton.server.shm_sweep import ClientRegionSweep
from mslite_triton.server.workers import describe_exit, state_of, upload_copies, workers_of

log = logging.getLogger(__name__)

# A parameter that only the supervisor sets (a `section.key` name, which the backend ignores): changing it
# makes Triton load every instance of the model again.
RELOAD_PARAMETER = "mslite_triton.reload"
LOAD_DEADLINE_S = 60.0  # one model's load, including waiting for a fresh server's gRPC endpoint
RETIRE_GRACE_S = 1.0  # how long an old worker of a reloaded model may finish what it was given


@dataclass(frozen=True)
class Snapshot:
    """What it takes to load one model again."""

    name: str
    config: dict[str, Any]
    files_dir: Path | None  # the launcher's copy of an uploaded model's files; None: from the repository


@dataclass(frozen=True)
class Heal:
    """One heal, for logs, tests and the chaos benchmark."""

    what: str  # "worker", "tritonserver" or "gateway"
    cause: str
    seconds: float  # from detection until serving again
    models: tuple[str, ...]  # the models loaded again
    ok: bool


class Supervisor(threading.Thread):
    """Watches the server's processes and heals them (see the module docstring)."""

    def __init__(
        self,
        server: Any,
        interval_s: float = 0.5,
        *,
        live_timeout_s: float = 3.0,
        live_failures: int = 3,
        max_leaked: int = 8,
        hang_s: float = 10.0,
    ) -> None:
        super().__init__(name="mslite-supervisor", daemon=True)
        self.server = server
        self.client_regions = ClientRegionSweep(server)  # shm registrations of clients that died
        self.interval_s = interval_s
        self.live_timeout_s = live_timeout_s
        self.live_failures = live_failures
        self.max_leaked = max_leaked
        self.hang_s = hang_s
        self.heals: list[Heal] = []
        self.gave_up = False  # tritonserver could not be started again: the service is gone
        self.leaked = 0  # dead instances Triton still holds (see the module docstring)
        self._halt = threading.Event()
        self._release = threading.Event()
        self._busy = threading.Lock()  # held for each poll; `halt` waits for it
        self._catalog: dict[str, Snapshot] = {}
        self._files_root = Path(server.workspace) / "uploads"
        self._dirs: dict[str, str] = {}  # instance name -> model directory, learnt from live workers
        self._suspects: set[int] = set()
        self._short: set[str] = set()  # catalog models short of a live worker at the last poll
        self._catalog_known = False  # the catalog held every ready model at least once
        self._serving: dict[int, str] = {}  # pid -> instance name of workers seen alive
        self._seen_workers: frozenset[int] = frozenset()
        self._not_live = 0
        self._hung_since: dict[int, float] = {}  # pid of a gateway or worker stopped or not answering -> since
        self._reloads = 0

    @property
    def recoveries(self) -> list[float]:
        """Seconds each heal took, in order."""
        return [h.seconds for h in self.heals]

    @property
    def catalog(self) -> dict[str, Snapshot]:
        """The models that a heal loads again, by name."""
        return dict(self._catalog)

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

    def stop(self) -> None:
        """`halt`, then `release`."""
        self.halt()
        self.release()

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
                    if not self._not_live:  # not while the server hangs: its calls would wait too
                        self.client_regions.maybe_sweep()
                except Exception:  # the supervisor must outlive any one bad poll
                    log.exception("supervisor poll failed")
        self._release.wait()

    # -- one look -------------------------------------------------------------------------------
    def poll(self) -> None:
        """One look at tritonserver, the gateway and the workers; heal what is dead or hung."""
        if self.gave_up:
            return
        process = self.server.process
        if process is None or process.poll() is not None:
            code = None if process is None else process.returncode
            self.heal_server(f"tritonserver exited (code {code})")
            return
        if not self.server.answers_live(self.live_timeout_s):
            self._not_live += 1
            log.warning("tritonserver did not answer its liveness check (%d of %d)", self._not_live, self.live_failures)
            if self._not_live >= self.live_failures:
                self.heal_server(f"tritonserver did not answer for {self._not_live} checks in a row (hung)")
            return
        self._not_live = 0
        gateway = self.server.gateway
        if gateway is not None and gateway.pid is not None and gateway.is_running():
            if self._hung_too_long(gateway.pid, self._gateway_hung(gateway.pid)):
                self._kill_hung(gateway.pid, "the gateway")
                self.heal_gateway(f"gateway hung for {self.hang_s:.0f} s (stopped or not answering)")
        elif gateway is not None:
            code = gateway.process.returncode if gateway.process is not None else None
            self.heal_gateway(f"gateway exited (code {code})")
        self._watch_workers(process.pid)

    def _gateway_hung(self, pid: int) -> bool:
        # a stopped gateway's port still accepts connections (the kernel's backlog): its state says it at once
        return state_of(pid) == "T" or not self.server.gateway_answers_live(self.live_timeout_s)

    def _hung_too_long(self, pid: int, hung: bool) -> bool:
        """Note whether `pid` is hung now; True once it has been for `hang_s` in a row."""
        if not hung:
            self._hung_since.pop(pid, None)
            return False
        since = self._hung_since.setdefault(pid, time.monotonic())
        return time.monotonic() - since >= self.hang_s

    def _kill_hung(self, pid: int, what: str) -> None:
        """SIGKILL a hung process (it ends even while stopped, and never runs again), and wait until it is gone."""
        log.warning("%s (pid %d) hung for %.0f s (stopped or not answering); killing it", what, pid, self.hang_s)
        self._hung_since.pop(pid, None)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while state_of(pid) not in ("", "Z") and time.monotonic() < deadline:
            time.sleep(0.01)

    def _watch_workers(self, server_pid: int) -> None:
        workers = workers_of(server_pid)
        self.server.note_model_dirs(w.model_dir for w in workers if w.state != "Z")
        for w in workers:
            if w.instance and w.state != "Z":
                self._dirs[w.instance] = w.model_dir
                self._serving[w.pid] = w.instance
        dead = {w.pid for w in workers if w.state == "Z" and w.pid in self._serving}
        confirmed, self._suspects = dead & self._suspects, dead
        hung = False
        for w in workers:
            if w.pid in self._serving and self._hung_too_long(w.pid, w.state == "T"):
                self._kill_hung(w.pid, f"worker '{w.instance}'")
                confirmed.add(w.pid)  # dead now, and never let run again
                hung = True
        # A worker that died before this thread saw it alive (e.g. while a heal was loading its model) left
        # no trace but a missing instance: a catalog model short of a worker, two polls in a row.
        live = {w.instance for w in workers if w.instance and w.state != "Z"}
        short = {n for n, snap in self._catalog.items() if not _instance_names(snap.config) <= live}
        short, self._short = short & self._short, short
        if confirmed or short:
            instances = {pid: self._serving.pop(pid) for pid in confirmed}
            models = set(self._models_of(set(instances.values()))) if confirmed else set()
            models |= short & set(self.server.loaded_models())  # not one unloaded on purpose
            if models:
                exits = "; ".join(f"pid {w.pid} {describe_exit(w.exit_status)}" for w in workers if w.pid in confirmed)
                self.heal_models(sorted(models), "was stopped and killed" if hung else f"died ({exits})")
                return
        alive = frozenset(w.pid for w in workers if w.state != "Z")
        if alive != self._seen_workers:  # a model was loaded, reloaded or unloaded: learn what it takes
            if self._refresh_catalog({w.instance for w in workers if w.instance and w.state != "Z"}):
                self._seen_workers = alive
                self._catalog_known = True

    def _models_of(self, instances: set[str]) -> list[str]:
        """The ready models the given instances served.

        A dead process that served none was no worker, e.g. the short-lived stub that auto-completes a config.
        """
        found = []
        for name in self.server.loaded_models():
            config = self.server.http_json("GET", f"/v2/models/{name}/config", None)
            if _instance_names(config) & instances:
                found.append(name)
        return found

    # -- the catalog ----------------------------------------------------------------------------
    def _refresh_catalog(self, instances: set[str]) -> bool:
        """Snapshot every ready model; drop the ones gone.

        False when it could not be completed, or when some of the live worker `instances` belong to no
        ready model yet (a model still loading): it is tried again at the next poll.
        """
        try:
            ready = set(self.server.loaded_models())
            complete = True
            for name in ready:
                config = self.server.http_json("GET", f"/v2/models/{name}/config", None)
                instances -= _instance_names(config)
                known = self._catalog.get(name)
                if known is not None and known.config == config:
                    continue
                snap = self._snapshot(name, config)
                if snap is None:
                    complete = False  # its workers are not known yet
                else:
                    self._catalog[name] = snap
        except ServerUnavailableError:
            return False
        for name in set(self._catalog) - ready:
            self._forget(name)
        return complete and not instances

    def _snapshot(self, name: str, config: dict[str, Any]) -> Snapshot | None:
        model_dir = next((self._dirs[i] for i in sorted(_instance_names(config)) if i in self._dirs), None)
        if model_dir is None:
            return None
        if not upload_copies([model_dir]):  # from the server's repository: Triton finds it there again
            return Snapshot(name, config, None)
        target = self._files_root / name
        shutil.rmtree(target, ignore_errors=True)
        try:
            _link_tree(Path(model_dir), target)
        except OSError as e:  # e.g. the model was unloaded meanwhile
            log.warning("could not keep the files of model '%s' for a heal: %s", name, e)
            shutil.rmtree(target, ignore_errors=True)
            return None
        return Snapshot(name, config, target)

    def _forget(self, name: str) -> None:
        snap = self._catalog.pop(name)
        if snap.files_dir is not None:
            shutil.rmtree(snap.files_dir, ignore_errors=True)

    # -- heals ----------------------------------------------------------------------------------
    def heal_models(self, names: list[str], how: str = "died") -> None:
        """Load the models of dead workers again, each with all new instances (or restart the server).

        `how` the worker ended, for the logs: "died (its exit status)", or "was stopped and killed".
        """
        started = time.monotonic()
        self.leaked += len(names)
        missing = [n for n in names if n not in self._catalog]
        if missing or self.leaked > self.max_leaked:
            why = f"model(s) {missing} not in the catalog" if missing else f"{self.leaked} dead instances held"
            self.heal_server(f"worker of {names} {how}; {why}")
            return
        log.warning("a worker of model(s) %s %s; loading them again", names, how)
        self._reloads += 1
        snaps = [self._catalog[n] for n in names]
        instances = set().union(*(_instance_names(s.config) for s in snaps))
        survivors = [pid for pid, instance in self._serving.items() if instance in instances]
        ok = self._load_all(snaps, reload=True)
        self._retire(survivors)
        self._seen_workers, self._short = frozenset(), set()  # learn the new workers' directories and configs
        self._record("worker", f"a worker of {names} {how}", started, names, ok)

    def _retire(self, pids: list[int]) -> None:
        """Kill the old workers of reloaded models: Triton never ends them, as their unload waits on the dead one.

        The new workers serve every request by now; one in progress on an old worker fails and is retried.
        """
        time.sleep(RETIRE_GRACE_S)
        server_pid = self.server.process.pid if self.server.process is not None else -1
        for pid in pids:
            self._serving.pop(pid, None)
            if any(w.pid == pid and w.state != "Z" for w in workers_of(server_pid)):  # still ours, still alive
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                self.leaked += 1

    def heal_server(self, cause: str) -> None:
        """Kill tritonserver and its workers, start it again on the same ports, load the catalog's models.

        Up to 3 tries (e.g. a worker dies while the models load); then the supervisor gives up.
        """
        started = time.monotonic()
        log.warning("%s: restarting it and loading its %d model(s) again", cause, len(self._catalog))
        snaps = list(self._catalog.values())
        # With the catalog known, tritonserver starts with no model and every model loads at once (the
        # repository's included, with the config they had): faster than its start loading the repository's
        # first and ours after. Otherwise its start loads the configured ones, as the first start did.
        at_start = () if self._catalog_known else None
        for attempt in range(3):
            if self._halt.is_set():
                return
            try:
                self.server.restart(load_models=at_start)
            except Exception as e:  # e.g. a port taken meanwhile: try again
                log.error("restarting tritonserver failed (try %d of 3): %s", attempt + 1, e)
                time.sleep(1.0)
                continue
            self._suspects, self._serving, self._seen_workers, self._short = set(), {}, frozenset(), set()
            self._not_live, self.leaked, self._hung_since = 0, 0, {}
            try:
                ready = set(self.server.loaded_models())
            except ServerUnavailableError:  # it died again right after its start: the next try restarts it
                log.warning("tritonserver died again while healing (try %d of 3); restarting again", attempt + 1)
                continue
            log.warning(
                "tritonserver up again in %.1f s with %d model(s); loading %d more",
                time.monotonic() - started, len(ready), len([s for s in snaps if s.name not in ready]),
            )  # fmt: skip
            if self._load_all([s for s in snaps if s.name not in ready], reload=False):
                self._record("tritonserver", cause, started, [s.name for s in snaps], True)
                return
            log.warning("some models did not come back (try %d of 3); restarting again", attempt + 1)
        self.gave_up = True
        self._record("tritonserver", cause, started, [s.name for s in snaps], False)
        log.error("tritonserver could not be restarted; giving up (log: %s)", self.server.log_path)

    def heal_gateway(self, cause: str) -> None:
        """Start the gateway again on the same ports."""
        started = time.monotonic()
        log.warning("%s; starting it again", cause)
        ok = True
        try:
            self.server.restart_gateway()
        except Exception as e:  # noqa: BLE001 - tried again at the next poll
            log.error("restarting the gateway failed: %s", e)
            ok = False
        self._record("gateway", cause, started, [], ok)

    def _record(self, what: str, cause: str, started: float, models: list[str], ok: bool) -> None:
        heal = Heal(what, cause, time.monotonic() - started, tuple(models), ok)
        self.heals.append(heal)
        log.warning("%s healed in %.1f s (%d model(s) loaded again)%s", what, heal.seconds, len(models),
                    "" if ok else "; some failed")  # fmt: skip

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
        files = {} if snap.files_dir is None else _read_files(snap.files_dir)
        # Over gRPC (Triton 2.51's HTTP load API crashes the server on bodies of a few MiB), to Triton's own
        # port: the gateway in front of it may be the process being healed.
        host = "127.0.0.1" if self.server.config.gateway else self.server.config.host
        url = f"grpc://{host}:{self.server.triton_grpc_port}"
        deadline = time.monotonic() + LOAD_DEADLINE_S
        while True:
            with Transport(url, key=self.server.admin_key, retry_s=0) as transport:  # a new connection each try
                try:
                    transport.load_model(snap.name, config, {f"file:{k}": v for k, v in files.items()})
                    return True
                except ServerUnavailableError as e:  # the fresh server's gRPC endpoint may lag its HTTP one
                    if not self._server_alive():  # died during the heal: no point waiting out the deadline
                        log.error("loading model '%s' again failed: tritonserver died meanwhile", snap.name)
                        return False
                    if time.monotonic() > deadline or self._halt.is_set():
                        log.error("loading model '%s' again failed: %s", snap.name, e)
                        return False
                except Exception as e:  # one model failing to come back must not stop the others
                    log.error("loading model '%s' again failed: %s", snap.name, e)
                    return False
            time.sleep(0.2)

    def _server_alive(self) -> bool:
        process = self.server.process
        return process is not None and process.poll() is None


def _instance_names(config: dict[str, Any]) -> set[str]:
    """The instance names Triton gives a model's workers, from its config."""
    names: set[str] = set()
    for group in config.get("instance_group") or []:
        count = int(group.get("count", 1)) * max(1, len(group.get("gpus") or []))
        names.update(f"{group.get('name')}_{k}" for k in range(count))
    return names


def _link_tree(source: Path, target: Path) -> None:
    """Hard links of every file under `source` (copies across file systems); config.pbtxt left out."""
    for path in source.rglob("*"):
        if not path.is_file() or path.name == "config.pbtxt":
            continue
        dest = target / path.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            os.link(path, dest)
        except OSError:
            shutil.copy2(path, dest)


def _read_files(root: Path) -> dict[str, bytes]:
    """Every file under a kept model folder, by path relative to it."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
