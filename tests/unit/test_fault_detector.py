"""The supervisor's detector on fixed observations: which poll turns what into which event (no processes)."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

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
from mslite_server.workers import Worker

HANG_S = 10.0
GRACE_S = 15.0
CATALOG = {"tiny": {"tiny_0"}, "big": {"big_0", "big_1"}}


@dataclass
class Seen:
    """What one poll sees; `asked` records which observations the detector asked for."""

    t: float = 0.0
    exited: bool = False
    code: int | None = None
    live: bool = True
    gateway_seen: GatewaySeen | None = None
    gateway_letter: str = "S"
    gateway_live: bool = True
    procs: list[Worker] = field(default_factory=list)
    ready: set[str] | None = field(default_factory=lambda: set(CATALOG))
    asked: list[str] = field(default_factory=list)

    def now(self) -> float:
        return self.t

    def server_exit(self) -> tuple[bool, int | None]:
        self.asked.append("server_exit")
        return self.exited, self.code

    def server_answers(self) -> bool:
        self.asked.append("server_answers")
        return self.live

    def gateway(self) -> GatewaySeen | None:
        self.asked.append("gateway")
        return self.gateway_seen

    def gateway_state(self, pid: int) -> str:
        self.asked.append("gateway_state")
        return self.gateway_letter

    def gateway_answers(self) -> bool:
        self.asked.append("gateway_answers")
        return self.gateway_live

    def workers(self) -> list[Worker]:
        self.asked.append("workers")
        return list(self.procs)

    def ready_models(self) -> set[str] | None:
        self.asked.append("ready_models")
        return None if self.ready is None else set(self.ready)


def alive(pid: int, instance: str, state: str = "S", started: int = 0) -> Worker:
    return Worker(pid, state, instance, "/repo/" + instance.rsplit("_", 1)[0], started=started)


def zombie(pid: int, status: int | None = signal.SIGKILL) -> Worker:
    return Worker(pid, "Z", "", "", status)


def all_alive() -> list[Worker]:
    return [alive(11, "tiny_0"), alive(21, "big_0"), alive(22, "big_1")]


def look(detector: FaultDetector, seen: Seen, catalog: dict[str, set[str]] = CATALOG) -> list[Event]:
    return list(detector.look(seen, catalog))


def settled(detector: FaultDetector, seen: Seen) -> None:
    """A first poll whose workers the catalog learns, as the supervisor does after a complete refresh."""
    events = look(detector, seen)
    assert events == [WorkersChanged(frozenset(w.pid for w in seen.procs), frozenset(w.instance for w in seen.procs))]
    detector.learnt(events[0].alive)
    assert look(detector, seen) == []


def test_a_worker_that_dies_is_lost_at_the_second_poll_that_sees_it_a_zombie():
    detector, seen = FaultDetector(hang_s=HANG_S), Seen(procs=all_alive())
    settled(detector, seen)
    seen.procs = [zombie(11), alive(21, "big_0"), alive(22, "big_1")]
    assert not [e for e in look(detector, seen) if isinstance(e, WorkersLost)]  # once: maybe an unload's reaping
    lost = [e for e in look(detector, seen) if isinstance(e, WorkersLost)]
    assert len(lost) == 1
    assert lost[0].dead == {11: "tiny_0"} and not lost[0].stopped
    assert lost[0].how.startswith("died (pid 11 killed by SIGKILL")
    assert detector.serving({"tiny_0"}) == []
    again = [e for e in look(detector, seen) if isinstance(e, WorkersLost)]
    assert [(e.dead, e.short) for e in again] == [({}, {"tiny"})]  # the pid once; its model short until a heal


def test_a_zombie_seen_once_is_no_loss_and_one_never_seen_alive_is_nobodys():
    detector, seen = FaultDetector(hang_s=HANG_S), Seen(procs=all_alive())
    settled(detector, seen)
    seen.procs = [zombie(11), zombie(99), alive(21, "big_0"), alive(22, "big_1")]
    look(detector, seen)
    seen.procs = [zombie(99), alive(21, "big_0"), alive(22, "big_1"), alive(12, "tiny_0")]  # 11 reaped, 12 new
    assert not [e for e in look(detector, seen) if isinstance(e, WorkersLost)]
    assert not [e for e in look(detector, seen) if isinstance(e, WorkersLost)]


def test_a_worker_that_exited_0_is_no_loss_however_long_it_stays_unreaped():
    # the old instance of a reloaded model, ended by Triton; its new one serves under the same name
    detector, seen = FaultDetector(hang_s=HANG_S), Seen(procs=all_alive())
    settled(detector, seen)
    seen.procs = [zombie(11, status=0), alive(12, "tiny_0"), alive(21, "big_0"), alive(22, "big_1")]
    for _ in range(3):
        assert not [e for e in look(detector, seen) if isinstance(e, WorkersLost)]
    assert detector.serving({"tiny_0"}) == [12]


def test_a_catalog_model_short_of_a_worker_two_polls_in_a_row_is_lost():
    detector, seen = FaultDetector(hang_s=HANG_S), Seen(procs=all_alive())
    settled(detector, seen)
    seen.procs = [alive(11, "tiny_0"), alive(21, "big_0")]  # big_1 gone without a trace
    assert not [e for e in look(detector, seen) if isinstance(e, WorkersLost)]
    lost = [e for e in look(detector, seen) if isinstance(e, WorkersLost)]
    assert len(lost) == 1 and lost[0].short == {"big"} and not lost[0].dead


def test_a_model_short_for_one_poll_only_is_not_lost():
    detector, seen = FaultDetector(hang_s=HANG_S), Seen(procs=all_alive())
    settled(detector, seen)
    seen.procs = [alive(11, "tiny_0"), alive(21, "big_0")]
    look(detector, seen)
    seen.procs = [alive(11, "tiny_0"), alive(21, "big_0"), alive(23, "big_1")]
    assert not [e for e in look(detector, seen) if isinstance(e, WorkersLost)]


def test_a_worker_stopped_for_hang_s_is_lost_as_stopped():
    detector, seen = FaultDetector(hang_s=HANG_S), Seen(procs=all_alive())
    settled(detector, seen)
    seen.procs = [alive(11, "tiny_0", "T"), alive(21, "big_0"), alive(22, "big_1")]
    for t in (1.0, 5.0, 1.0 + HANG_S - 0.01):
        seen.t = t
        assert look(detector, seen) == [], t
    seen.t = 1.0 + HANG_S
    lost = [e for e in look(detector, seen) if isinstance(e, WorkersLost)]
    assert len(lost) == 1 and lost[0].stopped == {11} and lost[0].dead == {11: "tiny_0"}
    assert lost[0].how == "was stopped and killed"


def test_a_worker_let_run_again_before_hang_s_starts_its_count_over():
    detector, seen = FaultDetector(hang_s=HANG_S), Seen(procs=all_alive())
    settled(detector, seen)
    seen.procs = [alive(11, "tiny_0", "T"), alive(21, "big_0"), alive(22, "big_1")]
    look(detector, seen)
    seen.t, seen.procs = HANG_S - 1, all_alive()
    look(detector, seen)
    seen.t, seen.procs = HANG_S + 1, [alive(11, "tiny_0", "T"), alive(21, "big_0"), alive(22, "big_1")]
    assert look(detector, seen) == []
    seen.t = 2 * HANG_S + 1
    assert [e.stopped for e in look(detector, seen) if isinstance(e, WorkersLost)] == [{11}]


def test_a_gateway_not_answering_its_probe_for_hang_s_is_down_and_named_for_the_kill():
    detector = FaultDetector(hang_s=HANG_S)
    seen = Seen(gateway_seen=GatewaySeen(pid=7, running=True), gateway_live=False, procs=all_alive())
    settled_events = look(detector, seen)
    assert not [e for e in settled_events if isinstance(e, GatewayDown)]
    seen.t = HANG_S - 0.5
    assert not [e for e in look(detector, seen) if isinstance(e, GatewayDown)]
    seen.t = HANG_S
    down = [e for e in look(detector, seen) if isinstance(e, GatewayDown)]
    assert down == [GatewayDown(f"gateway hung for {HANG_S:.0f} s (stopped or not answering)", 7)]
    seen.t = HANG_S + 0.5  # reported, then forgotten: its count starts over
    assert not [e for e in look(detector, seen) if isinstance(e, GatewayDown)]


def test_a_stopped_gateway_is_hung_without_a_probe_and_an_exited_one_is_down_at_once():
    detector = FaultDetector(hang_s=HANG_S)
    seen = Seen(gateway_seen=GatewaySeen(pid=7, running=True), gateway_letter="T")
    look(detector, seen)
    assert "gateway_answers" not in seen.asked  # its port still accepts: the state says it
    seen.gateway_seen = GatewaySeen(pid=7, running=False, code=-9)
    assert [e for e in look(detector, seen) if isinstance(e, GatewayDown)] == [GatewayDown("gateway exited (code -9)")]


def test_tritonserver_exited_ends_the_poll_at_once():
    detector, seen = FaultDetector(), Seen(exited=True, code=-6, gateway_seen=GatewaySeen(7, False))
    assert look(detector, seen) == [ServerDown("tritonserver exited (code -6)")]
    assert seen.asked == ["server_exit"]


def test_tritonserver_not_live_n_times_in_a_row_is_down_and_nothing_else_is_looked_at():
    detector, seen = FaultDetector(live_failures=3), Seen(live=False, procs=all_alive())
    assert look(detector, seen) == [] and look(detector, seen) == []
    assert not detector.server_answering
    seen.live = True  # one answer starts the count over
    look(detector, seen)
    assert detector.server_answering
    seen.live, seen.asked = False, []
    assert look(detector, seen) == [] and look(detector, seen) == []
    assert look(detector, seen) == [ServerDown("tritonserver did not answer for 3 checks in a row (hung)")]
    assert set(seen.asked) == {"server_exit", "server_answers"}  # not the gateway, not the workers


def test_the_live_workers_changing_asks_the_catalog_to_learn_them_until_it_has():
    detector, seen = FaultDetector(), Seen(procs=all_alive())
    changed = [e for e in look(detector, seen) if isinstance(e, WorkersChanged)]
    assert changed and [e for e in look(detector, seen) if isinstance(e, WorkersChanged)] == changed  # not learnt
    detector.learnt(changed[0].alive)
    assert look(detector, seen) == []
    seen.procs = [*all_alive(), alive(31, "new_0")]
    assert [e.instances for e in look(detector, seen) if isinstance(e, WorkersChanged)] == [
        {"tiny_0", "big_0", "big_1", "new_0"}
    ]


def test_a_tritonserver_heal_resets_everything_the_detector_remembered():
    detector, seen = FaultDetector(live_failures=3, hang_s=HANG_S), Seen(procs=all_alive())
    settled(detector, seen)
    seen.procs = [zombie(11), alive(21, "big_0"), alive(22, "big_1", "T")]  # a suspect and a hang started
    look(detector, seen)
    seen.live = False
    look(detector, seen)
    look(detector, seen)  # 2 of 3 liveness checks failed
    detector.healed("tritonserver")
    assert detector.server_answering
    look(detector, seen)  # a new server's first failed check: 1 of 3, not 3
    seen.live = True
    seen.t = HANG_S + 1  # the old timer would have fired
    seen.procs = [zombie(11), alive(21, "big_0"), alive(22, "big_1", "T")]
    events = look(detector, seen)
    assert not [e for e in events if isinstance(e, WorkersLost)]  # no suspect, no pid serving, no timer kept
    assert [e for e in events if isinstance(e, WorkersChanged)]  # the catalog learns the new workers


def test_a_worker_heal_resets_what_new_workers_make_stale_and_keeps_the_other_models_watch():
    detector, seen = FaultDetector(hang_s=HANG_S), Seen(procs=all_alive())
    settled(detector, seen)
    seen.procs = [zombie(11), alive(21, "big_0"), alive(22, "big_1", "T")]
    look(detector, seen)
    lost = [e for e in look(detector, seen) if isinstance(e, WorkersLost)]
    assert lost and lost[0].dead == {11: "tiny_0"}
    assert detector.serving({"tiny_0"}) == []
    detector.healed("worker", retired=[21])  # big's old worker 21 was killed by the heal
    assert detector.serving({"big_0", "big_1"}) == [22]
    seen.procs = [zombie(21), alive(12, "tiny_0"), alive(22, "big_1", "T")]
    events = look(detector, seen)
    assert [e for e in events if isinstance(e, WorkersChanged)]  # the catalog learns again
    seen.t = HANG_S  # 22's hang was counted from before the heal: not reset
    events = look(detector, seen)
    lost = [e for e in events if isinstance(e, WorkersLost)]
    assert len(lost) == 1 and lost[0].stopped == {22} and 21 not in lost[0].dead  # a retired pid is no loss
    assert lost[0].short == {"big"}  # short of big_0 two polls in a row (the count started over at the heal)


def orphaned(events: list[Event]) -> list[WorkersOrphaned]:
    return [e for e in events if isinstance(e, WorkersOrphaned)]


def test_a_worker_still_running_grace_s_after_its_model_was_unloaded_is_orphaned_once():
    detector, seen = FaultDetector(hang_s=HANG_S, orphan_grace_s=GRACE_S), Seen(procs=all_alive())
    settled(detector, seen)
    seen.ready = {"big"}  # tiny unloaded; its worker 11 runs on (inside a request that never ends)
    assert orphaned(look(detector, seen)) == []  # the grace starts
    seen.t = GRACE_S - 1
    assert orphaned(look(detector, seen)) == []
    seen.t = GRACE_S
    [event] = orphaned(look(detector, seen))
    assert event.orphans == {11: "tiny_0"}
    assert "model 'tiny' was unloaded" in event.why and "15 s later" in event.why
    seen.procs = [zombie(11), alive(21, "big_0"), alive(22, "big_1")]  # killed: its death is no loss
    for _ in range(3):
        events = look(detector, seen)
        assert orphaned(events) == [] and not [e.dead for e in events if isinstance(e, WorkersLost) and e.dead]


def test_the_older_of_two_workers_of_one_instance_is_orphaned_after_the_grace():
    # a reload: Triton started a new tiny_0 (12) and ends the old one (11) only once its execute returns
    detector, seen = FaultDetector(hang_s=HANG_S, orphan_grace_s=GRACE_S), Seen(procs=all_alive())
    settled(detector, seen)
    seen.procs = [alive(11, "tiny_0", "R", started=100), alive(12, "tiny_0", started=900)] + all_alive()[1:]
    assert orphaned(look(detector, seen)) == []
    seen.t = GRACE_S
    [event] = orphaned(look(detector, seen))
    assert event.orphans == {11: "tiny_0"} and "model 'tiny' was loaded again" in event.why


def test_an_orphan_whose_model_is_ready_again_starts_its_grace_over():
    detector, seen = FaultDetector(hang_s=HANG_S, orphan_grace_s=GRACE_S), Seen(procs=all_alive())
    settled(detector, seen)
    seen.ready = {"big"}
    look(detector, seen)
    seen.t, seen.ready = GRACE_S - 1, set(CATALOG)  # loaded again, the same worker serving (no new one)
    assert orphaned(look(detector, seen)) == []
    seen.t, seen.ready = GRACE_S + 1, {"big"}
    assert orphaned(look(detector, seen)) == []  # a new grace from here
    seen.t = 2 * GRACE_S + 1
    assert [e.orphans for e in orphaned(look(detector, seen))] == [{11: "tiny_0"}]


def test_an_unanswered_question_leaves_the_grace_running_and_decides_nothing():
    detector, seen = FaultDetector(hang_s=HANG_S, orphan_grace_s=GRACE_S), Seen(procs=all_alive())
    settled(detector, seen)
    seen.ready = {"big"}
    look(detector, seen)
    seen.t, seen.ready = GRACE_S, None
    assert orphaned(look(detector, seen)) == []
    seen.ready = {"big"}
    assert [e.orphans for e in orphaned(look(detector, seen))] == [{11: "tiny_0"}]


def test_a_worker_is_judged_by_the_model_it_was_seen_with_after_the_catalog_forgets_it():
    detector, seen = FaultDetector(hang_s=HANG_S, orphan_grace_s=GRACE_S), Seen(procs=all_alive())
    settled(detector, seen)
    seen.ready = {"big"}
    catalog = {"big": CATALOG["big"]}  # refreshed after the unload: tiny is gone from it
    list(detector.look(seen, catalog))
    seen.t = GRACE_S
    assert [e.orphans for e in orphaned(list(detector.look(seen, catalog)))] == [{11: "tiny_0"}]


def test_uploaded_models_sharing_instance_names_are_never_judged():
    catalog = {"a": {"g_0"}, "b": {"g_0"}}  # instance groups named alike in two uploaded models
    detector = FaultDetector(hang_s=HANG_S, orphan_grace_s=GRACE_S)
    procs = [
        Worker(11, "S", "g_0", "/tmp/folderAAAAAA", started=1),
        Worker(12, "S", "g_0", "/tmp/folderBBBBBB", started=2),
    ]
    seen = Seen(procs=procs, ready={"a"})
    for t in (0, GRACE_S, 2 * GRACE_S):
        seen.t = t
        assert orphaned(list(detector.look(seen, catalog))) == []
    assert "ready_models" not in seen.asked  # nothing to judge: Triton is not even asked


def test_repository_models_sharing_instance_names_are_told_apart_by_their_folders():
    catalog = {"a": {"g_0"}, "b": {"g_0"}}
    detector = FaultDetector(hang_s=HANG_S, orphan_grace_s=GRACE_S)
    procs = [Worker(11, "S", "g_0", "/repo/a", started=1), Worker(12, "S", "g_0", "/repo/b", started=2)]
    seen = Seen(procs=procs, ready={"a", "b"})
    for t in (0, GRACE_S, 2 * GRACE_S):
        seen.t = t
        assert orphaned(list(detector.look(seen, catalog))) == []  # b's younger worker replaces nothing of a's
    seen.ready, seen.t = {"b"}, 3 * GRACE_S  # a unloaded
    look(detector, seen, catalog)
    seen.t = 4 * GRACE_S
    assert [e.orphans for e in orphaned(look(detector, seen, catalog))] == [{11: "g_0"}]


def test_a_worker_of_a_model_never_yet_ready_is_not_judged():
    # a first load: its worker runs (loading, warming up) before Triton lists the model; the catalog knows nothing
    detector, seen = (
        FaultDetector(hang_s=HANG_S, orphan_grace_s=GRACE_S),
        Seen(procs=[alive(11, "tiny_0")], ready=set()),
    )
    for t in (0, GRACE_S, 5 * GRACE_S):
        seen.t = t
        assert orphaned(look(detector, seen, {})) == []
    seen.ready = {"tiny"}  # loaded; then unloaded while its worker runs on
    look(detector, seen, {})
    seen.ready = set()
    look(detector, seen, {})
    seen.t = 6 * GRACE_S
    assert [e.orphans for e in orphaned(look(detector, seen, {}))] == [{11: "tiny_0"}]
