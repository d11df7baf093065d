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

`add_model` takes what MindSpore Lite's cloud runtime takes under each flag: paths under any flag, `Model`
objects under `SHARE_WEIGHT` only (else `RuntimeError("ModelGroup's add model failed. ...")`), as the C++
and Java clients do.
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


_ADD_FAILED = "ModelGroup's add model failed."


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
        """Add models to the group: all model paths (workspace sharing, any flag) or all `Model` objects.

        `Model` objects need a group made with `SHARE_WEIGHT` (MindSpore Lite's cloud runtime's rule), and are
        added before they are built (a build decides what it shares), each to one group only.

        Raises:
            TypeError: `models` is not a list/tuple, or its elements are not all str or all Model.
            RuntimeError: `models` is empty; `ModelGroup's add model failed. Error is <status>: <reason>` for
                Model objects in a group of another flag, a model of another group or a built one.
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
        if self.flags != ModelGroupFlag.SHARE_WEIGHT:
            raise RuntimeError(
                f"{_ADD_FAILED} Error is kLiteError: Only support share weight for add_model of Model objects: "
                f"this group was made with {self.flags}"
            )
        for model in models:
            if model._remote is not None:
                raise RuntimeError(
                    f"{_ADD_FAILED} Error is kLiteParamInvalid: add models to a group before building them"
                )
            if model._group is not None and model._group is not self:
                raise RuntimeError(f"{_ADD_FAILED} Error is kLiteError: the model has been in another group")
        for model in models:
            if model._group is None:
                model._group = self
                self._models.append(model)

    def cal_max_size_of_workspace(self, model_type: ModelType, context: Context) -> None:
        """MindSpore Lite sizes the shared workspace here; workers size their own, so this only checks.

        Raises:
            TypeError: `context` is not a Context or `model_type` not a ModelType.
            RuntimeError: `ModelGroup's cal max size of workspace failed. Error is ...`: an Ascend context
                (the GE provider: kLiteError, as MindSpore Lite; else kLiteNotSupport: the workspace it sizes is
                Ascend memory, and this server runs CPU and GPU workers).
        """
        check_isinstance("context", context, Context)
        check_isinstance("model_type", model_type, ModelType)
        if context.target[0] == "ascend":
            failed = "ModelGroup's cal max size of workspace failed. Error is"
            if context.ascend.provider == "ge":
                raise RuntimeError(f"{failed} kLiteError: Not Support GE model: the GE provider sizes its own")
            raise RuntimeError(
                f"{failed} kLiteNotSupport: the shared workspace is Ascend device memory, and this server runs CPU "
                "and GPU workers (each sizes its own workspace)"
            )
        self._paths.clear()  # sized: MindSpore Lite forgets the paths it has planned

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
