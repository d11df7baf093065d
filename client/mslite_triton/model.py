"""`Model`: one model built from a file, served by one worker on the Triton server."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence

import numpy as np

from ._build import (
    Served,
    build_failed,
    check_config_dict,
    fill_outputs,
    input_arrays,
    load_sections,
    predict_failed,
    resized_remote,
)
from ._checkparam import check_isinstance, model_file_problem
from ._endpoint import server_url
from ._model_config import local_cores, merge_sections, plan_workers
from ._onnx_io import metadata_props
from ._pending import PendingLimit, runner_sizes, take_runner_section
from ._remote import RemoteModel, detect_format
from ._weights import check_weights, send_weights, weight_sections
from .context import Context
from .model_group import GroupMember, ModelGroup, ModelGroupFlag
from .runner import ModelParallelRunner
from .tensor import ModelType, Tensor, TensorMeta

# MindSpore Lite's `mindspore_lite.model` defines these five: ported code imports them from here too.
# ModelType, ModelGroup and ModelParallelRunner live in modules of their own (none imports this one).
__all__ = ["ModelType", "Model", "ModelParallelRunner", "ModelGroup", "ModelGroupFlag"]

log = logging.getLogger(__name__)

_INFO_KEYS = ("user_info", "input_shape", "dynamic_dims", "current_pid", "shareable_weight_mem_handle")


class Model(GroupMember, Served):
    """MindSpore Lite's `Model`, running on the server (one worker).

    Calls from several threads are allowed and run concurrently up to the server's capacity.
    """

    def __init__(self) -> None:
        self.model_path_ = ""
        self.provider = ""
        self._remote: RemoteModel | None = None
        self._inputs: list[Tensor] = []
        self._weight_aliases: dict[str, str] = {}
        self._pending = PendingLimit()
        self._group: ModelGroup | None = None  # set by ModelGroup.add_model

    def build_from_file(
        self,
        model_path: str,
        model_type: ModelType,
        context: Context | None = None,
        config_path: str = "",
        config_dict: dict[str, dict[str, str]] | None = None,
        dec_key: bytes | None = None,
        dec_mode: str = "AES-GCM",
        dec_num_parallel: int = 0,
    ) -> None:
        """Upload the ONNX file (or bind to `triton://<name>`) and build it with the context's settings.

        Checks run in MindSpore Lite's order: argument types, the model file, the config file, `config_dict`,
        then the decryption arguments.

        Raises:
            TypeError: an argument has the wrong type.
            KeyError: the config file names a `variable_weights_file` and `config_dict` has no `ascend_context`.
            ValueError: `dec_mode` is empty.
            RuntimeError: missing file or config file, not an ONNX file, encrypted model, server unreachable,
                load failure (`build_from_file failed! Error is ...`).
        """
        check_isinstance("model_path", model_path, str)
        check_isinstance("model_type", model_type, ModelType)
        context = Context() if context is None else check_isinstance("context", context, Context)
        check_isinstance("config_path", config_path, str)
        problem = model_file_problem("build_from_file failed", model_path)
        if problem is not None:
            raise RuntimeError(problem)
        from_file = load_sections(config_path, None, "build_from_file failed")
        if (
            "variable_weights_file" in from_file.get("ascend_context", {})
            and isinstance(config_dict, dict)
            and "ascend_context" not in config_dict
        ):
            raise KeyError("ascend_context")  # MindSpore Lite adds the weight list to config_dict['ascend_context']
        overrides = check_config_dict(config_dict)
        if dec_key:
            check_isinstance("dec_key", dec_key, bytes)
            check_isinstance("dec_mode", dec_mode, str)
            check_isinstance("dec_num_parallel", dec_num_parallel, int)
            if not dec_mode:
                raise ValueError("dec_mode must not be empty string!")
            raise RuntimeError(
                "build_from_file failed! Error is kLiteNotSupport: encrypted models cannot be served; decrypt the "
                "model where the key is kept and build from the plain file (.mindir or ONNX)"
            )
        sections = merge_sections(from_file, overrides)
        sections, aliases = weight_sections(sections, config_path, "build_from_file failed")
        _, tuned_threads = runner_sizes(sections, "build_from_file failed")  # one worker: only the threads apply
        sections, pending = take_runner_section(sections, "build_from_file failed")
        context._warn_unused_settings()
        if context.cpu.thread_affinity_mode == 2:
            log.warning("thread_affinity_mode 2 (middle cores) is not supported by the server: workers are not pinned")
        server_url(context.server_url)  # fail early, with the URL, when no server is reachable
        try:
            plan = plan_workers(context, cores=local_cores(), workers_num=1, config_thread_num=tuned_threads)
        except RuntimeError as e:
            raise RuntimeError(f"build_from_file failed! Error is {e}") from e
        shared = self._group.shared_model(model_path) if self._group is not None else None
        try:
            self._remote = shared or RemoteModel.build(model_path, context, plan, sections)
        except RuntimeError as e:
            raise build_failed(e, "build_from_file failed") from None
        self.model_path_ = model_path
        self.provider = context.ascend.provider
        self._inputs = self._remote.input_tensors()
        self._weight_aliases = aliases
        self._pending = pending

    def _built(self) -> RemoteModel:
        if self._remote is None:
            raise RuntimeError(
                "predict failed! Error is kLiteError: the model is not built; call build_from_file first"
            )
        return self._remote

    def get_inputs(self) -> list[Tensor]:
        """The model's input tensors (shared by every caller of this Model, as in MindSpore Lite).

        `[]` before a build, as in MindSpore Lite, which logs an error saying so; so does this.
        """
        if self._remote is None:
            log.error("Model.get_inputs: the model is not built yet (build_from_file first); []")
        return list(self._inputs)

    def get_outputs(self) -> tuple[TensorMeta, ...]:
        """Metadata of the outputs: name, dtype, shape, format, element_num, data_size; `()` before a build."""
        return () if self._remote is None else self._remote.output_metas()

    def predict(self, inputs: Sequence[Tensor | np.ndarray], outputs: list[Tensor] | None = None) -> list[Tensor]:
        """Run inference once.

        Args:
            inputs: one Tensor or numpy array per model input, in order.
            outputs: optional tensors to receive the results.

        Raises:
            TypeError: `inputs` or `outputs` has the wrong type.
            RuntimeError: wrong number of inputs; `predict failed! Error is <status>: <reason>` when an input
                has no data or the server failed (subclasses name the cause);
                `ServiceDenyError` (kLiteServiceDeny) when this Model already has `[runner] max_pending_predicts`
                predicts in flight (1000 by default).
            InvalidInputError: the server rejected an input; a ValueError and a RuntimeError.
        """
        if not isinstance(inputs, (list, tuple)):
            raise TypeError(f"inputs must be list or tuple, but got {type(inputs)}.")
        remote = self._built()
        if len(inputs) != len(self._inputs):
            raise RuntimeError(f"model input len:{len(self._inputs)} not equal input len:{len(inputs)}!")
        tensors = []
        for i, item in enumerate(inputs):
            if isinstance(item, np.ndarray):
                tensors.append(self._from_numpy(i, item))
            elif isinstance(item, Tensor):
                tensors.append(item)
            else:
                raise TypeError("inputs element must be Tensor, of numpy.")
        if outputs is not None:
            check_isinstance("outputs", outputs, list)
            for o in outputs:
                check_isinstance("outputs element", o, Tensor)
        try:
            with self._pending.slot():
                results = remote.predict(input_arrays(tensors))
        except RuntimeError as e:
            raise predict_failed(e) from None
        if not results:
            raise RuntimeError("predict failed!")
        return fill_outputs(outputs, results) if outputs else results

    def _from_numpy(self, index: int, array: np.ndarray) -> Tensor:
        """A numpy input: same rank as the model input -> taken with its own shape; else copied into it."""
        target = self._inputs[index]
        if array.ndim == len(target.shape) and array.ndim > 0:
            tensor = Tensor(array)
            tensor.name = target.name
            return tensor
        target.set_data_from_numpy(array)
        return target

    def resize(self, inputs: list[Tensor], dims: list[list[int]]) -> None:
        """Give the input tensors new shapes, as MindSpore Lite does for any model.

        A size in a dim the ONNX file fixes builds the model again on the server with that dim made
        symbolic (the graph's stale inner shapes dropped), and the new shapes are run once there: the
        model built before keeps serving until this succeeds.

        Raises:
            TypeError: bad argument types (with the index of the offending element).
            ValueError: `inputs` and `dims` differ in length.
            RuntimeError: `resize failed! Error is ...`: another rank, a graph that cannot run at the new
                shape (e.g. a Reshape to a constant shape; the reason is ONNX Runtime's), or a model bound
                with `triton://`.
        """
        if not isinstance(inputs, (list, tuple)):
            raise TypeError(f"inputs must be list or tuple, but got {type(inputs)}.")
        for i, t in enumerate(inputs):
            if not isinstance(t, Tensor):
                raise TypeError(f"inputs element must be Tensor, but got {type(t)} at index {i}.")
        if not isinstance(dims, (list, tuple)):
            raise TypeError(f"dims must be list or tuple, but got {type(dims)}.")
        for i, d in enumerate(dims):
            if not isinstance(d, (list, tuple)):
                raise TypeError(f"dims element must be list or tuple, but got {type(d)} at index {i}.")
            for j, v in enumerate(d):
                if not isinstance(v, int):
                    raise TypeError(f"dims element's element must be int, but got {type(v)} at {i},{j}.")
        if len(inputs) != len(dims):
            raise ValueError(
                f"inputs' size does not match dims' size, but got inputs: {len(inputs)} and dims: {len(dims)}."
            )
        remote = self._built()
        declared = {t.name: t.shape for t in remote.info.inputs}
        for t, d in zip(inputs, dims):
            want = declared.get(t.name)
            if want is not None and len(want) != len(d):
                raise RuntimeError(
                    f"resize failed! Error is kLiteInputParamInvalid: input '{t.name}' has {len(want)} dims "
                    f"{list(want)}, got {list(d)}: a resize keeps the rank"
                )
        asked = {t.name: list(d) for t, d in zip(inputs, dims) if t.name in declared}
        order = [t.name for t in remote.info.inputs]
        if remote.fixed_dims_changed([tuple(asked.get(n, declared[n])) for n in order]):
            # a dim the file fixes: the model is built again with those dims resizable (another server model)
            self._remote = resized_remote(remote, asked, "resize failed")
        for t, d in zip(inputs, dims):
            t.shape = list(d)

    def update_weights(self, weights: list[list[Tensor]]) -> None:
        """Replace updatable weights in every worker of the model, without reloading it.

        The weights must be declared at build time (`[ascend_context] variable_weights_file`). Tensors
        are matched by name, or by position in that list when a tensor has no name. Requests see all-old
        or all-new weights; a rejected update changes nothing.

        With `context.ascend.provider == "ge"` every name that is not in the name-list file's first column
        must end in `weight` or `alpha`, as MindSpore Lite checks before its GE rename (the rename itself
        does not apply: names here are the ONNX graph's).

        Raises:
            TypeError: `weights` is not a list of lists of Tensor.
            InvalidInputError: a tensor is not a declared weight, or its dtype or shape differs; a ValueError
                and a RuntimeError (`update weight failed! Error is ...`).
            RuntimeError: the model is not built, a tensor has no data, a "ge" name check failed, or the
                server failed.
        """
        if self.provider == "ge":
            for t in check_weights(weights):
                if t.name not in self._weight_aliases and not t.name.endswith(("weight", "alpha")):
                    raise RuntimeError("variable is not norm name, now only support **weight")
        # MindSpore Lite's words for an update before build (its unit tests look for them)
        send_weights(self._remote, weights, self._weight_aliases, "Session is null, please build model first!")

    def get_model_info(self, key: str) -> str:
        """Model information by key (`current_pid`, `input_shape`, ...); unknown keys give "" and a warning.

        `shareable_weight_mem_handle` gives a non-zero number naming the server model: sharing needs no
        handle here (a model's workers share its weights on CPU), but code passing it on keeps working.
        `user_info` is the ONNX file's metadata (`metadata_props`) as a JSON object, "" when it has none or
        the model was bound with `triton://`; `dynamic_dims` lists the inputs with dynamic dimensions in
        `input_shape`'s form, -1 for each dynamic dimension ("" when every shape is fixed).

        Raises:
            TypeError: `key` is not a str.
        """
        check_isinstance("key", key, str)
        if key == "current_pid":
            return str(os.getpid())
        if key == "shareable_weight_mem_handle" and self._remote is not None:
            return self._remote.shareable_handle
        if key == "input_shape" and self._remote is not None:
            return ";".join(f"{t.name}:{','.join(map(str, t.shape))}" for t in self._inputs)
        if key == "dynamic_dims" and self._remote is not None:
            shapes = [(t.name, t.shape) for t in self._remote.info.inputs]  # the server's: -1 where dynamic
            return ";".join(f"{name}:{','.join(map(str, shape))}" for name, shape in shapes if -1 in shape)
        if key == "user_info" and self._remote is not None and not self.model_path_.startswith("triton://"):
            with open(self.model_path_, "rb") as f:
                data = f.read()
            props = metadata_props(data) if detect_format(data[:16]) == "onnx" else {}
            return json.dumps(props) if props else ""
        if key not in _INFO_KEYS:
            log.warning("get_model_info: unsupported key '%s'", key)
        return ""
