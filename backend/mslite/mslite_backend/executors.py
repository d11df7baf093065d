"""How a worker turns the requests of one `execute` into results: chosen once, when the model loads.

Which executor runs follows from the model and the worker alone (provider, updatable weights, merging,
BOOL and string tensors), never from the requests, so `execute` has one path: read the inputs, call the
executor, answer each request from its result.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .batching import Feeds, Result
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


Executor = GeneralExecutor | PlainExecutor | BoundExecutor


def choose_executor(runtime: ModelRuntime) -> Executor:
    """The executor of a loaded model, from what its runs need."""
    if runtime.bound:  # GPU workers by default, CPU workers asked by `io_binding`
        return BoundExecutor(runtime)
    if runtime.weights is not None:
        return UpdatableExecutor(runtime)
    direct = runtime.direct_run()
    if direct is not None:
        return PlainExecutor(runtime, direct)
    return GeneralExecutor(runtime)
