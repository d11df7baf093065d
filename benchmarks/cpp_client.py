"""The C++ client (8 threads, batch 1) against perf_analyzer over HTTP (concurrency 8), on a `serve`-default server.

`python -m benchmarks.cpp_client [--rounds 3] [--threads 8] [--seconds 5] [--model mobilenetv2]`

The bar: `ModelParallelRunner::Predict` from 8 C++ threads (examples' library, KServe v2 HTTP with binary
tensors, pooled connections) serves >= 0.95 x perf_analyzer's HTTP throughput at concurrency 8 on the same
server. The server is the one `mslite-triton serve` starts (gateway, admin key, admission control; the
supervisor off, so a restart cannot land in a round); both clients go through its public HTTP port. The
two alternate, every other round in reverse order (paired.py says why); the C++ side is measured over as
long as the three windows perf_analyzer averages. perf_analyzer comes from the tools
venv (tools.py); the C++ side is built here with `make cpp-client` and benchmarks/cpp_bench.cc. The last
lines give each side's median img/s, latencies and client CPU per request, and the ratio of the medians
with every round's ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.perf_analyzer import PerfRun, run_relaxing
from tests.support.tools import Tools, ensure_tools

ROOT = Path(__file__).resolve().parent.parent


def build_bench(out: Path) -> Path:
    """libmslite_triton.a (make cpp-client) and the load program linked against it."""
    subprocess.run(["make", "-s", "cpp-client"], cwd=ROOT, check=True)
    binary = out / "cpp_bench"
    include = ROOT / "client" / "cpp" / "include"
    library = ROOT / "client" / "cpp" / "build" / "libmslite_triton.a"
    source = Path(__file__).with_name("cpp_bench.cc")
    cmd = ["g++", "-O2", "-std=c++17", "-Wall", "-Wextra", f"-I{include}", "-o", str(binary), str(source)]
    subprocess.run([*cmd, str(library), "-lcurl", "-pthread"], check=True)
    return binary


def cpp_round(binary: Path, url: str, model: str, image: Path, threads: int, seconds: float) -> dict[str, Any]:
    """One run of the C++ load over as long as perf_analyzer's figure (its last 3 windows); its JSON line."""
    args = [str(binary), url, model, str(image), str(threads), str(3 * seconds), "1"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=3 * seconds + 120)
    if out.returncode != 0:
        raise RuntimeError(f"cpp_bench exit {out.returncode}: {(out.stdout + out.stderr)[-1500:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def served(url: str, model: str) -> int:
    """Requests the model has answered so far (Triton's statistics)."""
    with urllib.request.urlopen(f"{url}/v2/models/{model}/stats", timeout=30) as resp:
        return int(json.load(resp)["model_stats"][0]["inference_count"])


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def perf_round(tools: Tools, address: str, model: str, image: Path, concurrency: int, seconds: float) -> dict[str, Any]:
    """One perf_analyzer HTTP run with the same input (binary tensors both ways); its figures."""
    with urllib.request.urlopen(f"http://{address}/v2/models/{model}", timeout=30) as resp:
        input_name = json.load(resp)["inputs"][0]["name"]
    with tempfile.TemporaryDirectory(prefix="bench-cpp-") as tmp:
        data = Path(tmp) / "data"  # perf_analyzer reads a folder of raw files named after the inputs
        data.mkdir()
        (data / input_name).write_bytes(image.read_bytes())
        # as perf.py: when the windows never agree (a shared machine), once more with windows twice as long
        # accepting any three of them
        spec = PerfRun(
            tools.perf_analyzer,
            model,
            address,
            "http",
            concurrency,
            int(seconds * 1000),
            max_trials=6,
            stability_pct=50,
            batch_size=1,
            input_data=data,
        )
        result, used, _ = run_relaxing(spec, tools.env, spec.relaxed(interval_factor=2))
    return {"img_s": result.infer_s, "p50_ms": result.p50_ms, "p99_ms": result.p99_ms, "command": used.shown()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--model", default="mobilenetv2")
    a = p.parse_args()
    from mslite_server import LocalServer, ServerConfig

    image = ROOT / "model_repository" / a.model / "input.bin"
    if not (ROOT / "model_repository" / a.model / "1" / "model.onnx").exists() or not image.exists():
        sys.exit("run `make models` first")
    tools = ensure_tools(ROOT, note=lambda line: print(line, flush=True))
    found: dict[str, list[dict[str, Any]]] = {"cpp": [], "perf_analyzer": []}
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()}, {tools.version}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-cpp-build-") as tmp:
        binary = build_bench(Path(tmp))
        config = ServerConfig(  # what `mslite-triton serve` sets, the supervisor aside
            model_repository=ROOT / "model_repository", load_models=(a.model,), gateway=True, supervise=False
        )
        with LocalServer(config) as srv:
            address = srv.http_url.split("://", 1)[-1]
            print(f"server: gateway {srv.gateway is not None}, admin key {bool(srv.admin_key)}", flush=True)
            for r in range(a.rounds):
                for side in ("cpp", "perf_analyzer") if r % 2 == 0 else ("perf_analyzer", "cpp"):
                    count0, cpu0 = served(srv.http_url, a.model), children_cpu_s()
                    if side == "cpp":
                        res = cpp_round(binary, srv.http_url, a.model, image, a.threads, a.seconds)
                    else:
                        res = perf_round(tools, address, a.model, image, a.threads, a.seconds)
                    # the client's own CPU (user + system) per request it sent, warm-up windows included
                    res["client_cpu_ms"] = (
                        1e3 * (children_cpu_s() - cpu0) / max(1, served(srv.http_url, a.model) - count0)
                    )
                    found[side].append(res)
                    print(
                        f"round {r + 1} {side}: {res['img_s']:.1f} img/s, p50 {res['p50_ms']:.2f} ms, "
                        f"p99 {res['p99_ms']:.2f} ms, client CPU {res['client_cpu_ms']:.3f} ms/req",
                        flush=True,
                    )
    for side, runs in found.items():
        print(
            f"{side}: median {statistics.median(x['img_s'] for x in runs):.1f} img/s, "
            f"p50 {statistics.median(x['p50_ms'] for x in runs):.2f} ms, "
            f"p99 {statistics.median(x['p99_ms'] for x in runs):.2f} ms, "
            f"client CPU {statistics.median(x['client_cpu_ms'] for x in runs):.3f} ms/req"
        )
    print(f"perf_analyzer: {found['perf_analyzer'][0]['command']}")
    ratios = [x["img_s"] / y["img_s"] for x, y in zip(found["cpp"], found["perf_analyzer"])]
    median_ratio = statistics.median(x["img_s"] for x in found["cpp"]) / statistics.median(
        x["img_s"] for x in found["perf_analyzer"]
    )
    print(
        f"C++ / perf_analyzer HTTP: {median_ratio:.3f} x (bar >= 0.95; rounds: {', '.join(f'{x:.2f}' for x in ratios)})"
    )


if __name__ == "__main__":
    main()
