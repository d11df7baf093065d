"""A model living on the server: upload or bind, metadata, and one predict call. Model and runner wrap it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mslite_triton_backend.mslite_backend.mindir import MINDIR_FILENAME, MS_FILE_MESSAGE, detect_format
from mslite_triton_backend.mslite_backend.protocol import (
    FILE_PARAMETER,
    FILE_REFUSED,
    PROOF_PARAMETER,
    UPDATE_ALIGN,
    UPDATE_PARAMETER,
    UPLOAD_PREFIX,
    VARIABLE_WEIGHTS_KEYS,
    WEIGHTS_INPUT,
    sign_update,
)

from . import _endpoint
from ._model_config import WorkerPlan, build_model_config
from ._onnx_io import has_dynamic_batch
from ._transport import ModelInfo, TensorInfo, Transport
from .context import Context
from .errors import InvalidInputError, PermissionDeniedError
from .tensor import DataType, Tensor, TensorMeta, _contiguous, from_triton_dtype

BIND_PREFIX = "triton://"
# A client on the server's host writes a full update straight into /dev/shm in the store's version layout
# and the server links it in: one copy, not three (protocol.py: UPLOAD_PREFIX, UPDATE_ALIGN, FILE_REFUSED).
UPLOAD_DIR = "/dev/shm"
log = logging.getLogger(__name__)


def read_model_files(path: str) -> dict[str, bytes]:
    """The files to upload, by the file's content (not its name).

    An ONNX model goes as `1/model.onnx`, plus `1/model.onnx.data` when external weights sit beside it;
    a MindIR model as `1/model.mindir`, which the server converts to ONNX (it needs MindSpore for that:
    `pip install 'mslite-triton[mindir]'` on the server).

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

    def __post_init__(self) -> None:
        """Hide the weights-update input: it is not one of the model's inputs."""
        found = next((t for t in self.info.inputs if t.name == WEIGHTS_INPUT), None)
        if found is not None:
            self.weights_input = found
            self.info = replace(self.info, inputs=tuple(t for t in self.info.inputs if t.name != WEIGHTS_INPUT))

    @classmethod
    def build(cls, path: str, context: Context, plan: WorkerPlan, sections: dict[str, dict[str, str]]) -> RemoteModel:
        """Upload (or reuse) a model built from `path`, or bind to `triton://<name>`.

        Raises:
            RuntimeError subclasses: server unreachable, load failure, unsupported file.
        """
        transport = _endpoint.transport(context.server_url)
        if path.startswith(BIND_PREFIX):
            return cls(transport, transport.model_info(path[len(BIND_PREFIX) :]))
        files = read_model_files(path)
        try:
            # a MindIR model's graph is read on the server, after conversion: its auto-complete decides
            batchable = "file:1/model.onnx" in files and has_dynamic_batch(files["file:1/model.onnx"])
            config = build_model_config("", context, plan, sections=sections, batchable=batchable)
        except ValueError as e:  # a bad config section: MindSpore Lite reports build errors as RuntimeError
            raise RuntimeError(f"build_from_file failed! Error is {e}") from e
        name = model_name(path, files, config)
        if not transport.is_model_ready(name):
            transport.load_model(name, {**config, "name": name}, files)
            log.info("model '%s' loaded at %s: %d worker(s) x %d thread(s)", name, transport.url, plan.workers,
                     plan.thread_num)  # fmt: skip
        else:
            log.info("model '%s' already loaded at %s: reused", name, transport.url)
        return cls(transport, transport.model_info(name))

    @property
    def batched(self) -> bool:
        """True when the model's first dimension is the batch dimension."""
        return self.info.max_batch_size > 0

    def input_tensors(self) -> list[Tensor]:
        """Fresh input tensors: name, dtype and shape, with a dynamic batch dimension shown as 1."""
        return [_template(t, self.batched) for t in self.info.inputs]

    def output_metas(self) -> tuple[TensorMeta, ...]:
        """The outputs as TensorMeta, batch dimension shown as 1."""
        metas = []
        for t in self.info.outputs:
            meta = TensorMeta()
            meta.name = t.name
            meta.dtype = from_triton_dtype(t.datatype)
            meta.shape = _present_shape(t, self.batched)
            meta.element_num = int(np.prod(meta.shape)) if all(d >= 0 for d in meta.shape) else 0
            meta.data_size = meta.element_num * np.dtype(_numpy(meta.dtype)).itemsize
            metas.append(meta)
        return tuple(metas)

    @property
    def variable_weights(self) -> tuple[str, ...]:
        """The updatable weights the model declares, in their list order."""
        for key in VARIABLE_WEIGHTS_KEYS:
            value = self.info.parameters.get(key, "")
            if value.strip():
                return tuple(n.strip() for n in value.split(",") if n.strip())
        return ()

    @property
    def shareable_handle(self) -> str:
        """A stable, non-zero integer naming this server model (MindSpore Lite's shared-weights handle)."""
        return str(int(hashlib.sha256(self.info.name.encode()).hexdigest()[:15], 16) | 1)

    def update_weights(self, tensors: list[Tensor], aliases: dict[str, str]) -> None:
        """Send new values for updatable weights; every worker serves them from its next request on.

        Tensors are matched by name (`aliases` maps a name-list file's first column to the graph name),
        or, when a tensor has no name, by its position in the declared list. The server checks
        everything before it changes anything.

        Raises:
            InvalidInputError: a tensor is not an updatable weight, appears twice, or does not match its
                weight's dtype or shape (the server's message); nothing changed.
            RuntimeError: a tensor has no data, or the server failed (subclasses name the cause).
        """
        declared = self.variable_weights
        failed = f"update weight failed! Error is model '{self.info.name}'"
        if self.weights_input is None or not declared:
            raise InvalidInputError(
                f"{failed} declares no updatable weights; name them at build time with [ascend_context] "
                "variable_weights_file=FILE (or [weights] updatable_file=FILE)"
            )
        names = []
        for i, t in enumerate(tensors):
            if t.name:
                names.append(aliases.get(t.name, t.name))
            elif i < len(declared):
                names.append(declared[i])
            else:
                raise InvalidInputError(
                    f"{failed}: tensor {i} has no name and only {len(declared)} updatable weights are declared"
                )
        unknown = [n for n in names if n not in declared]
        if unknown:
            raise InvalidInputError(
                f"{failed}: tensor(s) {unknown} are not updatable weights of this model; updatable: {list(declared)}"
            )
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise InvalidInputError(f"{failed}: tensor(s) {repeated} are given more than once")
        arrays = [_contiguous(t._array()) for t in tensors]  # keeps 0-d weights 0-d
        # Triton requires every non-optional input: placeholders of one sample, which the backend ignores.
        inputs = [(t.name, _placeholder(t, self.batched)) for t in self.info.inputs]
        try:
            if sorted(names) == sorted(declared) and self.transport.use_shm and os.access(UPLOAD_DIR, os.W_OK):
                order = {n: i for i, n in enumerate(declared)}
                try:
                    self._update_by_file(sorted(zip(names, arrays), key=lambda p: order[p[0]]), inputs)
                    return
                except InvalidInputError as e:
                    if FILE_REFUSED not in str(e):
                        raise
                    log.info(
                        "the server cannot use an update file in %s (%s); sending the weights inline", UPLOAD_DIR, e
                    )
                except OSError as e:  # e.g. /dev/shm full (ENOSPC): the file is removed, the values go inline
                    log.info("cannot write an update file in %s (%s); sending the weights inline", UPLOAD_DIR, e)
            data = np.concatenate([a.reshape(-1).view(np.uint8) for a in arrays])
            inputs.append((WEIGHTS_INPUT, data.reshape(1, -1) if self.batched else data))
            self._send_update(inputs, _manifest(names, arrays))
        except InvalidInputError as e:
            raise InvalidInputError(f"update weight failed! Error is {e}") from None
        except PermissionDeniedError as e:
            raise PermissionDeniedError(f"update weight failed! Error is kLiteError: {e}") from None

    def _send_update(self, inputs: list[tuple[str, np.ndarray]], manifest: str, file: str = "") -> None:
        """One update request, with the proof of the admin key when this client has the key."""
        parameters = {UPDATE_PARAMETER: manifest}
        if file:
            parameters[FILE_PARAMETER] = file
        if self.transport.key:
            parameters[PROOF_PARAMETER] = sign_update(self.transport.key, self.info.name, manifest, file)
        self.transport.infer(self.info.name, inputs, [], parameters=parameters)

    def _update_by_file(self, weights: list[tuple[str, np.ndarray]], inputs: list[tuple[str, np.ndarray]]) -> None:
        """Write every weight into a /dev/shm file in the store's layout and let the server link it in."""
        _sweep_uploads()
        name = f"{UPLOAD_PREFIX}{os.getpid()}_{secrets.token_hex(8)}"
        path = os.path.join(UPLOAD_DIR, name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            offset = 0
            for _, array in weights:
                view = array.reshape(-1).view(np.uint8).data
                written = 0
                while written < view.nbytes:
                    written += os.pwrite(fd, view[written:], offset + written)
                offset = -(-(offset + view.nbytes) // UPDATE_ALIGN) * UPDATE_ALIGN
            os.ftruncate(fd, max(offset, UPDATE_ALIGN))
            os.close(fd)
            fd = -1
            self._send_update(inputs, _manifest([n for n, _ in weights], [a for _, a in weights]), name)
        finally:
            if fd >= 0:
                os.close(fd)
            os.unlink(path)  # the server holds its own link to the data once it is published

    def predict(self, arrays: list[np.ndarray]) -> list[Tensor]:
        """Run one predict (arrays in model input order); outputs in model output order.

        A model with a fixed leading batch b and no Triton batch dimension (as converted for seed 003's
        multi-card inference) takes k x b samples as k requests sent at once, which the server's
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
        return self.transport.infer(self.info.name, list(zip((t.name for t in self.info.inputs), arrays)), names)


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _split_pool() -> ThreadPoolExecutor:
    """Threads that send the extra slices of split predicts (shared by every model of the process)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="mslite-split")
        return _pool


def _present_shape(t: TensorInfo, batched: bool) -> list[int]:
    shape = list(t.shape)
    if batched and shape and shape[0] == -1:
        shape[0] = 1
    return shape


def _sweep_uploads() -> None:
    """Remove update files left by client processes that died before removing them."""
    for entry in os.listdir(UPLOAD_DIR):
        if entry.startswith(UPLOAD_PREFIX):
            pid = entry[len(UPLOAD_PREFIX) :].split("_", 1)[0]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(UPLOAD_DIR, entry))


def _manifest(names: list[str], arrays: list[np.ndarray]) -> str:
    return json.dumps([{"name": n, "dtype": a.dtype.str, "shape": list(a.shape)} for n, a in zip(names, arrays)])


def _placeholder(t: TensorInfo, batched: bool) -> np.ndarray:
    """Zeros of the input's shape, one sample, dynamic dimensions as 1."""
    shape = [d if d >= 0 else 1 for d in _present_shape(t, batched)]
    if t.datatype == "BYTES":
        return np.full(shape, b"", dtype=np.object_)
    return np.zeros(shape, dtype=_numpy(from_triton_dtype(t.datatype)))


def _template(t: TensorInfo, batched: bool) -> Tensor:
    tensor = Tensor(shape=_present_shape(t, batched), dtype=from_triton_dtype(t.datatype))
    tensor.name = t.name
    return tensor


def _numpy(dtype: DataType) -> Any:
    from .tensor import to_numpy_dtype

    return to_numpy_dtype(dtype)
