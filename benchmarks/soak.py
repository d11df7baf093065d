"""The soak: MobileNetV2 at 16 concurrent clients for 10 minutes; errors, exactness and RSS of server + workers.

    .venv/bin/python -m benchmarks.soak [--duration-s 600] [--clients 16] [--protocol grpc|http|both]
    make soak        # this, then the long bad-input campaign (benchmarks/badinput)

Without `--grpc`/`--http` it starts its own tritonserver (`LocalServer`) on 127.0.0.1 serving the repository's
`mobilenetv2` (shipped config: 2 workers, dynamic batching; run `make models` first) and stops it at the end.
Every client is a thread with its own tritonclient connection, sending one of 8 fixed seeded images in a loop;
each answer must equal, bit for bit, the first answer to that image (batched results are exact on CPU).

RSS is VmRSS of the server and every process below it (the python-backend workers), summed, sampled every
`--sample-s`. The baseline is taken under the same load once the warm-up has lasted `--warmup-s` and the last
three samples agree within 2 % (at most `--max-warmup-s`): ORT's arena, the allocators and the python backend's
shared memory (which grows with the batch sizes the batcher forms) take tens of seconds to reach their working
size. Bar (reliability): 0 errors, RSS growth < 5 % from that baseline to the end.
Prints a line per sample and a summary; writes `soak.json` into `--out` (default benchmarks/results/).
Exit code 1 when the bar is missed.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support.badinput.memory import tree_rss_kb  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = "mobilenetv2"
IMAGES = 8
RSS_BAR = 0.05


@dataclass
class Stats:
    """What the clients saw; one lock, held only to add a finished request."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    mismatches: int = 0
    latencies_ms: list[float] = field(default_factory=list)

    def add(self, ms: float, error: str | None, mismatch: bool) -> None:
        with self.lock:
            self.requests += 1
            self.latencies_ms.append(ms)
            if error is not None:
                self.errors[error] += 1
            self.mismatches += mismatch


def _client(protocol: str, url: str) -> Any:
    target = url.split("://", 1)[-1]
    if protocol == "grpc":
        return grpcclient.InferenceServerClient(target)
    return httpclient.InferenceServerClient(target, connection_timeout=60, network_timeout=60)


def _infer(client: Any, protocol: str, image: np.ndarray) -> np.ndarray:
    mod = grpcclient if protocol == "grpc" else httpclient
    item = mod.InferInput("input", list(image.shape), "FP32")
    item.set_data_from_numpy(image)
    kwargs = {"client_timeout": 60} if protocol == "grpc" else {}
    return client.infer(MODEL, [item], **kwargs).as_numpy("shape1")


def client_loop(protocol: str, url: str, images: list[np.ndarray], expected: list[np.ndarray], seed: int,
                stop: threading.Event, stats: Stats) -> None:  # fmt: skip
    """One client: random fixed images until `stop`; every answer checked against the reference answer."""
    rng = np.random.default_rng(seed)
    client = _client(protocol, url)
    try:
        while not stop.is_set():
            k = int(rng.integers(len(images)))
            t0 = time.perf_counter()
            error, mismatch = None, False
            try:
                out = _infer(client, protocol, images[k])
                mismatch = not np.array_equal(out, expected[k])
            except Exception as e:  # noqa: BLE001  (every failure is counted, by kind)
                error = f"{protocol}: {type(e).__name__}: {str(e)[:160]}"
            stats.add((time.perf_counter() - t0) * 1000, error, mismatch)
    finally:
        client.close()


def _shm_mib(prefix: str | None) -> float:
    if not prefix:
        return float("nan")
    return sum(os.path.getsize(p) for p in glob.glob(f"/dev/shm/{prefix}*")) / 2**20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration-s", type=float, default=600.0, help="measured soak after the warm-up (default 600)")
    ap.add_argument("--warmup-s", type=float, default=30.0, help="least warm-up under load (default 30)")
    ap.add_argument("--max-warmup-s", type=float, default=180.0, help="most warm-up under load (default 180)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--protocol", choices=("grpc", "http", "both"), default="grpc")
    ap.add_argument("--sample-s", type=float, default=10.0, help="RSS sampling period (default 10)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--grpc", help="an existing server's gRPC URL (loopback); default: start one")
    ap.add_argument("--http", help="an existing server's HTTP URL (loopback)")
    ap.add_argument("--server-pid", type=int, help="with --grpc/--http: the server's pid, for the RSS figures")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args(argv)
    for url in filter(None, (args.grpc, args.http)):
        if urllib.parse.urlsplit(url if "://" in url else "x://" + url).hostname not in ("127.0.0.1", "localhost"):
            ap.error(f"{url}: loopback only")
    if bool(args.grpc or args.http) and args.server_pid is None:
        print("note: no --server-pid, so no RSS figures", file=sys.stderr)

    t_start = time.monotonic()

    def note(text: str) -> None:
        print(f"[{time.monotonic() - t_start:7.1f}s] {text}", flush=True)

    server = None
    if args.grpc or args.http:
        grpc_url, http_url, pid, shm_prefix = args.grpc, args.http, args.server_pid, None
    else:
        if not (ROOT / "model_repository" / MODEL / "1" / "model.onnx").exists():
            print("model_repository/mobilenetv2/1/model.onnx is missing: run `make models` first", file=sys.stderr)
            return 2
        from mslite_server import LocalServer, ServerConfig

        server = LocalServer(ServerConfig(model_repository=ROOT / "model_repository", load_models=(MODEL,)))
        server.start()
        assert server.process is not None
        grpc_url, http_url, pid = server.grpc_url, server.http_url, server.process.pid
        shm_prefix = server.workspace.shm_prefix
        note(f"server ready: {grpc_url} {http_url} (pid {pid})")
    protocols = {"grpc": ["grpc"], "http": ["http"], "both": ["grpc", "http"]}[args.protocol]
    if any((p == "grpc" and not grpc_url) or (p == "http" and not http_url) for p in protocols):
        ap.error(f"--protocol {args.protocol} needs the matching --grpc/--http URL")
    try:
        rng = np.random.default_rng(args.seed)
        images = [rng.standard_normal((1, 3, 224, 224), dtype=np.float32) for _ in range(IMAGES)]
        first = _client(protocols[0], grpc_url if protocols[0] == "grpc" else http_url)
        try:
            expected = [_infer(first, protocols[0], img) for img in images]
        finally:
            first.close()

        stats, stop = Stats(), threading.Event()
        threads = []
        for i in range(args.clients):
            protocol = protocols[i % len(protocols)]
            url = grpc_url if protocol == "grpc" else http_url
            t = threading.Thread(
                target=client_loop, args=(protocol, url, images, expected, args.seed + 1 + i, stop, stats), daemon=True
            )
            t.start()
            threads.append(t)
        note(f"{args.clients} clients ({args.protocol}) started; warm-up {args.warmup_s:.0f}-{args.max_warmup_s:.0f} s")
        samples: list[dict[str, Any]] = []

        def sample(phase: str) -> dict[str, Any]:
            rss = tree_rss_kb(pid) if pid else {}
            with stats.lock:
                row = {
                    "t_s": round(time.monotonic() - t_start, 1),
                    "phase": phase,
                    "requests": stats.requests,
                    "errors": sum(stats.errors.values()),
                    "mismatches": stats.mismatches,
                    "rss_mib": round(sum(rss.values()) / 1024, 1),
                    "processes": len(rss),
                    "shm_mib": round(_shm_mib(shm_prefix), 1),
                }
            samples.append(row)
            return row

        warm_end, warm_cap = time.monotonic() + args.warmup_s, time.monotonic() + args.max_warmup_s
        while True:
            time.sleep(args.sample_s)
            row = sample("warmup")
            last = [r["rss_mib"] for r in samples[-3:]]
            settled = len(last) == 3 and max(last) <= min(last) * 1.02
            if time.monotonic() >= warm_cap or (time.monotonic() >= warm_end and (settled or not pid)):
                break
        base = sample("baseline")
        base_requests, t_base = base["requests"], time.monotonic()
        note(f"baseline: RSS {base['rss_mib']} MiB over {base['processes']} processes, shm {base['shm_mib']} MiB")
        deadline = t_base + args.duration_s
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(args.sample_s, left))
            row = sample("soak")
            rate = (row["requests"] - base_requests) / max(time.monotonic() - t_base, 1e-9)
            note(
                f"{row['requests']} requests ({rate:.0f}/s), {row['errors']} errors, {row['mismatches']} mismatches, "
                f"RSS {row['rss_mib']} MiB, shm {row['shm_mib']} MiB"
            )
        stop.set()
        for t in threads:
            t.join(timeout=90)
        end = sample("end")
    finally:
        if server is not None:
            server.stop()
            server.remove_workspace()

    lat = np.array(stats.latencies_ms) if stats.latencies_ms else np.array([float("nan")])
    growth = end["rss_mib"] / base["rss_mib"] - 1 if base["rss_mib"] else float("nan")
    soak_rows = [r for r in samples if r["phase"] in ("soak", "end")]
    slope = float("nan")
    if len(soak_rows) >= 2:
        ts = np.array([r["t_s"] for r in soak_rows]) / 60
        slope = float(np.polyfit(ts, [r["rss_mib"] for r in soak_rows], 1)[0])
    errors = sum(stats.errors.values())
    ok = errors == 0 and stats.mismatches == 0 and (not pid or growth < RSS_BAR)
    summary = {
        "model": MODEL,
        "clients": args.clients,
        "protocol": args.protocol,
        "duration_s": args.duration_s,
        "warmup_s": args.warmup_s,
        "requests": stats.requests,
        "requests_measured": end["requests"] - base_requests,
        "throughput_per_s": round((end["requests"] - base_requests) / max(args.duration_s, 1e-9), 1),
        "latency_ms": {"p50": round(float(np.percentile(lat, 50)), 2), "p99": round(float(np.percentile(lat, 99)), 2)},
        "errors": errors,
        "error_kinds": dict(stats.errors.most_common(10)),
        "mismatches": stats.mismatches,
        "rss_mib": {"baseline": base["rss_mib"], "end": end["rss_mib"], "max": max(r["rss_mib"] for r in samples)},
        "rss_growth": round(growth, 4),
        "rss_slope_mib_per_min": round(slope, 2),
        "shm_mib": {"baseline": base["shm_mib"], "end": end["shm_mib"]},
        "bar": {"errors": 0, "rss_growth_lt": RSS_BAR, "met": ok},
        "samples": samples,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "soak.json").write_text(json.dumps(summary, indent=2))
    print(
        f"\nsoak {MODEL}: {args.clients} clients x {args.duration_s:.0f} s ({args.protocol}): "
        f"{summary['requests_measured']} requests measured, {summary['throughput_per_s']}/s, "
        f"p50 {summary['latency_ms']['p50']} ms, p99 {summary['latency_ms']['p99']} ms\n"
        f"errors {errors} {dict(stats.errors.most_common(3))}, mismatches {stats.mismatches}\n"
        f"RSS server + workers {base['rss_mib']} -> {end['rss_mib']} MiB ({growth:+.2%}, max "
        f"{summary['rss_mib']['max']}, slope {slope:+.2f} MiB/min); shm {base['shm_mib']} -> {end['shm_mib']} MiB\n"
        f"bar (0 errors, RSS growth < {RSS_BAR:.0%}): {'met' if ok else 'MISSED'}; details in {args.out / 'soak.json'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
