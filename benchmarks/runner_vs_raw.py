"""`ModelParallelRunner` against raw tritonclient gRPC, both against a server with the `serve` defaults.

`python -m benchmarks.runner_vs_raw [--rounds 5] [--threads 8] [--seconds 5] [--model mobilenetv2]`

The bar: the runner (8 threads, batch 1, its default transport: system shared memory on loopback) serves
>= 0.95 x raw `tritonclient.grpc` (8 threads, one client each) against the same server. The server is
the one `mslite-triton serve` starts (gateway, admin key, admission control; the supervisor off, so a
restart cannot land in a round), both clients go through its public gRPC port. Each client runs in its
own process (`client_bench.py`), the two alternated (every other round in reverse order, paired.py says
why); the last lines give each side's median img/s, p50, p99 and client CPU per request, the ratio of the
medians and every round's ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def client(mode: str, url: str, model: str, threads: int, seconds: float) -> dict[str, Any]:
    """One `client_bench` run in its own process; its JSON line."""
    args = [sys.executable, "-m", "benchmarks.client_bench", mode, "--url", url, "--model", model]
    args += ["--threads", str(threads), "--seconds", str(seconds), "--warmup-s", "1"]
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 120, env=dict(os.environ))
    if out.returncode != 0:
        raise RuntimeError(f"client_bench {mode} exit {out.returncode}: {out.stderr[-1500:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--model", default="mobilenetv2")
    a = p.parse_args()
    from mslite_server import LocalServer, ServerConfig

    if not (ROOT / "model_repository" / a.model / "1" / "model.onnx").exists():
        sys.exit("run `make models` first")
    config = ServerConfig(  # what `mslite-triton serve` sets, the supervisor aside
        model_repository=ROOT / "model_repository", load_models=(a.model,), gateway=True, supervise=False
    )
    found: dict[str, list[dict[str, Any]]] = {"runner": [], "raw": []}
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()}", flush=True)
    with LocalServer(config) as srv:
        print(f"server: gateway {srv.gateway is not None}, admin key {bool(srv.admin_key)}", flush=True)
        for r in range(a.rounds):
            for mode in ("runner", "raw") if r % 2 == 0 else ("raw", "runner"):
                res = client(mode, srv.grpc_url, a.model, a.threads, a.seconds)
                found[mode].append(res)
                print(
                    f"round {r + 1} {mode}: {res['img_s']:.1f} img/s, p50 {res['p50_ms']:.2f} ms, "
                    f"p99 {res['p99_ms']:.2f} ms, client CPU {res['client_cpu_ms_per_req']:.3f} ms/req, "
                    f"errors {res['errors']}",
                    flush=True,
                )
    for mode, runs in found.items():
        print(
            f"{mode}: median {statistics.median(x['img_s'] for x in runs):.1f} img/s, "
            f"p50 {statistics.median(x['p50_ms'] for x in runs):.2f} ms, "
            f"p99 {statistics.median(x['p99_ms'] for x in runs):.2f} ms, "
            f"client CPU {statistics.median(x['client_cpu_ms_per_req'] for x in runs):.3f} ms/req"
        )
    ratios = [x["img_s"] / y["img_s"] for x, y in zip(found["runner"], found["raw"])]
    median_ratio = statistics.median(x["img_s"] for x in found["runner"]) / statistics.median(
        x["img_s"] for x in found["raw"]
    )
    print(f"runner / raw: {median_ratio:.3f} x (bar >= 0.95; rounds: {', '.join(f'{x:.2f}' for x in ratios)})")


if __name__ == "__main__":
    main()
