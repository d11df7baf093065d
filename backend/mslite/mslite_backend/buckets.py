"""Fixed-shape buckets: pad a batch up to a configured size and slice the outputs back.

ONNX Runtime's CUDA provider pays 0.6-0.7 s every time a session's input shape changes (measured on an
H200), and Triton's dynamic batcher changes the batch size from one execution to the next. So a GPU
worker runs every batch at one of a few fixed sizes: the batch is padded with zeros up to the smallest
bucket that holds it (or split into chunks of the largest bucket), and the padding rows are cut from
the outputs. Rows do not interact in a batch, so the real rows' results are the same (up to the low
bits some kernels change with the batch size).

Fixed sizes alone are not enough on CUDA: the cost is paid whenever a session's input shape differs from
its previous run, even a shape it has run (and been warmed) before. So a GPU worker keeps one session per
bucket, and each session only ever sees its own batch size (more device memory: one copy of the weights
and one memory arena per bucket; `batch_buckets` with fewer sizes uses less).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Feeds = dict[str, np.ndarray]


def parse(text: str) -> tuple[int, ...]:
    """`"1,2,4,8"` -> (1, 2, 4, 8), sorted and unique.

    Raises:
        ValueError: not positive integers.
    """
    sizes = sorted({int(v) for v in text.replace(" ", "").split(",") if v})
    if not sizes or sizes[0] < 1:
        raise ValueError(f"batch buckets must be positive integers, got '{text}'")
    return tuple(sizes)


def bucket_for(batch: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket that holds `batch`, else the largest (the batch is then run in chunks)."""
    return next((b for b in buckets if b >= batch), buckets[-1])


def run_in_buckets(feeds: Feeds, buckets: tuple[int, ...], run: Callable[[Feeds], dict[str, np.ndarray]]) -> dict:
    """Run `feeds` (axis 0 = batch) through `run` only at bucket sizes; outputs cover exactly the real rows."""
    batch = next(iter(feeds.values())).shape[0]
    parts: list[dict[str, np.ndarray]] = []
    start = 0
    while start < batch:
        size = bucket_for(batch - start, buckets)
        rows = min(size, batch - start)
        chunk = {name: _pad(a[start : start + rows], size) for name, a in feeds.items()}
        out = run(chunk)
        parts.append({name: a[:rows] for name, a in out.items()})
        start += rows
    if len(parts) == 1:
        return parts[0]
    return {name: np.concatenate([p[name] for p in parts], axis=0) for name in parts[0]}


def session_per_bucket(kind: str, buckets: tuple[int, ...]) -> bool:
    """Whether a worker of `kind` runs each bucket on a session of its own (GPU workers with two or more)."""
    return kind == "GPU" and len(buckets) > 1


def _pad(a: np.ndarray, size: int) -> np.ndarray:
    if a.shape[0] == size:
        return a
    pad = np.zeros((size - a.shape[0], *a.shape[1:]), dtype=a.dtype)
    return np.concatenate([a, pad], axis=0)
