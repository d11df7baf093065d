"""The supervisor's detector on fixed observations: which poll turns what into which event (no processes)."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

from mslite_triton.server.fault_detector import (
    Event,
    FaultDetector,
    GatewayDown,
    GatewaySeen,
    ServerDown,
    WorkersChanged,
    WorkersLost,
)
from mslite_triton.server.workers import Worker

HANG_S = 10.0
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


def alive(pid: int, instance: str, state: str = "S") -> Worker:
    return Worker(pid, state, instance, "/repo/" + instance.rsplit("_", 1)[0])


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
