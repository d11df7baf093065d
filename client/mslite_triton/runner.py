"""`ModelParallelRunner`: N workers of one model on the server, fed concurrently by many client threads."""

from __future__ import annotations

import logging
import threading

from ._build import Served, build_failed, fill_outputs, input_arrays, load_sections, predict_failed, resized_remote
from ._checkparam import check_isinstance, model_file_problem
from ._endpoint import server_url
from ._model_config import local_cores, plan_workers
from ._pending import PendingLimit, runner_sizes, take_runner_section
from ._remote import RemoteModel
from ._weights import send_weights, weight_sections
from .context import Context
from .errors import InvalidInputError
from .tensor import Tensor

log = logging.getLogger(__name__)

_BUILD_FAILED = "ModelParallelRunner's build from file failed"


class ModelParallelRunner(Served):
    """MindSpore Lite's `ModelParallelRunner`: `workers_num` worker processes of one model on the server.

    `predict` may be called from many threads at once; no lock is held while a request is in flight.
    """

    def __init__(self) -> None:
        self.model_path_ = ""
        self._remote: RemoteModel | None = None
        self._weight_aliases: dict[str, str] = {}
        self._pending = PendingLimit()
        # the model built again for inputs given sizes its file fixes, by the (input, dims) that differ
        self._resized: dict[tuple, RemoteModel] = {}
        self._resize_lock = threading.Lock()

    def build_from_file(self, model_path: str, context: Context | None = None) -> None:
        """Upload the ONNX file (or bind to `triton://<name>`) and start the workers.

        A second call logs a warning and keeps the first build, as MindSpore Lite does.

        Raises:
            TypeError: `model_path` is not a str or `context` not a Context.
            RuntimeError: missing file, unsupported settings (affinity mode 2, too many workers), server
                unreachable, or load failure (`ModelParallelRunner's build from file failed! Error is ...`).
        """
        check_isinstance("model_path", model_path, str)
        problem = model_file_problem(_BUILD_FAILED, model_path)
        if problem is not None:
            raise RuntimeError(problem)
        context = Context() if context is None else check_isinstance("context", context, Context)
        if self._remote is not None:
            log.warning("ModelParallelRunner is already built from '%s'; not rebuilding", self.model_path_)
            return
        if context.cpu.thread_affinity_mode == 2:
            raise RuntimeError(f"{_BUILD_FAILED}! Error is Currently only HIGH_CPU and NO_BIND are supported")
        sections = load_sections(context.parallel.config_path, context.parallel._config_info, _BUILD_FAILED)
        sections, aliases = weight_sections(sections, context.parallel.config_path, _BUILD_FAILED)
        tuned_workers, tuned_threads = runner_sizes(sections, _BUILD_FAILED)
        sections, pending = take_runner_section(sections, _BUILD_FAILED)
        context._warn_unused_settings()
        server_url(context.server_url)  # fail early, with the URL, when no server is reachable
        try:
            plan = plan_workers(
                context, cores=local_cores(), config_workers_num=tuned_workers, config_thread_num=tuned_threads
            )
        except RuntimeError as e:
            raise RuntimeError(f"{_BUILD_FAILED}! Error is {e}") from e
        try:
            self._remote = RemoteModel.build(model_path, context, plan, sections)
        except RuntimeError as e:
            raise build_failed(e, _BUILD_FAILED) from None
        self.model_path_ = model_path
        self._weight_aliases = aliases
        self._pending = pending

    def get_inputs(self) -> list[Tensor]:
        """Fresh input tensors (name, dtype, shape; no data) on every call: safe to fill per thread.

        `[]` before a build, as in MindSpore Lite, which logs an error saying so; so does this.
        """
        if self._remote is None:
            log.error("ModelParallelRunner.get_inputs: the runner is not built yet (build_from_file first); []")
            return []
        return self._remote.input_tensors()

    def predict(self, inputs: list[Tensor], outputs: list[Tensor] | None = None) -> list[Tensor]:
        """Run one request on whichever worker is free.

        Raises:
            TypeError: `inputs` is not a list/tuple of Tensor, or `outputs` not a list.
            RuntimeError: `predict failed! Error is <status>: <reason>`: an input without data, a graph that
                cannot run at the given shape, or the server failed; `ServiceDenyError` (kLiteServiceDeny) at
                once, without asking the server, when this runner already has `[runner] max_pending_predicts`
                predicts in flight (1000 by default), or when the server refuses for overload.
            InvalidInputError: a wrong number of inputs, or the server rejected an input; a ValueError and a
                RuntimeError.
        """
        if not isinstance(inputs, (list, tuple)):
            raise TypeError(f"inputs must be list or tuple, but got {type(inputs)}.")
        for i, t in enumerate(inputs):
            if not isinstance(t, Tensor):
                raise TypeError(f"inputs element must be Tensor, but got {type(t)} at index {i}.")
        if outputs is not None:
            if not isinstance(outputs, list):
                raise TypeError(f"outputs must be list, bug got {type(inputs)}.")
            for i, t in enumerate(outputs):
                if not isinstance(t, Tensor):
                    raise TypeError(f"outputs element must be Tensor, but got {type(t)} at index {i}.")
        if self._remote is None:
            raise RuntimeError("predict failed! Error is kLiteError: call build_from_file first")
        try:
            arrays = input_arrays(list(inputs))
            if len(arrays) != len(self._remote.info.inputs):  # MindSpore Lite's runner fails in its native run
                raise InvalidInputError(
                    f"the model has {len(self._remote.info.inputs)} input(s), the call gave {len(arrays)}"
                )
            remote = self._remote_for(arrays)
            with self._pending.slot():
                results = remote.predict(arrays)
        except RuntimeError as e:
            raise predict_failed(e) from None
        if not results:
            raise RuntimeError("predict failed!")
        return fill_outputs(outputs, results) if outputs else results

    def _remote_for(self, arrays: list) -> RemoteModel:
        """The model that serves these shapes: MindSpore Lite's workers resize to any shape the graph runs.

        Sizes in dims the file fixes are served by the model built again with those dims resizable,
        once per set of such dims (later sizes in the same dims reuse it).
        """
        remote = self._remote
        assert remote is not None
        changed = remote.fixed_dims_changed([a.shape for a in arrays])
        if not changed or remote.slices(arrays) > 1:
            return remote
        key = tuple(sorted(changed.items()))
        with self._resize_lock:
            if key not in self._resized:
                shapes = {t.name: list(a.shape) for t, a in zip(remote.info.inputs, arrays) if t.name in changed}
                self._resized[key] = resized_remote(remote, shapes, "predict failed")
            return self._resized[key]

    def update_weights(self, weights: list[list[Tensor]]) -> None:
        """Replace updatable weights in every worker, without reloading (as `Model.update_weights`).

        Raises:
            TypeError: `weights` is not a list of lists of Tensor.
            InvalidInputError: a tensor is not a declared weight, or its dtype or shape differs; a ValueError
                and a RuntimeError (`update weight failed! Error is ...`).
            RuntimeError: the runner is not built, a tensor has no data, or the server failed.
        """
        send_weights(self._remote, weights, self._weight_aliases, "call build_from_file first")
