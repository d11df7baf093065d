"""Validation and config gathering shared by `Model.build_from_file` and `ModelParallelRunner.build_from_file`."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from ._checkparam import check_isinstance
from ._model_config import merge_sections, parse_config_file
from .errors import InferenceError, InvalidInputError, ModelLoadError, NotFoundError, PermissionDeniedError
from .tensor import Tensor

if TYPE_CHECKING:
    from ._remote import RemoteModel


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
            raise RuntimeError(f"{who}, config_path does not exist!")
        try:
            from_file = parse_config_file(config_path)
        except (OSError, UnicodeDecodeError) as e:
            raise RuntimeError(f"load configuration failed! Error is {e}") from e
    return merge_sections(from_file, overrides)


# What Triton wraps around a backend's load error: the reason that matters to the user comes after it.
_LOAD_WRAPPING = re.compile(
    r"^(?:load failed for model '[^']*': |version \d+ is at UNAVAILABLE state: |Internal: |TritonModelException: "
    r"|model '[^']*': )+"
)
_REPHRASED = (ModelLoadError, NotFoundError, PermissionDeniedError, InvalidInputError, InferenceError)
_OWN_PREFIX = "build_from_file failed! Error is "


def build_failed(e: Exception, who: str) -> Exception:
    """A failed build as MindSpore Lite words it, `<who>! Error is <status>: <the server's reason>`.

    The exception keeps its class; those with messages of their own (unreachable server, overload) and
    exceptions that are not build failures come back unchanged.
    """
    if isinstance(e, _REPHRASED):
        reason = _LOAD_WRAPPING.sub("", str(e).removeprefix(_OWN_PREFIX))
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


def check_weights(weights: Any) -> list[Tensor]:
    """MindSpore Lite's type check of `update_weights`' argument (list[list[Tensor]]), flattened in order.

    Raises:
        TypeError: naming the level and index of the offending element.
    """
    check_isinstance("weights", weights, list)
    flat = []
    for i, group in enumerate(weights):
        if not isinstance(group, list):
            raise TypeError(f"weights element must be list, but got {type(group)} at index {i}.")
        for j, t in enumerate(group):
            if not isinstance(t, Tensor):
                raise TypeError(f"weights element's element must be Tensor, but got {type(t)} at {i},{j}.")
            flat.append(t)
    return flat


def send_weights(remote: RemoteModel | None, weights: Any, aliases: dict[str, str], not_built: str) -> None:
    """The body of `Model.update_weights` and `ModelParallelRunner.update_weights`, checks in MindSpore Lite's order.

    Raises:
        TypeError: `weights` is not a list of lists of Tensor.
        RuntimeError: not built (`not_built` says how), no weights given, or the update failed.
    """
    tensors = check_weights(weights)
    if remote is None:
        raise RuntimeError(f"update weight failed! Error is kLiteError: {not_built}")
    if not tensors:
        raise RuntimeError("update weight failed! Error is kLiteInputParamInvalid: no weights given")
    remote.update_weights(tensors, aliases)


def fill_outputs(outputs: list[Tensor], results: list[Tensor]) -> list[Tensor]:
    """Copy results into caller-provided output tensors (MindSpore Lite's `outputs=` argument)."""
    for target, result in zip(outputs, results):
        target.name = result.name
        target.dtype = result.dtype
        target.shape = result.shape
        target.set_data_from_numpy(result.get_data_to_numpy())
    return outputs


# Where the updatable weights are named: MindSpore Lite's `[ascend_context] variable_weights_file=PATH`
# (read here, on the client, whose disk PATH is on) and the neutral `[weights] updatable_file=PATH`; each
# becomes the comma-separated list the server reads (`variable_weights_list` / `updatable`).
_WEIGHT_FILES = {
    "ascend_context": ("variable_weights_file", "variable_weights_list"),
    "weights": ("updatable_file", "updatable"),
}
_SHAREABLE_KEYS = ("shareable_weight_pid_list", "shareable_weight_mem_handle")


def weight_sections(
    sections: dict[str, dict[str, str]], config_path: str, who: str
) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """Resolve the weights settings of the config sections for the server.

    Name-list files become comma-separated lists; the spec's cross-process sharing keys are dropped, since
    the workers of a model share its weights on CPU without them (and dropping them lets the builds of
    MindSpore Lite's "master" and "slave" processes map to the same server model).

    Args:
        sections: the merged config sections.
        config_path: the config file, whose directory relative list paths may also be found in.
        who: the message prefix of the caller's build errors.

    Returns:
        The sections to send, and the name map of two-column list lines (name used in updates -> graph name).

    Raises:
        RuntimeError: a list file is missing or has a line of more than two columns, or both sharing keys are set.
    """
    out = {section: dict(entries) for section, entries in sections.items()}
    aliases: dict[str, str] = {}
    for section, (file_key, list_key) in _WEIGHT_FILES.items():
        entries = out.get(section, {})
        if file_key not in entries:
            continue
        names, mapping = read_weight_names(entries.pop(file_key), config_path, who)
        entries[list_key] = ",".join(names)
        aliases.update(mapping)
    ascend = out.get("ascend_context", {})
    if all(k in ascend for k in _SHAREABLE_KEYS):
        raise RuntimeError(
            f"{who}! Error is kLiteError: shareable_weight_pid_list and shareable_weight_mem_handle are mutually "
            "exclusive"
        )
    for key in _SHAREABLE_KEYS:
        ascend.pop(key, None)
    return {s: e for s, e in out.items() if e or s not in _WEIGHT_FILES}, aliases


def read_weight_names(value: str, config_path: str, who: str) -> tuple[list[str], dict[str, str]]:
    """Read a name-list file: one weight per line, `graph_name` or `update_name,graph_name`.

    The path may be quoted (the spec's own example is); a relative path is tried from the working
    directory, then from the config file's directory.

    Raises:
        RuntimeError: the file is missing or unreadable, or a line has more than two columns.
    """
    path = value.strip().strip("\"'")
    candidates = [path]
    if config_path and not os.path.isabs(path):
        candidates.append(os.path.join(os.path.dirname(os.path.abspath(config_path)), path))
    found = next((c for c in candidates if os.path.isfile(c)), None)
    if found is None:
        raise RuntimeError(f"{who}! Error is variable weight name list '{os.path.basename(path)}' does not exist")
    names: list[str] = []
    mapping: dict[str, str] = {}
    try:
        with open(found, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise RuntimeError(f"{who}! Error is cannot read variable weight name list: {e}") from e
    for number, line in enumerate(lines, 1):
        columns = [c.strip() for c in line.split(",")]
        if not line.strip():
            continue
        if len(columns) > 2:
            raise RuntimeError(
                f"{who}! Error is variable weight name list line {number}: only support 1 or 2 row name list, "
                f"current row num: {len(columns)}"
            )
        if not all(columns):
            raise RuntimeError(f"{who}! Error is variable weight name list line {number} has an empty name")
        name = columns[-1]
        if len(columns) == 2:
            mapping[columns[0]] = name
        if name not in names:
            names.append(name)
    return names, mapping
