"""The gateway's relays without sockets: their Python cost per request, on traffic recorded from a real run.

    .venv/bin/python -m benchmarks.relay_replay [--protocol http] [--profile]   # the committed recording
    .venv/bin/python -m benchmarks.relay_replay --against /tmp/base/server   # another version's gateway beside
        # this one (e.g. `git archive BASE server | tar -x -C /tmp/base`)
    .venv/bin/python -m benchmarks.relay_replay --record [--model tiny] [--concurrency 8] [--chunks 40000]

With no `--replay` or `--record` it replays the recording committed for the protocol (`DEFAULT_RECORDINGS`,
seconds). `--record` starts a `LocalServer` (no gateway), puts `benchmarks.passthrough_relay` in front of its gRPC port
with `--record`, and runs perf_analyzer through it until one connection has carried `--chunks` reads.
Those reads, in their order, are then fed to the relay's socket-free core (`grpc.core.RelayCore`), and
its writes to a transport that drops them. Prints the median (and the best) of 5 replays as microseconds
of Python per request (requests counted by admission control); `--profile` adds cProfile's top functions. Nothing here
waits on a socket or another process, so the figure holds steady on a busy machine, where throughput
ratios do not; in the real process the same work costs about twice as much (cold caches between requests).

`--protocol http` records perf_analyzer's HTTP traffic instead (one connection, concurrency 1) and replays it
through the whole HTTP front (`http.front.HttpFront.handle`: framing, checks, the answer's head) on in-memory
streams: the client's next request is fed once the answer to the last one is written, and the upstream
connection answers each request with Triton's recorded answer (the recording `HTTP_REPEAT` times over,
on one connection). That includes asyncio's stream code on both
sides, as the real process has it (and as any version of the front needs, so versions compare alike).

`--against DIR` times a second version of the gateway (the `mslite_gateway` package in DIR) on the same
reads in the same process, the two alternated replay by replay (the order reversed every other round), so
a change of the machine's load reaches both alike; it prints each one's median and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib
import importlib.util
import pickle
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support import relay_traffic

ROOT = Path(__file__).resolve().parent.parent
# perf_analyzer's traffic on model tiny, recorded here (tests/support/relay_traffic.py says how)
DEFAULT_RECORDINGS = {"grpc": "perf_analyzer_tiny.reads", "http": "perf_analyzer_tiny_http.reads"}
HTTP_REPEAT = 20  # an HTTP recording's exchanges, one after another, this many times in one replay


class _Sink:
    """A transport that takes writes and drops them."""

    def write(self, data: Any) -> None:
        pass

    def writelines(self, data: Any) -> None:
        pass


def load_gateway(root: Path | None = None) -> dict[str, Any]:
    """The relay's names that `replay` uses, from the `mslite_gateway` package in `root` (None: the installed one).

    A version from `root` is imported under the usual name and then taken out of `sys.modules` again, so
    that another version can be imported beside it: its functions keep their own module globals. A version
    from before the gateway's `grpc/` and `http/` folders (flat `grpc_core.py`, `http_front.py`) loads too.
    """
    installed = Path(importlib.import_module("mslite_gateway").__file__ or "").parent
    folder = installed if root is None else root / "mslite_gateway"
    sep = "." if (folder / "grpc").is_dir() else "_"
    core_name, frames_name, front_name = (
        f"mslite_gateway.{m}" for m in (f"grpc{sep}core", f"grpc{sep}frames", f"http{sep}front")
    )
    if root is None:
        importlib.import_module(core_name)  # the installed version, as every other caller sees it
        importlib.import_module(front_name)
        modules = {n: m for n, m in sys.modules.items() if n.split(".")[0] == "mslite_gateway"}
    else:
        saved = {n: sys.modules.pop(n) for n in list(sys.modules) if n.split(".")[0] == "mslite_gateway"}
        spec = importlib.util.spec_from_file_location(
            "mslite_gateway", folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        assert spec is not None and spec.loader is not None, folder
        try:
            sys.modules["mslite_gateway"] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(sys.modules["mslite_gateway"])  # its submodules are then found in `folder`
            importlib.import_module(core_name)
            importlib.import_module(front_name)
            modules = {n: sys.modules.pop(n) for n in list(sys.modules) if n.split(".")[0] == "mslite_gateway"}
        finally:
            sys.modules.update(saved)
    core, frames, front = modules[core_name], modules[frames_name], modules[front_name]
    return {
        "Admission": modules["mslite_gateway.admission"].Admission,
        "CLIENT": core.CLIENT,
        "TRITON": core.TRITON,
        "RelayCore": core.RelayCore,
        "RelayRules": core.RelayRules,
        "write": frames.write,
        "HttpFront": front.HttpFront,
        "Upstream": front.Upstream,  # every version's HTTP front has the name
    }


def replay(reads: list[tuple[str, bytes]], gateway: dict[str, Any] | None = None) -> tuple[float, int]:
    """Seconds the relay's core (of `gateway`, `load_gateway`'s) spent on `reads`, and the requests it let through."""
    g = gateway or load_gateway()
    Admission, CLIENT, TRITON, RelayCore, RelayRules, write = (  # noqa: N806  (the classes' own names)
        g["Admission"],
        g["CLIENT"],
        g["TRITON"],
        g["RelayCore"],
        g["RelayRules"],
        g["write"],
    )

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
    start = time.thread_time()  # CPU time: on a busy machine, waiting for a core is not the relay's cost
    for side, data in reads:  # what the asyncio adapter does with each read, but for the sockets
        writes = core.feed(CLIENT if side == "client" else TRITON, data, 0.0)
        if writes.to_client:
            write(sink, writes.to_client)
        if writes.to_triton:
            write(sink, writes.to_triton)
    return time.thread_time() - start, entered


class _Peer:
    """The far end of an in-memory connection: each write to it is answered with its next recorded bytes."""

    def __init__(self, replies: Iterator[bytes], limit: int) -> None:
        self.reader = asyncio.StreamReader(limit=limit)  # the gateway's: 64 KiB for clients, 1 MiB for Triton
        self.replies = replies
        self.status_lines: list[bytes] = []  # the start of each message written to this side
        self.transport = self  # (a writer's transport: all written at once)

    def reply(self) -> None:
        data = next(self.replies, None)
        if data is None:
            self.reader.feed_eof()
        else:
            self.reader.feed_data(data)

    def write(self, data: Any) -> None:
        self.status_lines.append(data[:12])
        self.reply()

    def writelines(self, data: Any) -> None:
        self.status_lines.append(data[0][:12])
        self.reply()

    async def drain(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def write_eof(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Triton:
    """An upstream address whose connections answer with the recorded answers, in order."""

    def __init__(self, answers: list[bytes]) -> None:
        self.answers = iter(answers)  # one order for all: the pool may open another connection

    async def open_connection(self, **kwargs: Any) -> tuple[asyncio.StreamReader, _Peer]:
        peer = _Peer(self.answers, 1 << 20)
        return peer.reader, peer


def exchanges(reads: list[tuple[str, bytes]]) -> tuple[list[bytes], list[bytes]]:
    """A recorded HTTP connection as its requests and Triton's answers (the last, perhaps cut off, left out)."""
    requests: list[bytes] = []
    answers: list[bytes] = []
    for side, data in reads:
        if side == "client":
            if len(answers) == len(requests):
                requests.append(b"")
            requests[-1] += data
        else:
            if len(answers) < len(requests):
                answers.append(b"")
            answers[-1] += data
    n = min(len(requests), len(answers)) - 1
    return requests[:n], answers[:n]


def replay_http(reads: list[tuple[str, bytes]], gateway: dict[str, Any] | None = None) -> tuple[float, int]:
    """CPU seconds the HTTP front (of `gateway`) spent on the recorded connection `reads`, and the answers it
    wrote that were Triton's 200s."""
    import uvloop

    g = gateway or load_gateway()
    requests, answers = exchanges(reads)
    requests, answers = requests * HTTP_REPEAT, answers * HTTP_REPEAT
    admission = g["Admission"](max_inflight_per_model=1000, max_inflight_bytes=256 << 20)
    upstream = g["Upstream"](_Triton(answers), timeout_s=60.0)
    front = g["HttpFront"](upstream, max_request_bytes=64 << 20, admission=admission)

    async def serve() -> tuple[float, _Peer]:
        client = _Peer(iter(requests), 64 << 10)  # its reader belongs to the loop that runs this
        client.reply()  # the first request; each answer brings the next
        start = time.thread_time()
        await front.handle(client.reader, client)
        return time.thread_time() - start, client

    loop = uvloop.new_event_loop()
    try:
        spent, client = loop.run_until_complete(serve())
    finally:
        loop.close()
    return spent, client.status_lines.count(b"HTTP/1.1 200")


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


def record(
    model: str, concurrency: int, chunks: int, path: Path, *, driver: str = "perf_analyzer", protocol: str = "grpc"
) -> None:
    """perf_analyzer (or tritonclient: `driver`) through a recording pass-through relay, until `path` holds
    `chunks` reads."""
    from benchmarks import passthrough_relay
    from mslite_server import LocalServer, ServerConfig
    from mslite_server.ports import pick_ports
    from tests.support.perf_analyzer import PerfAnalyzerError, PerfRun, run

    config = ServerConfig(model_repository=ROOT / "model_repository", load_models=(model,), gateway=False)
    with LocalServer(config) as srv:
        (port,) = pick_ports([("127.0.0.1", 0, "gRPC")])
        route = f"{port}:127.0.0.1:{srv.grpc_port if protocol == 'grpc' else srv.http_port}"
        relay = passthrough_relay.start([route], "--record", str(path), "--chunks", str(chunks))
        try:
            deadline = time.monotonic() + 300
            while not path.exists() and time.monotonic() < deadline:
                if driver == "tritonclient":
                    drive_client(f"127.0.0.1:{port}", model, 10)
                    continue
                from tests.support.tools import ensure_tools

                tools = ensure_tools(ROOT, note=lambda s: print(s, flush=True))
                spec = PerfRun(
                    tools.perf_analyzer, model, f"127.0.0.1:{port}", protocol, concurrency, 2000, max_trials=3
                )
                try:  # only its traffic matters: the relay may cut it off once it has recorded enough
                    run(spec, tools.env)
                except PerfAnalyzerError:
                    pass
            if not path.exists():
                raise RuntimeError(f"no connection carried {chunks} reads within 300 s")
        finally:
            relay.kill()
            relay.wait()


def _per_request_us(runs: list[tuple[float, int]]) -> tuple[float, float]:
    """The median and the best of `runs` ((seconds, requests) each) in microseconds per request."""
    per = [seconds / max(requests, 1) * 1e6 for seconds, requests in runs]
    return statistics.median(per), min(per)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--chunks", type=int, default=40000, help="reads to record (both ways together)")
    ap.add_argument("--profile", action="store_true", help="also cProfile's top functions of one replay")
    ap.add_argument("--driver", choices=("perf_analyzer", "tritonclient"), default="perf_analyzer", help="gRPC only")
    ap.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    ap.add_argument("--save", type=Path, help="also write the recording here (tests/support/relay_traffic.py format)")
    ap.add_argument("--replay", type=Path, help="replay this saved recording (default: the committed one)")
    ap.add_argument("--record", action="store_true", help="record new traffic through a local server (minutes)")
    ap.add_argument("--against", type=Path, help="also time the mslite_gateway package in this folder, alternated")
    ap.add_argument("--rounds", type=int, default=5, help="replays per version (the median counts)")
    args = ap.parse_args(argv)
    if not args.record:
        reads = relay_traffic.load(args.replay or relay_traffic.HERE / DEFAULT_RECORDINGS[args.protocol])
    else:
        if not (ROOT / "model_repository" / args.model / "1" / "model.onnx").exists():
            sys.exit("run `make models` first")
        with tempfile.TemporaryDirectory(prefix="relay-replay-") as tmp:
            path = Path(tmp) / "reads.pickle"
            record(args.model, args.concurrency, args.chunks, path, driver=args.driver, protocol=args.protocol)
            reads = pickle.loads(path.read_bytes())
        if args.save is not None:
            relay_traffic.save(args.save, reads)
    ours = load_gateway()
    replay_one = replay_http if args.protocol == "http" else replay
    runs: list[tuple[float, int]] = []
    theirs: list[tuple[float, int]] = []
    other = load_gateway(args.against.resolve()) if args.against is not None else None
    for i in range(args.rounds):  # alternated, the order reversed every other round
        for version in (ours, other) if i % 2 else (other, ours):
            if version is not None:
                (runs if version is ours else theirs).append(replay_one(reads, version))
    source = f"{args.model} c={args.concurrency}" if args.record else (args.replay or DEFAULT_RECORDINGS[args.protocol])
    print(f"{source} ({args.protocol}): {len(reads)} reads, {runs[0][1]} requests", flush=True)
    us = {"this version": _per_request_us(runs)}
    if theirs:
        us[str(args.against)] = _per_request_us(theirs)
    for name, (median, best) in us.items():
        print(f"{name}: {median:.2f} us of relay Python per request (median of {args.rounds}; best {best:.2f})")
    if theirs:
        ratio = us["this version"][0] / us[str(args.against)][0]
        print(f"this version / {args.against}: {ratio:.3f} (medians)", flush=True)
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(replay_one, reads, ours)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
