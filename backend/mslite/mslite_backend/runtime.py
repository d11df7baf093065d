"""A loaded model in one worker: each `execute`'s requests validated and run on its ORT session(s).

Loading it (sessions, weights store, bound buckets, warm-up) is `loading.load_runtime`; what a request must be
is `request_checks`. What stays here runs on every request: the runs, with buckets, strings and merging.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .batching import Feeds, Result, run_batched
from .bound import Bucket
from .buckets import run_in_buckets
from .config import BackendConfig
from .errors import BackendError, RequestError
from .graph import GraphIO
from .ort_c_strings import CStringSession
from .request_checks import RequestChecks, input_layout
from .session import OrtSession
from .strings import from_ort, to_ort
from .weight_store import WeightStore


class ModelRuntime:
    """Runs the requests of each `execute`, checked by `checks`, on the worker's session(s)."""

    def __init__(
        self,
        cfg: BackendConfig,
        session: OrtSession,
        io: GraphIO,
        weights: WeightStore | None = None,
        *,
        shared: bool = False,
        notes: tuple[str, ...] = (),
        buckets: tuple[int, ...] = (),
        merge: bool = False,
        bucket_sessions: dict[int, OrtSession] | None = None,
        string_session: CStringSession | None = None,
    ) -> None:
        self.cfg = cfg
        self.buckets = buckets  # fixed batch sizes the session runs at (GPU: one shape per bucket), or none
        self._bucketed = bool(buckets) and cfg.batched  # read on every run: decided once
        # GPU: one session per bucket, each only ever sees its own batch size (buckets.session_per_bucket)
        self.bucket_sessions = bucket_sessions or {}
        self._one_session = not self._bucketed and not self.bucket_sessions  # every run on `session` as it is
        self.merge = merge  # concatenate the requests of one execute into one run (BackendConfig.merges_for)
        self.session = session
        self.weights = weights  # the updatable weights' shared store, when the model has any
        self.shared = shared  # True when the constant weights are one file-backed copy for all workers
        self.notes = notes  # for the log: why weights are not shared, fallbacks taken
        self.output_names = [t.name for t in io.outputs]
        self.checks = RequestChecks(cfg, input_layout(cfg, io))
        self.validate = self.checks.validate  # bound once: it runs on every request
        # the bucket size -> bucket of a model on bound buffers (`loading.bind_buckets`); empty: the ordinary paths
        self.bound: dict[int, Bucket] = {}
        # BYTES tensors: converted for ONNX Runtime on every run (`strings`); models without any skip it
        self.string_inputs = {name for name, (dtype, _) in self.checks.expected.items() if dtype == np.object_}
        self._string_outputs = {t.name for t in io.outputs if t.data_type == "TYPE_STRING"}
        self._strings = bool(self.string_inputs or self._string_outputs)
        # a string model's runs through ORT's C API, strings as raw bytes (`ort_c_strings`); None: the Python API
        self.string_session = string_session

    def direct_run(self) -> Callable[..., list[np.ndarray]] | None:
        """ORT's own run, when a request that passed `validate` needs nothing else to run (`PlainExecutor`).

        `run(self.output_names, feeds, None)`, whose exceptions go through `session.failure`. None when a run
        needs more: updatable weights, buckets or a session per bucket, BOOL inputs (checked on every
        request), strings (converted on every run), or a provider other than the CPU's. Merged runs
        (`MergedExecutor`) call it too.
        """
        direct = self.session.direct
        if direct is None or not self._one_session or self.weights is not None:
            return None
        if self.checks.bool_inputs or self._strings:
            return None
        return direct

    def run(self, feeds: Feeds, weights: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Run one set of inputs (with the updatable weights' values, if any); returns every graph output by name.

        With buckets, the batch is padded to a bucket size (or cut into chunks of the largest) and the
        padding rows are dropped from the outputs; with a session per bucket, each chunk runs on its own.
        """
        if self._bucketed:
            return run_in_buckets(feeds, self.buckets, lambda chunk: self._run_once(chunk, weights))
        return self._run_once(feeds, weights)

    def _run_once(self, feeds: Feeds, weights: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
        session = self.session
        if self.bucket_sessions:
            session = self.bucket_sessions.get(next(iter(feeds.values())).shape[0], session)
        if self._strings:
            return self._run_strings(session, feeds, weights)
        outputs = session.run(self.output_names, {**feeds, **weights} if weights else feeds)
        return dict(zip(self.output_names, outputs))

    def _run_strings(
        self, session: OrtSession, feeds: Feeds, weights: dict[str, np.ndarray] | None
    ) -> dict[str, np.ndarray]:
        """`_run_once` for a model with string tensors: bytes as they are through the C API, or else as UTF-8 `str`."""
        if self.string_session is not None:
            outputs = self.string_session.run(self.output_names, {**feeds, **weights} if weights else feeds)
            return dict(zip(self.output_names, outputs))
        where = f"model '{self.cfg.model_name}'"
        feeds = {name: to_ort(where, name, a) if name in self.string_inputs else a for name, a in feeds.items()}
        outputs = session.run(self.output_names, {**feeds, **weights} if weights else feeds)
        return {name: from_ort(a) if name in self._string_outputs else a for name, a in zip(self.output_names, outputs)}

    def execute(self, requests: list[Feeds]) -> list[Result]:
        """Validate and run a batch of requests; one result (outputs or error) per request, in order.

        The updatable weights are read once, so every request of the batch sees the same version.
        """
        weights = self.weights.snapshot().arrays if self.weights is not None else None
        if len(requests) == 1 or not self.merge:  # CPU: each request runs alone, so no grouping (once per request)
            out: list[Result] = []
            for feeds in requests:
                try:
                    self.validate(feeds)
                    out.append(self.run(feeds, weights))
                except BackendError as e:
                    out.append(e)
            return out
        results: list[Result | None] = [None] * len(requests)
        valid: list[int] = []
        for i, feeds in enumerate(requests):
            try:
                self.validate(feeds)
                valid.append(i)
            except RequestError as e:
                results[i] = e
        ran = run_batched([requests[i] for i in valid], lambda f: self.run(f, weights), merge=self.merge)
        for i, r in zip(valid, ran):
            results[i] = r
        return [r for r in results if r is not None]

    def update_weights(self, manifest: str, data: Any = None, *, file: str | None = None) -> int:
        """Publish new values of updatable weights to every worker of the model; returns the new version.

        Args:
            manifest: JSON list of the tensors (name, dtype, shape) of the update.
            data: their values back to back, or None with `file`.
            file: name of an update file a client on this host wrote (`WeightStore.adopt`).

        Raises:
            RequestError: the model has no updatable weights, or the update does not fit them (nothing changed).
            InferenceFailure: the new version could not be written (nothing changed).
        """
        if self.weights is None:
            raise RequestError(
                f"model '{self.cfg.model_name}' declares no updatable weights (variable_weights_list is empty)"
            )
        return self.weights.update(manifest, data) if file is None else self.weights.adopt(manifest, file)

    def close(self, *, failed_load: bool = False) -> None:
        """Leave the weights store (the last worker removes it; see `WeightStore.close`). Safe to call twice."""
        if self.string_session is not None:
            self.string_session.close()
        if self.weights is not None:
            self.weights.close(failed_load=failed_load)
