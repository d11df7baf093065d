"""`serve`'s defaults against `--no-gateway` on one model: perf_analyzer throughput, alternated, as a ratio.

Two servers on the same repository at once: one as `mslite-triton serve` runs by default (the gateway, the
admin key, admission control, tritonserver on Unix sockets) and one with `--no-gateway` (tritonserver on TCP
ports). Each round measures both on every protocol, one right after the other, the order reversed every
other round (`paired`); the figure is the median of the rounds' ratios, gateway / direct. perf_analyzer
sends no key: inference is open.

Run: .venv/bin/python -m benchmarks.gateway_ratio [--model mobilenetv2] [--rounds 3] [--concurrency 8]

To compare two trees, run it from each, alternately, with the tree's packages first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

from mslite_server import LocalServer, ServerConfig
from tests.support.perf_analyzer import PerfRun, run_relaxing
from tests.support.tools import ensure_tools

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mobilenetv2")
    parser.add_argument("--repository", type=Path, default=ROOT / "model_repository")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--protocols", default="grpc,http")
    parser.add_argument("--interval-ms", type=int, default=3000)
    args = parser.parse_args()
    tools = ensure_tools(ROOT)
    protocols = [p for p in args.protocols.split(",") if p]
    common = {"model_repository": args.repository, "load_models": (args.model,), "exit_timeout_s": 5}
    ratios: dict[str, list[float]] = {p: [] for p in protocols}
    with (
        LocalServer(ServerConfig(gateway=True, **common)) as gateway,  # type: ignore[arg-type]
        LocalServer(ServerConfig(gateway=False, **common)) as direct,  # type: ignore[arg-type]
    ):
        servers = [("gateway", gateway), ("direct", direct)]
        for r in range(args.rounds):
            for protocol in protocols:
                got: dict[str, float] = {}
                for name, srv in servers if r % 2 == 0 else servers[::-1]:
                    port = srv.grpc_port if protocol == "grpc" else srv.http_port
                    spec = PerfRun(
                        binary=tools.perf_analyzer,
                        model=args.model,
                        url=f"127.0.0.1:{port}",
                        protocol=protocol,
                        concurrency=args.concurrency,
                        interval_ms=args.interval_ms,
                        shared_memory="none",
                    )
                    result, _, _ = run_relaxing(spec, tools.env, spec.relaxed(interval_factor=2))
                    got[name] = result.infer_s
                ratios[protocol].append(got["gateway"] / got["direct"])
                print(
                    f"round {r + 1} {protocol}: gateway {got['gateway']:.1f} infer/s, direct {got['direct']:.1f}, "
                    f"ratio {ratios[protocol][-1]:.3f} (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
    for protocol, values in ratios.items():
        print(
            f"{args.model} {protocol} c={args.concurrency}: gateway / direct median {statistics.median(values):.3f} "
            f"[{min(values):.3f}-{max(values):.3f}] over {len(values)} rounds",
            flush=True,
        )


if __name__ == "__main__":
    main()
