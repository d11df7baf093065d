"""What the validating gateway costs valid traffic: MobileNetV2 batch 1, gateway vs Triton's own ports, one run.

    .venv/bin/python -m benchmarks.gateway_overhead [--seconds 5] [--rounds 3] [--concurrency 1 8]

One embedded server with `gateway=True` serves both paths at once: the public ports (through the gateway)
and Triton's private ports (direct), so both see the same server, workers and machine load. For each
protocol x concurrency, the two paths alternate (A B B A ...) for `--rounds` rounds of `--seconds` each;
the client is raw tritonclient (inputs inline, binary over HTTP: no shared memory), one client per thread.
Prints p50 / p99 / throughput per path and the gateway/direct ratios, plus the gateway process's CPU time
per request; writes benchmarks/results/gateway_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODEL = "mobilenetv2"


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load(protocol: str, address: str, threads: int, seconds: float, image: np.ndarray) -> list[float]:
    """Latencies (s) of back-to-back requests from `threads` clients for `seconds`."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    mod: Any = grpcclient if protocol == "grpc" else httpclient
    latencies: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def worker() -> None:
        client = mod.InferenceServerClient(address)
        item = mod.InferInput("input", list(image.shape), "FP32")
        item.set_data_from_numpy(image)
        wanted = (
            [mod.InferRequestedOutput("shape1")]
            if protocol == "grpc"
            else [httpclient.InferRequestedOutput("shape1", binary_data=True)]
        )
        mine = []
        try:
            client.infer(MODEL, [item], outputs=wanted)  # connect outside the timed part
            start.wait()
            stop = time.monotonic() + seconds
            while (t0 := time.monotonic()) < stop:
                client.infer(MODEL, [item], outputs=wanted).as_numpy("shape1")
                mine.append(time.monotonic() - t0)
        except BaseException as e:  # noqa: BLE001  (re-raised below)
            errors.append(e)
        finally:
            client.close()
        with lock:
            latencies.extend(mine)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    return latencies


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--protocols", nargs="+", default=["grpc", "http"])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args(argv)
    from mslite_triton.server import EmbeddedServer, ServerConfig

    if not (ROOT / "model_repository" / MODEL / "1" / "model.onnx").exists():
        sys.exit("run `make models` first")
    config = ServerConfig(
        model_repository=ROOT / "model_repository", load_models=(MODEL,), gateway=True, supervise=False
    )
    image = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)
    rows = []
    print(f"cores {os.cpu_count()}, load average before start {os.getloadavg()}", flush=True)
    with EmbeddedServer(config) as srv:
        assert srv.gateway is not None and srv.gateway.pid is not None
        addresses = {
            ("grpc", "direct"): f"127.0.0.1:{srv.triton_grpc_port}",
            ("grpc", "gateway"): f"127.0.0.1:{srv.grpc_port}",
            ("http", "direct"): f"127.0.0.1:{srv.triton_http_port}",
            ("http", "gateway"): f"127.0.0.1:{srv.http_port}",
        }
        for protocol in args.protocols:
            for threads in args.concurrency:
                samples: dict[str, list[float]] = {"direct": [], "gateway": []}
                counts: dict[str, list[float]] = {"direct": [], "gateway": []}
                gateway_cpu, gateway_requests = 0.0, 0
                for path in ("direct", "gateway"):  # warm-up, untimed
                    _load(protocol, addresses[(protocol, path)], threads, 1.0, image)
                for r in range(args.rounds):
                    order = ("direct", "gateway") if r % 2 == 0 else ("gateway", "direct")
                    for path in order:
                        cpu0 = _cpu_s(srv.gateway.pid)
                        lat = _load(protocol, addresses[(protocol, path)], threads, args.seconds, image)
                        if path == "gateway":
                            gateway_cpu += _cpu_s(srv.gateway.pid) - cpu0
                            gateway_requests += len(lat)
                        samples[path].extend(lat)
                        counts[path].append(len(lat) / args.seconds)
                row: dict[str, Any] = {"protocol": protocol, "concurrency": threads}
                for path, lat in samples.items():
                    lat.sort()
                    row[path] = {
                        "p50_ms": round(1e3 * statistics.median(lat), 3),
                        "p99_ms": round(1e3 * lat[int(0.99 * (len(lat) - 1))], 3),
                        "infer_per_s": round(statistics.median(counts[path]), 1),
                        "requests": len(lat),
                    }
                row["p50_ratio"] = round(row["gateway"]["p50_ms"] / row["direct"]["p50_ms"], 3)
                row["throughput_ratio"] = round(row["gateway"]["infer_per_s"] / row["direct"]["infer_per_s"], 3)
                row["gateway_cpu_ms_per_request"] = round(1e3 * gateway_cpu / max(gateway_requests, 1), 3)
                rows.append(row)
                d, g = row["direct"], row["gateway"]
                print(
                    f"{protocol:4s} c={threads}: direct p50 {d['p50_ms']:.2f} ms {d['infer_per_s']:.0f}/s | gateway "
                    f"p50 {g['p50_ms']:.2f} ms {g['infer_per_s']:.0f}/s | p50 x{row['p50_ratio']:.3f}, throughput "
                    f"x{row['throughput_ratio']:.3f}, gateway CPU {row['gateway_cpu_ms_per_request']:.3f} ms/request",
                    flush=True,
                )
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "gateway_overhead.json"
    path.write_text(
        json.dumps({"cores": os.cpu_count(), "seconds": args.seconds, "rounds": args.rounds, "rows": rows}, indent=2)
    )
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
