"""Batch splitting (its bar): a batch-2 predict split over 2 single-thread workers vs the same two
slices one after the other on 1 worker, MobileNetV2 with its batch fixed to 1, measured side by side.

Run: .venv/bin/python -m benchmarks.split_bench [--rounds 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
import mslite_triton as mslite  # noqa: E402
from mslite_server import LocalServer, ServerConfig  # noqa: E402
from tests.support.repository import GEN as generate_models  # noqa: E402


def _runner(url: str, path: str, workers: int) -> mslite.ModelParallelRunner:
    ctx = mslite.Context()
    ctx.server_url = url
    ctx.parallel.workers_num = workers
    ctx.cpu.thread_num = 1
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(path, ctx)
    return runner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="split-bench-"))
    model = generate_models.build_mobilenetv2()
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_value = 1
    path = work / "mobilenet_bs1.onnx"
    path.write_bytes(model.SerializeToString())
    (work / "repo").mkdir()
    x = np.random.default_rng(0).standard_normal((2, 3, 224, 224), dtype=np.float32)
    with LocalServer(ServerConfig(model_repository=work / "repo")) as server:
        split = _runner(server.grpc_url, str(path), 2)
        single = _runner(server.grpc_url, str(path), 1)
        for _ in range(5):  # warm both
            split.predict([mslite.Tensor(x)])
            single.predict([mslite.Tensor(x[:1])])
        t_split, t_seq = [], []
        for _ in range(args.rounds):  # interleaved, so drift on a noisy machine hits both alike
            t0 = time.perf_counter()
            split.predict([mslite.Tensor(x)])
            t_split.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            single.predict([mslite.Tensor(x[:1])])
            single.predict([mslite.Tensor(x[1:])])
            t_seq.append(time.perf_counter() - t0)
    a, b = statistics.median(t_split), statistics.median(t_seq)
    result = {"split_2_workers_ms": a * 1e3, "sequential_1_worker_ms": b * 1e3, "ratio": a / b, "bar": 0.65}
    print(f"batch 2 split over 2 workers x 1 thread: {a * 1e3:.2f} ms (median of {args.rounds})")
    print(f"2 slices one after the other, 1 worker:  {b * 1e3:.2f} ms")
    print(f"ratio {a / b:.3f} (bar <= 0.65): {'PASS' if a / b <= 0.65 else 'FALLS SHORT'}")
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "split.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
