"""Validation and config gathering shared by `Model.build_from_file` and `ModelParallelRunner.build_from_file`."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from mslite_contract.scrub import load_reason

from ._checkparam import check_isinstance, missing_file
from ._model_config import merge_sections, parse_config_file
from ._remote import RemoteModel
from .errors import (
    InferenceError,
    InvalidInputError,
    ModelLoadError,
    NotFoundError,
    PermissionDeniedError,
    ServerUnavailableError,
    ServiceDenyError,
)
from .tensor import Tensor


class Served:
    """What `Model` and `ModelParallelRunner` share: the file they were built from and the server's model."""

    model_path_: str
    _remote: RemoteModel | None

    def __str__(self) -> str:
        return f"model_path: {self.model_path_}."

    @property
    def served_name(self) -> str:
        """The model's name on the Triton server; "" before `build_from_file`. Not in MindSpore Lite.

        For Triton's own tools pointed at this model (tritonclient, perf_analyzer, the `model` label of the
        metrics). The name carries a hash of the file and the config, so the same build gets the same name.
        """
        return "" if self._remote is None else self._remote.info.name


def check_config_dict(config_dict: Any) -> dict[str, dict[str, str]]:
    """MindSpore Lite's shape check of `config_dict` (dict[str, dict[str, str]]).

    Raises:
        TypeError: at any level, naming the level.
    """
    if config_dict is None:
        return {}
    check_isinstance("config_dict", config_dict, dict)
    for key, value in config_dict.items():
        check_isinstance("config_dict_key", key, str)
        check_isinstance("config_dict_value", value, dict)
        for k, v in value.items():
            check_isinstance("config_dict_value_key", k, str)
            check_isinstance("config_dict_value_value", v, str)
    return config_dict


def load_sections(config_path: str, overrides: dict[str, dict[str, str]] | None, who: str) -> dict[str, dict[str, str]]:
    """Config file sections with `overrides` applied on top (MindSpore Lite's precedence).

    Raises:
        RuntimeError: the file is missing or unreadable.
    """
    from_file: dict[str, dict[str, str]] = {}
    if config_path:
        if not os.path.exists(config_path):
            raise RuntimeError(missing_file(who, "config_path", config_path))
        try:
            from_file = parse_config_file(config_path)
        except (OSError, UnicodeDecodeError) as e:
            raise RuntimeError(f"load configuration failed! Error is {e}") from e
    return merge_sections(from_file, overrides)


_REPHRASED = (ModelLoadError, NotFoundError, PermissionDeniedError, InvalidInputError, InferenceError)
_OWN_PREFIX = "build_from_file failed! Error is "


def build_failed(e: Exception, who: str) -> Exception:
    """A failed build as MindSpore Lite words it, `<who>! Error is <status>: <the server's reason>`.

    The exception keeps its class; those with messages of their own (unreachable server, overload) and
    exceptions that are not build failures come back unchanged.
    """
    if isinstance(e, _REPHRASED):
        reason = load_reason(str(e).removeprefix(_OWN_PREFIX))
        return type(e)(f"{who}! Error is {e.status}: {reason}")
    if type(e) is RuntimeError and str(e).startswith(_OWN_PREFIX):  # raised before anything was sent
        return RuntimeError(f"{who}! Error is {str(e).removeprefix(_OWN_PREFIX)}")
    return e


def input_arrays(inputs: list[Tensor]) -> list[np.ndarray]:
    """The data of each input tensor, with the tensor's shape.

    Raises:
        RuntimeError: an input tensor has no data.
    """
    return [t._array() for t in inputs]


def fill_outputs(outputs: list[Tensor], results: list[Tensor]) -> list[Tensor]:
    """Copy results into caller-provided output tensors (MindSpore Lite's `outputs=` argument)."""
    for target, result in zip(outputs, results):
        target.name = result.name
        target.dtype = result.dtype
        target.shape = result.shape
        target.set_data_from_numpy(result.get_data_to_numpy())
    return outputs


_PREDICT_FAILED = "predict failed!"


def predict_failed(e: RuntimeError) -> RuntimeError:
    """A failed predict as MindSpore Lite words it: `predict failed! Error is <status>: <our reason>`.

    The exception keeps its class. An unreachable server keeps its own message (it says what to start),
    and so does a message that already carries the prefix.
    """
    if str(e).startswith(_PREDICT_FAILED) or isinstance(e, (ServerUnavailableError, ServiceDenyError)):
        return e
    return type(e)(f"{_PREDICT_FAILED} Error is {getattr(e, 'status', 'kLiteError')}: {e}")


def resized_remote(remote: RemoteModel, shapes: dict[str, list[int]], who: str) -> RemoteModel:
    """The model built again with `shapes` (input name -> full shape) in dims its file fixes.

    Raises:
        RuntimeError: `<who>! Error is ...`: the model was bound with `triton://` (its shapes are the
            server's), or the graph cannot run at the new shapes (the server's reason).
    """
    if remote.rebuild is None:
        shown = ", ".join(f"'{n}' {s}" for n, s in shapes.items())
        raise RuntimeError(
            f"{who}! Error is kLiteNotSupport: a model bound with triton:// keeps the shapes of its server config; "
            f"it cannot take input {shown}"
        )
    try:
        return remote.rebuild(shapes)
    except RuntimeError as e:
        raise build_failed(e, who) from None
