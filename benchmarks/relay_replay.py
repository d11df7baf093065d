"""The gateway's gRPC relay without sockets: its Python cost per request, on traffic recorded from a real run.

    .venv/bin/python -m benchmarks.relay_replay [--model tiny] [--concurrency 8] [--chunks 40000] [--profile]

Starts the embedded server (no gateway), puts `benchmarks.passthrough_relay` in front of its gRPC port
with `--record`, and runs perf_analyzer through it until one connection has carried `--chunks` reads.
Those reads, in their order, are then fed to the relay's two sides (`grpc_relay._ClientSide` for the
client's bytes, `grpc_upstream.UpstreamSide` for tritonserver's), with transports that take the writes
and drop them. Prints the best of 5 replays as microseconds of Python per request (requests counted by
admission control); `--profile` adds cProfile's top functions. Nothing here waits on a socket or another
process, so the figure holds steady on a busy machine, where throughput ratios do not; in the real process
the same work costs about twice as much (cold caches between requests).
"""

from __future__ import annotations

import argparse
import cProfile
import pickle
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class _Sink:
    """A transport that takes writes and drops them."""

    def write(self, data: Any) -> None:
        pass

    def writelines(self, data: Any) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def replay(reads: list[tuple[str, bytes]]) -> tuple[float, int]:
    """Seconds the relay spent on `reads`, and the inference requests it let through."""
    from mslite_gateway.admission import Admission
    from mslite_gateway.grpc_relay import GrpcRelay, _ClientSide
    from mslite_gateway.grpc_upstream import UpstreamSide

    admission = Admission(max_inflight_per_model=1000, max_inflight_bytes=256 << 20)
    entered = 0
    enter = admission.enter

    def counted(model: str) -> None:
        nonlocal entered
        entered += 1
        enter(model)

    admission.enter = counted  # type: ignore[method-assign]
    relay = GrpcRelay(("127.0.0.1", 1), max_request_bytes=64 << 20, admission=admission, staging=None)
    client = _ClientSide(relay)
    client.transport = _Sink()  # type: ignore[assignment]
    upstream = UpstreamSide(client)
    upstream.transport = _Sink()  # type: ignore[assignment]
    client.upstream = upstream
    start = time.perf_counter()
    for side, data in reads:
        if side == "client":
            client._feed(data)
        else:
            upstream.data_received(data)
    return time.perf_counter() - start, entered


def record(model: str, concurrency: int, chunks: int, path: Path) -> None:
    """perf_analyzer through a recording pass-through relay, until `path` holds `chunks` reads."""
    from benchmarks import passthrough_relay
    from mslite_triton.server import EmbeddedServer, ServerConfig
    from mslite_triton.server.ports import pick_ports
    from tests.support.tools import ensure_tools

    tools = ensure_tools(ROOT, note=lambda s: print(s, flush=True))
    config = ServerConfig(model_repository=ROOT / "model_repository", load_models=(model,), gateway=False)
    with EmbeddedServer(config) as srv:
        (port,) = pick_ports([("127.0.0.1", 0, "gRPC")])
        route = f"{port}:127.0.0.1:{srv.grpc_port}"
        relay = passthrough_relay.start([route], "--record", str(path), "--chunks", str(chunks))
        try:
            deadline = time.monotonic() + 300
            while not path.exists() and time.monotonic() < deadline:
                pa = [str(tools.perf_analyzer), "-m", model, "-u", f"127.0.0.1:{port}", "-i", "grpc"]
                pa += ["--concurrency-range", str(concurrency), "--measurement-interval", "2000"]
                pa += ["--max-trials", "3", "--stability-percentage", "1000"]
                subprocess.run(pa, env=tools.env, capture_output=True, timeout=120)
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
    args = ap.parse_args(argv)
    if not (ROOT / "model_repository" / args.model / "1" / "model.onnx").exists():
        sys.exit("run `make models` first")
    with tempfile.TemporaryDirectory(prefix="relay-replay-") as tmp:
        path = Path(tmp) / "reads.pickle"
        record(args.model, args.concurrency, args.chunks, path)
        reads = pickle.loads(path.read_bytes())
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
