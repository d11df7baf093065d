"""`serve`'s defaults against `--no-gateway` on one model: perf_analyzer throughput, c=8, gRPC and HTTP.

Both servers run at once on the checkout's repository; each round measures the two one right after the other,
the order reversed every other round (`paired`), and the figure is the median of the rounds' ratios. To
compare two trees, run it from each in turn, with that tree's packages first on PYTHONPATH.

Run: .venv/bin/python -m benchmarks.gateway_ratio [MODEL [ROUNDS]]   (default: mobilenetv2 3)
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

from mslite_server import LocalServer, ServerConfig
from tests.support.perf_analyzer import PerfRun, run_relaxing
from tests.support.tools import ensure_tools

ROOT = Path(__file__).resolve().parent.parent


def main(model: str = "mobilenetv2", rounds: int = 3) -> None:
    tools = ensure_tools(ROOT)
    common = {"model_repository": ROOT / "model_repository", "load_models": (model,), "exit_timeout_s": 5}
    ratios: dict[str, list[float]] = {"grpc": [], "http": []}
    with LocalServer(ServerConfig(gateway=True, **common)) as gw, LocalServer(ServerConfig(**common)) as direct:  # type: ignore[arg-type]
        for r in range(rounds):
            for protocol, values in ratios.items():
                got = {}
                for name, srv in [("gateway", gw), ("direct", direct)][:: -1 if r % 2 else 1]:
                    url = f"127.0.0.1:{srv.grpc_port if protocol == 'grpc' else srv.http_port}"
                    spec = PerfRun(tools.perf_analyzer, model, url, protocol, 8, 3000, shared_memory="none")
                    got[name] = run_relaxing(spec, tools.env, spec.relaxed(interval_factor=2))[0].infer_s
                values.append(got["gateway"] / got["direct"])
                print(f"round {r + 1} {protocol}: gateway {got['gateway']:.1f} infer/s, direct {got['direct']:.1f}, "
                      f"ratio {values[-1]:.3f} (load {os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip
    for protocol, values in ratios.items():
        print(f"{model} {protocol} c=8: gateway / direct median {statistics.median(values):.3f} "
              f"[{min(values):.3f}-{max(values):.3f}] over {rounds} rounds")  # fmt: skip


if __name__ == "__main__":
    main(*sys.argv[1:2], *map(int, sys.argv[2:3]))
