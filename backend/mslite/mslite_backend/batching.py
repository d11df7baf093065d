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
            merged = _run_merged([requests[i] for i in members], run)
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


def _run_merged(group: list[Feeds], run: RunFn) -> list[Outputs] | None:
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
