"""How a worker turns the requests of one `execute` into results: chosen once, when the model loads.

Which executor runs follows from the model and the worker alone (provider, updatable weights, merging,
BOOL and string tensors), never from the requests, so `execute` has one path: read the inputs, call the
executor, answer each request from its result.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .batching import Feeds, Result
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


Executor = GeneralExecutor | PlainExecutor


def choose_executor(runtime: ModelRuntime) -> Executor:
    """The executor of a loaded model, from what its runs need."""
    # The GPU executor (a request cut into the configured buckets, each replayed as a captured CUDA graph)
    # is chosen here, first, once it exists; until then bucketed and per-bucket runs go through the
    # general executor (`ModelRuntime.run`).
    if runtime.weights is not None:
        return UpdatableExecutor(runtime)
    direct = runtime.direct_run()
    if direct is not None:
        return PlainExecutor(runtime, direct)
    return GeneralExecutor(runtime)
