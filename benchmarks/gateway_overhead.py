"""What the validating gateway costs valid traffic: perf_analyzer through the gateway vs Triton's own ports.

    .venv/bin/python -m benchmarks.gateway_overhead [--rounds 5] [--interval-ms 2000] [--concurrency 8]
        [--models mobilenetv2 tiny] [--protocols grpc http] [--cpu-only]

One embedded server with `gateway=True` (the launcher's defaults: admin key on, the gateway's admission
control on) serves both paths at once: the public ports (through the gateway, what `mslite-triton serve`
gives) and Triton's private ports (direct, what `--no-gateway` gives), so both see the same server, workers
and machine load. For each model x protocol x concurrency the two paths alternate (A B, B A, ...) for
`--rounds` rounds; each round is one perf_analyzer run (3 windows of `--interval-ms`, any three accepted, so
every run ends in bounded time on a busy machine). Prints per path the median throughput and p50 with the
spread (min-max) over rounds, the gateway/direct ratio of the medians with the ratios' own min-max, and the
gateway process's CPU time per request; writes benchmarks/results/gateway_overhead.json.

`--cpu-only` runs only the gateway path and reports the gateway's CPU time per request (user and system,
median and range over the rounds): on a shared machine that figure holds steady where throughput ratios do
not, and it is what the gateway takes from the workers on a CPU-bound machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_split(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _count(http_url: str, model: str) -> int:
    """Requests Triton has served for `model` (its statistics, read on the direct port)."""
    with urllib.request.urlopen(f"{http_url}/v2/models/{model}/stats", timeout=10) as r:
        stats = json.load(r)["model_stats"][0]["inference_stats"]["success"]["count"]
    return int(stats)


def _perf(tools: Any, model: str, protocol: str, address: str, concurrency: int, interval_ms: int) -> dict[str, str]:
    with tempfile.TemporaryDirectory(prefix="gw-pa-") as tmp:
        csv_path = Path(tmp) / "pa.csv"
        cmd = [str(tools.perf_analyzer), "-m", model, "-u", address, "-i", protocol]
        cmd += ["--concurrency-range", str(concurrency), "--measurement-interval", str(interval_ms)]
        cmd += ["--max-trials", "3", "--stability-percentage", "1000", "-f", str(csv_path)]
        out = subprocess.run(cmd, env=tools.env, capture_output=True, text=True, timeout=3 * interval_ms / 1e3 + 60)
        if out.returncode != 0 or not csv_path.exists():
            raise RuntimeError(f"perf_analyzer exit {out.returncode}: {(out.stdout + out.stderr)[-800:]}")
        with open(csv_path, newline="") as f:
            return next(csv.DictReader(f))


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
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args(argv)
    from benchmarks.tools import ensure_tools
    from mslite_triton.server import EmbeddedServer, ServerConfig

    for model in args.models:
        if not (ROOT / "model_repository" / model / "1" / "model.onnx").exists():
            sys.exit("run `make models` first")
    tools = ensure_tools(ROOT, note=lambda s: print(s, flush=True))
    config = ServerConfig(
        model_repository=ROOT / "model_repository", load_models=tuple(args.models), gateway=True, supervise=False
    )
    rows = []
    print(f"cores {os.cpu_count()}, load average before start {os.getloadavg()}, {tools.version}", flush=True)
    with EmbeddedServer(config) as srv:
        assert srv.gateway is not None and srv.gateway.pid is not None
        gw_pid = srv.gateway.pid
        addresses = {
            ("grpc", "direct"): f"127.0.0.1:{srv.triton_grpc_port}",
            ("grpc", "gateway"): f"127.0.0.1:{srv.grpc_port}",
            ("http", "direct"): f"127.0.0.1:{srv.triton_http_port}",
            ("http", "gateway"): f"127.0.0.1:{srv.http_port}",
        }
        for model in args.models:
            for protocol in args.protocols:
                for c in args.concurrency:
                    if args.cpu_only:
                        rows.append(_cpu_row(tools, srv.triton_http_url, gw_pid, addresses, model, protocol, c, args))
                        continue
                    runs: dict[str, list[dict[str, str]]] = {"direct": [], "gateway": []}
                    gw_cpu, gw_requests = 0.0, 0
                    for path in ("direct", "gateway"):  # warm-up, untimed
                        _perf(tools, model, protocol, addresses[(protocol, path)], c, 500)
                    for r in range(args.rounds):
                        for path in ("direct", "gateway") if r % 2 == 0 else ("gateway", "direct"):
                            cpu0, n0 = _cpu_s(gw_pid), _count(srv.triton_http_url, model)
                            runs[path].append(
                                _perf(tools, model, protocol, addresses[(protocol, path)], c, args.interval_ms)
                            )
                            if path == "gateway":
                                gw_cpu += _cpu_s(gw_pid) - cpu0
                                gw_requests += _count(srv.triton_http_url, model) - n0
                    tput = {p: [float(x["Inferences/Second"]) for x in v] for p, v in runs.items()}
                    p50 = {p: [float(x["p50 latency"]) / 1e3 for x in v] for p, v in runs.items()}
                    ratios = [g / d for g, d in zip(tput["gateway"], tput["direct"])]
                    row: dict[str, Any] = {"model": model, "protocol": protocol, "concurrency": c}
                    for path in runs:
                        row[path] = {"infer_per_s": tput[path], "p50_ms": p50[path]}
                    row["throughput_ratio"] = round(
                        statistics.median(tput["gateway"]) / statistics.median(tput["direct"]), 3
                    )
                    row["paired_ratios"] = [round(x, 3) for x in ratios]
                    row["gateway_cpu_ms_per_request"] = round(1e3 * gw_cpu / max(gw_requests, 1), 3)
                    rows.append(row)
                    print(
                        f"{model:11s} {protocol:4s} c={c}: direct {_spread(tput['direct'])}/s p50 "
                        f"{_spread(p50['direct'], 2)} ms | gateway {_spread(tput['gateway'])}/s p50 "
                        f"{_spread(p50['gateway'], 2)} ms | ratio x{row['throughput_ratio']:.3f} (paired "
                        f"{min(ratios):.3f}-{max(ratios):.3f}), gateway CPU {row['gateway_cpu_ms_per_request']:.3f} "
                        "ms/request",
                        flush=True,
                    )
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / ("gateway_cpu.json" if args.cpu_only else "gateway_overhead.json")
    out.write_text(json.dumps({"cores": os.cpu_count(), "rounds": args.rounds, "rows": rows}, indent=2))
    print(f"written: {out}")
    return 0


def _cpu_row(
    tools: Any, url: str, pid: int, addresses: dict[tuple[str, str], str], model: str, protocol: str, c: int, args: Any
) -> dict[str, Any]:
    """The gateway's CPU time per request over `args.rounds` runs through it (user and system apart)."""
    address = addresses[(protocol, "gateway")]
    _perf(tools, model, protocol, address, c, 500)  # warm-up, untimed
    user, system, tput = [], [], []
    for _ in range(args.rounds):
        (u0, s0), n0 = _cpu_split(pid), _count(url, model)
        tput.append(float(_perf(tools, model, protocol, address, c, args.interval_ms)["Inferences/Second"]))
        (u1, s1), n1 = _cpu_split(pid), _count(url, model)
        user.append(1e3 * (u1 - u0) / max(n1 - n0, 1))
        system.append(1e3 * (s1 - s0) / max(n1 - n0, 1))
    total = [u + s for u, s in zip(user, system)]
    print(
        f"{model:11s} {protocol:4s} c={c}: gateway CPU {_spread(total, 3)} ms/request (user {_spread(user, 3)}, "
        f"system {_spread(system, 3)}), {_spread(tput)}/s, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return {
        "model": model,
        "protocol": protocol,
        "concurrency": c,
        "gateway_cpu_ms_per_request": [round(x, 4) for x in total],
        "user_ms": [round(x, 4) for x in user],
        "system_ms": [round(x, 4) for x in system],
        "infer_per_s": tput,
    }


if __name__ == "__main__":
    sys.exit(main())
