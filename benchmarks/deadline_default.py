"""How long one worker's `execute` takes next to its warm-up: the figures behind `execute_deadline_s`'s default.

A worker (backend/mslite/model.py, driven as Triton's stub drives it, on the stand-in `pb_utils` of the unit
tests) loads a model and warms it up; then `execute` runs batches of 1, 2 and max_batch_size requests, on a
quiet machine and next to `--hogs` processes that each keep a core busy. Printed per load: the warm-up run, the
median and slowest execute of each batch size, and the slowest as a multiple of the warm-up.

Run: .venv/bin/python -m benchmarks.deadline_default [--model model_repository/mobilenetv2/1/model.onnx]
     [--rounds 10] [--hogs 0,2,4]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tests.support import fake_pb_utils as pb

MODEL = pb.install()


def _hog(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        pass


def _worker(model: Path, work: Path) -> tuple[Any, dict[str, Any], float]:
    """A loaded worker, its config, and the seconds its warm-up run took (a first run on a fresh session)."""
    from mslite_backend.graph import plan_auto_complete, read_graph_io

    (work / "1").mkdir(parents=True)
    shutil.copy(model, work / "1" / "model.onnx")
    plan = plan_auto_complete({"name": "m"}, read_graph_io(str(work / "1" / "model.onnx")))
    config = {
        "name": "m",
        "max_batch_size": plan.max_batch_size or 0,
        "input": list(plan.inputs),
        "output": list(plan.outputs),
        "instance_group": [{"name": "m_0", "count": 1, "kind": "KIND_CPU"}],
        "parameters": {},
    }
    worker = MODEL.TritonPythonModel()
    started = time.perf_counter()
    worker.initialize(
        {
            "model_config": json.dumps(config),
            "model_instance_name": "m_0_0",
            "model_instance_kind": "CPU",
            "model_instance_device_id": "0",
            "model_repository": str(work),
            "model_version": "1",
        }
    )
    del started
    import onnxruntime as ort

    from mslite_backend.session import session_options

    # the warm-up: a first run on a fresh session made as the worker's is (what `loading.warm_up` costs a load)
    session = ort.InferenceSession(
        str(work / "1" / "model.onnx"), session_options(worker.runtime.cfg), providers=["CPUExecutionProvider"]
    )
    feeds = _feeds(config)
    started = time.perf_counter()
    session.run(None, feeds)
    return worker, config, time.perf_counter() - started


def _feeds(config: dict[str, Any]) -> dict[str, np.ndarray]:
    feeds = {}
    for t in config["input"]:
        dims = [1 if d < 0 else d for d in t["dims"]]
        shape = [1, *dims] if config["max_batch_size"] else dims
        dtype = np.float32 if t["data_type"] == "TYPE_FP32" else np.int64
        feeds[t["name"]] = np.random.default_rng(0).random(shape).astype(dtype)
    return feeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("model_repository/mobilenetv2/1/model.onnx"))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--hogs", default="0,2,4")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="deadline-default-"))
    try:
        worker, config, warm_s = _worker(args.model, work)
        feeds = _feeds(config)
        sizes = sorted({1, 2, max(1, config["max_batch_size"])})
        print(f"{args.model}: warm-up run {warm_s * 1000:.1f} ms; cores {os.cpu_count()}", flush=True)
        for hogs in (int(h) for h in args.hogs.split(",")):
            stop_at = time.monotonic() + 3600
            procs = [multiprocessing.Process(target=_hog, args=(stop_at,), daemon=True) for _ in range(hogs)]
            for p in procs:
                p.start()
            try:
                row = []
                for size in sizes:
                    took = []
                    for _ in range(args.rounds):
                        requests = [pb.InferenceRequest(dict(feeds), "{}", ()) for _ in range(size)]
                        started = time.perf_counter()
                        responses = worker.execute(requests)
                        took.append(time.perf_counter() - started)
                        assert not any(r.has_error() for r in responses)
                    row.append(
                        f"batch {size}: median {statistics.median(took) * 1000:.0f} ms, slowest "
                        f"{max(took) * 1000:.0f} ms = {max(took) / warm_s:.0f} x warm-up"
                    )
                print(f"hogs {hogs} (load {os.getloadavg()[0]:.1f}): " + "; ".join(row), flush=True)
            finally:
                for p in procs:
                    p.terminate()
                    p.join(timeout=10)
        worker.finalize()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
