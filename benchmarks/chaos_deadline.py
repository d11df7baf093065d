"""The `execute-deadline` row of `python -m benchmarks.chaos costs`: keyless requests that run for ever.

A keyless client sends requests of 2**40 loop iterations to `spin` (the zoo's spin model, one worker,
`execute_deadline_s` SPIN_DEADLINE_S) at a fixed rate, each on a connection of its own, while another client
predicts `tiny` in a loop. Bar: every one of the other client's requests answered, the slowest within 2 s;
each attack answered with the deadline's error; tritonserver not restarted (workers may be ended, and the
row counts them); gateway and tritonserver RSS growth under 256 MiB each.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import tritonclient.http as httpclient

from mslite_contract.protocol import DEADLINE_PASSED
from mslite_server import LocalServer
from mslite_server.workers import workers_of
from tests.support import model_zoo
from tests.support.badinput.memory import rss_kib
from tests.support.repository import MINIMAL
from tests.support.traffic import Loops

SPIN_DEADLINE_S = 1.0
SPIN_CONFIG = (
    MINIMAL
    + "instance_group [ { kind: KIND_CPU, count: 1 } ]\n"
    + f'parameters {{ key: "execute_deadline_s" value {{ string_value: "{SPIN_DEADLINE_S:g}" }} }}\n'
)
FOREVER = 2**40  # loop iterations: days of work


def spin_model() -> object:
    """The attacked model (`add_model(repo, "spin", spin_model(), SPIN_CONFIG)`)."""
    return model_zoo.spin()


class _Other(Loops):
    """The other client: predicts `tiny` in a loop until stopped; counts answers and the slowest."""

    def __init__(self, port: int) -> None:
        self.client = httpclient.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=30)
        self.ok = self.failed = 0
        self.slowest = 0.0
        self.errors: list[str] = []
        super().__init__([self._loop], join_s=60)

    def _loop(self) -> None:
        x = httpclient.InferInput("x", [1, 4], "FP32")
        x.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(1, 4))
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                good = self.client.infer("tiny", [x]).as_numpy("y").tolist() == [[1.0, 3.0, 5.0, 7.0]]
            except Exception as e:  # noqa: BLE001 - counted: the other client's failures are the bar
                good = False
                self.errors.append(repr(e)[:200])
            self.slowest = max(self.slowest, time.monotonic() - started)
            self.ok, self.failed = self.ok + good, self.failed + (not good)
            time.sleep(0.02)


def _rss_mib(pid: int | None) -> float:
    return (rss_kib(pid) or 0) / 1024 if pid else 0.0


def execute_deadline(server: LocalServer, seconds: float = 30.0, every_s: float = 1.0) -> str:
    """One keyless request of 2**40 iterations to `spin` every `every_s` for `seconds`; the row of figures."""
    assert server.process is not None and server.supervisor is not None
    triton_pid = server.process.pid
    gateway_pid = server.gateway.pid if server.gateway is not None else None
    spin_workers = {w.pid for w in workers_of(triton_pid) if w.model == "spin"}
    heals = len(server.supervisor.heals)
    rss = (_rss_mib(triton_pid), _rss_mib(gateway_pid))
    answers: list[tuple[float, str]] = []
    lock = threading.Lock()

    def attack() -> None:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}", network_timeout=120)
        n = httpclient.InferInput("n", [1], "INT64")
        n.set_data_from_numpy(np.array([FOREVER], np.int64))
        started = time.monotonic()
        try:
            client.infer("spin", [n])
            outcome = "answered (never expected)"
        except Exception as e:  # noqa: BLE001 - the deadline's error is the expected outcome
            outcome = "deadline" if DEADLINE_PASSED in str(e) else f"other: {str(e)[:100]}"
        with lock:
            answers.append((time.monotonic() - started, outcome))

    threads: list[threading.Thread] = []
    with _Other(server.http_port) as other:
        time.sleep(1)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = threading.Thread(target=attack, daemon=True)
            t.start()
            threads.append(t)
            time.sleep(every_s)
        for t in threads:
            t.join(timeout=300)
    grown = (_rss_mib(triton_pid) - rss[0], _rss_mib(gateway_pid) - rss[1])
    ended = len(spin_workers - {w.pid for w in workers_of(triton_pid) if w.model == "spin"})
    restarted = server.process is None or server.process.pid != triton_pid
    deadline_errors = [s for s, outcome in answers if outcome == "deadline"]
    odd = sorted({outcome for _, outcome in answers if outcome != "deadline"})
    new_heals = [h.what for h in server.supervisor.heals[heals:]]
    return (
        f"execute-deadline: {len(threads)} keyless requests of 2**40 iterations to spin (execute_deadline_s "
        f"{SPIN_DEADLINE_S:g}, 1 worker), one every {every_s:g} s: {len(deadline_errors)} answered the deadline's "
        f"error (slowest {max(deadline_errors, default=0):.1f} s){'; other outcomes ' + str(odd) if odd else ''}; "
        f"the other client's predicts of tiny: {other.ok} ok, {other.failed} failed (bar: 0), slowest "
        f"{other.slowest:.2f} s (bar: 2 s); spin workers ended {ended}, heals {new_heals or 'none'}, tritonserver "
        f"restarted: {'yes' if restarted else 'no'} (bar: no); RSS growth tritonserver {grown[0]:+.0f} MiB, gateway "
        f"{grown[1]:+.0f} MiB (bar: < 256 each)"
    )
