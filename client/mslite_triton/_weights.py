"""Weights updates from the client: the update files and requests, and the build's weights settings.

`Model.update_weights` and `ModelParallelRunner.update_weights` send new values for a model's updatable
weights (`send_weights`): from a client on the server's host, as one file written straight into /dev/shm,
each weight 64-byte aligned (for every weight, the store's version layout, which the server links in: one
copy, not three); else inline, as the bytes of the hidden input WEIGHTS_INPUT (protocol.py: UPLOAD_PREFIX,
UPDATE_ALIGN, FILE_REFUSED). At build time `weight_sections` turns the config's name-list files into the lists the
server reads.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from typing import Any

import numpy as np

from mslite_contract.owned_files import sweep_dead_owners
from mslite_contract.protocol import (
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

from ._checkparam import check_isinstance
from ._remote import RemoteModel, present_shape
from ._transport import ModelInfo, TensorInfo
from .errors import InvalidInputError, PermissionDeniedError
from .tensor import Tensor, _contiguous, from_triton_dtype, to_numpy_dtype

UPLOAD_DIR = "/dev/shm"
FILE_MIN_BYTES = 1 << 20  # a partial update this large goes by file on the server's host
log = logging.getLogger(__name__)


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
    update_weights(remote, tensors, aliases)


def declared_weights(info: ModelInfo) -> tuple[str, ...]:
    """The updatable weights a served model declares (its config's parameters), in their list order."""
    for key in VARIABLE_WEIGHTS_KEYS:
        value = info.parameters.get(key, "")
        if value.strip():
            return tuple(n.strip() for n in value.split(",") if n.strip())
    return ()


def update_weights(remote: RemoteModel, tensors: list[Tensor], aliases: dict[str, str]) -> None:
    """Send new values for updatable weights; every worker serves them from its next request on.

    Tensors are matched by name (`aliases` maps a name-list file's first column to the graph name),
    or, when a tensor has no name, by its position in the declared list. The server checks
    everything before it changes anything.

    Raises:
        InvalidInputError: a tensor is not an updatable weight, appears twice, or does not match its
            weight's dtype or shape (the server's message); nothing changed.
        RuntimeError: a tensor has no data, or the server failed (subclasses name the cause).
    """
    declared = declared_weights(remote.info)
    shown = remote.display_name or remote.info.name  # the user's file, not the name it is served under
    failed = f"update weight failed! Error is model '{shown}'"
    if remote.weights_input is None or not declared:
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
    inputs = [(t.name, _placeholder(t, remote.batched)) for t in remote.info.inputs]
    try:
        # On the server's host an update of every weight, or a large one, goes by file: no request carries the
        # values, so the gateway's request size limit does not apply (a full update is linked in, a partial one
        # copied). A small partial update goes inline, which costs less than a file.
        full = sorted(names) == sorted(declared)
        large = sum(a.nbytes for a in arrays) >= FILE_MIN_BYTES
        if (full or large) and remote.transport.use_shm and os.access(UPLOAD_DIR, os.W_OK):
            order = {n: i for i, n in enumerate(declared)}
            try:
                _update_by_file(remote, sorted(zip(names, arrays), key=lambda p: order[p[0]]), inputs)
                return
            except InvalidInputError as e:
                if FILE_REFUSED not in str(e):
                    raise
                log.info("the server cannot use an update file in %s (%s); sending the weights inline", UPLOAD_DIR, e)
            except OSError as e:  # e.g. /dev/shm full (ENOSPC): the file is removed, the values go inline
                log.info("cannot write an update file in %s (%s); sending the weights inline", UPLOAD_DIR, e)
        data = np.concatenate([a.reshape(-1).view(np.uint8) for a in arrays])
        inputs.append((WEIGHTS_INPUT, data.reshape(1, -1) if remote.batched else data))
        _send_update(remote, inputs, _manifest(names, arrays))
    except InvalidInputError as e:
        said = str(e).replace(remote.info.name, shown)
        raise InvalidInputError(f"update weight failed! Error is {said}") from None
    except PermissionDeniedError as e:
        said = str(e).replace(remote.info.name, shown)
        raise PermissionDeniedError(f"update weight failed! Error is kLiteError: {said}") from None


def _send_update(remote: RemoteModel, inputs: list[tuple[str, np.ndarray]], manifest: str, file: str = "") -> None:
    """One update request, with the proof of the admin key when this client has the key."""
    parameters = {UPDATE_PARAMETER: manifest}
    if file:
        parameters[FILE_PARAMETER] = file
    if remote.transport.key:  # the proof covers the inline values' bytes, so it is good for these alone
        values = dict(inputs).get(WEIGHTS_INPUT)
        parameters[PROOF_PARAMETER] = sign_update(remote.transport.key, remote.info.name, manifest, file, data=values)
    remote.transport.infer(remote.info.name, inputs, [], parameters=parameters)


def _update_by_file(
    remote: RemoteModel, weights: list[tuple[str, np.ndarray]], inputs: list[tuple[str, np.ndarray]]
) -> None:
    """Write the weights into a /dev/shm file, each 64-byte aligned, and let the server take it in."""
    sweep_dead_owners(UPLOAD_PREFIX, root=UPLOAD_DIR)  # files of clients killed before they removed them
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
        _send_update(remote, inputs, _manifest([n for n, _ in weights], [a for _, a in weights]), name)
    finally:
        if fd >= 0:
            os.close(fd)
        os.unlink(path)  # the server holds its own link to the data once it is published


def _manifest(names: list[str], arrays: list[np.ndarray]) -> str:
    return json.dumps([{"name": n, "dtype": a.dtype.str, "shape": list(a.shape)} for n, a in zip(names, arrays)])


def _placeholder(t: TensorInfo, batched: bool) -> np.ndarray:
    """Zeros of the input's shape, one sample, dynamic dimensions as 1."""
    shape = [d if d >= 0 else 1 for d in present_shape(t, batched)]
    if t.datatype == "BYTES":
        return np.full(shape, b"", dtype=np.object_)
    return np.zeros(shape, dtype=to_numpy_dtype(from_triton_dtype(t.datatype)))


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
