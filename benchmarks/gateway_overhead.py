"""What the validating gateway costs valid traffic: perf_analyzer through the gateway vs Triton's own ports.

    .venv/bin/python -m benchmarks.gateway_overhead [--rounds 5] [--interval-ms 2000] [--concurrency 8]
        [--models mobilenetv2 tiny] [--protocols grpc http] [--tcp-hop] [--relayed] [--floor] [--cpu-only]
        [--streaming]

Two local servers on the same repository, with the launcher's defaults (admin key on, the gateway's
admission control on): `serve`'s (`gateway=True`: the gateway on the public ports, tritonserver behind it on
Unix sockets) is the `gateway` path; one with `--no-gateway` (tritonserver on loopback TCP ports) is the
`direct` path. Only the path under load works, so each sees the machine's load alike. For each model x
protocol x concurrency the paths alternate (A B, B A, ...) for `--rounds` rounds; each round is one
perf_analyzer run (3 windows of `--interval-ms`, any three accepted, so every run ends in bounded time on a
busy machine). Prints per path the median throughput and p50 with the
spread (min-max) over rounds, the path/direct ratio of the medians with the ratios' own min-max, and the
serving CPU time per request (tritonserver and its workers, plus the path's gateway); writes
benchmarks/results/gateway_overhead.json. `--tcp-hop` adds the path `gateway-tcp`: the same gateway in front
of the direct server's TCP ports, what `serve` ran before tritonserver moved to Unix sockets; the
`gateway`/`gateway-tcp` ratio is what the Unix-socket hop changes. `--relayed` adds a gateway there that
relays every tensor over TCP as it came (`--no-staging`), what the gateway did before it handed large inputs
over through shared memory. `--floor` adds `benchmarks.passthrough_relay` there, a relay that checks
nothing, which shows what one more TCP hop costs before any check.

`--cpu-only` runs only the gateway path (with `--tcp-hop`, the gateway on TCP too, alternated) and reports
the gateway's CPU time per request (user and system, median and range over the rounds): on a shared
machine that figure holds steady where throughput ratios do not, and it is what the gateway takes from the
workers on a CPU-bound machine.

`--streaming` has perf_analyzer send its gRPC requests on streams (`--streaming`: one ModelStreamInfer call
per concurrent client); it applies to gRPC only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.support.perf_analyzer import PerfResult, PerfRun, run_relaxing

from . import passthrough_relay
from .serving import process_cpu_s

ROOT = Path(__file__).resolve().parent.parent


def _cpu_split(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _count(server: Any, model: str) -> int:
    """Requests `server`'s Triton has served for `model` (its statistics, read on its own endpoint)."""
    status, body = server.triton_http("GET", f"/v2/models/{model}/stats", None)
    assert status == 200, body
    return int(json.loads(body)["model_stats"][0]["inference_stats"]["success"]["count"])


def _perf(
    tools: Any, model: str, protocol: str, address: str, concurrency: int, interval_ms: int, streaming: bool = False
) -> PerfResult:
    """One perf_analyzer run of 3 windows, any three accepted (a busy machine never fails a round)."""
    spec = PerfRun(
        tools.perf_analyzer, model, address, protocol, concurrency, interval_ms, max_trials=3, streaming=streaming
    )
    return run_relaxing(spec, tools.env, spec.relaxed())[0]


def _spread(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--interval-ms", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[8])
    ap.add_argument("--models", nargs="+", default=["mobilenetv2", "tiny"])
    ap.add_argument("--protocols", nargs="+", default=["grpc", "http"])
    ap.add_argument("--cpu-only", action="store_true", help="only the gateway path: its CPU time per request")
    ap.add_argument(
        "--tcp-hop", action="store_true", help="also the gateway in front of tritonserver's TCP ports (not sockets)"
    )
    ap.add_argument(
        "--relayed", action="store_true", help="also a gateway without staging (every tensor over TCP as it came)"
    )
    ap.add_argument(
        "--floor", action="store_true", help="also a relay that checks nothing (benchmarks.passthrough_relay)"
    )
    ap.add_argument("--streaming", action="store_true", help="gRPC requests on streams (perf_analyzer --streaming)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args(argv)
    if args.streaming and args.protocols != ["grpc"]:
        ap.error("--streaming applies to gRPC only: add --protocols grpc")
    from mslite_server import LocalServer, ServerConfig
    from tests.support.tools import ensure_tools

    for model in args.models:
        if not (ROOT / "model_repository" / model / "1" / "model.onnx").exists():
            sys.exit("run `make models` first")
    tools = ensure_tools(ROOT, note=lambda s: print(s, flush=True))
    config = ServerConfig(
        model_repository=ROOT / "model_repository", load_models=tuple(args.models), gateway=True, supervise=False
    )
    rows = []
    print(f"cores {os.cpu_count()}, load average before start {os.getloadavg()}, {tools.version}", flush=True)
    with LocalServer(config) as srv, contextlib.ExitStack() as stack:
        assert srv.gateway is not None and srv.gateway.pid is not None
        gw_pid = srv.gateway.pid
        addresses = {
            ("grpc", "gateway"): f"127.0.0.1:{srv.grpc_port}",
            ("http", "gateway"): f"127.0.0.1:{srv.http_port}",
        }
        gateways = {"gateway": gw_pid}
        servers = {"gateway": srv}
        if not args.cpu_only or args.tcp_hop:  # tritonserver on TCP ports, perf_analyzer straight at it
            tcp = stack.enter_context(LocalServer(replace(config, gateway=False)))
            servers["direct"] = tcp
            addresses.update({("grpc", "direct"): tcp.triton.grpc_address, ("http", "direct"): tcp.triton.http_address})
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            extra = {"gateway-tcp": args.tcp_hop, "relayed": args.relayed, "floor": args.floor}
            for path in (p for p, wanted in extra.items() if wanted):  # each in front of the direct server's ports
                if path == "floor":  # one more TCP hop and nothing else: the least any relay costs
                    relay, at = _passthrough_relay(tcp)
                    stack.callback(relay.kill)
                    gateways[path] = relay.pid
                else:  # `serve`'s gateway on TCP; `relayed` without staging, every tensor over TCP as it came
                    relay, at = _gateway_on_tcp(tcp, workdir, staging=path == "gateway-tcp")
                    stack.callback(relay.stop)
                    gateways[path] = relay.pid
                servers[path] = tcp
                addresses.update({(protocol, path): address for protocol, address in at.items()})
        for model in args.models:
            for protocol in args.protocols:
                for c in args.concurrency:
                    if args.cpu_only:
                        paths = {p: (servers[p], gateways[p]) for p in ("gateway", "gateway-tcp") if p in gateways}
                        rows.append(_cpu_row(tools, paths, addresses, model, protocol, c, args))
                        continue
                    rows.append(_throughput_row(tools, servers, gateways, addresses, model, protocol, c, args))
    args.out.mkdir(parents=True, exist_ok=True)
    name = "gateway_cpu" if args.cpu_only else "gateway_overhead"
    out = args.out / f"{name}{'_streaming' if args.streaming else ''}.json"
    out.write_text(json.dumps({"cores": os.cpu_count(), "rounds": args.rounds, "rows": rows}, indent=2))
    print(f"written: {out}")
    return 0


def _gateway_on_tcp(srv: Any, workdir: Path, *, staging: bool) -> tuple[Any, dict[str, str]]:
    """A gateway like `serve`'s on free ports in front of the TCP ports of `srv`'s Triton (a `--no-gateway`
    server); without staging (`--no-staging`) unless `staging`.

    Returns the started gateway and its address per protocol.
    """
    from mslite_server.gateway_process import GatewayProcess
    from mslite_server.ports import pick_ports

    http_port, grpc_port = pick_ports([("127.0.0.1", 0, "HTTP"), ("127.0.0.1", 0, "gRPC")])
    gateway = GatewayProcess(
        host="127.0.0.1",
        http_port=http_port,
        grpc_port=grpc_port,
        upstream_http=srv.triton.http_address,
        upstream_grpc=srv.triton.grpc_address,
        admin_key=srv.admin_key,
        log_path=workdir / f"gateway-{'staging' if staging else 'relayed'}.log",
    )
    if not staging:
        gateway.args.append("--no-staging")
    gateway.start()
    return gateway, {"http": f"127.0.0.1:{http_port}", "grpc": f"127.0.0.1:{grpc_port}"}


def _passthrough_relay(srv: Any) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """`benchmarks.passthrough_relay` on free ports in front of `srv`'s Triton; its address per protocol."""
    from mslite_server.ports import pick_ports

    http_port, grpc_port = pick_ports([("127.0.0.1", 0, "HTTP"), ("127.0.0.1", 0, "gRPC")])
    routes = [f"{http_port}:{srv.triton.http_address}", f"{grpc_port}:{srv.triton.grpc_address}"]
    return passthrough_relay.start(routes), {"http": f"127.0.0.1:{http_port}", "grpc": f"127.0.0.1:{grpc_port}"}


def _serving_cpu_s(pids: list[int]) -> float:
    """CPU seconds of these processes and their children (tritonserver with its workers, a gateway)."""
    from tests.support.processes import children_of

    return sum(process_cpu_s(pid) + sum(process_cpu_s(child) for child, _ in children_of(pid)) for pid in pids)


def _throughput_row(
    tools: Any,
    servers: dict[str, Any],
    gateways: dict[str, int],
    addresses: dict[tuple[str, str], str],
    model: str,
    protocol: str,
    c: int,
    args: Any,
) -> dict[str, Any]:
    """Every path in turn (order reversed every other round): throughput, p50, and CPU per request.

    CPU per request counts what serving costs the machine: tritonserver with its workers, plus the
    gateway the path goes through.
    """
    paths = ["direct", *gateways]  # each path's server: `servers`
    runs: dict[str, list[PerfResult]] = {p: [] for p in paths}
    cpu: dict[str, list[float]] = {p: [] for p in paths}
    for path in paths:  # warm-up, untimed
        _perf(tools, model, protocol, addresses[(protocol, path)], c, 500, args.streaming)
    for r in range(args.rounds):
        for path in paths if r % 2 == 0 else paths[::-1]:
            srv = servers[path]
            pids = [srv.process.pid, *([gateways[path]] if path in gateways else [])]
            c0, n0 = _serving_cpu_s(pids), _count(srv, model)
            runs[path].append(
                _perf(tools, model, protocol, addresses[(protocol, path)], c, args.interval_ms, args.streaming)
            )
            c1, n1 = _serving_cpu_s(pids), _count(srv, model)
            cpu[path].append(1e3 * (c1 - c0) / max(n1 - n0, 1))
    tput = {p: [x.infer_s for x in v] for p, v in runs.items()}
    p50 = {p: [x.p50_ms for x in v] for p, v in runs.items()}
    row: dict[str, Any] = {"model": model, "protocol": protocol, "concurrency": c, "streaming": args.streaming}
    for path in paths:
        ratios = [x / d for x, d in zip(tput[path], tput["direct"])]
        row[path] = {
            "infer_per_s": tput[path],
            "p50_ms": p50[path],
            "serving_cpu_ms_per_request": [round(x, 4) for x in cpu[path]],
            "throughput_ratio": round(statistics.median(tput[path]) / statistics.median(tput["direct"]), 3),
            "paired_ratios": [round(x, 3) for x in ratios],
        }
        print(
            f"{model:11s} {protocol:4s} c={c} {path:8s}: {_spread(tput[path])}/s p50 {_spread(p50[path], 2)} ms, "
            f"ratio x{row[path]['throughput_ratio']:.3f} (paired {min(ratios):.3f}-{max(ratios):.3f}), "
            f"serving CPU {_spread(cpu[path], 3)} ms/request",
            flush=True,
        )
    if "gateway-tcp" in runs:  # what the Unix-socket hop changes, round by round
        hop = [x / t for x, t in zip(tput["gateway"], tput["gateway-tcp"])]
        row["unix_over_tcp"] = {
            "throughput_ratio": round(statistics.median(tput["gateway"]) / statistics.median(tput["gateway-tcp"]), 3),
            "paired_ratios": [round(x, 3) for x in hop],
            "p50_ms_unix": p50["gateway"],
            "p50_ms_tcp": p50["gateway-tcp"],
        }
        print(
            f"{model:11s} {protocol:4s} c={c} Unix socket vs TCP behind the gateway: throughput "
            f"x{row['unix_over_tcp']['throughput_ratio']:.3f} (paired {min(hop):.3f}-{max(hop):.3f})",
            flush=True,
        )
    return row


def _cpu_row(
    tools: Any,
    paths: dict[str, tuple[Any, int]],
    addresses: dict[tuple[str, str], str],
    model: str,
    protocol: str,
    c: int,
    args: Any,
) -> dict[str, Any]:
    """Each gateway's CPU time per request (user and system apart) over `args.rounds` runs through it.

    `paths`: the server and the gateway's pid of each path; with `gateway-tcp` the two alternate round by round.
    """
    names = list(paths)
    for path in names:  # warm-up, untimed
        _perf(tools, model, protocol, addresses[(protocol, path)], c, 500, args.streaming)
    user: dict[str, list[float]] = {p: [] for p in names}
    system: dict[str, list[float]] = {p: [] for p in names}
    tput: dict[str, list[float]] = {p: [] for p in names}
    for r in range(args.rounds):
        for path in names if r % 2 == 0 else names[::-1]:
            srv, pid = paths[path]
            (u0, s0), n0 = _cpu_split(pid), _count(srv, model)
            tput[path].append(
                _perf(tools, model, protocol, addresses[(protocol, path)], c, args.interval_ms, args.streaming).infer_s
            )
            (u1, s1), n1 = _cpu_split(pid), _count(srv, model)
            user[path].append(1e3 * (u1 - u0) / max(n1 - n0, 1))
            system[path].append(1e3 * (s1 - s0) / max(n1 - n0, 1))
    row: dict[str, Any] = {"model": model, "protocol": protocol, "concurrency": c}
    for path in names:
        total = [u + s for u, s in zip(user[path], system[path])]
        print(
            f"{model:11s} {protocol:4s} c={c} {path}: gateway CPU {_spread(total, 3)} ms/request (user "
            f"{_spread(user[path], 3)}, system {_spread(system[path], 3)}), {_spread(tput[path])}/s, load average "
            f"{os.getloadavg()[0]:.1f}",
            flush=True,
        )
        row[path] = {
            "gateway_cpu_ms_per_request": [round(x, 4) for x in total],
            "user_ms": [round(x, 4) for x in user[path]],
            "system_ms": [round(x, 4) for x in system[path]],
            "infer_per_s": tput[path],
        }
    return row


if __name__ == "__main__":
    sys.exit(main())
