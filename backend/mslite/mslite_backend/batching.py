"""Dynamic batching: group compatible requests, concatenate on axis 0, run once, split outputs back.

Triton's dynamic batcher hands `execute` several requests but never merges their tensors. Requests
are merged only when every input agrees on all non-batch dimensions; a failed merged run is retried
request by request, so one bad request cannot fail its neighbours.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .errors import BackendError

Feeds = dict[str, np.ndarray]
Outputs = dict[str, np.ndarray]
Result = Outputs | BackendError
RunFn = Callable[[Feeds], Outputs]


def signature(feeds: Feeds) -> tuple:
    """Requests with equal signatures can share one run."""
    return tuple(sorted((name, a.dtype.str, a.shape[1:]) for name, a in feeds.items()))


def run_batched(requests: list[Feeds], run: RunFn, *, merge: bool) -> list[Result]:
    """Run every request, merging compatible ones when `merge`.

    Args:
        requests: validated inputs of each request, in arrival order.
        run: runs one (possibly merged) set of inputs; raises BackendError on failure.
        merge: concatenate compatible requests on axis 0 (only for models whose axis 0 is the batch).

    Returns:
        One entry per request, in order: its outputs, or the BackendError that failed it.
    """
    results: list[Result | None] = [None] * len(requests)
    groups: dict[tuple, list[int]] = {}
    for i, feeds in enumerate(requests):
        key = signature(feeds) if merge else ("single", i)
        groups.setdefault(key, []).append(i)
    for members in groups.values():
        if len(members) > 1:
            merged = run_merged([requests[i] for i in members], run)
            if merged is not None:
                for i, out in zip(members, merged):
                    results[i] = out
                continue
        for i in members:
            results[i] = _run_one(requests[i], run)
    return [r for r in results if r is not None]


def _run_one(feeds: Feeds, run: RunFn) -> Result:
    try:
        return run(feeds)
    except BackendError as e:
        return e


def run_merged(group: list[Feeds], run: RunFn) -> list[Outputs] | None:
    """Concatenate, run once and split; None when the merged run failed or cannot be split."""
    sizes = [len(next(iter(f.values()))) for f in group]
    merged = {name: np.concatenate([f[name] for f in group]) for name in group[0]}
    try:
        outputs = run(merged)
    except BackendError:
        return None
    total = sum(sizes)
    if any(a.ndim == 0 or a.shape[0] != total for a in outputs.values()):
        return None
    parts, start = [], 0
    for n in sizes:  # plain slices: np.split costs more than a small model's run
        parts.append({name: a[start : start + n] for name, a in outputs.items()})
        start += n
    return parts


# the totals a merged run is checked at (`merge_differs`), up to the model's max_batch_size
MERGE_CHECK_TOTALS = (2, 3, 4, 5, 7, 8, 16, 32, 64)


def merge_differs(run: RunFn, rows: Feeds) -> str | None:
    """Whether a merged run differs in any bit from one run per request, on this model; None: it does not.

    Each row of `rows` (a fixed random input, its batch the most a merged run may hold) runs alone; then the
    first n rows run as one batch, for each n of MERGE_CHECK_TOTALS that fits, and each of their output rows
    must have the bits of the row's own run. A kernel that changes with the batch size (a matrix product
    blocked differently, a reduction split otherwise) shows here, and the model then runs each request alone.
    """
    count = len(next(iter(rows.values())))
    alone = []
    try:
        for i in range(count):
            alone.append(run({name: a[i : i + 1] for name, a in rows.items()}))
        for total in [n for n in MERGE_CHECK_TOTALS if n < count] + [count]:
            merged = run({name: a[:total] for name, a in rows.items()})
            for name, out in merged.items():
                if out.ndim == 0 or out.shape[0] != total:
                    return f"output '{name}' has no batch axis to split (shape {list(out.shape)})"
                for i in range(total):
                    if not same_bits(out[i : i + 1], alone[i][name]):
                        return f"output '{name}' of row {i} differs between a batch of {total} and a run of its own"
    except BackendError as e:
        return f"a check run failed: {e}"
    return None


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Same shape, dtype and bytes (NaNs and signed zeros compared as stored)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype == np.object_:
        return bool(all(x == y for x, y in zip(a.ravel(), b.ravel())))
    return np.ascontiguousarray(a).view(np.uint8).tobytes() == np.ascontiguousarray(b).view(np.uint8).tobytes()
