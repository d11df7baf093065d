"""How a worker turns the requests of one `execute` into results: chosen once, when the model loads.

Which executor runs follows from the model and the worker alone (provider, updatable weights, merging,
BOOL and string tensors), never from the requests, so `execute` has one path: read the inputs, call the
executor, answer each request from its result.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .batching import Feeds, Outputs, Result, run_merged
from .bound import run_rows
from .errors import BackendError
from .runtime import ModelRuntime
from .session import failure


class GeneralExecutor:
    """Every request through `ModelRuntime.execute`: validation (BOOL values included), strings, buckets, merging."""

    kind = "general"

    def __init__(self, runtime: ModelRuntime) -> None:
        self._execute = runtime.execute

    def __call__(self, requests: list[Feeds]) -> list[Result]:
        """One result (outputs by name, or the request's error) per request, in order."""
        return self._execute(requests)


class UpdatableExecutor(GeneralExecutor):
    """The general runs for a model with updatable weights: each batch runs on one snapshot of the shared store.

    `ModelRuntime.execute` reads the snapshot once per call, so weights updates applied before the call
    (`execute` applies a batch's updates first) are seen by every request of the batch.
    """

    kind = "updatable"


class PlainExecutor:
    """A valid request is one call of ONNX Runtime's own run (`ModelRuntime.direct_run`), and nothing else.

    On CPU a tiny model's run costs a few microseconds, as much as the Python around it: no other frame
    runs per request than `validate` (a set lookup once a request's layout passed) and ORT's run.
    """

    kind = "plain"

    def __init__(self, runtime: ModelRuntime, run: Callable[..., list[np.ndarray]]) -> None:
        self._validate = runtime.validate
        self._run = run
        self._names = runtime.output_names

    def __call__(self, requests: list[Feeds]) -> list[Result]:
        """One result (outputs by name, or the request's error) per request, in order."""
        validate, run, names = self._validate, self._run, self._names
        results: list[Result] = []
        for feeds in requests:
            try:
                validate(feeds)
            except BackendError as e:
                results.append(e)
                continue
            try:
                outputs = run(names, feeds, None)
            except Exception as e:  # ORT's own run raises its own exceptions: mapped as `OrtSession.run` maps them
                results.append(failure(e))
                continue
            results.append(dict(zip(names, outputs)))
        return results


class MergedExecutor:
    """A light model's valid requests of one `execute` as one call of ONNX Runtime's own run, split back by rows.

    Requests whose inputs agree on every dim but the batch are concatenated on axis 0 (`batching.run_merged`);
    the load checked that such a run gives each request the bits of its own run (`batching.merge_differs`).
    A lone request, or a group whose merged run fails, runs as `PlainExecutor` runs it, one run per request.
    """

    kind = "merged"

    def __init__(self, runtime: ModelRuntime, run: Callable[..., list[np.ndarray]]) -> None:
        self._validate = runtime.validate
        self._one = PlainExecutor(runtime, run)
        self._run = run
        self._names = names = runtime.output_names

        def merged_run(feeds: Feeds) -> Outputs:
            try:
                return dict(zip(names, run(names, feeds, None)))
            except Exception as e:  # as `OrtSession.run` maps them
                raise failure(e) from e

        self._merged_run = merged_run

    def __call__(self, requests: list[Feeds]) -> list[Result]:
        """One result (outputs by name, or the request's error) per request, in order."""
        validate = self._validate
        if len(requests) == 1:  # `PlainExecutor`'s run, inlined: at low load every execute holds one request
            feeds = requests[0]
            try:
                validate(feeds)
            except BackendError as e:
                return [e]
            try:
                return [dict(zip(self._names, self._run(self._names, feeds, None)))]
            except Exception as e:  # as `OrtSession.run` maps them
                return [failure(e)]
        results: list[Result | None] = [None] * len(requests)
        groups: dict[tuple, list[int]] = {}
        for i, feeds in enumerate(requests):
            try:
                validate(feeds)
            except BackendError as e:
                results[i] = e
                continue
            # dtypes and names passed `validate`: what may still differ is a dim other than the batch
            groups.setdefault(tuple([(name, a.shape[1:]) for name, a in feeds.items()]), []).append(i)
        for members in groups.values():
            group = [requests[i] for i in members]
            merged = run_merged(group, self._merged_run) if len(members) > 1 else None
            for i, result in zip(members, merged if merged is not None else self._one(group)):
                results[i] = result
        return [r for r in results if r is not None]


class BoundExecutor:
    """Rows written straight into each bucket's bound buffers, run (or replayed), outputs read once and split.

    With merging (GPU by default) the valid requests of one `execute` run back to back through the buckets;
    a failed merged run is retried request by request, so one bad request cannot fail its neighbours.
    """

    kind = "bound"

    def __init__(self, runtime: ModelRuntime) -> None:
        self._validate = runtime.validate
        self._buckets = runtime.bound
        self._merge = runtime.merge

    def __call__(self, requests: list[Feeds]) -> list[Result]:
        """One result (outputs by name, or the request's error) per request, in order."""
        results: list[Result | None] = [None] * len(requests)
        valid: list[int] = []
        for i, feeds in enumerate(requests):
            try:
                self._validate(feeds)
                valid.append(i)
            except BackendError as e:
                results[i] = e
        groups = [valid] if self._merge and len(valid) > 1 else [[i] for i in valid]
        for group in groups:
            try:
                for i, out in zip(group, run_rows(self._buckets, [requests[i] for i in group])):
                    results[i] = out
            except BackendError as e:
                if len(group) == 1:
                    results[group[0]] = e
                    continue
                for i in group:
                    results[i] = self._one(requests[i])
        return [r for r in results if r is not None]

    def _one(self, feeds: Feeds) -> Result:
        try:
            return run_rows(self._buckets, [feeds])[0]
        except BackendError as e:
            return e


Executor = GeneralExecutor | PlainExecutor | MergedExecutor | BoundExecutor


def choose_executor(runtime: ModelRuntime) -> Executor:
    """The executor of a loaded model, from what its runs need."""
    if runtime.bound:  # GPU workers by default, CPU workers asked by `io_binding`
        return BoundExecutor(runtime)
    if runtime.weights is not None:
        return UpdatableExecutor(runtime)
    direct = runtime.direct_run()
    if direct is not None:
        return MergedExecutor(runtime, direct) if runtime.merge else PlainExecutor(runtime, direct)
    return GeneralExecutor(runtime)
