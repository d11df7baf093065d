"""`ModelGroup` / `ModelGroupFlag`: MindSpore Lite's memory sharing between models, mapped onto this server.

What each flag does here (CPU workers; each worker is a process of its own):

- `SHARE_WEIGHT`: the `Model`s of the group built from the same file share one server model, so one set
  of workers and one copy of the weights (the workers of a model already share their weights through the
  backend's weight cache), even when their contexts differ: the first build's settings serve them all.
  Models of different files keep their own weights.
- `SHARE_WORKSPACE`: nothing to do: a workspace (activation memory) lives inside one worker process and
  ONNX Runtime sizes it per run. `add_model` with paths and `cal_max_size_of_workspace` check their
  arguments as MindSpore Lite does and return.
- `SHARE_WEIGHT_WORKSPACE`: both of the above, so in effect `SHARE_WEIGHT`.
"""

from __future__ import annotations

import hashlib
import os
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from ._checkparam import check_isinstance
from .context import Context
from .tensor import ModelType

if TYPE_CHECKING:
    from ._remote import RemoteModel


class ModelGroupFlag(IntEnum):
    """How the models of a `ModelGroup` share memory (MindSpore Lite's values)."""

    SHARE_WEIGHT = 1
    SHARE_WORKSPACE = 2
    SHARE_WEIGHT_WORKSPACE = 3

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


class GroupMember:
    """What a group holds besides paths: `Model` is one (its module imports this one, never the reverse)."""

    _group: ModelGroup | None
    _remote: RemoteModel | None
    model_path_: str


class ModelGroup:
    """A group of models that share weights or workspace memory (see the module docstring).

    Args:
        flags: what the models share; default `ModelGroupFlag.SHARE_WORKSPACE`, as in MindSpore Lite.

    Raises:
        RuntimeError: `flags` is not a ModelGroupFlag.
    """

    def __init__(self, flags: ModelGroupFlag = ModelGroupFlag.SHARE_WORKSPACE) -> None:
        if not isinstance(flags, ModelGroupFlag):
            raise RuntimeError(
                "Parameter flags should be ModelGroupFlag.SHARE_WORKSPACE or ModelGroupFlag.SHARE_WEIGHT"
                " or ModelGroupFlag.kShareWeightAndWorkspace"
            )
        self.flags = flags
        self._models: list[GroupMember] = []
        self._paths: list[str] = []

    @property
    def shares_weights(self) -> bool:
        """True for SHARE_WEIGHT and SHARE_WEIGHT_WORKSPACE."""
        return self.flags in (ModelGroupFlag.SHARE_WEIGHT, ModelGroupFlag.SHARE_WEIGHT_WORKSPACE)

    def add_model(self, models: list[Any] | tuple[Any, ...]) -> None:
        """Add models to the group: all model paths (workspace sharing) or all `Model` objects.

        Add `Model` objects before building them, as in MindSpore Lite.

        Raises:
            TypeError: `models` is not a list/tuple, or its elements are not all str or all Model.
            RuntimeError: `models` is empty.
        """
        if not isinstance(models, (list, tuple)):
            raise TypeError(f"models must be list/tuple, but got {type(models)}")
        if not models:
            raise RuntimeError("models cannot be empty")
        kind = str if isinstance(models[0], str) else GroupMember if isinstance(models[0], GroupMember) else None
        for i, element in enumerate(models):
            if kind is None or not isinstance(element, kind):
                raise TypeError(f"models element must be all str or Model, but got {type(element)} at index {i}.")
        if kind is str:
            self._paths.extend(models)
            return
        for model in models:
            model._group = self
            self._models.append(model)

    def cal_max_size_of_workspace(self, model_type: ModelType, context: Context) -> None:
        """MindSpore Lite sizes the shared workspace here; workers size their own, so this only checks.

        Raises:
            TypeError: `context` is not a Context or `model_type` not a ModelType.
        """
        check_isinstance("context", context, Context)
        check_isinstance("model_type", model_type, ModelType)

    def shared_model(self, model_path: str) -> RemoteModel | None:
        """The server model a member already built from the same file, when the group shares weights."""
        if not self.shares_weights or model_path.startswith("triton://"):
            return None
        digest = _digest(model_path)
        for member in self._models:
            remote = member._remote
            if remote is not None and member.model_path_ and _digest(member.model_path_) == digest:
                return remote
        return None


def _digest(path: str) -> str:
    """Content hash of a model file (a path may name the same file differently; a file may be rewritten)."""
    if path.startswith("triton://") or not os.path.isfile(path):
        return path
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
