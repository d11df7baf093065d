"""The GPU proof run by `benchmarks/gpu_proof.sh`: MobileNetV2 served by 2 KIND_GPU workers against in-process
ONNX Runtime CUDA, in one process, every figure written to `<out>/summary.json` as soon as it is known.

Steps (each one recorded, and a failing step does not stop the next):
1. in-process: the shape-change cost of one CUDA session (alternating batch 1 / 2 against a session per
   shape), reference outputs at batch 1, and the reference throughput: 2 sessions, 8 (and 16) caller
   threads, batch 1;
2. the served model (2 workers, GPU batch buckets, dynamic batching): outputs against the references,
   one request at a time and 8 at once;
3. perf_analyzer over gRPC at concurrency 1, 8, 32, then the same with `--shared-memory system`;
4. a Python client loop at concurrency 8 that times every request (batch 1, then mixed batch sizes),
   since perf_analyzer reports no maximum;
5. the multi-card sample's batch split on the GPU: a batch-2 predict split over 2 workers of a batch-1 model
   (`ModelParallelRunner`) against the two slices one after the other on 1 worker, and the sample's
   master / child-process flow (`ParallelPredictUtils`), both checked against in-process outputs.

`--device cpu` runs the same flow with KIND_CPU workers and the CPU provider (to test the script without
a GPU; its figures mean nothing for the GPU bars).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
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

MODEL = "mobilenetv2_gpu"
ONE_THREAD = 'parameters { key: "thread_num" value { string_value: "1" } }\n'
# the same model with one change each, measured at c=8 over gRPC only, for comparison: (batcher, count, extra)
VARIANTS = {
    "mobilenetv2_gpu_1thread": ("max_queue_delay_microseconds: 0", 2, ONE_THREAD),
    "mobilenetv2_gpu_delay500": ("max_queue_delay_microseconds: 500", 2, ""),
    "mobilenetv2_gpu_1worker": ("max_queue_delay_microseconds: 0", 1, ""),
}
BARS = {"served_vs_inprocess_c8": 0.9, "p99_over_p50_c8": 3.0, "max_latency_s": 0.5, "max_abs_diff": 1e-5}
IMAGES = 16


class Proof:
    """Collects results, writes them after every step, and runs each step in isolation."""

    def __init__(self, out: Path, device: str) -> None:
        self.out = out
        self.device = device
        self.results: dict[str, Any] = {"device": device, "steps": {}, "errors": {}}

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


def providers(device: str, precision: str = "enforce_fp32") -> list[Any]:
    """The provider list a served worker of `device` uses (the backend's own choice, options included)."""
    from mslite_backend.providers import choose

    return choose("GPU" if device == "gpu" else "CPU", 0, 0, {}, gpu_precision=precision).providers()


def session(path: str, device: str, precision: str = "enforce_fp32") -> Any:
    import onnxruntime as ort

    s = ort.InferenceSession(path, providers=providers(device, precision))
    if device == "gpu" and s.get_providers()[0] != "CUDAExecutionProvider":
        raise RuntimeError(f"in-process session runs {s.get_providers()}, not CUDA")
    return s


def images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=(n, 3, 224, 224)).astype(np.float32)


def shape_change_cost(path: str, device: str) -> dict[str, Any]:
    """One session alternating batch 1 and 2, against one session per batch size: ms per run."""
    x = images(2)
    one = session(path, device)
    name = one.get_inputs()[0].name
    alternating = []
    for i in range(8):
        feed = {name: x[: 1 + i % 2]}
        t0 = time.perf_counter()
        one.run(None, feed)
        alternating.append((time.perf_counter() - t0) * 1e3)
    fixed_sessions = {1: session(path, device), 2: session(path, device)}
    for b, s in fixed_sessions.items():
        s.run(None, {name: x[:b]})
    fixed = []
    for i in range(8):
        b = 1 + i % 2
        t0 = time.perf_counter()
        fixed_sessions[b].run(None, {name: x[:b]})
        fixed.append((time.perf_counter() - t0) * 1e3)
    result = {
        "one_session_alternating_ms": [round(v, 2) for v in alternating],
        "session_per_shape_ms": [round(v, 2) for v in fixed],
        "alternating_p50_ms": statistics.median(alternating[2:]),
        "per_shape_p50_ms": statistics.median(fixed),
    }
    print(json.dumps(result), flush=True)
    return result


def references(path: str, device: str, x: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """Batch-1 in-process outputs of every image, and how far a batch-8 run's rows are from them."""
    s = session(path, device)
    name = s.get_inputs()[0].name
    ref = np.concatenate([s.run(None, {name: x[i : i + 1]})[0] for i in range(len(x))])
    batch8 = s.run(None, {name: x[:8]})[0]
    tf32 = session(path, device, "preferred_fp16")  # the CUDA provider's default: TF32 allowed
    tf32_1 = np.concatenate([tf32.run(None, {name: x[i : i + 1]})[0] for i in range(8)])
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
    lat: list[list[float]] = [[] for _ in range(callers)]
    start = threading.Barrier(callers + 1)
    stop = threading.Event()

    def loop(i: int) -> None:
        s = pool[i % 2]
        start.wait()
        while not stop.is_set():
            t0 = time.perf_counter()
            s.run(None, feed)
            lat[i].append(time.perf_counter() - t0)

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(callers)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ms = np.array([v for per in lat for v in per]) * 1e3
    result = {
        "sessions": 2,
        "callers": callers,
        "img_s": len(ms) / wall,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "max_ms": float(ms.max()),
    }
    print(json.dumps(result), flush=True)
    return result


# --- the served model ----------------------------------------------------------------------------------


def write_repository(root: Path, model: str, device: str) -> Path:
    """MODEL as shipped for the device (GPU: the backend's defaults), and the VARIANTS."""
    repo = root / "repo"
    kind = "KIND_GPU" if device == "gpu" else "KIND_CPU"
    gpus = " gpus: [ 0 ]" if device == "gpu" else ""
    cpu = "" if device == "gpu" else ONE_THREAD
    models = {MODEL: ("max_queue_delay_microseconds: 0", 2, cpu), **VARIANTS}
    for name, (batcher, count, params) in models.items():
        (repo / name / "1").mkdir(parents=True)
        shutil.copy(model, repo / name / "1" / "model.onnx")
        (repo / name / "config.pbtxt").write_text(
            f'backend: "mslite"\nmax_batch_size: 64\ndynamic_batching {{ {batcher} }}\n'
            f"instance_group [ {{ kind: {kind}, count: {count}{gpus} }} ]\n{params or cpu}"
        )
    return repo


def grpc_client(url: str) -> Any:
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(url)


def infer(client: Any, x: np.ndarray, in_name: str, out_name: str) -> np.ndarray:
    import tritonclient.grpc as grpcclient

    inp = grpcclient.InferInput(in_name, list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    res = client.infer(MODEL, [inp], outputs=[grpcclient.InferRequestedOutput(out_name)])
    return res.as_numpy(out_name)  # type: ignore[no-any-return]


def io_names(url: str) -> tuple[str, str]:
    meta = grpc_client(url).get_model_metadata(MODEL, as_json=True)
    return meta["inputs"][0]["name"], meta["outputs"][0]["name"]


def served_outputs(url: str, x: np.ndarray, ref: np.ndarray) -> dict[str, Any]:
    """Every image alone (c=1), then all at once from 8 threads, then as one batch of 8: max abs diffs."""
    in_name, out_name = io_names(url)
    client = grpc_client(url)
    alone = np.concatenate([infer(client, x[i : i + 1], in_name, out_name) for i in range(len(x))])
    concurrent: list[np.ndarray | None] = [None] * len(x)

    def one(i: int) -> None:
        c = grpc_client(url)
        for j in range(i, len(x), 8):
            concurrent[j] = infer(c, x[j : j + 1], in_name, out_name)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    together = np.concatenate([c for c in concurrent if c is not None])
    batch8 = infer(client, x[:8], in_name, out_name)
    result = {
        "max_abs_diff_one_at_a_time": float(np.abs(alone - ref).max()),
        "max_abs_diff_8_concurrent": float(np.abs(together - ref).max()),
        "max_abs_diff_batch_of_8": float(np.abs(batch8 - ref[:8]).max()),
        "bit_exact_one_at_a_time": bool(np.array_equal(alone, ref)),
    }
    result["max_abs_diff"] = max(v for k, v in result.items() if k.startswith("max_abs_diff_"))
    print(json.dumps(result), flush=True)
    return result


def model_stats(url: str, model: str = MODEL) -> tuple[int, int]:
    stats = grpc_client(url).get_inference_statistics(model, as_json=True)["model_stats"][0]
    return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))


def perf_analyzer(
    pa: Path, env: dict[str, str], url: str, concurrency: int, shm: bool, interval_ms: int, model: str = MODEL
) -> dict:
    """One perf_analyzer point over gRPC; if its windows never agree, once more accepting any three."""
    with tempfile.TemporaryDirectory(prefix="gpu-proof-pa-") as tmp:
        csv_path = Path(tmp) / "pa.csv"
        cmd = [str(pa), "-m", model, "-u", url, "-i", "grpc", "--concurrency-range", str(concurrency)]
        cmd += ["--measurement-interval", str(interval_ms), "--max-trials", "6"]
        cmd += ["--shared-memory", "system" if shm else "none"]
        inf0, exe0 = model_stats(url, model)
        stable = True
        for pct in ("15", "1000"):
            out = subprocess.run(
                [*cmd, "--stability-percentage", pct, "-f", str(csv_path)],
                env=env,
                capture_output=True,
                text=True,
                timeout=interval_ms / 1000 * 8 + 60,
            )
            text = out.stdout + out.stderr
            if out.returncode == 0 and csv_path.exists():
                break
            stable = False
            if "Failed to obtain stable measurement" not in text:
                raise RuntimeError(f"perf_analyzer exit {out.returncode}: {text[-1500:]}")
        else:
            raise RuntimeError(f"perf_analyzer gave no result: {text[-1500:]}")
        with open(csv_path, newline="") as f:
            row = next(csv.DictReader(f))
    inf1, exe1 = model_stats(url, model)
    result = {
        "model": model,
        "concurrency": concurrency,
        "shm": shm,
        "infer_s": float(row["Inferences/Second"]),
        "p50_ms": float(row["p50 latency"]) / 1e3,
        "p99_ms": float(row["p99 latency"]) / 1e3,
        "avg_batch": (inf1 - inf0) / max(1, exe1 - exe0),
        "stable": stable,
        "command": shlex.join([Path(cmd[0]).name, *cmd[1:], "--stability-percentage", "15"]),
    }
    print(json.dumps(result), flush=True)
    return result


def latency_loop(url: str, seconds: float, mixed: bool, log: Path) -> dict[str, Any]:
    """8 threads, each with its own client, timing every request (batch 1, or 1-8 chosen at random)."""
    in_name, out_name = io_names(url)
    x = images(8, seed=1)
    records: list[list[tuple[float, int, float]]] = [[] for _ in range(8)]
    start = threading.Barrier(9)
    stop = threading.Event()

    def loop(i: int) -> None:
        client = grpc_client(url)
        rng = np.random.default_rng(100 + i)
        infer(client, x[:1], in_name, out_name)  # the connection's set-up, not timed
        start.wait()
        while not stop.is_set():
            b = int(rng.integers(1, 9)) if mixed else 1
            t0 = time.perf_counter()
            infer(client, x[:b], in_name, out_name)
            records[i].append((t0, b, time.perf_counter() - t0))

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(8)]
    for t in threads:
        t.start()
    start.wait()
    t_start = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t_start
    rows = sorted((t0 - t_start, i, b, s) for i, per in enumerate(records) for t0, b, s in per)
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
        "over_500ms": int((ms > 500).sum()),
    }
    print(json.dumps(result), flush=True)
    return result


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
    s = session(model_bs1, device)
    name = s.get_inputs()[0].name
    ref = np.concatenate([s.run(None, {name: x[i : i + 1]})[0] for i in range(2)])
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


def _one_device_parallel_predict() -> Any:
    """`ParallelPredictUtils` whose children all run on device 0: the multi-card sample's two cores
    of one card, on one GPU.

    The library's children bind child i to device i (one card each); this machine has one GPU.
    """
    from mslite_triton.parallel_predict import BUILD_FINISH, ParallelPredictUtils, predict_process_func

    class OneDevice(ParallelPredictUtils):  # type: ignore[misc]
        def build_model(self) -> None:
            for i in range(self.device_num):
                p = self._ctx.Process(
                    target=predict_process_func, args=(self.pipe_child_end[i], self.model_path, 0, self.target)
                )
                p.start()
                self.process.append(p)
            for i in range(self.device_num):
                msg_type, msg = self.pipe_parent_end[i].recv()
                if msg_type != BUILD_FINISH:
                    self.finalize()
                    raise RuntimeError(f"child {i} failed to build: {msg}")

    return OneDevice


def multicard_flow(url: str, model_bs1: str, device: str, rounds: int) -> dict[str, Any]:
    """The sample's master and one child process per device (here: two on the one GPU), over pipes."""
    from mslite_backend.settings import URL_ENV

    os.environ[URL_ENV] = url
    x = images(2, seed=3)
    s = session(model_bs1, device)
    name = s.get_inputs()[0].name
    ref = np.concatenate([s.run(None, {name: x[i : i + 1]})[0] for i in range(2)])
    utils = _one_device_parallel_predict()(model_bs1, device_num=2, target="gpu" if device == "gpu" else "cpu")
    t0 = time.perf_counter()
    utils.build_model()
    build_s = time.perf_counter() - t0
    try:
        for _ in range(3):
            (y,) = utils.predict_batch([x])
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            (y,) = utils.predict_batch([x])
            times.append(time.perf_counter() - t0)
    finally:
        utils.finalize()
    result = {
        "children": 2,
        "build_s": build_s,
        "predict_batch_2_ms": statistics.median(times) * 1e3,
        "max_abs_diff": float(np.abs(y - ref).max()),
        "rounds": rounds,
    }
    print(json.dumps(result), flush=True)
    return result


# --- main ------------------------------------------------------------------------------------------------


def gpu_memory() -> str:
    if not shutil.which("nvidia-smi"):
        return "no nvidia-smi"
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def verdict(r: dict[str, Any]) -> dict[str, Any]:
    """Every bar with its figure: PASS, FAIL or MISSING."""
    steps = r["steps"]
    bars: dict[str, Any] = {}

    def check(name: str, value: float | None, ok: Any) -> None:
        bar = BARS[next(k for k in BARS if name.startswith(k) or name.endswith(k))]
        result = "MISSING" if value is None else ("PASS" if ok(value) else "FAIL")
        bars[name] = {"value": value, "bar": bar, "result": result}

    ref8 = (steps.get("inprocess_8_callers") or {}).get("img_s")
    for shm in (False, True):
        key = "perf_shm" if shm else "perf_grpc"
        c8 = next((p for p in steps.get(key) or [] if p["concurrency"] == 8), None)
        tag = "_shm" if shm else ""
        check(f"served_vs_inprocess_c8{tag}", c8["infer_s"] / ref8 if c8 and ref8 else None, lambda v: v >= 0.9)
        check(f"p99_over_p50_c8{tag}", c8["p99_ms"] / c8["p50_ms"] if c8 else None, lambda v: v <= 3.0)
    loops = [steps.get(k) for k in ("latency_loop_batch1", "latency_loop_mixed") if steps.get(k)]
    check("max_latency_s", max(v["max_ms"] for v in loops) / 1e3 if loops else None, lambda v: v <= 0.5)
    outputs = steps.get("served_outputs")
    check("max_abs_diff", outputs["max_abs_diff"] if outputs else None, lambda v: v <= 1e-5)
    for key in ("batch_split", "multicard_flow"):
        if steps.get(key):
            check(f"{key}_max_abs_diff", steps[key]["max_abs_diff"], lambda v: v <= 1e-5)
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
    parser.add_argument("--seconds", type=float, default=6.0, help="each in-process and client-loop measurement")
    parser.add_argument("--interval-ms", type=int, default=2000, help="perf_analyzer's measurement window")
    parser.add_argument("--levels", default="1,8,32")
    parser.add_argument("--rounds", type=int, default=20, help="batch-split rounds")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    proof = Proof(args.out, args.device)
    r = proof.results
    r["python"] = sys.version.split()[0]
    import onnxruntime as ort

    r["onnxruntime"] = f"{ort.__version__} {ort.get_available_providers()}"
    print(f"device {args.device}, ORT {r['onnxruntime']}", flush=True)
    x = images(IMAGES, seed=5)
    proof.step("shape_change_cost", shape_change_cost, args.model, args.device)
    got = proof.step("references", references, args.model, args.device, x)
    ref = got[0] if got else None
    if got:
        r["steps"]["references"] = got[1]
    proof.step("inprocess_8_callers", inprocess_throughput, args.model, args.device, 8, args.seconds)
    proof.step("inprocess_16_callers", inprocess_throughput, args.model, args.device, 16, args.seconds)

    from mslite_triton.server import EmbeddedServer, ServerConfig

    work = Path(tempfile.mkdtemp(prefix="gpu-proof-"))
    repo = write_repository(work, args.model, args.device)
    r["config"] = (repo / MODEL / "config.pbtxt").read_text()
    cfg = ServerConfig(
        model_repository=repo,
        load_models=(MODEL, *VARIANTS),
        restrict_admin=False,
        supervise=False,
        startup_timeout_s=300,
    )
    pa_env = dict(os.environ)  # perf_analyzer's own libraries (libcudart 12, libb64) go to it alone
    pa_libs = os.environ.get("GPU_PROOF_PA_LIBS", "")
    pa_env["LD_LIBRARY_PATH"] = ":".join(filter(None, [pa_libs, os.environ.get("LD_LIBRARY_PATH")]))
    t0 = time.perf_counter()
    server = EmbeddedServer(cfg)
    try:
        server.start()
        r["server_start_s"] = time.perf_counter() - t0
        url = server.grpc_url.removeprefix("grpc://")
        print(f"server ready in {r['server_start_s']:.1f} s at {url}", flush=True)
        r["gpu_memory_after_load"] = gpu_memory()
        print(r["gpu_memory_after_load"], flush=True)
        if ref is not None:
            proof.step("served_outputs", served_outputs, url, x, ref)
        levels = [int(v) for v in args.levels.split(",")]
        for shm in (False, True):
            key = "perf_shm" if shm else "perf_grpc"
            r["steps"][key] = []
            for c in levels:
                point = proof.step(
                    f"{key}_c{c}", perf_analyzer, args.perf_analyzer, pa_env, url, c, shm, args.interval_ms
                )
                if point:
                    r["steps"][key].append(point)
                    r["steps"].pop(f"{key}_c{c}", None)
        log = args.out / "latencies.csv"
        log.write_text("phase,thread,t_s,batch,ms\n")
        proof.step("latency_loop_batch1", latency_loop, url, args.seconds, False, log)
        proof.step("latency_loop_mixed", latency_loop, url, args.seconds, True, log)
        proof.step("batch_split", batch_split, server.grpc_url, args.model_bs1, args.device, args.rounds)
        proof.step("multicard_flow", multicard_flow, server.grpc_url, args.model_bs1, args.device, args.rounds)
        for name in VARIANTS:
            proof.step(
                f"variant_{name}_c8", perf_analyzer, args.perf_analyzer, pa_env, url, 8, False, args.interval_ms, name
            )
        r["gpu_memory_at_end"] = gpu_memory()
    finally:
        try:
            shutil.copy(server.log_path, args.out / "tritonserver.log")
        except Exception as e:
            print(f"no server log: {e}", flush=True)
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    r["bars"] = verdict(r)
    proof.save()
    print("\n=== bars", flush=True)
    for name, b in r["bars"].items():
        value = b["value"]
        shown = "-" if value is None else f"{value:.4g}"
        print(f"{name:36s} {shown:>12s}  bar {b['bar']}  {b['result']}", flush=True)
    if r["errors"]:
        print(f"errors: {json.dumps(r['errors'], indent=1)}", flush=True)


if __name__ == "__main__":
    main()
