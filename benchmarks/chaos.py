"""Reliability campaigns, loopback only and bounded in time.

  kill:     8 client threads call ModelParallelRunner.predict for --seconds (default 60) while one worker
            process is killed with SIGKILL every 5 s; prints failed calls (bar: 0), restarts, and the
            supervisor's recovery times (bar: dead worker replaced within 10 s).
  overload: 64 threads flood a 1-worker MobileNetV2 through the gateway, as `mslite-triton serve` runs it,
            with its admission control at 8 requests in flight per model (no Triton queue bound); prints how
            many were served and refused (kLiteServiceDeny), and server + worker + gateway RSS before, at the
            peak and after (bounded).
  heal:     one row per case: `mslite-triton serve` on the repository (MobileNetV2 and tiny) with a model
            uploaded by the client and its weights updated to 10 x I; 4 client threads predict it while
            SIGKILL hits one worker, the gateway, or tritonserver, or SIGSTOP hangs tritonserver; and
            tritonserver killed under the client's auto-started server. Each row: the supervisor's heal
            time (from its log; bar <= 10 s), predicts ok and failed (bar: 0), the longest a client
            waited for an answer, and whether every answer used the updated weights (bar: yes).

  faults:   `mslite-triton serve` as shipped under 8 Python-client and 8 raw-HTTP threads, every answer
            checked; process faults (kills, SIGSTOP, a second death during a heal) and client attacks, one
            row per fault and kind of client: outage seconds, ok, failed and wrong answers
            (`chaos_faults.py`; `make chaos`).
  costs:    requests that cost everyone else, through the gateway: 300 requests of batch size 0, one request of
            4,000,000 strings, 8 threads of gzip bombs; one row each with the bar (`chaos_costs.py`; `make chaos`).
  zero-shapes: requests with dims of 0 sent straight to tritonserver, to find those it never answers, or
            through the gateway (--gateway), which must leave none unanswered; prints them (`chaos_costs.py`).
  busy:     workers kept inside `execute` for good: seconds each outlives its model's unload or reload (bar:
            30 s), and what a request past a model's execute deadline gets (`chaos_busy.py`).

Run: .venv/bin/python -m benchmarks.chaos faults [--quick] [--faults worker-kill,gateway-stop,...]
     .venv/bin/python -m benchmarks.chaos kill [--seconds 60]
     .venv/bin/python -m benchmarks.chaos overload [--seconds 20]
     .venv/bin/python -m benchmarks.chaos heal [--rounds 1]
     .venv/bin/python -m benchmarks.chaos costs [--attacks zero-batch,strings,gzip-bomb]
     .venv/bin/python -m benchmarks.chaos zero-shapes [--gateway]
     .venv/bin/python -m benchmarks.chaos busy [--rounds 1]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

import mslite_triton as mslite  # noqa: E402
from mslite_server import LocalServer, ServerConfig  # noqa: E402
from mslite_server.workers import workers_of  # noqa: E402
from mslite_triton.errors import ServiceDenyError  # noqa: E402
from tests.support.badinput.memory import rss_kib  # noqa: E402
from tests.support.repository import GEN as generate_models  # noqa: E402


def _rss_kib(pid: int) -> int:
    return sum(rss_kib(p) or 0 for p in [pid, *(w.pid for w in workers_of(pid))])


def _runner(url: str, path: str, workers: int, config_info: dict | None = None) -> mslite.ModelParallelRunner:
    ctx = mslite.Context()
    ctx.server_url = url
    ctx.parallel.workers_num = workers
    ctx.cpu.thread_num = 1
    if config_info:
        ctx.parallel.config_info = config_info
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(path, ctx)
    return runner


def kill_campaign(seconds: float) -> int:
    work = Path(tempfile.mkdtemp(prefix="chaos-"))
    (work / "repo").mkdir()
    path = work / "mobilenetv2.onnx"
    path.write_bytes(generate_models.build_mobilenetv2().SerializeToString())
    x = generate_models.make_input_bin()
    with LocalServer(ServerConfig(model_repository=work / "repo", exit_timeout_s=5)) as server:
        runner = _runner(server.grpc_url, str(path), 2)
        expected = runner.predict([mslite.Tensor(x)])[0].get_data_to_numpy()
        stop = threading.Event()
        ok, failed = [0], []
        lock = threading.Lock()

        def client() -> None:
            while not stop.is_set():
                try:
                    y = runner.predict([mslite.Tensor(x)])[0].get_data_to_numpy()
                    assert np.array_equal(y, expected)
                    with lock:
                        ok[0] += 1
                except Exception as e:  # counted: the bar is zero of these
                    failed.append(repr(e))

        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        started, kills = time.monotonic(), 0
        while time.monotonic() - started < seconds:
            time.sleep(5)
            workers = [w for w in workers_of(server.process.pid) if w.state != "Z"] if server.process else []
            if workers:
                os.kill(workers[0].pid, signal.SIGKILL)
                kills += 1
                print(f"  t={time.monotonic() - started:5.1f} s  killed worker {workers[0].pid}", flush=True)
        time.sleep(3)
        stop.set()
        for t in threads:
            t.join(timeout=120)
        recoveries = [h.seconds for h in server.supervisor.heals] if server.supervisor else []
    print(f"predict calls: {ok[0]} ok, {len(failed)} failed (bar: 0); workers killed: {kills}")
    if recoveries:
        median = sorted(recoveries)[len(recoveries) // 2]
        print(f"recoveries: {len(recoveries)}, max {max(recoveries):.1f} s, median {median:.1f} s")
    for f in failed[:5]:
        print("  failure:", f)
    return 0 if not failed else 1


def overload_campaign(seconds: float) -> int:
    work = Path(tempfile.mkdtemp(prefix="overload-"))
    (work / "repo").mkdir()
    path = work / "mobilenetv2.onnx"
    path.write_bytes(generate_models.build_mobilenetv2().SerializeToString())
    x = generate_models.make_input_bin()
    batching = {"dynamic_batching": {"max_batch_size": "1"}}
    config = ServerConfig(model_repository=work / "repo", gateway=True, max_inflight_per_model=8)
    with LocalServer(config) as server:
        runner = _runner(server.grpc_url, str(path), 1, batching)
        for _ in range(20):
            runner.predict([mslite.Tensor(x)])
        pids = [server.process.pid, server.gateway.pid]
        before = sum(_rss_kib(p) for p in pids)
        stop = threading.Event()
        served, denied, other = [0], [0], []
        lock = threading.Lock()

        def client() -> None:
            while not stop.is_set():
                try:
                    runner.predict([mslite.Tensor(x)])
                    with lock:
                        served[0] += 1
                except ServiceDenyError:
                    with lock:
                        denied[0] += 1
                except Exception as e:  # anything but overload is a bug
                    other.append(repr(e))

        threads = [threading.Thread(target=client) for _ in range(64)]
        for t in threads:
            t.start()
        peak = before
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(1)
            peak = max(peak, sum(_rss_kib(p) for p in pids))
        stop.set()
        for t in threads:
            t.join(timeout=60)
        after = sum(_rss_kib(p) for p in pids)
    print(f"served {served[0]}, refused with kLiteServiceDeny {denied[0]}, other errors {len(other)}")
    for e in other[:3]:
        print("  other error:", e[:300])
    print(
        f"server + worker + gateway RSS: before {before / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB, "
        f"after {after / 1024:.0f} MiB"
    )
    return 0 if not other else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "mode", choices=["faults", "kill", "overload", "heal", "heal-autostart-child", "costs", "zero-shapes", "busy"]
    )
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--rounds", type=int, default=1, help="heal: kills per case; busy: rounds of every case")
    parser.add_argument("--quick", action="store_true", help="faults: attacks of 3 s at most, shorter settling")
    parser.add_argument("--faults", default="", help="faults: comma-separated names (default: all, in order)")
    parser.add_argument("--attacks", default="", help="costs: comma-separated names (default: all, in order)")
    parser.add_argument("--gateway", action="store_true", help="zero-shapes: through the gateway")
    args = parser.parse_args()
    if args.mode == "zero-shapes":
        from benchmarks.chaos_costs import zero_shapes_campaign

        sys.exit(zero_shapes_campaign(gateway=args.gateway))
    if args.mode == "costs":
        from benchmarks.chaos_costs import ATTACKS, costs_campaign

        chosen = [a for a in args.attacks.split(",") if a] or list(ATTACKS)
        if unknown := [a for a in chosen if a not in ATTACKS]:
            parser.error(f"unknown attack(s) {unknown}; known: {', '.join(ATTACKS)}")
        sys.exit(costs_campaign(chosen))
    if args.mode == "faults":
        from benchmarks.chaos_faults import FAULTS, faults_campaign

        selected = [f for f in args.faults.split(",") if f] or list(FAULTS)
        unknown = [f for f in selected if f not in FAULTS]
        if unknown:
            parser.error(f"unknown fault(s) {unknown}; known: {', '.join(FAULTS)}")
        sys.exit(faults_campaign(selected, args.quick))
    if args.mode == "kill":
        sys.exit(kill_campaign(args.seconds or 60))
    if args.mode == "heal":
        from benchmarks.chaos_heal import heal_campaign

        sys.exit(heal_campaign(args.rounds))
    if args.mode == "busy":
        from benchmarks.chaos_busy import busy_campaign

        sys.exit(busy_campaign(args.rounds))
    if args.mode == "heal-autostart-child":
        from benchmarks.chaos_heal import autostart_child

        sys.exit(autostart_child(args.rounds))
    sys.exit(overload_campaign(args.seconds or 20))


if __name__ == "__main__":
    main()
