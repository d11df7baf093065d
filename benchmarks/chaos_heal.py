"""`python -m benchmarks.chaos heal`: kill (or hang) each process of a serving stack under clients, a row per case.

The stack is `mslite-triton serve` (gateway on, supervisor on) on the repository's models, plus a model
the client uploads with 2 workers and whose weight it updates to 10 x I; 4 client threads predict that
model throughout. The auto-started case runs in a child process: the client starts its own loopback server
there, and its tritonserver is killed. Loopback only; each case is bounded by HEAL_DEADLINE_S.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import mslite_triton as mslite
from mslite_contract.settings import KEY_DIR_ENV
from mslite_server.ports import pick_ports
from mslite_server.workers import workers_of
from tests.support.processes import children_of
from tests.support.updatable import build_updated

ROOT = Path(__file__).resolve().parents[1]
HEAL_DEADLINE_S = 90.0
SETTLE_PREDICTS = 40  # answered predicts after a heal before the next case
X = np.arange(1, 5, dtype=np.float32).reshape(1, 4)
_HEALED = re.compile(r"(worker|tritonserver|gateway) healed in ([0-9.]+) s")


@dataclass
class Row:
    """One kill and what the clients saw."""

    case: str
    heal_s: float
    ok: int
    failed: int
    longest_wait_s: float
    weights_kept: bool


class Clients:
    """4 predicting threads; counts answers, failures, wrong answers and the longest wait for one."""

    def __init__(self, runner: mslite.ModelParallelRunner, threads: int = 4) -> None:
        self.runner = runner
        self.ok = 0
        self.failures: list[str] = []
        self.wrong = 0
        self._last: dict[int, float] = {}
        self.longest_wait_s = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, args=(i,)) for i in range(threads)]

    def _loop(self, index: int) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                inputs = self.runner.get_inputs()
                inputs[0].set_data_from_numpy(X)
                y = self.runner.predict(inputs)[0].get_data_to_numpy()
                with self._lock:
                    self.ok += 1
                    self.wrong += int(not np.array_equal(y, 10 * X))
                    self.longest_wait_s = max(self.longest_wait_s, time.monotonic() - started)
            except Exception as e:  # counted: the bar is zero of these
                with self._lock:
                    self.failures.append(repr(e)[:200])

    def reset_window(self) -> tuple[int, int, int]:
        with self._lock:
            self.longest_wait_s = 0.0
            return self.ok, len(self.failures), self.wrong

    def wait_for(self, count: int, timeout_s: float = HEAL_DEADLINE_S) -> None:
        target, deadline = self.ok + count, time.monotonic() + timeout_s
        while self.ok < target and time.monotonic() < deadline:
            time.sleep(0.05)

    def start(self) -> Clients:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=180)


def _kill_and_measure(case: str, clients: Clients, kill: Callable[[], None], heals: Callable[[], list[float]]) -> Row:
    clients.wait_for(SETTLE_PREDICTS)
    ok0, failed0, wrong0 = clients.reset_window()
    before = len(heals())
    kill()
    deadline = time.monotonic() + HEAL_DEADLINE_S
    while len(heals()) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    clients.wait_for(SETTLE_PREDICTS)
    done = heals()
    heal_s = done[before] if len(done) > before else float("nan")
    return Row(
        case,
        heal_s,
        clients.ok - ok0,
        len(clients.failures) - failed0,
        clients.longest_wait_s,
        clients.wrong == wrong0,
    )


def _serve_rows(rounds: int, work: Path) -> list[Row]:
    ports = [str(p) for p in pick_ports([("127.0.0.1", 0, "free")] * 3)]
    env = {**os.environ, KEY_DIR_ENV: str(work / "keys")}
    log_path = work / "serve.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mslite_server.cli", "serve",
             "--model-repository", str(ROOT / "model_repository"),
             "--http-port", ports[0], "--grpc-port", ports[1], "--metrics-port", ports[2], "--exit-timeout-s", "5"],
            env=env, stdout=subprocess.PIPE, stderr=log, text=True,
        )  # fmt: skip
    rows: list[Row] = []
    clients = None
    try:
        assert proc.stdout is not None
        while not proc.stdout.readline().startswith("serving"):
            if proc.poll() is not None:
                raise RuntimeError("serve did not start:\n" + log_path.read_text()[-3000:])
        os.environ[KEY_DIR_ENV] = env[KEY_DIR_ENV]
        runner = build_updated(f"grpc://127.0.0.1:{ports[1]}", work)
        time.sleep(2)  # the supervisor learns the new model at its next poll

        def heals() -> list[float]:
            return [float(m.group(2)) for m in _HEALED.finditer(log_path.read_text())]

        def child(word: str) -> int:
            return next(pid for pid, cmd in children_of(proc.pid) if word in cmd)

        def worker() -> int:
            name = runner._remote.info.name
            live = [w for w in workers_of(child("tritonserver")) if w.state != "Z"]
            return next(w.pid for w in live if w.instance.startswith(name))

        kills: list[tuple[str, Callable[[], None]]] = [
            ("serve: SIGKILL a worker", lambda: os.kill(worker(), signal.SIGKILL)),
            (
                "serve: SIGKILL the gateway",
                lambda: os.kill(child("mslite_gateway"), signal.SIGKILL),
            ),
            ("serve: SIGKILL tritonserver", lambda: os.kill(child("tritonserver"), signal.SIGKILL)),
            ("serve: SIGSTOP tritonserver (hung)", lambda: os.kill(child("tritonserver"), signal.SIGSTOP)),
        ]
        clients = Clients(runner).start()
        for case, kill in kills:
            for _ in range(rounds):
                failed = len(clients.failures)
                rows.append(_kill_and_measure(case, clients, kill, heals))
                print(_format(rows[-1]), flush=True)
                for failure in clients.failures[failed : failed + 2]:
                    print(f"    failure: {failure}", flush=True)
    finally:
        if clients is not None:
            clients.stop()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        os.environ.pop(KEY_DIR_ENV, None)
    return rows


def autostart_child(rounds: int) -> int:
    """In a fresh process: the client's auto-started server, its tritonserver killed `rounds` times."""
    from mslite_triton import _endpoint

    work = Path(tempfile.mkdtemp(prefix="chaos-heal-auto-"))
    url = _endpoint.server_url(None)
    runner = build_updated(url, work)
    server = _endpoint.started_server()
    time.sleep(2)
    clients = Clients(runner).start()
    rows = []
    try:
        for _ in range(rounds):
            row = _kill_and_measure(
                "auto-started: SIGKILL tritonserver",
                clients,
                lambda: os.kill(server.process.pid, signal.SIGKILL),
                lambda: [h.seconds for h in server.supervisor.heals],
            )
            rows.append(row.__dict__)
    finally:
        clients.stop()
    print(json.dumps(rows))
    return 0


def _format(row: Row) -> str:
    return (
        f"{row.case:38s} {row.heal_s:7.1f} {row.ok:6d} {row.failed:6d} {row.longest_wait_s:9.1f}  "
        f"{'yes' if row.weights_kept else 'NO'}"
    )


def heal_campaign(rounds: int) -> int:
    """Every case `rounds` times; prints one row per kill and a summary per case."""
    work = Path(tempfile.mkdtemp(prefix="chaos-heal-"))
    print(f"{'case':38s} {'heal s':>7s} {'ok':>6s} {'failed':>6s} {'longest s':>9s}  weights kept", flush=True)
    rows = _serve_rows(rounds, work)
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.chaos", "heal-autostart-child", "--rounds", str(rounds)],
        cwd=ROOT, capture_output=True, text=True, timeout=HEAL_DEADLINE_S * (rounds + 2),
    )  # fmt: skip
    try:
        auto = [Row(**r) for r in json.loads(out.stdout.strip().splitlines()[-1])]
    except (ValueError, IndexError):
        print("auto-started case failed:\n" + out.stderr[-3000:])
        return 1
    for row in auto:
        print(_format(row), flush=True)
    rows += auto
    print("\nsummary (bar: heal <= 10 s after a SIGKILL, 0 failed, weights kept)")
    for case in dict.fromkeys(r.case for r in rows):
        mine = [r for r in rows if r.case == case]
        heals = [r.heal_s for r in mine]
        print(
            f"  {case:38s} heal max {max(heals):5.1f} s, median {sorted(heals)[len(heals) // 2]:5.1f} s; "
            f"{sum(r.ok for r in mine)} ok, {sum(r.failed for r in mine)} failed; "
            f"weights kept: {all(r.weights_kept for r in mine)}"
        )
    kills = [r for r in rows if "SIGKILL" in r.case]
    bad = [r for r in kills if r.failed or not r.weights_kept or not r.heal_s <= 10]
    return 1 if bad else 0
