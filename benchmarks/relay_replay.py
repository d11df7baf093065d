"""The gateway's gRPC relay without sockets: its Python cost per request, on traffic recorded from a real run.

    .venv/bin/python -m benchmarks.relay_replay [--model tiny] [--concurrency 8] [--chunks 40000] [--profile]

Starts the embedded server (no gateway), puts `benchmarks.passthrough_relay` in front of its gRPC port
with `--record`, and runs perf_analyzer through it until one connection has carried `--chunks` reads.
Those reads, in their order, are then fed to the relay's socket-free core (`grpc_core.RelayCore`), and
its writes to a transport that drops them. Prints the best of 5 replays as microseconds of Python per
request (requests counted by admission control); `--profile` adds cProfile's top functions. Nothing here
waits on a socket or another process, so the figure holds steady on a busy machine, where throughput
ratios do not; in the real process the same work costs about twice as much (cold caches between requests).
"""

from __future__ import annotations

import argparse
import cProfile
import pickle
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support import relay_traffic

ROOT = Path(__file__).resolve().parent.parent


class _Sink:
    """A transport that takes writes and drops them."""

    def write(self, data: Any) -> None:
        pass

    def writelines(self, data: Any) -> None:
        pass


def replay(reads: list[tuple[str, bytes]]) -> tuple[float, int]:
    """Seconds the relay's core spent on `reads`, and the inference requests it let through."""
    from mslite_gateway.admission import Admission
    from mslite_gateway.grpc_core import CLIENT, TRITON, RelayCore, RelayRules
    from mslite_gateway.grpc_frames import write

    admission = Admission(max_inflight_per_model=1000, max_inflight_bytes=256 << 20)
    entered = 0
    enter = admission.enter

    def counted(model: str) -> None:
        nonlocal entered
        entered += 1
        enter(model)

    admission.enter = counted  # type: ignore[method-assign]
    core = RelayCore(RelayRules(max_request_bytes=64 << 20, admission=admission, staging=None))
    core.opened(True, 0.0)
    sink = _Sink()
    start = time.perf_counter()
    for side, data in reads:  # what the asyncio adapter does with each read, but for the sockets
        writes = core.feed(CLIENT if side == "client" else TRITON, data, 0.0)
        if writes.to_client:
            write(sink, writes.to_client)
        if writes.to_triton:
            write(sink, writes.to_triton)
    return time.perf_counter() - start, entered


def drive_client(url: str, model: str, seconds: float) -> None:
    """tritonclient's gRPC traffic on one channel: 8 inferences in flight, and now and then a call refused."""
    import threading

    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(url)
    slots = threading.Semaphore(8)

    def done(result: Any, error: Any) -> None:
        slots.release()

    deadline, n = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        n += 1
        x = grpcclient.InferInput("x", [1 + n % 3, 4], "FP32")
        x.set_data_from_numpy(np.full((1 + n % 3, 4), n, np.float32))
        slots.acquire()
        client.async_infer(model, [x], callback=done)
        if n % 50 == 0:  # Triton's refusal (a wrong input name), its message scrubbed on the way back
            bad = grpcclient.InferInput("nope", [1, 4], "FP32")
            bad.set_data_from_numpy(np.zeros((1, 4), np.float32))
            try:
                client.infer(model, [bad])
            except InferenceServerException:
                pass
            client.get_model_metadata(model)
    for _ in range(8):
        slots.acquire()
    client.close()


def record(model: str, concurrency: int, chunks: int, path: Path, *, driver: str = "perf_analyzer") -> None:
    """perf_analyzer (or tritonclient: `driver`) through a recording pass-through relay, until `path` holds
    `chunks` reads."""
    from benchmarks import passthrough_relay
    from mslite_triton.server import EmbeddedServer, ServerConfig
    from mslite_triton.server.perf_analyzer import PerfAnalyzerError, PerfRun, run
    from mslite_triton.server.ports import pick_ports

    config = ServerConfig(model_repository=ROOT / "model_repository", load_models=(model,), gateway=False)
    with EmbeddedServer(config) as srv:
        (port,) = pick_ports([("127.0.0.1", 0, "gRPC")])
        route = f"{port}:127.0.0.1:{srv.grpc_port}"
        relay = passthrough_relay.start([route], "--record", str(path), "--chunks", str(chunks))
        try:
            deadline = time.monotonic() + 300
            while not path.exists() and time.monotonic() < deadline:
                if driver == "tritonclient":
                    drive_client(f"127.0.0.1:{port}", model, 10)
                    continue
                from tests.support.tools import ensure_tools

                tools = ensure_tools(ROOT, note=lambda s: print(s, flush=True))
                spec = PerfRun(tools.perf_analyzer, model, f"127.0.0.1:{port}", "grpc", concurrency, 2000, max_trials=3)
                try:  # only its traffic matters: the relay may cut it off once it has recorded enough
                    run(spec, tools.env)
                except PerfAnalyzerError:
                    pass
            if not path.exists():
                raise RuntimeError(f"no connection carried {chunks} reads within 300 s")
        finally:
            relay.kill()
            relay.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--chunks", type=int, default=40000, help="reads to record (both ways together)")
    ap.add_argument("--profile", action="store_true", help="also cProfile's top functions of one replay")
    ap.add_argument("--driver", choices=("perf_analyzer", "tritonclient"), default="perf_analyzer")
    ap.add_argument("--save", type=Path, help="also write the recording here (tests/support/relay_traffic.py format)")
    ap.add_argument("--replay", type=Path, help="replay this saved recording instead of recording one")
    args = ap.parse_args(argv)
    if args.replay is not None:
        reads = relay_traffic.load(args.replay)
    else:
        if not (ROOT / "model_repository" / args.model / "1" / "model.onnx").exists():
            sys.exit("run `make models` first")
        with tempfile.TemporaryDirectory(prefix="relay-replay-") as tmp:
            path = Path(tmp) / "reads.pickle"
            record(args.model, args.concurrency, args.chunks, path, driver=args.driver)
            reads = pickle.loads(path.read_bytes())
        if args.save is not None:
            relay_traffic.save(args.save, reads)
    runs = [replay(reads) for _ in range(5)]
    best, requests = min(runs)
    print(
        f"{args.model} gRPC c={args.concurrency}: {len(reads)} reads, {requests} requests, "
        f"{best / max(requests, 1) * 1e6:.2f} us of relay Python per request (best of 5)",
        flush=True,
    )
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(replay, reads)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
