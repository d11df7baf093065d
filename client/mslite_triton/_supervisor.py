"""Heals the embedded server when a worker process dies.

Triton 2.51 neither restarts a killed python-backend worker nor reports it: requests routed to it fail
with "Stub process ... is not healthy", and the dead instance, its zombie process and its /dev/shm
region stay until the server exits (after waiting its whole exit timeout). So the supervisor watches
the server's worker processes; when one is dead (a zombie for two polls in a row), it snapshots the
loaded models (config, and the files of uploaded ones), restarts the server on the same ports with a
clean /dev/shm, and loads the models again. Clients retry idempotent predicts meanwhile.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._shm_sweep import ClientRegionSweep
from ._transport import Transport
from ._workers import workers_of
from .errors import ServerUnavailableError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Snapshot:
    """What it takes to load one model again."""

    name: str
    config: dict[str, Any]
    files: dict[str, bytes] | None  # None: the model comes from the server's own repository


class Supervisor(threading.Thread):
    """Polls the server's workers and restarts the server when one has died."""

    def __init__(self, server: Any, interval_s: float = 0.5) -> None:
        super().__init__(name="mslite-supervisor", daemon=True)
        self.server = server
        self.client_regions = ClientRegionSweep(server)  # shm registrations of clients that died
        self.interval_s = interval_s
        self.recoveries: list[float] = []  # seconds from detection to all models ready again
        self._stop_event = threading.Event()
        self._dirs: dict[str, str] = {}  # instance name -> model directory, learnt from live workers
        self._suspects: set[int] = set()
        self._serving: dict[int, str] = {}  # pid -> instance name of workers seen alive

    def stop(self) -> None:
        """Stop polling (does not touch the server)."""
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=30)

    def run(self) -> None:
        while not self._stop_event.wait(self.interval_s):
            try:
                self.poll()
                self.client_regions.maybe_sweep()
            except Exception:  # the supervisor must outlive any one bad poll
                log.exception("supervisor poll failed")

    def poll(self) -> None:
        """One look at the workers; recover when one has been dead for two polls."""
        process = self.server.process
        if process is None or process.poll() is not None:
            return
        workers = workers_of(process.pid)
        self.server.note_model_dirs(w.model_dir for w in workers if w.state != "Z")
        for w in workers:
            if w.instance and w.state != "Z":
                self._dirs[w.instance] = w.model_dir
                self._serving[w.pid] = w.instance
        dead = {w.pid for w in workers if w.state == "Z" and w.pid in self._serving}
        confirmed, self._suspects = dead & self._suspects, dead
        instances = self._instances_of_ready_models() if confirmed else set()
        confirmed = {pid for pid in confirmed if self._serving.pop(pid, "") in instances}
        if confirmed:
            self.recover(len(confirmed))

    def _instances_of_ready_models(self) -> set[str]:
        """Instance names of every ready model.

        A dead process not among them was no worker, e.g. the short-lived stub that auto-completes a config.
        """
        names: set[str] = set()
        for name in self.server.loaded_models():
            config = self.server.http_json("GET", f"/v2/models/{name}/config", None)
            for group in config.get("instance_group") or []:
                count = int(group.get("count", 1)) * max(1, len(group.get("gpus") or []))
                names.update(f"{group.get('name')}_{k}" for k in range(count))
        return names

    def recover(self, dead: int) -> None:
        """Restart the server and load its models again (up to 3 tries, e.g. if a worker dies mid-load)."""
        started = time.monotonic()
        log.warning("%d worker process(es) died; restarting the server and reloading its models", dead)
        snapshots = self.snapshot()
        for attempt in range(3):
            self.server.restart()
            self._suspects, self._serving = set(), {}
            ready = set(self.server.loaded_models())
            missing = [s for s in snapshots if s.name not in ready]
            with ThreadPoolExecutor(max(1, min(4, len(missing)))) as pool:
                list(pool.map(self._load, missing))
            if set(self.server.loaded_models()) >= {s.name for s in snapshots}:
                break
            log.warning("some models did not come back (try %d of 3); restarting again", attempt + 1)
        self.recoveries.append(time.monotonic() - started)
        log.warning("server restarted; %d model(s) reloaded in %.1f s", len(snapshots), self.recoveries[-1])

    def snapshot(self) -> list[Snapshot]:
        """Config and files of every ready model, taken while the server still runs."""
        repo = str(Path(self.server.config.model_repository).resolve())
        snapshots = []
        for name in self.server.loaded_models():
            config = self.server.http_json("GET", f"/v2/models/{name}/config", None)
            model_dir = self._model_dir(config)
            if model_dir is None or os.path.dirname(model_dir) == repo:
                snapshots.append(Snapshot(name, config, None))
            else:
                snapshots.append(Snapshot(name, config, _read_files(model_dir)))
        return snapshots

    def _model_dir(self, config: dict[str, Any]) -> str | None:
        for group in config.get("instance_group") or []:
            count = int(group.get("count", 1)) * max(1, len(group.get("gpus") or []))
            for k in range(count):
                found = self._dirs.get(f"{group.get('name')}_{k}")
                if found:
                    return found
        return None

    def _load(self, snap: Snapshot) -> None:
        # over gRPC: Triton 2.51's HTTP load API crashes the server on bodies of a few MiB
        files = {f"file:{k}": v for k, v in (snap.files or {}).items()}
        deadline = time.monotonic() + 20
        with Transport(self.server.grpc_url, key=self.server.admin_key, retry_s=0) as transport:
            while True:
                try:
                    transport.load_model(snap.name, None if snap.files is None else snap.config, files)
                    return
                except ServerUnavailableError as e:  # the fresh server's gRPC endpoint may lag its HTTP one
                    if time.monotonic() > deadline:
                        log.error("reloading model '%s' failed: %s", snap.name, e)
                        return
                    time.sleep(0.2)
                except Exception as e:  # one model failing to come back must not stop the others
                    log.error("reloading model '%s' failed: %s", snap.name, e)
                    return


def _read_files(model_dir: str) -> dict[str, bytes]:
    """Every file under an uploaded model's folder, by path relative to it."""
    files = {}
    root = Path(model_dir)
    for path in root.rglob("*"):
        if path.is_file() and path.name != "config.pbtxt":
            files[str(path.relative_to(root))] = path.read_bytes()
    return files
