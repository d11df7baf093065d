"""Turns what one supervisor poll sees into events: a process of the server died or hangs.

The detector does nothing itself: it reads an `Observer` (the real one reads `/proc` and asks the server,
`supervisor.py`; unit tests pass fixed observations) and returns what to heal. Its state is what it must
remember between polls, for as long as one tritonserver process lives: `healed` resets it after each heal,
the one place that does.

The rules, in the order of one poll (the first that finds tritonserver gone or hung ends the poll):
- tritonserver exited; or it did not answer its liveness check `live_failures` times in a row.
- the gateway exited; or it was stopped (state T) or did not answer its probe for `hang_s` in a row.
- a worker seen alive is a zombie two polls in a row (one sighting could be a worker Triton is reaping at
  an unload), unless it exited with code 0: Triton ended it (an unload, or the old instance of a reloaded
  model), which a busy machine can leave unreaped for more than a poll; or it was stopped for `hang_s`
  (the supervisor kills it while stopped: let run again, it can crash tritonserver).
- a model in the catalog is short of one of its instances two polls in a row: a worker that died before
  a poll ever saw it alive (e.g. while a heal was loading its model) leaves no other trace.
- the set of live workers changed since the catalog last learnt it (a model was loaded or unloaded).
- a live worker is an orphan for `orphan_grace_s` in a row: its model, once seen ready in its lifetime, is
  no longer ready (unloaded), or a younger live worker of that model has its instance name (the model was
  loaded again). Triton ends such a worker only once its `execute` returns, which a request may keep it
  from doing for good.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from mslite_server.config import ORPHAN_GRACE_S
from mslite_server.workers import Worker, describe_exit, upload_copies

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GatewaySeen:
    """The gateway's process as one poll sees it."""

    pid: int | None
    running: bool
    code: int | None = None  # its exit code once it ended


class Observer(Protocol):
    """What one poll looks at; each is asked only when what was asked before leaves a reason to."""

    def now(self) -> float:
        """A monotonic clock, in seconds."""

    def server_exit(self) -> tuple[bool, int | None]:
        """(True, exit code) once tritonserver has exited or was never started; (False, None) while it runs."""

    def server_answers(self) -> bool:
        """True when tritonserver answered its liveness check in time."""

    def gateway(self) -> GatewaySeen | None:
        """The gateway's process; None when the server runs without one."""

    def gateway_state(self, pid: int) -> str:
        """The gateway's state letter in /proc (`T`: stopped)."""

    def gateway_answers(self) -> bool:
        """True when the gateway answered its probe in time."""

    def workers(self) -> list[Worker]:
        """The worker processes of tritonserver, zombies included."""

    def ready_models(self) -> set[str] | None:
        """The models with a version ready to serve; None when tritonserver did not say."""


@dataclass(frozen=True)
class ServerDown:
    """tritonserver exited or hangs: restart it."""

    cause: str


@dataclass(frozen=True)
class GatewayDown:
    """The gateway exited, or hangs (`hung_pid`: kill it first); start it again."""

    cause: str
    hung_pid: int | None = None


@dataclass(frozen=True)
class WorkersLost:
    """Workers died or hang: load their models again.

    `dead` maps the pid of each lost worker to its instance name; `stopped` are those to kill first (hung,
    not dead yet); `short` are catalog models short of a worker that no poll saw alive.
    """

    dead: Mapping[int, str]
    stopped: frozenset[int]
    exits: Mapping[int, int | None]  # wait status of each dead pid (None: unknown)
    short: frozenset[str]

    @property
    def how(self) -> str:
        """How the workers ended, for the log and the heal's cause."""
        if self.stopped:
            return "was stopped and killed"
        return "died (" + "; ".join(f"pid {pid} {describe_exit(s)}" for pid, s in sorted(self.exits.items())) + ")"


@dataclass(frozen=True)
class WorkersChanged:
    """The live workers are not the ones the catalog learnt: it should learn them (then call `learnt`)."""

    alive: frozenset[int]
    instances: frozenset[str]


@dataclass(frozen=True)
class WorkersOrphaned:
    """Live workers of instances Triton no longer serves, still running after the grace: kill them.

    `orphans` maps each pid to its instance name; `why` says what became of their models, for the log.
    """

    orphans: Mapping[int, str]
    why: str


Event = ServerDown | GatewayDown | WorkersLost | WorkersChanged | WorkersOrphaned


@dataclass
class _Memory:
    """What the detector remembers between polls of one tritonserver process."""

    not_live: int = 0  # liveness checks failed in a row
    hung_since: dict[int, float] = field(default_factory=dict)  # pid stopped or not answering -> since when
    serving: dict[int, str] = field(default_factory=dict)  # pid -> instance name of workers seen alive
    suspects: frozenset[int] = frozenset()  # workers seen as zombies at the last poll
    short: frozenset[str] = frozenset()  # catalog models short of a live instance at the last poll
    learnt: frozenset[int] = frozenset()  # the live workers the catalog last learnt
    owner: dict[int, str] = field(default_factory=dict)  # pid of a live worker -> its model, once known
    was_ready: set[int] = field(default_factory=set)  # live workers whose model was seen ready in their lifetime
    orphaned_since: dict[int, float] = field(default_factory=dict)  # pid of an orphan -> since when


class FaultDetector:
    """Finds dead and hung processes of one local server, poll by poll (see the module docstring)."""

    def __init__(self, *, live_failures: int = 3, hang_s: float = 10.0, orphan_grace_s: float = ORPHAN_GRACE_S) -> None:
        self.live_failures = live_failures
        self.hang_s = hang_s
        self.orphan_grace_s = orphan_grace_s
        self._memory = _Memory()

    @property
    def server_answering(self) -> bool:
        """False while tritonserver fails its liveness checks (calls to it would wait too)."""
        return self._memory.not_live == 0

    def serving(self, instances: set[str]) -> list[int]:
        """The pids of the live workers seen serving any of `instances`."""
        return [pid for pid, name in self._memory.serving.items() if name in instances]

    def look(self, seen: Observer, catalog: Mapping[str, set[str]]) -> Iterator[Event]:
        """One poll: what to heal, given the catalog's models and the instance names each should have.

        Lazily, in the order of the module docstring: a heal acted on before taking the next event
        happens before the next process is looked at. Stop taking events after a heal of tritonserver
        or of workers (what follows was seen before it).
        """
        m = self._memory
        exited, code = seen.server_exit()
        if exited:
            yield ServerDown(f"tritonserver exited (code {code})")
            return
        if not seen.server_answers():
            m.not_live += 1
            log.warning("tritonserver did not answer its liveness check (%d of %d)", m.not_live, self.live_failures)
            if m.not_live >= self.live_failures:
                yield ServerDown(f"tritonserver did not answer for {m.not_live} checks in a row (hung)")
            return
        m.not_live = 0
        gateway = self._look_at_gateway(seen)
        if gateway is not None:
            yield gateway
        yield from self._look_at_workers(seen, catalog)

    def _look_at_gateway(self, seen: Observer) -> GatewayDown | None:
        gateway = seen.gateway()
        if gateway is None:
            return None
        if gateway.pid is not None and gateway.running:
            # a stopped gateway's port still accepts connections (the kernel's backlog): its state says it at once
            hung = seen.gateway_state(gateway.pid) == "T" or not seen.gateway_answers()
            if self._hung_too_long(gateway.pid, hung, seen.now()):
                return GatewayDown(f"gateway hung for {self.hang_s:.0f} s (stopped or not answering)", gateway.pid)
            return None
        return GatewayDown(f"gateway exited (code {gateway.code})")

    def _look_at_workers(self, seen: Observer, catalog: Mapping[str, set[str]]) -> Iterator[Event]:
        m = self._memory
        workers = seen.workers()
        live = [w for w in workers if w.state != "Z"]
        for w in live:
            if w.instance:
                m.serving[w.pid] = w.instance
        for w in workers:
            if w.state == "Z" and w.exit_status == 0:  # ended by Triton: no longer serving, and no loss
                m.serving.pop(w.pid, None)
        dead = frozenset(w.pid for w in workers if w.state == "Z" and w.pid in m.serving)
        confirmed, m.suspects = set(dead & m.suspects), dead
        now = seen.now()
        stopped = frozenset(
            w.pid for w in workers if w.pid in m.serving and self._hung_too_long(w.pid, w.state == "T", now)
        )
        instances = frozenset(w.instance for w in live if w.instance)
        short = frozenset(name for name, wanted in catalog.items() if not wanted <= instances)
        short, m.short = short & m.short, short
        if confirmed or stopped or short:
            lost = {pid: m.serving.pop(pid) for pid in confirmed | stopped}
            exits = {w.pid: w.exit_status for w in workers if w.pid in lost}
            yield WorkersLost(lost, stopped, exits, short)
        alive = frozenset(w.pid for w in live)
        if alive != m.learnt:
            yield WorkersChanged(alive, instances)
        orphaned = self._orphans(seen, catalog, live, now)
        if orphaned is not None:
            yield orphaned

    def _orphans(
        self, seen: Observer, catalog: Mapping[str, set[str]], live: list[Worker], now: float
    ) -> WorkersOrphaned | None:
        """The live workers that have been orphans for `orphan_grace_s` (see the module docstring).

        Each worker's model is learnt once: from the catalog, by an instance name that one catalog model
        alone has (another model's instance group of the same name would make a worker of either look
        replaced), else from the folder it runs from, for a model of the server's repository (whose folder
        bears its name). A worker is judged only once its model was seen ready in its lifetime: the workers
        of a model's first load run before it is ready.
        """
        m = self._memory
        owners: dict[str, str] = {}
        for model, names in catalog.items():
            for name in names:
                owners[name] = "" if name in owners else model
        for w in live:
            model = owners.get(w.instance) or _repository_model(w)
            if model:
                m.owner.setdefault(w.pid, model)
        m.owner = {w.pid: m.owner[w.pid] for w in live if w.pid in m.owner}  # the dead are forgotten
        ready = seen.ready_models() if m.owner else set()
        if ready is None:  # no answer this time: the timers go on from what was seen before
            return None
        m.was_ready = {pid for pid, model in m.owner.items() if pid in m.was_ready or model in ready}
        judged = [w for w in live if w.pid in m.was_ready]
        youngest: dict[tuple[str, str], int] = {}
        for w in judged:
            key = (m.owner[w.pid], w.instance)
            youngest[key] = max(youngest.get(key, 0), w.started)
        why = {}
        for w in judged:
            model = m.owner[w.pid]
            if model not in ready:
                why[w.pid] = f"model '{model}' was unloaded"
            elif w.started < youngest[(model, w.instance)]:
                why[w.pid] = f"model '{model}' was loaded again"
        since = m.orphaned_since
        for pid in set(since) - set(why):
            del since[pid]  # it ended, or its model is ready again
        due = {
            w.pid: w.instance
            for w in judged
            if w.pid in why and now - since.setdefault(w.pid, now) >= self.orphan_grace_s
        }
        if not due:
            return None
        for pid in due:
            del since[pid]
            m.serving.pop(pid, None)  # its death is no loss: the detector must not heal it
        reasons = "; ".join(sorted({why[pid] for pid in due}))
        return WorkersOrphaned(due, f"{reasons}, and its worker was still running {self.orphan_grace_s:.0f} s later")

    def _hung_too_long(self, pid: int, hung: bool, now: float) -> bool:
        """Note whether `pid` is hung now; True once it has been for `hang_s` in a row (then forgotten: it goes)."""
        since = self._memory.hung_since
        if not hung:
            since.pop(pid, None)
            return False
        if now - since.setdefault(pid, now) < self.hang_s:
            return False
        del since[pid]
        return True

    def learnt(self, alive: frozenset[int]) -> None:
        """The catalog has learnt the live workers of a `WorkersChanged` event."""
        self._memory.learnt = alive

    def healed(self, what: str, retired: list[int] | tuple[int, ...] = ()) -> None:
        """Forget what a heal made stale, the one place that does.

        A new tritonserver ("tritonserver") starts a new memory: its workers, counters and timers are new.
        Reloaded models ("worker") have new workers: the catalog learns them again, the count of polls a
        model was short of a worker starts over, and the `retired` old workers are no longer serving.
        A restarted gateway leaves nothing stale (its hung pid was forgotten when it was reported).
        """
        if what == "tritonserver":
            self._memory = _Memory()
        elif what == "worker":
            m = self._memory
            serving = {pid: name for pid, name in m.serving.items() if pid not in retired}
            self._memory = replace(m, serving=serving, short=frozenset(), learnt=frozenset())


def _repository_model(worker: Worker) -> str:
    """The model of a worker that runs from the server's repository (`<repository>/<model>/<version>`), else ""."""
    if not worker.model_dir or upload_copies([worker.model_dir]):
        return ""
    return os.path.basename(worker.model_dir)
