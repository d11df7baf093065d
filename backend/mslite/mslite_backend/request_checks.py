"""What a request must be to run: its inputs' names, dtypes, ranks, fixed dims, batch size and BOOL values.

The layouts come from the model config, with the graph's fixed sizes filled in, once at load. A request's
layout that passed is remembered, so a worker checks each distinct layout once and afterwards only a set
lookup (and BOOL contents, which no layout says anything of) runs per request.
"""

from __future__ import annotations

import numpy as np

from mslite_contract.dtypes import TRITON_TO_NUMPY, wire_name

from .batching import Feeds
from .bound import Layout
from .config import BackendConfig, TensorSpec
from .errors import ModelLoadError, RequestError
from .graph import GraphIO

ACCEPTED_CACHE_SIZE = 1024  # distinct input layouts remembered as valid (variable lengths make many)


class RequestChecks:
    """Validates requests against the config's inputs (`expected`: `input_layout`)."""

    def __init__(self, cfg: BackendConfig, expected: Layout) -> None:
        self.cfg = cfg
        self.expected = expected
        self._required = {s.name for s in cfg.inputs if not s.optional}
        self.bool_inputs = {name for name, (dtype, _) in expected.items() if dtype == np.bool_}
        # (name, dtype, shape) of every input of requests that passed: the checks depend on nothing else,
        # except BOOL contents, which are checked on every request
        self._accepted: set[tuple] = set()

    def validate(self, feeds: Feeds) -> None:
        """Check one request's inputs: names, dtypes, ranks, fixed dims, batch size, BOOL values.

        Raises:
            RequestError: naming the tensor, what was expected and what arrived.
        """
        if len(feeds) == 1:  # most models: no comprehension (a function call of its own) per request
            ((name, arr),) = feeds.items()
            key: tuple = ((name, arr.dtype, arr.shape),)
        else:
            key = tuple([(name, arr.dtype, arr.shape) for name, arr in feeds.items()])  # what the layout checks read
        if key not in self._accepted:
            self._check_layout(feeds)
            if len(self._accepted) >= ACCEPTED_CACHE_SIZE:
                self._accepted.clear()
            self._accepted.add(key)
        if not self.bool_inputs:
            return
        for name in self.bool_inputs & feeds.keys():
            arr = feeds[name]
            if arr.size and arr.view(np.uint8).max() > 1:
                raise RequestError(
                    f"model '{self.cfg.model_name}', input '{name}': BOOL values must be 0 or 1 "
                    "(bytes other than 0/1 found)"
                )

    def _check_layout(self, feeds: Feeds) -> None:
        """Everything `validate` checks that follows from the names, dtypes and shapes alone."""
        where = f"model '{self.cfg.model_name}'"
        missing = sorted(self._required - feeds.keys())
        if missing:
            raise RequestError(f"{where}: missing input(s) {missing}; expected {sorted(self.expected)}")
        unknown = sorted(feeds.keys() - self.expected.keys())
        if unknown:
            raise RequestError(f"{where}: unexpected input(s) {unknown}; expected {sorted(self.expected)}")
        size = sum(a.nbytes for a in feeds.values())
        if size > self.cfg.max_request_bytes:
            raise RequestError(
                f"{where}: request of {size} bytes exceeds max_request_bytes {self.cfg.max_request_bytes}"
            )
        batch = None
        for name, arr in feeds.items():
            dtype, dims = self.expected[name]
            if arr.dtype != dtype:
                raise RequestError(
                    f"{where}, input '{name}': data type expected {wire_name(dtype)}, got {wire_name(arr.dtype)}"
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


def input_layout(cfg: BackendConfig, io: GraphIO) -> Layout:
    """Each config input's dtype and dims (without the batch), the graph's fixed sizes filled in."""
    graph_dims = {t.name: t.dims for t in io.inputs}
    return {s.name: (_numpy_dtype(cfg, s), _merged_dims(cfg, s, graph_dims[s.name])) for s in cfg.inputs}


def output_layout(io: GraphIO) -> Layout:
    """Each graph output's dtype and dims without the batch (-1: dynamic; object: not a numeric type)."""
    return {t.name: (TRITON_TO_NUMPY.get(t.data_type, np.dtype(object)), t.dims[1:]) for t in io.outputs}


def _numpy_dtype(cfg: BackendConfig, spec: TensorSpec) -> np.dtype:
    if spec.data_type not in TRITON_TO_NUMPY:
        raise ModelLoadError(f"model '{cfg.model_name}', input '{spec.name}': data type {spec.data_type} is not served")
    return TRITON_TO_NUMPY[spec.data_type]


def _merged_dims(cfg: BackendConfig, spec: TensorSpec, graph_dims: tuple[int, ...]) -> tuple[int, ...]:
    """Config dims, with any -1 the graph pins to a fixed size replaced by that size."""
    gd = graph_dims[1:] if cfg.batched else graph_dims
    return tuple(c if c >= 0 else g for c, g in zip(spec.dims, gd))
