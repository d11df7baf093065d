"""Triton adapter of the `mslite` backend: Triton args -> typed config, pb_utils <-> numpy, errors -> TritonError.

All ONNX Runtime work lives in the `mslite_backend` package beside this file.
"""

from __future__ import annotations

import json
import os
import traceback
from typing import Any

import triton_python_backend_utils as pb_utils

from mslite_backend.affinity import worker_index
from mslite_backend.config import BackendConfig, InstanceInfo
from mslite_backend.errors import (
    BackendError,
    ConfigError,
    InferenceFailure,
    ModelLoadError,
    RequestError,
    client_message,
)
from mslite_backend.graph import plan_auto_complete, read_graph_io

# exception class -> Triton error code name (pb_utils fills TritonError in only after this module is imported)
_ERROR_CODES = {
    RequestError: "INVALID_ARG",
    InferenceFailure: "INTERNAL",
}


def _log() -> Any:
    return pb_utils.Logger


class TritonPythonModel:
    """One worker: an ONNX Runtime session serving the requests Triton routes to this instance."""

    @staticmethod
    def auto_complete_config(auto_complete_model_config: Any) -> Any:
        """Fill inputs, outputs, dtypes, dims, max_batch_size and dynamic batching from the ONNX file."""
        config = auto_complete_model_config.as_dict()
        filename = config.get("default_model_filename") or "model.onnx"
        try:
            io = read_graph_io(f"{pb_utils.get_model_dir()}/{filename}")
        except ModelLoadError as e:
            raise pb_utils.TritonModelException(f"model '{config.get('name')}': {e}") from None
        plan = plan_auto_complete(config, io)
        if plan.max_batch_size is not None:
            auto_complete_model_config.set_max_batch_size(plan.max_batch_size)
        if plan.dynamic_batching:
            auto_complete_model_config.set_dynamic_batching()
        for entry in plan.inputs:
            auto_complete_model_config.add_input(entry)
        for entry in plan.outputs:
            auto_complete_model_config.add_output(entry)
        return auto_complete_model_config

    def __init__(self) -> None:
        self.runtime: Any = None
        self.instance: InstanceInfo | None = None
        self.output_names: list[str] = []

    def initialize(self, args: dict[str, str]) -> None:
        """Parse the config once, load and check the session, warm it up."""
        from mslite_backend.runtime import ModelRuntime  # imports onnxruntime: keep it out of auto-complete

        try:
            model_config = json.loads(args["model_config"])
            cfg = BackendConfig.from_model_config(model_config)
            name = args.get("model_instance_name", "")
            self.instance = InstanceInfo.from_args(args, worker_index(model_config, name))
            for warning in cfg.warnings:
                _log().log_warn(warning)
            version_dir = f"{args['model_repository']}/{args['model_version']}"
            self.runtime = ModelRuntime.load(version_dir, cfg, self.instance)
        except (ConfigError, ModelLoadError) as e:
            raise pb_utils.TritonModelException(str(e)) from None
        self.output_names = [t["name"] for t in model_config.get("output", [])]
        _log().log_info(
            f"mslite: instance '{self.instance.name}' ready: providers={list(self.runtime.session.providers)} "
            f"intra_op_threads={cfg.intra_op_threads} inter_op_threads={cfg.inter_op_threads} "
            f"spinning={cfg.allow_spinning} worker={self.instance.index}/{cfg.workers} "
            f"cores={sorted(os.sched_getaffinity(0))}"
        )

    def execute(self, requests: list[Any]) -> list[Any]:
        """Exactly one response per request; a bad request fails alone."""
        feeds = [{t.name(): t.as_numpy() for t in request.inputs()} for request in requests]
        try:
            results = self.runtime.execute(feeds)
        except Exception:  # a bug of ours: every request gets a short message, the log the traceback
            _log().log_error(f"mslite: execute failed:\n{traceback.format_exc()}")
            error = pb_utils.TritonError("internal error in the mslite backend", pb_utils.TritonError.INTERNAL)
            return [pb_utils.InferenceResponse(error=error) for _ in requests]
        return [self._response(request, result) for request, result in zip(requests, results)]

    def _response(self, request: Any, result: Any) -> Any:
        if isinstance(result, BackendError):
            code = getattr(pb_utils.TritonError, _ERROR_CODES.get(type(result), "INTERNAL"))
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(client_message(str(result)), code))
        wanted = request.requested_output_names() or self.output_names
        tensors = [pb_utils.Tensor(name, result[name]) for name in wanted if name in result]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def finalize(self) -> None:
        """Drop the session (safe to call twice)."""
        self.runtime = None
