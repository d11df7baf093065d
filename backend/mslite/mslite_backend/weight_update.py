"""A weights update checked before anything is written: its manifest against the weights, its file's name.

An update names some or all of a model's updatable weights (`weights.WeightSpec`) in a JSON manifest, with
their values back to back (inline) or in a file a client on this host wrote next to the store (`upload_path`).
"""

from __future__ import annotations

import json
import os
import re

import numpy as np

from mslite_contract.dtypes import wire_name
from mslite_contract.protocol import UPLOAD_PREFIX

from .errors import RequestError
from .store_files import store_root
from .weights import WeightSpec

_UPLOAD_NAME = re.compile(UPLOAD_PREFIX + r"[A-Za-z0-9_]{1,64}")


def parse_update(model: str, manifest: str, size: int, specs: tuple[WeightSpec, ...]) -> dict[str, tuple[int, int]]:
    """Check an update's manifest against the updatable weights, all of it before anything is written.

    Args:
        model: the model's name, for messages.
        manifest: JSON list of `{"name", "dtype", "shape"}`, in the order of their bytes in the data.
        size: bytes of data that came with it.
        specs: the updatable weights.

    Returns:
        name -> (offset, size) of its new value in the data (values back to back, in manifest order).

    Raises:
        RequestError: naming the model, the tensor, what was expected and what arrived.
    """
    seen: dict[str, tuple[int, int]] = {}
    offset = 0
    for spec in checked_entries(model, manifest, specs):
        seen[spec.name] = (offset, spec.nbytes)
        offset += spec.nbytes
    if offset != size:
        raise RequestError(f"model '{model}': the update describes {offset} bytes of weights but carries {size}")
    return seen


def checked_entries(model: str, manifest: str, specs: tuple[WeightSpec, ...]) -> list[WeightSpec]:
    """The manifest's weights, in its order, each checked against `specs` (name, dtype, shape, once each).

    Raises:
        RequestError: naming the model, the tensor, what was expected and what arrived.
    """
    where = f"model '{model}'"
    try:
        items = json.loads(manifest)
        entries = [(str(i["name"]), np.dtype(str(i["dtype"])), tuple(int(d) for d in i["shape"])) for i in items]
    except (ValueError, TypeError, KeyError) as e:
        raise RequestError(f"{where}: malformed weights update ({type(e).__name__})") from None
    by_name = {s.name: s for s in specs}
    if not entries:
        raise RequestError(f"{where}: a weights update needs at least one tensor")
    unknown = [n for n, _, _ in entries if n not in by_name]
    if unknown:
        raise RequestError(
            f"{where}: tensor(s) {unknown} are not updatable weights of this model; updatable: {list(by_name)}"
        )
    checked: list[WeightSpec] = []
    for name, dtype, shape in entries:
        spec = by_name[name]
        if spec in checked:
            raise RequestError(f"{where}: tensor '{name}' appears twice in one update")
        if dtype != np.dtype(spec.dtype):
            raise RequestError(
                f"{where}, weight '{name}': data type expected {wire_name(np.dtype(spec.dtype))}, "
                f"got {wire_name(dtype)}"
            )
        if shape != spec.shape:
            raise RequestError(f"{where}, weight '{name}': shape expected {list(spec.shape)}, got {list(shape)}")
        checked.append(spec)
    return checked


def upload_path(name: str, root: str | None = None) -> str:
    """Where a client on this host wrote an update file, from its bare name (any other name is refused).

    Raises:
        RequestError: the name is not an update file's.
    """
    if not _UPLOAD_NAME.fullmatch(name):
        raise RequestError(f"'{name[:80]}' is not the name of a weights update file")
    return os.path.join(root or store_root(), name)
