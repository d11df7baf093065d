"""The GPU proof run by `benchmarks/gpu_proof.sh`: MobileNetV2 served by 2 KIND_GPU workers, side by side in one
server, against in-process ONNX Runtime CUDA and Triton's C++ ONNX Runtime backend; every figure is written to
`<out>/summary.json` as soon as it is known, with the bar keys and their verdicts at the end.

Steps (each one recorded, and a failing step does not stop the next):
1. in-process references: outputs at batch 1 (the worker's provider options: `use_tf32` 0, the same
   `cudnn_conv_algo_search`), plain throughput (2 sessions x 4 callers), with CUDA graphs (one bound session per
   caller), and the c=1 latency (one session, one caller);
2. the served outputs of MODEL (the shipped GPU defaults) against the references: one request at a time
   (must be bit-identical) and merged (8 concurrent requests, and one batch of 8);
3. perf_analyzer at each concurrency level, over system shared memory and gRPC, for every served variant
   (`SERVED`: ours as before, ours with graphs, ours with graphs and the GPU batching defaults, the C++ peer
   when `--peer-backend` is given), models alternated, `--rounds` rounds; throughput, p50, p99 and images per
   execute, medians over the rounds;
4. a Python client loop at concurrency 8 that times every request (batch 1, then mixed batch sizes 1-8),
   since perf_analyzer reports no maximum;
5. the queue-delay sweep that chooses protocol.GPU_MAX_QUEUE_DELAY_US: ours with graphs at c=8 over shared
   memory, each delay with and without the buckets above 1 as preferred sizes;
6. GPU memory per worker of MODEL (nvidia-smi, by the workers' pids from the server log) after the run.

`--device cpu` (gpu_proof.sh --dry-run) runs the same flow with KIND_CPU workers and the CPU provider, to test
the script without a GPU: its figures say nothing about a GPU and its summary is not the committed one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

MODEL = "ours_defaults"  # the shipped GPU defaults: every bar key comes from it
ONE_THREAD = 'parameters { key: "thread_num" value { string_value: "1" } }\n'
BIND = 'parameters { key: "io_binding" value { string_value: "%s" } }\n'
# The served variants, alternated in one server: name -> (backend, dynamic_batching body, parameters).
# None as the batcher body: the config leaves the batcher's fields out and auto-complete fills them (on GPU:
# the buckets above 1 as preferred sizes and protocol.GPU_MAX_QUEUE_DELAY_US).
SERVED: dict[str, tuple[str, str | None, str]] = {
    "ours_plain": ("mslite", "max_queue_delay_microseconds: 0", BIND % "false"),  # as before bound buckets
    "ours_graphs": ("mslite", "max_queue_delay_microseconds: 0", BIND % "true"),  # bound, CUDA graphs on GPU
    "ours_defaults": ("mslite", None, BIND % "true"),  # bound + graphs + the GPU batching defaults
    "cpp_peer": ("onnxruntime", None, ""),  # Triton's C++ ONNX Runtime backend (--peer-backend)
}
# The memory candidate, measured after the side-by-side points (loaded alone): the shipped defaults with one
# session for every bucket, each bucket's CUDA graph under its own id (`bucket_sessions` one)
ONE_SESSION = "ours_one_session"
ONE_SESSION_PARAM = 'parameters { key: "bucket_sessions" value { string_value: "one" } }\n'
ONE_SESSION_VARIANT = ("mslite", None, BIND % "true" + ONE_SESSION_PARAM)
# The queue delays measured for GPU_MAX_QUEUE_DELAY_US, each with and without the preferred sizes
SWEEP_DELAYS_US = (0, 100, 300, 500)
BARS = {
    "vs_inprocess_c8_shm": (">=", 1.0),
    "vs_inprocess_c8_grpc": (">=", 0.9),
    "vs_cpp_c8_shm": (">=", 1.0),
    "vs_cpp_c8_grpc": (">=", 1.0),
    "vs_cpp_c32_shm": (">=", 1.0),
    "vs_cpp_c32_grpc": (">=", 1.0),
    "gpu_mem_per_worker_gb": ("<=", 1.5),
    "max_abs_diff_single": ("<=", 0.0),
    "max_abs_diff_merged": ("<=", 1e-6),
    "p99_over_p50_c8": ("<=", 2.0),
    "max_request_ms": ("<=", 100.0),
    "c1_p50_over_inprocess_ms": ("<=", 0.5),
}
IMAGES = 16
# The CPU dry run's max_batch_size (so its buckets are 1, 2, 4, 8): a CPU load-time check of MobileNetV2 at
# batch 64 in 16 workers would take minutes on a small machine
CPU_DRY_RUN_MAX_BATCH = 8


class Proof:
    """Collects results, writes them after every step, and runs each step in isolation."""

    def __init__(self, out: Path, device: str) -> None:
        self.out = out
        self.device = device
        dry = "cpu (dry run: its figures say nothing about a GPU)"
        name = _smi("--query-gpu=name", "--format=csv,noheader") if device == "gpu" else dry
        self.results: dict[str, Any] = {"device": name, "device_kind": device, "steps": {}, "errors": {}}

    def save(self) -> None:
        (self.out / "summary.json").write_text(json.dumps(self.results, indent=2, default=str))

    def step(self, name: str, fn: Any, *args: Any) -> Any:
        print(f"\n=== {name}", flush=True)
        t0 = time.perf_counter()
        try:
            value = fn(*args)
            self.results["steps"][name] = value
            return value
        except Exception as e:  # keep going: every later step still says something
            self.results["errors"][name] = f"{type(e).__name__}: {e}"
            print(f"!!! {name} failed: {e}\n{traceback.format_exc()}", flush=True)
            return None
        finally:
            print(f"--- {name}: {time.perf_counter() - t0:.1f} s", flush=True)
            self.save()


# --- in-process ----------------------------------------------------------------------------------------


def providers(device: str, precision: str = "enforce_fp32", graph: bool = False) -> list[Any]:
    """The provider list a served worker of `device` uses (the backend's own choice, options included)."""
    from mslite_backend.providers import choose

    kind = "GPU" if device == "gpu" else "CPU"
    return choose(kind, 0, 0, {}, gpu_precision=precision, cuda_graph=graph).providers()


def session(path: str, device: str, precision: str = "enforce_fp32", graph: bool = False) -> Any:
    import onnxruntime as ort

    s = ort.InferenceSession(path, providers=providers(device, precision, graph))
    if device == "gpu" and s.get_providers()[0] != "CUDAExecutionProvider":
        raise RuntimeError(f"in-process session runs {s.get_providers()}, not CUDA")
    return s


def images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=(n, 3, 224, 224)).astype(np.float32)


def one_at_a_time(s: Any, x: np.ndarray) -> np.ndarray:
    """The outputs of session `s` for every image of `x` run alone (batch 1), in order."""
    name = s.get_inputs()[0].name
    return np.concatenate([s.run(None, {name: x[i : i + 1]})[0] for i in range(len(x))])


def references(path: str, device: str, x: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """Batch-1 in-process outputs of every image, and how far a batch-8 run's rows are from them."""
    s = session(path, device)
    name = s.get_inputs()[0].name
    ref = one_at_a_time(s, x)
    batch8 = s.run(None, {name: x[:8]})[0]
    tf32 = session(path, device, "preferred_fp16")  # the CUDA provider's default: TF32 allowed
    tf32_1 = one_at_a_time(tf32, x[:8])
    info = {
        "images": len(x),
        "providers": str(providers(device)),
        "output_abs_max": float(np.abs(ref).max()),
        "inprocess_batch8_vs_batch1_max_abs_diff": float(np.abs(batch8 - ref[:8]).max()),
        "tf32_batch8_vs_batch1_max_abs_diff": float(np.abs(tf32.run(None, {name: x[:8]})[0] - tf32_1).max()),
        "tf32_vs_fp32_batch1_max_abs_diff": float(np.abs(tf32_1 - ref[:8]).max()),
    }
    print(json.dumps(info), flush=True)
    return ref, info


def inprocess_throughput(path: str, device: str, callers: int, seconds: float) -> dict[str, Any]:
    """2 sessions, `callers` threads in all (half on each), batch 1: images per second and latency."""
    pool = [session(path, device) for _ in range(2)]
    name = pool[0].get_inputs()[0].name
    feed = {name: images(1)}
    for s in pool:
        for _ in range(3):
            s.run(None, feed)
    return _callers_loop(lambda i: pool[i % 2].run(None, feed), callers, seconds, sessions=2)


# --- the served model ----------------------------------------------------------------------------------


def config_text(name: str, device: str, batcher: str | None, backend: str, params: str) -> str:
    """One variant's config.pbtxt: 2 workers on the device, max_batch_size 64, FP32 on both backends."""
    from mslite_contract.protocol import GPU_MAX_QUEUE_DELAY_US

    kind = "KIND_GPU" if device == "gpu" else "KIND_CPU"
    gpus = " gpus: [ 0 ]" if device == "gpu" else ""
    mbs = 64 if device == "gpu" else CPU_DRY_RUN_MAX_BATCH
    preferred = ", ".join(str(b) for b in (2, 4, 8, 16, 32, 64) if b <= mbs)  # the GPU default buckets above 1
    text = f'backend: "{backend}"\nmax_batch_size: {mbs}\ninstance_group [ {{ kind: {kind}, count: 2{gpus} }} ]\n'
    if backend == "onnxruntime":
        # the peer gets our shipped GPU batcher written out, and the CUDA options our workers run with
        batcher = f"preferred_batch_size: [ {preferred} ] max_queue_delay_microseconds: {GPU_MAX_QUEUE_DELAY_US}"
        if device == "gpu":
            text += (
                'optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "cuda" '
                'parameters { key: "use_tf32" value: "0" } } ] } }\n'
                'parameters { key: "cudnn_conv_algo_search" value { string_value: "0" } }\n'
            )
        else:
            text += 'parameters { key: "intra_op_thread_count" value { string_value: "1" } }\n'
    elif device != "gpu":
        text += ONE_THREAD
        if batcher is None:  # a CPU worker gets the CPU defaults from auto-complete: write the GPU ones out
            batcher = f"preferred_batch_size: [ {preferred} ] max_queue_delay_microseconds: {GPU_MAX_QUEUE_DELAY_US}"
    if batcher is None:  # Triton takes auto-complete's batcher fields only when the config has no section
        return text + params
    return text + f"dynamic_batching {{ {batcher} }}\n" + params


def sweep_variants(delays: tuple[int, ...], device: str) -> dict[str, tuple[str, str | None, str]]:
    """ours_graphs at each queue delay, with and without the buckets above 1 as preferred sizes."""
    sizes = (2, 4, 8, 16, 32, 64) if device == "gpu" else (2, 4, 8)
    preferred = f"preferred_batch_size: [ {', '.join(map(str, sizes))} ] "
    out: dict[str, tuple[str, str | None, str]] = {}
    for d in delays:
        out[f"sweep_d{d}"] = ("mslite", f"max_queue_delay_microseconds: {d}", BIND % "true")
        out[f"sweep_d{d}_pref"] = ("mslite", f"{preferred}max_queue_delay_microseconds: {d}", BIND % "true")
    return out


def write_repository(root: Path, model: str, device: str, variants: dict[str, tuple[str, str | None, str]]) -> Path:
    """Every variant, each a copy of the same model file."""
    repo = root / "repo"
    for name, (backend, batcher, params) in variants.items():
        (repo / name / "1").mkdir(parents=True)
        shutil.copy(model, repo / name / "1" / "model.onnx")
        (repo / name / "config.pbtxt").write_text(config_text(name, device, batcher, backend, params))
    return repo


def grpc_client(url: str) -> Any:
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(url)


def infer(client: Any, x: np.ndarray, in_name: str, out_name: str, model: str = MODEL) -> np.ndarray:
    import tritonclient.grpc as grpcclient

    inp = grpcclient.InferInput(in_name, list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    res = client.infer(model, [inp], outputs=[grpcclient.InferRequestedOutput(out_name)])
    return res.as_numpy(out_name)  # type: ignore[no-any-return]


def io_names(url: str, model: str = MODEL) -> tuple[str, str]:
    meta = grpc_client(url).get_model_metadata(model, as_json=True)
    return meta["inputs"][0]["name"], meta["outputs"][0]["name"]


def served_outputs(url: str, x: np.ndarray, ref: np.ndarray, model: str = MODEL) -> dict[str, Any]:
    """Every image alone (c=1), then all at once from 8 threads, then as one batch of 8: max abs diffs."""
    in_name, out_name = io_names(url, model)
    client = grpc_client(url)
    alone = np.concatenate([infer(client, x[i : i + 1], in_name, out_name, model) for i in range(len(x))])
    concurrent: list[np.ndarray | None] = [None] * len(x)

    def one(i: int) -> None:
        c = grpc_client(url)
        for j in range(i, len(x), 8):
            concurrent[j] = infer(c, x[j : j + 1], in_name, out_name, model)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    together = np.concatenate([c for c in concurrent if c is not None])
    batch8 = infer(client, x[:8], in_name, out_name, model)
    result = {
        "max_abs_diff_one_at_a_time": float(np.abs(alone - ref).max()),
        "max_abs_diff_8_concurrent": float(np.abs(together - ref).max()),
        "max_abs_diff_batch_of_8": float(np.abs(batch8 - ref[:8]).max()),
        "bit_exact_one_at_a_time": bool(np.array_equal(alone, ref)),
    }
    result["max_abs_diff"] = max(v for k, v in result.items() if k.startswith("max_abs_diff_"))
    result["max_abs_diff_single"] = result["max_abs_diff_one_at_a_time"]
    result["max_abs_diff_merged"] = max(result["max_abs_diff_8_concurrent"], result["max_abs_diff_batch_of_8"])
    print(json.dumps(result), flush=True)
    return result


def model_stats(url: str, model: str = MODEL) -> tuple[int, int]:
    stats = grpc_client(url).get_inference_statistics(model, as_json=True)["model_stats"][0]
    return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))


def perf_analyzer(
    pa: Path, env: dict[str, str], url: str, concurrency: int, shm: bool, interval_ms: int, model: str = MODEL
) -> dict:
    """One perf_analyzer point over gRPC; if its windows never agree, once more accepting any three."""
    from tests.support.perf_analyzer import PerfRun, run_relaxing

    spec = PerfRun(
        pa,
        model,
        url,
        "grpc",
        concurrency,
        interval_ms,
        max_trials=6,
        stability_pct=15,
        shared_memory="system" if shm else "none",
    )
    inf0, exe0 = model_stats(url, model)
    got, _, stable = run_relaxing(spec, env, spec.relaxed())
    inf1, exe1 = model_stats(url, model)
    result = {
        "model": model,
        "concurrency": concurrency,
        "shm": shm,
        "infer_s": got.infer_s,
        "p50_ms": got.p50_ms,
        "p99_ms": got.p99_ms,
        "avg_batch": (inf1 - inf0) / max(1, exe1 - exe0),
        "stable": stable,
        "command": spec.shown(),
    }
    print(json.dumps(result), flush=True)
    return result


def latency_loop(url: str, seconds: float, mixed: bool, log: Path) -> dict[str, Any]:
    """8 threads, each with its own client, timing every request (batch 1, or 1-8 chosen at random)."""
    in_name, out_name = io_names(url)
    x = images(8, seed=1)
    clients = [grpc_client(url) for _ in range(8)]
    for client in clients:
        infer(client, x[:1], in_name, out_name)  # the connection's set-up, not timed
    rngs = [np.random.default_rng(100 + i) for i in range(8)]

    def call(i: int) -> int:
        b = int(rngs[i].integers(1, 9)) if mixed else 1
        infer(clients[i], x[:b], in_name, out_name)
        return b

    rows, wall = timed_threads(call, 8, seconds)
    with open(log, "a") as f:
        for t, i, b, s in rows:
            f.write(f"{'mixed' if mixed else 'batch1'},{i},{t:.4f},{b},{s * 1e3:.3f}\n")
    ms = np.array([r[3] for r in rows]) * 1e3
    result = {
        "mixed_batch_1_to_8": mixed,
        "requests": len(rows),
        "images_s": sum(r[2] for r in rows) / wall,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "max_ms": float(ms.max()),
        "over_100ms": int((ms > 100).sum()),
    }
    print(json.dumps(result), flush=True)
    return result


def timed_threads(call: Any, threads: int, seconds: float) -> tuple[list[tuple[float, int, Any, float]], float]:
    """`call(i)` in a loop on threads i = 0 .. threads-1, from one start for `seconds`: every call as (its start
    since then, i, what it returned, its seconds), in start order, and the seconds that passed in all."""
    records: list[list[tuple[float, Any, float]]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads + 1)
    stop = threading.Event()

    def loop(i: int) -> None:
        start.wait()
        while not stop.is_set():
            t0 = time.perf_counter()
            out = call(i)
            records[i].append((t0, out, time.perf_counter() - t0))

    workers = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    start.wait()
    t_start = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()
    wall = time.perf_counter() - t_start
    rows = [(t0 - t_start, i, out, s) for i, per in enumerate(records) for t0, out, s in per]
    return sorted(rows, key=lambda r: r[0]), wall


# --- the multi-card sample's batch split ----------------------------------------------------------------------


def batch_split(url: str, model_bs1: str, device: str, rounds: int) -> dict[str, Any]:
    """A batch-2 predict split over 2 workers of a batch-1 model vs the 2 slices in turn on 1 worker."""
    import mslite_triton as mslite

    target = "gpu" if device == "gpu" else "cpu"

    def runner(workers: int) -> Any:
        ctx = mslite.Context()
        ctx.target = [target]
        ctx.server_url = url
        ctx.parallel.workers_num = workers
        ctx.cpu.thread_num = 1
        r = mslite.ModelParallelRunner()
        r.build_from_file(model_bs1, ctx)
        return r

    x = images(2, seed=2)
    ref = one_at_a_time(session(model_bs1, device), x)
    t0 = time.perf_counter()
    split, single = runner(2), runner(1)
    build_s = time.perf_counter() - t0
    for _ in range(5):
        split.predict([mslite.Tensor(x)])
        single.predict([mslite.Tensor(x[:1])])
    t_split, t_seq = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        (y,) = split.predict([mslite.Tensor(x)])
        t_split.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        single.predict([mslite.Tensor(x[:1])])
        single.predict([mslite.Tensor(x[1:])])
        t_seq.append(time.perf_counter() - t0)
    a, b = statistics.median(t_split), statistics.median(t_seq)
    result = {
        "builds_s": build_s,
        "split_2_workers_ms": a * 1e3,
        "sequential_1_worker_ms": b * 1e3,
        "ratio": a / b,
        "max_abs_diff": float(np.abs(y.get_data_to_numpy() - ref).max()),
        "rounds": rounds,
    }
    print(json.dumps(result), flush=True)
    return result


# --- main ------------------------------------------------------------------------------------------------


def _smi(*args: str) -> str | None:
    """What `nvidia-smi ARGS` prints; None when it prints nothing or the machine has none."""
    if not shutil.which("nvidia-smi"):
        return None
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True).stdout.strip() or None


def gpu_memory() -> str:
    return _smi("--query-compute-apps=pid,process_name,used_memory", "--format=csv") or "no nvidia-smi"


def worker_pids(log: Path, model: str) -> list[int]:
    """The pids of `model`'s workers, from the backend's ready line in the server log."""
    pattern = re.compile(rf"instance '{re.escape(model)}_[^']*' ready: .*? pid=(\d+)")
    return sorted({int(m.group(1)) for m in pattern.finditer(log.read_text(errors="replace"))})


def gpu_mem_per_worker_gb(pids: list[int]) -> float | None:
    """nvidia-smi's memory figure of the largest of `pids`, in GB (10^9 bytes); None without nvidia-smi."""
    out = _smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
    if out is None or not pids:
        return None
    used = {int(p): float(m) for p, m in (line.split(",") for line in out.strip().splitlines() if "," in line)}
    mib = [used[p] for p in pids if p in used]
    return max(mib) * 2**20 / 1e9 if mib else None


def inprocess_bound(path: str, device: str, callers: int, seconds: float) -> dict[str, Any]:
    """One session per caller, batch 1 on bound buffers (a CUDA graph replayed on GPU): images per second."""
    import onnxruntime as ort

    where = "cuda" if device == "gpu" else "cpu"
    runs = []
    for _ in range(callers):
        s = session(path, device, graph=device == "gpu")
        x = images(1)
        binding = s.io_binding()
        value = ort.OrtValue.ortvalue_from_numpy(x, where, 0)
        binding.bind_ortvalue_input(s.get_inputs()[0].name, value)
        out = s.get_outputs()[0]
        shape = [1, *out.shape[1:]]
        binding.bind_ortvalue_output(out.name, ort.OrtValue.ortvalue_from_shape_and_type(shape, np.float32, where, 0))
        for _ in range(5):  # the CUDA provider runs a few times plainly before it captures
            s.run_with_iobinding(binding)
        runs.append((s, binding))
    return _callers_loop(lambda i: runs[i][0].run_with_iobinding(runs[i][1]), callers, seconds, sessions=callers)


def inprocess_c1(path: str, device: str, seconds: float) -> dict[str, Any]:
    """The c=1 reference: one plain session, one caller, batch 1."""
    s = session(path, device)
    feed = {s.get_inputs()[0].name: images(1)}
    for _ in range(3):
        s.run(None, feed)
    return _callers_loop(lambda i: s.run(None, feed), 1, seconds, sessions=1)


def _callers_loop(run: Any, callers: int, seconds: float, *, sessions: int) -> dict[str, Any]:
    rows, wall = timed_threads(run, callers, seconds)
    ms = np.array([r[3] for r in rows]) * 1e3
    result = {
        "sessions": sessions,
        "callers": callers,
        "img_s": len(ms) / wall,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "max_ms": float(ms.max()),
    }
    print(json.dumps(result), flush=True)
    return result


def median_points(points: list[dict[str, Any]]) -> dict[tuple[str, int, bool], dict[str, float]]:
    """(model, concurrency, shm) -> the median over rounds of throughput, p50, p99 and images per execute."""
    grouped: dict[tuple[str, int, bool], list[dict[str, Any]]] = {}
    for p in points:
        grouped.setdefault((p["model"], p["concurrency"], p["shm"]), []).append(p)
    return {
        key: {k: statistics.median(p[k] for p in ps) for k in ("infer_s", "p50_ms", "p99_ms", "avg_batch")}
        for key, ps in grouped.items()
    }


def queue_delay_sweep(args: Any, pa_env: dict[str, str], url: str, served: dict) -> list[dict[str, Any]]:
    """`sweep_variants` at c=8 over shared memory, two loaded at a time, after the served variants are unloaded."""
    control = grpc_client(url)
    for name in served:
        control.unload_model(name)
    delays = tuple(int(d) for d in args.sweep_delays.split(",") if d.strip())
    names = list(sweep_variants(delays, args.device))
    points = []
    for pair in (names[i : i + 2] for i in range(0, len(names), 2)):
        for name in pair:
            control.load_model(name)
        for name in pair:
            points.append(perf_analyzer(args.perf_analyzer, pa_env, url, 8, True, args.interval_ms, name))
        for name in pair:
            control.unload_model(name)
    return points


def one_session(args: Any, pa_env: dict[str, str], url: str, log: Path, x: np.ndarray, ref: Any) -> dict:
    """ONE_SESSION loaded alone: its GPU memory per worker, its outputs, and c=8 over shared memory and gRPC."""
    control = grpc_client(url)
    control.load_model(ONE_SESSION)
    try:
        result: dict[str, Any] = {"gpu_mem_per_worker_gb": gpu_mem_per_worker_gb(worker_pids(log, ONE_SESSION))}
        if ref is not None:
            result["outputs"] = served_outputs(url, x, ref, ONE_SESSION)
        for shm in (True, False):
            point = perf_analyzer(args.perf_analyzer, pa_env, url, 8, shm, args.interval_ms, ONE_SESSION)
            result[f"c8_{'shm' if shm else 'grpc'}"] = point
        result["gpu_mem_per_worker_gb_after"] = gpu_mem_per_worker_gb(worker_pids(log, ONE_SESSION))
        return result
    finally:
        control.unload_model(ONE_SESSION)


def bar_figures(r: dict[str, Any]) -> dict[str, float | None]:
    """The figures the bars read, all from MODEL (the shipped GPU defaults)."""
    steps = r["steps"]
    med = {(m, c, shm): v for m, c, shm, v in r.get("served_medians", [])}

    def ratio(a: dict | None, b: float | None) -> float | None:
        return a["infer_s"] / b if a and b else None

    def point(model: str, c: int, shm: bool) -> dict | None:
        return med.get((model, c, shm))

    ref8 = (steps.get("inprocess_plain_c8") or {}).get("img_s")
    out: dict[str, float | None] = {}
    for shm, tag in ((True, "shm"), (False, "grpc")):
        out[f"vs_inprocess_c8_{tag}"] = ratio(point(MODEL, 8, shm), ref8)
        for c in (8, 32):
            peer = point("cpp_peer", c, shm)
            out[f"vs_cpp_c{c}_{tag}"] = ratio(point(MODEL, c, shm), peer["infer_s"] if peer else None)
    out["gpu_mem_per_worker_gb"] = r.get("gpu_mem_per_worker_gb")
    outputs = steps.get("served_outputs") or {}
    out["max_abs_diff_single"] = outputs.get("max_abs_diff_single")
    out["max_abs_diff_merged"] = outputs.get("max_abs_diff_merged")
    c8 = [p for p in (point(MODEL, 8, True), point(MODEL, 8, False)) if p]
    out["p99_over_p50_c8"] = max(p["p99_ms"] / p["p50_ms"] for p in c8) if c8 else None
    loops = [steps.get(k) for k in ("latency_loop_batch1", "latency_loop_mixed") if steps.get(k)]
    out["max_request_ms"] = max(v["max_ms"] for v in loops) if loops else None
    c1 = [p for p in (point(MODEL, 1, True), point(MODEL, 1, False)) if p]
    ref1 = (steps.get("inprocess_c1") or {}).get("p50_ms")
    out["c1_p50_over_inprocess_ms"] = max(p["p50_ms"] for p in c1) - ref1 if c1 and ref1 is not None else None
    return out


def verdict(figures: dict[str, float | None]) -> dict[str, Any]:
    """Every bar with its figure: PASS, FAIL (and by how much) or MISSING."""
    bars: dict[str, Any] = {}
    for name, (op, bar) in BARS.items():
        value = figures.get(name)
        if value is None:
            bars[name] = {"value": None, "bar": f"{op} {bar}", "result": "MISSING"}
            continue
        ok = value >= bar if op == ">=" else value <= bar
        bars[name] = {"value": value, "bar": f"{op} {bar}", "result": "PASS" if ok else "FAIL", "off_by": value - bar}
    return bars


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--model", required=True, help="MobileNetV2 ONNX (dynamic batch)")
    parser.add_argument(
        "--model-bs1", required=True, help="the same model with its batch fixed to 1 (the multi-card sample)"
    )
    parser.add_argument("--perf-analyzer", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--peer-backend", type=Path, help="a built onnxruntime backend folder (the C++ peer)")
    parser.add_argument("--seconds", type=float, default=4.0, help="each in-process and client-loop measurement")
    parser.add_argument("--interval-ms", type=int, default=1000, help="perf_analyzer's measurement window")
    parser.add_argument("--levels", default="1,8,32")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the side-by-side points, models alternated")
    parser.add_argument("--sweep-delays", default=",".join(map(str, SWEEP_DELAYS_US)), help="'' for no sweep")
    parser.add_argument("--multicard", action="store_true", help="also the multi-card sample's batch split")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    t_run = time.perf_counter()
    proof = Proof(args.out, args.device)
    r = proof.results
    r["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    r["python"] = sys.version.split()[0]
    r["driver"] = _smi("--query-gpu=name,driver_version", "--format=csv,noheader")
    import onnxruntime as ort

    r["onnxruntime"] = f"{ort.__version__} {ort.get_available_providers()}"
    r["windows"] = {
        "perf_analyzer_interval_ms": args.interval_ms,
        "inprocess_and_client_loop_s": args.seconds,
        "rounds": args.rounds,
    }
    print(f"device {args.device}, ORT {r['onnxruntime']}", flush=True)
    x = images(IMAGES, seed=5)
    got = proof.step("references", references, args.model, args.device, x)
    ref = got[0] if got else None
    if got:
        r["steps"]["references"] = got[1]
    proof.step("inprocess_plain_c8", inprocess_throughput, args.model, args.device, 8, args.seconds)
    proof.step("inprocess_graphs_c8", inprocess_bound, args.model, args.device, 8, args.seconds)
    proof.step("inprocess_c1", inprocess_c1, args.model, args.device, args.seconds)

    from mslite_server import LocalServer, ServerConfig
    from tests.support.perf_analyzer import perf_env

    served = {k: v for k, v in SERVED.items() if k != "cpp_peer" or args.peer_backend is not None}
    delays = tuple(int(d) for d in args.sweep_delays.split(",") if d.strip())
    variants = {**served, ONE_SESSION: ONE_SESSION_VARIANT, **sweep_variants(delays, args.device)}
    work = Path(tempfile.mkdtemp(prefix="gpu-proof-"))
    repo = write_repository(work, args.model, args.device, variants)
    r["configs"] = {name: (repo / name / "config.pbtxt").read_text() for name in served}
    cfg = ServerConfig(
        model_repository=repo,
        load_models=tuple(served),  # the sweep's variants are loaded later, two at a time (GPU memory)
        restrict_admin=False,
        supervise=False,
        startup_timeout_s=300,
    )
    pa_env = dict(os.environ)  # perf_analyzer's own libraries (libcudart 12, libb64) go to it alone
    pa_libs = os.environ.get("GPU_PROOF_PA_LIBS", "")
    pa_env["LD_LIBRARY_PATH"] = ":".join(filter(None, [pa_libs, os.environ.get("LD_LIBRARY_PATH")]))
    pa_env = perf_env(args.perf_analyzer, pa_env)  # a venv's binary: its CUDA runtime too
    t0 = time.perf_counter()
    server = LocalServer(cfg)
    try:
        if args.peer_backend is not None:  # beside python/ and mslite/, as in a Triton container's backends/
            server.workspace.backends.mkdir(parents=True, exist_ok=True)
            os.symlink(args.peer_backend.resolve(), server.workspace.backends / "onnxruntime")
        server.start()
        r["server_start_s"] = time.perf_counter() - t0
        url = server.grpc_url.removeprefix("grpc://")
        print(f"server ready in {r['server_start_s']:.1f} s at {url}", flush=True)
        r["completed_config"] = grpc_client(url).get_model_config(MODEL, as_json=True).get("config", {})
        r["gpu_memory_after_load"] = gpu_memory()
        if ref is not None:
            proof.step("served_outputs", served_outputs, url, x, ref)
        levels = [int(v) for v in args.levels.split(",")]
        points: list[dict[str, Any]] = []
        for rnd in range(args.rounds):
            for c in levels:
                for shm in (True, False):
                    order = list(served) if rnd % 2 == 0 else list(reversed(served))  # models alternated
                    for name in order:
                        step = f"r{rnd}_{name}_c{c}_{'shm' if shm else 'grpc'}"
                        p = proof.step(
                            step, perf_analyzer, args.perf_analyzer, pa_env, url, c, shm, args.interval_ms, name
                        )
                        r["steps"].pop(step, None)
                        if p:
                            points.append({**p, "round": rnd})
        r["served_points"] = points
        r["served_medians"] = [[m, c, shm, v] for (m, c, shm), v in sorted(median_points(points).items())]
        log = args.out / "latencies.csv"
        log.write_text("phase,thread,t_s,batch,ms\n")
        proof.step("latency_loop_batch1", latency_loop, url, args.seconds, False, log)
        proof.step("latency_loop_mixed", latency_loop, url, args.seconds, True, log)
        if args.multicard:
            proof.step("batch_split", batch_split, server.grpc_url, args.model_bs1, args.device, 20)
        r["gpu_memory_at_end"] = gpu_memory()
        pids = worker_pids(Path(server.log_path), MODEL)
        r["worker_pids"] = pids
        r["gpu_mem_per_worker_gb"] = gpu_mem_per_worker_gb(pids)
        # the sweep: the served variants unloaded first, then each delay's pair loaded, measured and unloaded;
        # then the one-session memory candidate alone
        r["queue_delay_sweep_c8_shm"] = proof.step("queue_delay_sweep", queue_delay_sweep, args, pa_env, url, served)
        r["steps"].pop("queue_delay_sweep", None)
        proof.step("one_session", one_session, args, pa_env, url, Path(server.log_path), x, ref)
    finally:
        try:
            shutil.copy(server.log_path, args.out / "tritonserver.log")
        except Exception as e:
            print(f"no server log: {e}", flush=True)
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    figures = bar_figures(r)
    r.update(figures)
    # what a missed bar can be read against: every variant's medians are in served_medians, the delays in the sweep
    r["tried"] = {
        "ours_plain": "no bound buffers, no batching delay (before this round)",
        "ours_graphs": "bound buckets and CUDA graphs, no batching delay",
        MODEL: "bound buckets, CUDA graphs and the GPU batching defaults from auto-complete (every bar key)",
        "queue_delay_sweep_c8_shm": f"ours_graphs at delays {args.sweep_delays} us, with and without preferred sizes",
    }
    r["bars"] = verdict(figures)
    r["run_s"] = time.perf_counter() - t_run
    proof.save()
    print("\n=== bars", flush=True)
    for name, b in r["bars"].items():
        value = b["value"]
        shown = "-" if value is None else f"{value:.4g}"
        print(f"{name:28s} {shown:>12s}  bar {b['bar']:>8s}  {b['result']}", flush=True)
    print(f"run took {r['run_s']:.0f} s", flush=True)
    if r["errors"]:
        print(f"errors: {json.dumps(r['errors'], indent=1)}", flush=True)


if __name__ == "__main__":
    main()
