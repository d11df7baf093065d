"""A loaded model in one worker: request validation, batching and warm-up around an ORT session."""

from __future__ import annotations

import os

import numpy as np

from .affinity import cores_for_worker, pin_process
from .batching import Feeds, Result, run_batched
from .config import BackendConfig, InstanceInfo, TensorSpec
from .dtypes import TRITON_TO_NUMPY, short_name
from .errors import ModelLoadError, RequestError
from .graph import GraphIO, check_config_against_graph, read_graph_io
from .session import OrtSession


class ModelRuntime:
    """Validates requests against the config and runs them on the worker's session."""

    def __init__(self, cfg: BackendConfig, session: OrtSession, io: GraphIO) -> None:
        self.cfg = cfg
        self.session = session
        self.output_names = [t.name for t in io.outputs]
        graph_dims = {t.name: t.dims for t in io.inputs}
        self._expected = {s.name: (_numpy_dtype(cfg, s), _merged_dims(cfg, s, graph_dims[s.name])) for s in cfg.inputs}
        self._required = {s.name for s in cfg.inputs if not s.optional}

    @classmethod
    def load(cls, version_dir: str, cfg: BackendConfig, instance: InstanceInfo) -> ModelRuntime:
        """Load `<version_dir>/<model_filename>`, check it against the config, and warm it up.

        Raises:
            ModelLoadError: missing or corrupt file, or config/graph mismatch, or provider missing.
        """
        path = os.path.join(version_dir, cfg.model_filename)
        io = read_graph_io(path)
        check_config_against_graph(cfg, io)
        cores = cores_for_worker(cfg, instance.index, sorted(os.sched_getaffinity(0)))
        if cores is not None:  # before the session exists, so ORT's threads start inside the slice
            pin_process(cores)
        runtime = cls(cfg, OrtSession(path, cfg, instance), io)
        if cfg.warmup:
            runtime.warm_up()
        return runtime

    def warm_up(self) -> None:
        """Run one batch-1 request of zeros so the first user request does not pay for lazy init."""
        feeds = {}
        for name, (dtype, dims) in self._expected.items():
            shape = ([1] if self.cfg.batched else []) + [d if d >= 0 else 1 for d in dims]
            feeds[name] = np.zeros(shape, dtype=dtype)
        self.run(feeds)

    def validate(self, feeds: Feeds) -> None:
        """Check one request's inputs: names, dtypes, ranks, fixed dims, batch size.

        Raises:
            RequestError: naming the tensor, what was expected and what arrived.
        """
        where = f"model '{self.cfg.model_name}'"
        missing = sorted(self._required - feeds.keys())
        if missing:
            raise RequestError(f"{where}: missing input(s) {missing}; expected {sorted(self._expected)}")
        unknown = sorted(feeds.keys() - self._expected.keys())
        if unknown:
            raise RequestError(f"{where}: unexpected input(s) {unknown}; expected {sorted(self._expected)}")
        batch = None
        for name, arr in feeds.items():
            dtype, dims = self._expected[name]
            if arr.dtype != dtype:
                raise RequestError(
                    f"{where}, input '{name}': data type expected {_triton_name(dtype)}, got {_triton_name(arr.dtype)}"
                )
            shape = arr.shape[1:] if self.cfg.batched else arr.shape
            want = ([-1] if self.cfg.batched else []) + list(dims)
            if len(shape) != len(dims) or any(d >= 0 and s != d for s, d in zip(shape, dims)):
                raise RequestError(f"{where}, input '{name}': shape expected {want}, got {list(arr.shape)}")
            if self.cfg.batched:
                if arr.ndim == 0 or arr.shape[0] < 1:
                    raise RequestError(f"{where}, input '{name}': batch size must be >= 1, got shape {list(arr.shape)}")
                if arr.shape[0] > self.cfg.max_batch_size:
                    raise RequestError(
                        f"{where}, input '{name}': batch size {arr.shape[0]} exceeds max_batch_size "
                        f"{self.cfg.max_batch_size}"
                    )
                if batch is not None and arr.shape[0] != batch:
                    raise RequestError(f"{where}: inputs disagree on the batch size ({batch} vs {arr.shape[0]})")
                batch = arr.shape[0]

    def run(self, feeds: Feeds) -> dict[str, np.ndarray]:
        """Run one set of inputs; returns every graph output by name."""
        outputs = self.session.run(self.output_names, feeds)
        return dict(zip(self.output_names, outputs))

    def execute(self, requests: list[Feeds]) -> list[Result]:
        """Validate and run a batch of requests; one result (outputs or error) per request, in order."""
        results: list[Result | None] = [None] * len(requests)
        valid: list[int] = []
        for i, feeds in enumerate(requests):
            try:
                self.validate(feeds)
                valid.append(i)
            except RequestError as e:
                results[i] = e
        ran = run_batched([requests[i] for i in valid], self.run, batched=self.cfg.batched)
        for i, r in zip(valid, ran):
            results[i] = r
        return [r for r in results if r is not None]


def _numpy_dtype(cfg: BackendConfig, spec: TensorSpec) -> np.dtype:
    if spec.data_type not in TRITON_TO_NUMPY:
        raise ModelLoadError(f"model '{cfg.model_name}', input '{spec.name}': data type {spec.data_type} is not served")
    return TRITON_TO_NUMPY[spec.data_type]


def _merged_dims(cfg: BackendConfig, spec: TensorSpec, graph_dims: tuple[int, ...]) -> tuple[int, ...]:
    """Config dims, with any -1 the graph pins to a fixed size replaced by that size."""
    gd = graph_dims[1:] if cfg.batched else graph_dims
    return tuple(c if c >= 0 else g for c, g in zip(spec.dims, gd))


def _triton_name(dtype: np.dtype) -> str:
    for triton_t, np_t in TRITON_TO_NUMPY.items():
        if np_t == dtype:
            return short_name(triton_t)
    return str(dtype)
