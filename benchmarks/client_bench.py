"""Python-client load: `ModelParallelRunner.predict` or raw `tritonclient.grpc` from N threads.

Run in its own process by the benchmark (`python -m benchmarks.client_bench ...`), so the client's state
(connection pools, the shared-memory switch read from the environment) starts fresh; prints one JSON line.
Both sides send the same array and read the output back as numpy.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

Call = Callable[[], None]


def runner_calls(url: str, model: str, batch: int, threads: int) -> list[Call]:
    """One closure per thread calling `ModelParallelRunner.predict` on a runner bound to `model`."""
    import mslite_triton as mslite

    context = mslite.Context()
    context.target = ["cpu"]
    context.server_url = url
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(f"triton://{model}", context)
    data = _image(batch)

    def make() -> Call:
        inputs = runner.get_inputs()
        inputs[0].shape = list(data.shape)
        inputs[0].set_data_from_numpy(data)

        def call() -> None:
            outputs = runner.predict(inputs)
            outputs[0].get_data_to_numpy()

        return call

    return [make() for _ in range(threads)]


def raw_calls(url: str, model: str, batch: int, threads: int) -> list[Call]:
    """One closure per thread, each with its own `tritonclient.grpc` client and prepared request."""
    import tritonclient.grpc as grpcclient

    address = url.split("://", 1)[-1]
    meta = grpcclient.InferenceServerClient(address).get_model_metadata(model, as_json=True)
    in_name, out_name = meta["inputs"][0]["name"], meta["outputs"][0]["name"]
    data = _image(batch)

    def make() -> Call:
        client = grpcclient.InferenceServerClient(address)
        item = grpcclient.InferInput(in_name, list(data.shape), "FP32")
        item.set_data_from_numpy(data)
        wanted = [grpcclient.InferRequestedOutput(out_name)]

        def call() -> None:
            client.infer(model, [item], outputs=wanted).as_numpy(out_name)

        return call

    return [make() for _ in range(threads)]


def drive(calls: list[Call], warmup_s: float, seconds: float) -> dict[str, Any]:
    """Loop every call in its own thread; count completions and latencies inside the timed window only."""
    stop = threading.Event()
    done: list[list[tuple[float, float]]] = [[] for _ in calls]
    errors = [0]

    def loop(i: int) -> None:
        while not stop.is_set():
            a = time.perf_counter()
            try:
                calls[i]()
            except Exception:  # counted and reported; one failure must not end the measurement
                errors[0] += 1
                continue
            done[i].append((time.perf_counter(), time.perf_counter() - a))

    workers = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(len(calls))]
    for w in workers:
        w.start()
    time.sleep(warmup_s)
    t0, cpu0 = time.perf_counter(), time.process_time()
    time.sleep(seconds)
    t1, cpu1 = time.perf_counter(), time.process_time()
    stop.set()
    for w in workers:
        w.join()
    lat = np.array([d for per in done for (end, d) in per if t0 <= end <= t1]) * 1e3
    return {
        "requests": int(lat.size),
        "req_s": lat.size / (t1 - t0),
        "p50_ms": float(np.percentile(lat, 50)) if lat.size else None,
        "p99_ms": float(np.percentile(lat, 99)) if lat.size else None,
        "errors": errors[0],
        "client_cpu_ms_per_req": (cpu1 - cpu0) * 1e3 / lat.size if lat.size else None,
    }


def _image(batch: int) -> np.ndarray:
    return np.random.default_rng(0).uniform(-1, 1, size=(batch, 3, 224, 224)).astype(np.float32)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("mode", choices=("runner", "raw"))
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--warmup-s", type=float, default=1.0)
    p.add_argument("--seconds", type=float, default=5.0)
    a = p.parse_args()
    make = runner_calls if a.mode == "runner" else raw_calls
    result = drive(make(a.url, a.model, a.batch, a.threads), a.warmup_s, a.seconds)
    result.update(mode=a.mode, threads=a.threads, batch=a.batch, img_s=result["req_s"] * a.batch)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
