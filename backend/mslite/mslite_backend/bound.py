"""Bound buckets: each bucket runs on input and output buffers allocated once, at load (ONNX Runtime IOBinding).

A plain run allocates its outputs on every call, and a merged, padded batch costs two copies before it
(`np.concatenate`, then padding with `np.zeros`). A bound bucket owns one host buffer per input of exactly
its batch size: the executor writes each request's rows straight into it, zeroes only the rows a previous
run left behind, runs, and reads each output once. On a GPU the inputs and outputs live on the device at
fixed addresses, which is what a CUDA graph needs: the session captures its launches once and replays them
(`enable_cuda_graph`), so a launch-bound model's execute gets shorter, not only its copies.

At load every bucket runs a fixed, non-zero random input through its bound path (several times: the CUDA
provider captures on a later run than the first) and through a plain session; a bucket whose outputs
differ in any bit serves plain runs instead. Models the bound path cannot run (`obstacle`) keep the
ordinary path, and the load log says why, once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from .batching import same_bits
from .errors import BackendError

Feeds = dict[str, np.ndarray]
Outputs = dict[str, np.ndarray]
Layout = dict[str, tuple[np.dtype, tuple[int, ...]]]  # tensor name -> (dtype, dims without the batch)

# Operators whose subgraphs run a data-dependent number of times or take a data-dependent branch: a CUDA
# graph records one path, so such a model is not bound (and the same rule on CPU keeps the paths alike).
CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})
# bound runs compared with the plain run at load: ONNX Runtime's CUDA provider runs a few times plainly before it
# captures, so the last runs are replays of the captured graph
CHECK_RUNS = 5
CHECK_SEED = 20261127


class Bucket(Protocol):
    """One batch size: host input buffers the executor fills, and a run that reads them."""

    size: int
    inputs: Feeds
    dirty: int  # rows of `inputs` the last run filled: the padding rows past the next fill are zeroed

    def run(self) -> Outputs:
        """Run the rows in `inputs`; the outputs belong to the caller (no later run overwrites them)."""
        ...


class BoundBucket:
    """A bucket on pre-allocated, bound buffers: in host memory on CPU, on the device for CUDA."""

    def __init__(
        self,
        session: Any,
        size: int,
        inputs: Layout,
        outputs: Layout,
        device: str,
        device_id: int,
        graph_id: int | None = None,
    ) -> None:
        """Allocate and bind every buffer once.

        Args:
            session: the `OrtSession` this bucket runs on (shared by the buckets of a CPU worker).
            size: the bucket's batch size.
            inputs: every input's dtype and dims (without the batch); all fixed.
            outputs: every output's dtype and dims (without the batch); all fixed.
            device: "cpu" or "cuda".
            device_id: the device of a CUDA worker.
            graph_id: the CUDA graph id of this bucket when several buckets share one session (run option
                `gpu_graph_id`: each captures and replays its own graph); None: the session's one graph.
        """
        import onnxruntime as ort

        self.size = size
        self.inputs = {name: np.zeros((size, *dims), dtype=dtype) for name, (dtype, dims) in inputs.items()}
        self.dirty = 0
        self._on_host = device == "cpu"
        self._run = session.run_bound
        self._options = None
        if graph_id is not None:
            self._options = ort.RunOptions()
            self._options.add_run_config_entry("gpu_graph_id", str(graph_id))
        self._binding = session.io_binding()
        self._device_inputs: dict[str, Any] = {}
        for name, host in self.inputs.items():
            if self._on_host:  # the OrtValue wraps the host buffer itself: no copy at all
                value = ort.OrtValue.ortvalue_from_numpy(host)
            else:
                value = ort.OrtValue.ortvalue_from_shape_and_type(host.shape, host.dtype, device, device_id)
                self._device_inputs[name] = value
            self._binding.bind_ortvalue_input(name, value)
        self._host_outputs: Outputs = {}
        self._device_outputs: dict[str, Any] = {}
        for name, (dtype, dims) in outputs.items():
            if self._on_host:
                host = np.zeros((size, *dims), dtype=dtype)
                self._host_outputs[name] = host
                value = ort.OrtValue.ortvalue_from_numpy(host)
            else:
                value = ort.OrtValue.ortvalue_from_shape_and_type((size, *dims), dtype, device, device_id)
                self._device_outputs[name] = value
            self._binding.bind_ortvalue_output(name, value)

    def run(self) -> Outputs:
        """Copy the inputs to the device (CUDA), run or replay, and read every output once."""
        for name, value in self._device_inputs.items():
            value.update_inplace(self.inputs[name])
        self._run(self._binding, self._options)
        if self._on_host:  # the next run writes the same buffers: the caller gets its own copy
            return {name: host.copy() for name, host in self._host_outputs.items()}
        return {name: value.numpy() for name, value in self._device_outputs.items()}


class PlainBucket:
    """A bucket that failed the load-time check: the same host buffers, run by a plain session run."""

    def __init__(self, session: Any, size: int, inputs: Layout, output_names: list[str]) -> None:
        self.size = size
        self.inputs = {name: np.zeros((size, *dims), dtype=dtype) for name, (dtype, dims) in inputs.items()}
        self.dirty = 0
        self._session = session
        self._names = output_names

    def run(self) -> Outputs:
        """One plain run on the buffers (fresh outputs)."""
        return dict(zip(self._names, self._session.run(self._names, self.inputs)))


def obstacle(
    *,
    batched: bool,
    inputs: Layout,
    outputs: Layout,
    op_types: set[str],
    updatable: bool,
    strings: bool,
    resized: bool,
) -> str | None:
    """Why a model cannot run on bound buckets, or None when it can."""
    if not batched:
        return "the model has no batch dimension (max_batch_size 0)"
    if updatable:
        return "the model has updatable weights, fed with every run"
    if strings:
        return "the model has string tensors"
    if resized:
        return "the model's inputs were resized"
    for kind, layout in (("input", inputs), ("output", outputs)):
        for name, (_, dims) in layout.items():
            if any(d < 0 for d in dims):
                return f"{kind} '{name}' has dynamic dims {list(dims)} (dynamic shapes inside the graph)"
    flow = sorted(op_types & CONTROL_FLOW_OPS)
    if flow:
        return f"the graph has control flow ({', '.join(flow)})"
    return None


def graph_op_types(path: str) -> set[str]:
    """The operator types of an ONNX file's main graph (control flow can only start there)."""
    import onnx

    return {node.op_type for node in onnx.load(path, load_external_data=False).graph.node}


def check_input(layout: Layout, size: int) -> Feeds:
    """The fixed, non-zero random input of the load-time check for a bucket of `size` rows."""
    rng = np.random.default_rng(CHECK_SEED)
    feeds: Feeds = {}
    for name, (dtype, dims) in layout.items():
        shape = (size, *dims)
        if dtype == np.bool_:
            feeds[name] = np.ones(shape, dtype=dtype)
        elif np.issubdtype(dtype, np.floating):
            values = rng.uniform(0.1, 1.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
            feeds[name] = values.astype(dtype)
        else:
            feeds[name] = rng.integers(1, 3, size=shape).astype(dtype)
    return feeds


def differs(bound: Bucket, plain: Callable[[Feeds], Outputs], feeds: Feeds) -> str | None:
    """Run `feeds` through `bound` CHECK_RUNS times and through `plain` once; the first difference, or None.

    Leaves `bound`'s input buffers zeroed, as a fresh bucket's.
    """
    want = plain({name: a.copy() for name, a in feeds.items()})
    try:
        for run in range(CHECK_RUNS):
            for name, buf in bound.inputs.items():
                buf[...] = feeds[name]
            got = bound.run()
            for name, expected in want.items():
                if not same_bits(got[name], expected):
                    return f"output '{name}' differs from a plain run in run {run + 1}"
    except BackendError as e:
        return f"the bound run failed: {e}"
    finally:
        for buf in bound.inputs.values():
            buf[...] = 0
        bound.dirty = 0
    return None


def run_rows(buckets: Mapping[int, Bucket], requests: list[Feeds]) -> list[Outputs]:
    """Run the rows of `requests` (axis 0), back to back, through the buckets; each request's outputs.

    Rows are written straight into a bucket's buffers: the smallest bucket that holds the rows left, else
    the largest (a request may then span two runs). Padding rows are zeros, as `buckets.run_in_buckets` pads.

    Raises:
        BackendError: a run failed (the caller retries the requests one at a time).
    """
    sizes = sorted(buckets)
    counts = [len(next(iter(feeds.values()))) for feeds in requests]
    total = sum(counts)
    pieces: list[list[Outputs]] = [[] for _ in requests]
    req, offset, done = 0, 0, 0
    while done < total:
        left = total - done
        bucket = buckets[next((b for b in sizes if b >= left), sizes[-1])]
        spans: list[tuple[int, int, int]] = []  # (request, first row in the bucket, rows)
        filled = 0
        while filled < bucket.size and req < len(requests):
            n = min(counts[req] - offset, bucket.size - filled)
            for name, buf in bucket.inputs.items():
                buf[filled : filled + n] = requests[req][name][offset : offset + n]
            spans.append((req, filled, n))
            filled += n
            offset += n
            if offset == counts[req]:
                req, offset = req + 1, 0
        _zero_padding(bucket, filled)
        out = bucket.run()
        for r, start, n in spans:
            pieces[r].append({name: a[start : start + n] for name, a in out.items()})
        done += filled
    return [p[0] if len(p) == 1 else {k: np.concatenate([x[k] for x in p]) for k in p[0]} for p in pieces]


def _zero_padding(bucket: Bucket, filled: int) -> None:
    """Zero the rows past `filled` that an earlier run wrote (the rest are zero already)."""
    if bucket.dirty > filled:
        for buf in bucket.inputs.values():
            buf[filled : bucket.dirty] = 0
    bucket.dirty = filled
