"""In-process ONNX Runtime: the ceiling (what the hardware gives with no serving) and the single-session references.

Every measurement runs `n` caller threads, each with its own session (ORT releases the GIL in `run`), for a
fixed time after one untimed warm-up run per session.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class GridCell:
    """One point of the ceiling grid."""

    sessions: int
    threads: int
    batch: int
    img_s: float
    cpu_ms_per_img: float  # CPU time of this process (all its threads) per image

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SingleSession:
    """One session, one caller, batch 1: latency and CPU per image (the served worker's reference)."""

    threads: int
    runs: int
    p50_ms: float
    p99_ms: float
    img_s: float
    cpu_ms_per_img: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_session(path: str, threads: int, *, spinning: bool) -> Any:
    """A CPU session configured like one served worker (explicit threads, inter-op 1, sequential)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if not spinning:  # the backend's rule: threads would outnumber the cores
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def image_batch(batch: int, seed: int = 0) -> np.ndarray:
    """A float32 `batch x 3 x 224 x 224` input, uniform in [-1, 1)."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.0, 1.0, size=(batch, 3, 224, 224)).astype(np.float32)


def drive(sessions: list[Any], batch: int, seconds: float) -> tuple[float, float]:
    """Run each session from its own thread for `seconds`; returns (images per second, CPU ms per image)."""
    name = sessions[0].get_inputs()[0].name
    feed = {name: image_batch(batch)}
    for s in sessions:
        s.run(None, feed)
    counts = [0] * len(sessions)
    start = threading.Barrier(len(sessions) + 1)
    stop = threading.Event()

    def loop(i: int) -> None:
        start.wait()
        while not stop.is_set():
            sessions[i].run(None, feed)
            counts[i] += 1

    workers = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(len(sessions))]
    for w in workers:
        w.start()
    start.wait()
    t0, cpu0 = time.perf_counter(), time.process_time()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()
    images = max(1, sum(counts) * batch)
    return images / (time.perf_counter() - t0), (time.process_time() - cpu0) * 1e3 / images


def grid_cell(path: str, sessions: int, threads: int, batch: int, seconds: float, cores: int) -> GridCell:
    """`sessions` sessions of `threads` threads, each driven by its own caller thread at `batch`."""
    spinning = sessions * threads <= cores  # the backend's rule
    pool = [make_session(path, threads, spinning=spinning) for _ in range(sessions)]
    return GridCell(sessions, threads, batch, *drive(pool, batch, seconds))


def single_session(path: str, threads: int, seconds: float) -> SingleSession:
    """Sequential batch-1 runs of one session: p50/p99 latency and process CPU time per image."""
    session = make_session(path, threads, spinning=True)
    name = session.get_inputs()[0].name
    feed = {name: image_batch(1)}
    for _ in range(5):
        session.run(None, feed)
    latencies = []
    cpu0, t0 = time.process_time(), time.perf_counter()
    deadline = t0 + seconds
    while True:
        a = time.perf_counter()
        session.run(None, feed)
        b = time.perf_counter()
        latencies.append(b - a)
        if b >= deadline:
            break
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    ms = np.array(latencies) * 1e3
    return SingleSession(
        threads=threads,
        runs=len(latencies),
        p50_ms=float(np.percentile(ms, 50)),
        p99_ms=float(np.percentile(ms, 99)),
        img_s=len(latencies) / wall,
        cpu_ms_per_img=cpu * 1e3 / len(latencies),
    )
