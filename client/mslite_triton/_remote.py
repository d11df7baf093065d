"""A model living on the server: upload or bind, metadata, and one predict call. Model and runner wrap it."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _endpoint
from ._model_config import WorkerPlan, build_model_config
from ._transport import ModelInfo, TensorInfo, Transport
from .context import Context
from .tensor import DataType, Tensor, TensorMeta, from_triton_dtype

BIND_PREFIX = "triton://"


def detect_format(head: bytes) -> str:
    """Tell an ONNX file from MindSpore's formats by content, not by name.

    ONNX's ModelProto starts with field 1 `ir_version` as a varint (byte 0x08); MindIR's starts with a
    string (0x0A); a MindSpore Lite `.ms` file is a flatbuffer whose identifier `MSL?` sits at offset 4.
    """
    if head[:1] == b"\x08":
        return "onnx"
    if len(head) >= 8 and head[4:7] == b"MSL":
        return "ms"
    if head[:1] == b"\x0a":
        return "mindir"
    return "unknown"


def read_model_files(path: str) -> dict[str, bytes]:
    """The files to upload: `1/model.onnx`, plus `1/model.onnx.data` when external weights sit beside it.

    Raises:
        RuntimeError: the file is not an ONNX model (MindIR, .ms or unknown), naming what it looks like.
    """
    with open(path, "rb") as f:
        data = f.read()
    kind = detect_format(data[:16])
    if kind != "onnx":
        what = {"ms": "a MindSpore Lite .ms file", "mindir": "a MindIR file"}.get(kind, "not an ONNX model")
        raise RuntimeError(
            f"build_from_file failed! Error is kLiteNotSupport: '{os.path.basename(path)}' is {what}; "
            "this server runs ONNX models (export the network to ONNX)"
        )
    files = {"file:1/model.onnx": data}
    external = path + ".data"
    if os.path.isfile(external):
        with open(external, "rb") as f:
            files[f"file:1/{os.path.basename(path)}.data"] = f.read()
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
            config = build_model_config("", context, plan, sections=sections)
        except ValueError as e:  # a bad config section: MindSpore Lite reports build errors as RuntimeError
            raise RuntimeError(f"build_from_file failed! Error is {e}") from e
        name = model_name(path, files, config)
        if not transport.is_model_ready(name):
            transport.load_model(name, {**config, "name": name}, files)
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

    def predict(self, arrays: list[np.ndarray]) -> list[Tensor]:
        """Send one request (arrays in model input order); outputs in model output order."""
        names = [t.name for t in self.info.outputs]
        sent = list(zip((t.name for t in self.info.inputs), arrays))
        result = self.transport.infer(self.info.name, sent, names)
        return [Tensor._from_numpy(n, result[n]) for n in names]


def _present_shape(t: TensorInfo, batched: bool) -> list[int]:
    shape = list(t.shape)
    if batched and shape and shape[0] == -1:
        shape[0] = 1
    return shape


def _template(t: TensorInfo, batched: bool) -> Tensor:
    tensor = Tensor(shape=_present_shape(t, batched), dtype=from_triton_dtype(t.datatype))
    tensor.name = t.name
    return tensor


def _numpy(dtype: DataType) -> Any:
    from .tensor import to_numpy_dtype

    return to_numpy_dtype(dtype)
