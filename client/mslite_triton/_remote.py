"""A model living on the server: upload or bind, metadata, and one predict call. Model and runner wrap it.

Its weights updates are `_weights.py`'s.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from mslite_contract.mindir import MINDIR_FILENAME, MS_FILE_MESSAGE, detect_format
from mslite_contract.protocol import (
    BATCHING_SECTION,
    DEFAULT_MAX_BATCH_SIZE,
    MAX_BATCH_SIZE_KEY,
    WEIGHTS_INPUT,
)

from ._endpoint import transport_for
from ._model_config import WorkerPlan, build_model_config
from ._onnx_io import has_dynamic_batch, input_layouts, is_light_model
from ._transport import ModelInfo, TensorInfo, Transport
from .context import Context
from .errors import ModelLoadError, MSLiteError, NotFoundError
from .tensor import Format, Tensor, TensorMeta, from_triton_dtype, to_numpy_dtype

BIND_PREFIX = "triton://"
log = logging.getLogger(__name__)


def read_model_files(path: str) -> dict[str, bytes]:
    """The files to upload, by the file's content (not its name).

    An ONNX model goes as `1/model.onnx`, plus `1/model.onnx.data` when external weights sit beside it;
    a MindIR model as `1/model.mindir`, which the server converts to ONNX (it needs MindSpore for that:
    the `[mindir]` extra on the server).

    Raises:
        RuntimeError: a MindSpore Lite `.ms` file, or not a model file, naming what it looks like.
    """
    with open(path, "rb") as f:
        data = f.read()
    kind = detect_format(data[:16])
    name = os.path.basename(path)
    if kind == "mindir":
        return {f"file:1/{MINDIR_FILENAME}": data}
    if kind == "ms":
        raise RuntimeError(f"build_from_file failed! Error is {MS_FILE_MESSAGE} ('{name}')")
    if kind != "onnx":
        raise RuntimeError(
            f"build_from_file failed! Error is kLiteNotSupport: '{name}' is neither an ONNX nor a MindIR model"
        )
    files = {"file:1/model.onnx": data}
    external = path + ".data"
    if os.path.isfile(external):
        with open(external, "rb") as f:
            files[f"file:1/{name}.data"] = f.read()
    return files


def model_name(path: str, files: dict[str, bytes], config: dict[str, Any]) -> str:
    """`<stem>_<hash>`: the same file and config map to the same server model (and reuse it)."""
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode())
    for key in sorted(files):
        digest.update(key.encode())
        digest.update(files[key])
    stem = re.sub(r"[^A-Za-z0-9_]", "_", os.path.splitext(os.path.basename(path))[0])[:40] or "model"
    return f"{stem}_{digest.hexdigest()[:12]}"


@dataclass
class RemoteModel:
    """A model loaded on the server, and the pooled transport that reaches it."""

    transport: Transport
    info: ModelInfo
    weights_input: TensorInfo | None = None  # present when the model has updatable weights
    # the model as its user knows it: the file name without directory, or NAME of triton://NAME
    display_name: str = ""
    # input name -> "NHWC" / "NCHW" where the ONNX graph tells (`_onnx_io.input_layouts`); others read NCHW
    layouts: dict[str, str] = field(default_factory=dict)
    # builds the same model again with inputs resized to shapes the file fixes (None: bound with triton://)
    rebuild: Callable[[dict[str, list[int]]], RemoteModel] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        """Refuse string tensors; hide the weights-update input: it is not one of the model's inputs.

        Raises:
            RuntimeError: the model has a string (BYTES) input or output.
        """
        for kind, tensors in (("input", self.info.inputs), ("output", self.info.outputs)):
            for t in tensors:
                if t.datatype == "BYTES":  # MindSpore Lite's DataType has no string type to give it
                    raise RuntimeError(
                        f"model '{self.info.name}': {kind} '{t.name}' is a string (BYTES) tensor, and a MindSpore "
                        "Lite Tensor holds numbers only; call this model with Triton's own clients (tritonclient)"
                    )
        found = next((t for t in self.info.inputs if t.name == WEIGHTS_INPUT), None)
        if found is not None:
            self.weights_input = found
            self.info = replace(self.info, inputs=tuple(t for t in self.info.inputs if t.name != WEIGHTS_INPUT))

    @classmethod
    def build(
        cls,
        path: str,
        context: Context,
        plan: WorkerPlan,
        sections: dict[str, dict[str, str]],
        resized: dict[str, list[int]] | None = None,
    ) -> RemoteModel:
        """Upload (or reuse) a model built from `path`, or bind to `triton://<name>`.

        `resized` (input name -> full shape) builds it with those inputs resized (`build_model_config`):
        another server model, under its own name, so the one built before keeps serving.

        Raises:
            RuntimeError subclasses: server unreachable, load failure, unsupported file.
        """
        transport = transport_for(context.server_url)
        if path.startswith(BIND_PREFIX):
            bound = path[len(BIND_PREFIX) :]
            try:
                info = transport.model_info(bound)
            except NotFoundError:
                reason = transport.load_failure(bound)
                if not reason:
                    raise
                raise ModelLoadError(f"model '{bound}' failed to load on the server: {reason}") from None
            return cls(transport, info, display_name=bound)
        files = read_model_files(path)
        try:
            # a MindIR model's graph is read on the server, after conversion: its auto-complete decides
            onnx_bytes = files.get("file:1/model.onnx")
            batchable = onnx_bytes is not None and has_dynamic_batch(onnx_bytes)
            light = onnx_bytes is not None and is_light_model(onnx_bytes, batched=batchable)
            config = build_model_config(
                "", context, plan, sections=sections, batchable=batchable, light=light, resized=resized
            )
        except ValueError as e:  # a bad config section: MindSpore Lite reports build errors as RuntimeError
            raise RuntimeError(f"build_from_file failed! Error is {e}") from e
        name = model_name(path, files, config)
        if not transport.is_model_ready(name):
            transport.load_model(name, {**config, "name": name}, files)
            log.info("model '%s' loaded at %s: %d worker(s) x %d thread(s)", name, transport.url, plan.workers,
                     plan.thread_num)  # fmt: skip
        else:
            log.info("model '%s' already loaded at %s: reused", name, transport.url)
        return cls(
            transport,
            transport.model_info(name),
            display_name=os.path.basename(path),
            layouts=input_layouts(onnx_bytes) if onnx_bytes is not None else {},
            rebuild=lambda shapes: cls.build(path, context, plan, sections, shapes),
        )

    @property
    def batched(self) -> bool:
        """True when the model's first dimension is the batch dimension."""
        return self.info.max_batch_size > 0

    def input_tensors(self) -> list[Tensor]:
        """Fresh input tensors: name, dtype and shape, with a dynamic batch dimension shown as 1."""
        return [_template(t, self.batched, self.layouts.get(t.name)) for t in self.info.inputs]

    def output_metas(self) -> tuple[TensorMeta, ...]:
        """The outputs as TensorMeta, batch dimension shown as 1."""
        metas = []
        for t in self.info.outputs:
            meta = TensorMeta()
            meta.name = t.name
            meta.dtype = from_triton_dtype(t.datatype)
            meta.shape = present_shape(t, self.batched)
            meta.element_num = int(np.prod(meta.shape)) if all(d >= 0 for d in meta.shape) else 0
            meta.data_size = meta.element_num * np.dtype(to_numpy_dtype(meta.dtype)).itemsize
            metas.append(meta)
        return tuple(metas)

    @property
    def shareable_handle(self) -> str:
        """A stable, non-zero integer naming this server model (MindSpore Lite's shared-weights handle)."""
        return str(int(hashlib.sha256(self.info.name.encode()).hexdigest()[:15], 16) | 1)

    def predict(self, arrays: list[np.ndarray]) -> list[Tensor]:
        """Run one predict (arrays in model input order); outputs in model output order.

        A model with a fixed leading batch b and no Triton batch dimension (as MindSpore Lite's multi-card
        sample converts one) takes k x b samples as k requests sent at once, which the server's
        workers run in parallel; the outputs are concatenated in order.
        """
        names = [t.name for t in self.info.outputs]
        k = self.slices(arrays)
        if k == 1:
            result = self._infer(arrays)
        else:
            parts = [np.split(a, k, axis=0) for a in arrays]
            futures = [_split_pool().submit(self._infer, [p[i] for p in parts]) for i in range(1, k)]
            first = self._infer([p[0] for p in parts])  # the calling thread runs one slice itself
            results = [first, *(f.result() for f in futures)]
            result = {n: np.concatenate([r[n] for r in results], axis=0) for n in names}
        return [Tensor._from_numpy(n, result[n]) for n in names]

    def fixed_dims_changed(self, shapes: list[tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
        """Inputs given a shape of their rank that differs in a dim the model fixes: name -> those dims."""
        changed = {}
        for t, shape in zip(self.info.inputs, shapes):
            if len(shape) == len(t.shape):
                dims = tuple(i for i, (d, s) in enumerate(zip(t.shape, shape)) if d >= 0 and d != s)
                if dims:
                    changed[t.name] = dims
        return changed

    def slices(self, arrays: list[np.ndarray]) -> int:
        """How many model-sized slices `arrays` hold along axis 0 (1: send as one request).

        Only for models without a Triton batch dimension whose inputs and outputs all start with the
        same fixed size b, and only when every input holds k x b rows of otherwise matching shape.
        """
        tensors = self.info.inputs + self.info.outputs
        if self.batched or not tensors or any(not t.shape for t in tensors):
            return 1
        lead = {t.shape[0] for t in tensors}
        if len(lead) != 1 or min(lead) <= 0:
            return 1
        b = lead.pop()
        counts = set()
        for t, a in zip(self.info.inputs, arrays):
            if (
                a.ndim != len(t.shape)
                or a.shape[0] % b
                or any(d >= 0 and d != s for d, s in zip(t.shape[1:], a.shape[1:]))
            ):
                return 1
            counts.add(a.shape[0] // b)
        return counts.pop() if len(counts) == 1 else 1

    def _infer(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        names = [t.name for t in self.info.outputs]
        try:
            return self.transport.infer(self.info.name, list(zip((t.name for t in self.info.inputs), arrays)), names)
        except MSLiteError as e:
            e.args = (users_words(str(e), self.info.name, self.display_name),)  # same class, same attributes
            raise


_BATCH_LIMIT = re.compile(r"batch-size must be <= (\d+)( for '[^']*')?")


def users_words(message: str, server_name: str, display_name: str) -> str:
    """A server message about one model as its user can follow it.

    The server's name of the model (`<file stem>_<hash>`) becomes the user's (the file name, or the
    triton:// name), and a batch limit says where it comes from and how to raise it.
    """
    if display_name:
        message = message.replace(f"'{server_name}'", f"'{display_name}'")
    return _BATCH_LIMIT.sub(
        lambda m: (
            f"{m.group(0)}: the model's max_batch_size ({DEFAULT_MAX_BATCH_SIZE} unless its config says otherwise)"
            f"; send fewer rows per predict, or raise it with [{BATCHING_SECTION}] {MAX_BATCH_SIZE_KEY}=N in the "
            "build's config (config_path, config_dict, or context.parallel.config_info)"
        ),
        message,
        count=1,
    )


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _split_pool() -> ThreadPoolExecutor:
    """Threads that send the extra slices of split predicts (shared by every model of the process)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="mslite-split")
        return _pool


def present_shape(t: TensorInfo, batched: bool) -> list[int]:
    """The tensor's shape as the user sees it: a dynamic batch dimension shown as 1."""
    shape = list(t.shape)
    if batched and shape and shape[0] == -1:
        shape[0] = 1
    return shape


def _template(t: TensorInfo, batched: bool, layout: str | None = None) -> Tensor:
    tensor = Tensor(shape=present_shape(t, batched), dtype=from_triton_dtype(t.datatype))
    tensor.name = t.name
    if layout == "NHWC":  # else MindSpore Lite's default for a new tensor, NCHW
        tensor.format = Format.NHWC
    return tensor
