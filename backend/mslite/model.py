"""Triton adapter of the `mslite` backend: Triton args -> typed config, pb_utils <-> numpy, errors -> TritonError.

All ONNX Runtime work lives in the `mslite_backend` package beside this file.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import time
import traceback
from typing import Any

import triton_python_backend_utils as pb_utils

from mslite_backend import bytes_wire
from mslite_backend.affinity import config_with_instance, worker_index
from mslite_backend.batching import Feeds, Result
from mslite_backend.config import BackendConfig, InstanceInfo, declared_resized_inputs, declared_variable_weights
from mslite_backend.deadline import ExecuteWatch, stop_runs
from mslite_backend.errors import (
    BackendError,
    ConfigError,
    InferenceFailure,
    ModelLoadError,
    RequestError,
    UpdateDenied,
)
from mslite_backend.executors import Executor, choose_executor
from mslite_backend.graph import plan_auto_complete, read_graph_io
from mslite_backend.loading import load_runtime
from mslite_backend.metrics import (
    WEIGHTS_VERSION_FAMILY,
    WEIGHTS_VERSION_HELP,
    WorkerMetrics,
    worker_labels,
)
from mslite_backend.metrics_publisher import MetricsPublisher
from mslite_backend.model_source import onnx_source
from mslite_backend.runtime import ModelRuntime
from mslite_backend.update_auth import UpdateGuard
from mslite_contract.owned_files import close_stub_region
from mslite_contract.protocol import (
    DEADLINE_EXIT_CODE,
    DEADLINE_PASSED,
    FILE_PARAMETER,
    PROOF_PARAMETER,
    UPDATE_PARAMETER,
    WEIGHTS_INPUT,
)
from mslite_contract.scrub import client_message

# exception class -> Triton error code name (pb_utils fills TritonError in only after this module is imported)
_ERROR_CODES = {
    RequestError: "INVALID_ARG",
    UpdateDenied: "INVALID_ARG",  # the python backend has no PERMISSION_DENIED; the client reads the message
    InferenceFailure: "INTERNAL",
}


_ERROR_KINDS = {RequestError: "invalid_input", InferenceFailure: "inference"}


def _faster_bytes_wire() -> None:
    """Put `bytes_wire`'s conversions of BYTES tensors in place of the stub module's own (see `bytes_wire`).

    Triton's stub looks both up on its module at each call, so this worker's requests use them from here on.
    """
    if hasattr(pb_utils, "serialize_byte_tensor") and hasattr(pb_utils, "deserialize_bytes_tensor"):
        pb_utils.serialize_byte_tensor = bytes_wire.serializer(pb_utils.serialize_byte_tensor)
        pb_utils.deserialize_bytes_tensor = bytes_wire.deserialize


def _log() -> Any:
    return pb_utils.Logger


class TritonPythonModel:
    """One worker: an ONNX Runtime session serving the requests Triton routes to this instance."""

    @staticmethod
    def auto_complete_config(auto_complete_model_config: pb_utils.ModelConfig) -> pb_utils.ModelConfig:
        """Fill inputs, outputs, dtypes, dims, max_batch_size and dynamic batching from the ONNX file."""
        config = auto_complete_model_config.as_dict()
        filename = config.get("default_model_filename") or "model.onnx"
        try:
            directory, filename = onnx_source(pb_utils.get_model_dir(), filename)  # MindIR: converted once
            io = read_graph_io(f"{directory}/{filename}", declared_resized_inputs(config), str(config.get("name")))
            updatable = declared_variable_weights(config)
            plan = plan_auto_complete(config, io)
        except (ConfigError, ModelLoadError) as e:
            raise pb_utils.TritonModelException(f"model '{config.get('name')}': {e}") from None
        if plan.max_batch_size is not None:
            auto_complete_model_config.set_max_batch_size(plan.max_batch_size)
        if plan.dynamic_batching:
            auto_complete_model_config.set_dynamic_batching()
            # pb_utils has no setter for these: as_dict() is the live config that goes back to Triton
            auto_complete_model_config.as_dict()["dynamic_batching"].update(plan.batcher_defaults)
        for entry in plan.inputs:
            auto_complete_model_config.add_input(entry)
        for entry in plan.outputs:
            auto_complete_model_config.add_output(entry)
        if updatable and WEIGHTS_INPUT not in {t.get("name") for t in config.get("input") or []}:
            # the data of a weights update; optional, so user requests never carry it
            auto_complete_model_config.add_input(
                {"name": WEIGHTS_INPUT, "data_type": "TYPE_UINT8", "dims": [-1], "optional": True}
            )
        return auto_complete_model_config

    def __init__(self) -> None:
        self.runtime: ModelRuntime | None = None
        self.executor: Executor | None = None  # how requests run, chosen in `initialize` (`choose_executor`)
        self.instance: InstanceInfo | None = None
        self.output_names: list[str] = []
        self._batched = False  # the config's axis 0 is the batch: samples are rows, not requests
        self._version_family: Any = None
        self._version_metric: Any = None
        self.metrics = WorkerMetrics()
        self._publisher: MetricsPublisher | None = None
        self.update_guard = UpdateGuard.from_environment()
        self._watch: ExecuteWatch | None = None  # the execute deadline's, when the config sets one
        self._in_flight: list[pb_utils.InferenceRequest] = []  # the requests of the `execute` watched

    def initialize(self, args: dict[str, str]) -> None:
        """Parse the config once, load and check the session, warm it up."""
        close_stub_region()  # first: the region carries every request's tensors
        faulthandler.enable()  # a crash in native code (ONNX Runtime, the stub) leaves each thread's stack in the log

        try:
            name = args.get("model_instance_name", "")
            model_config, added = config_with_instance(json.loads(args["model_config"]), name)
            cfg = BackendConfig.from_model_config(model_config)
            self.instance = InstanceInfo.from_args(args, worker_index(model_config, name))
            for warning in cfg.warnings:
                _log().log_warn(warning)
            if added:
                _log().log_warn(
                    f"mslite: instance '{name}' was added to the live model '{cfg.model_name}' (only the instance "
                    f"count changed); the workers already running keep the threads they were sized with"
                )
            version_dir = f"{args['model_repository']}/{args['model_version']}"
            self.runtime = runtime = load_runtime(version_dir, cfg, self.instance)
        except (ConfigError, ModelLoadError) as e:
            raise pb_utils.TritonModelException(str(e)) from None
        # In name order (by bytes, as std::map orders them): the order in which Triton's C++ ONNX Runtime
        # backend answers, whichever outputs were requested and in whatever order
        self.output_names = sorted(t["name"] for t in model_config.get("output", []))
        self._batched = cfg.batched
        if cfg.execute_deadline_s:  # before the executor is chosen: every run is made with the deadline's options
            stop = stop_runs(runtime)
            self._watch = ExecuteWatch(cfg.execute_deadline_s, self._overdue, stop=stop.stop, resume=stop.resume)
            self._watch.start()
        self.executor = choose_executor(runtime)
        for note in runtime.notes:
            _log().log_warn(note)
        labels = worker_labels(cfg.model_name, self.instance.name, os.getpid())
        if cfg.metrics:
            self._publisher = MetricsPublisher(
                labels,
                self.metrics,
                counter_family=lambda name, text: pb_utils.MetricFamily(name, text, pb_utils.MetricFamily.COUNTER),
                warn=lambda message: _log().log_warn(message),
            )
        store = runtime.weights
        if store is not None:
            self._version_family = pb_utils.MetricFamily(
                name=WEIGHTS_VERSION_FAMILY, description=WEIGHTS_VERSION_HELP, kind=pb_utils.MetricFamily.GAUGE
            )
            self._version_metric = self._version_family.Metric(labels=labels)
            store.on_switch = self._weights_switched
            self._weights_switched(store.snapshot().version)
            if not self.update_guard.required:
                _log().log_warn(
                    f"mslite: model '{cfg.model_name}': the server has no admin key, so anyone who reaches its "
                    "inference port can update these weights"
                )
        _log().log_info(
            f"mslite: instance '{self.instance.name}' ready: providers={list(runtime.session.providers)} "
            f"executor={self.executor.kind} "
            f"intra_op_threads={cfg.intra_op_threads} inter_op_threads={cfg.inter_op_threads} "
            f"spinning={cfg.allow_spinning} worker={self.instance.index}/{cfg.workers} "
            f"cores={sorted(os.sched_getaffinity(0))} weights={'shared' if runtime.shared else 'per-worker'} "
            f"updatable={len(cfg.variable_weights)} pid={os.getpid()}"
        )

    def _weights_switched(self, version: int) -> None:
        self._version_metric.set(version)
        _log().log_info(f"mslite: instance '{self.instance_name}' serves weights version {version}")

    def execute(self, requests: list[pb_utils.InferenceRequest]) -> list[pb_utils.InferenceResponse]:
        """Exactly one response per request (`_execute`), within the execute deadline when the config sets one."""
        watch = self._watch
        if watch is None:
            return self._execute(requests)
        self._in_flight = requests
        try:
            with watch.running() as run:
                responses = self._execute(requests)
        finally:
            self._in_flight = []
        return self._stopped(responses, watch.deadline_s) if run.stopped else responses

    def _stopped(
        self, responses: list[pb_utils.InferenceResponse], deadline_s: float
    ) -> list[pb_utils.InferenceResponse]:
        """An `execute` whose run was stopped at the deadline (`deadline`): its failed requests say so."""
        name = self.runtime.cfg.model_name if self.runtime is not None else ""
        message = (
            f"model '{name}': the request {DEADLINE_PASSED} (execute_deadline_s {deadline_s:g} s); its run was stopped"
        )
        _log().log_warn(f"mslite: instance '{self.instance_name}': {message}")
        error = pb_utils.TritonError(message)
        return [pb_utils.InferenceResponse(error=error) if r.has_error() else r for r in responses]

    def _overdue(self, elapsed_s: float) -> None:
        """Past the execute deadline and its grace (the watch's thread): answer the requests in flight, end the worker.

        The run did not stop when told (`deadline`), so the main thread is stuck inside `execute`: the answers
        go through the requests' response senders;
        the process then ends at once (no finalizer can run while `execute` holds the session), and the
        supervisor loads the model again.
        """
        assert self.runtime is not None and self._watch is not None
        message = (
            f"model '{self.runtime.cfg.model_name}': the request {DEADLINE_PASSED} "
            f"(execute_deadline_s {self._watch.deadline_s:g} s); the worker running it was ended and is replaced"
        )
        # stderr goes to the server log directly: Triton's logger would send it through the process that ends
        sys.stderr.write(
            f"mslite: instance '{self.instance_name}' (pid {os.getpid()}): execute still running after "
            f"{elapsed_s:.1f} s, past execute_deadline_s {self._watch.deadline_s:g} s, and its run did not stop when "
            f"told; ending this worker\n"
        )
        sys.stderr.flush()
        for request in self._in_flight:
            try:
                request.get_response_sender().send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(message)),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
            except Exception as e:  # noqa: BLE001 - Triton then answers it "not healthy" itself
                sys.stderr.write(f"mslite: could not answer a request past its deadline: {e}\n")
        os._exit(DEADLINE_EXIT_CODE)

    def _execute(self, requests: list[pb_utils.InferenceRequest]) -> list[pb_utils.InferenceResponse]:
        """Exactly one response per request; a bad request fails alone.

        Weights updates are applied while the inputs are read, before anything runs, so the other requests
        of the batch already see them; every other request goes through the executor `initialize` chose.
        The metrics are only queued, and only when a publisher sends them.
        """
        pending: list[pb_utils.InferenceResponse | None] = []  # an update's response, or None: the request runs
        feeds: list[Feeds] = []
        for request in requests:
            raw = request.parameters()
            if raw and UPDATE_PARAMETER in raw:  # parse only what may be an update
                params = json.loads(raw)
                if UPDATE_PARAMETER in params:
                    pending.append(self._update(request, params))
                    continue
            pending.append(None)
            feeds.append({t.name(): t.as_numpy() for t in request.inputs()})
        results = iter(self._run(feeds) if feeds else ())
        respond = self._respond
        return [respond(request, next(results)) if done is None else done for request, done in zip(requests, pending)]

    def _run(self, feeds: list[Feeds]) -> list[Result]:
        """The executor's results for the inputs of the requests to run (an error for each, if it fails)."""
        assert self.executor is not None, "execute before initialize"
        started = time.perf_counter()
        try:
            results = self.executor(feeds)
        except Exception:  # a bug of ours: every request gets a short message, the log the traceback
            _log().log_error(f"mslite: execute failed:\n{traceback.format_exc()}")
            results = [InferenceFailure("internal error in the mslite backend")] * len(feeds)
        if self._publisher is not None:  # nobody reads the figures otherwise
            elapsed_ms = (time.perf_counter() - started) * 1000.0
            self.metrics.record(elapsed_ms, _samples(feeds) if self._batched else len(feeds))
        return results

    def _respond(self, request: pb_utils.InferenceRequest, result: Result) -> pb_utils.InferenceResponse:
        """The response of one request that ran: its outputs, or its error (counted in the metrics)."""
        if isinstance(result, BackendError):
            self.metrics.error(_ERROR_KINDS.get(type(result), "internal"))
            return _refusal(result)
        # with one output there is nothing to choose (and Triton checks requested names before we run); the
        # requested names are a set, whose order differs in every worker: the outputs go in `output_names` order
        names = self.output_names
        requested = request.requested_output_names() if len(names) > 1 else None
        return pb_utils.InferenceResponse(
            [pb_utils.Tensor(n, result[n]) for n in names if n in result and (not requested or n in requested)]
        )

    def _update(self, request: pb_utils.InferenceRequest, params: dict[str, Any]) -> pb_utils.InferenceResponse:
        """Publish the new weights a request carries (or names) to every worker; the reply has no outputs.

        Only an update that proves the admin key is applied (`UpdateGuard`).
        """
        runtime = self.runtime
        assert runtime is not None, "execute before initialize"
        started = time.perf_counter()
        manifest, file = str(params[UPDATE_PARAMETER]), params.get(FILE_PARAMETER)
        try:
            proof = params.get(PROOF_PARAMETER)
            name = runtime.cfg.model_name
            data = None if file is not None else pb_utils.get_input_tensor_by_name(request, WEIGHTS_INPUT)
            values = None if data is None else data.as_numpy()
            self.update_guard.check(
                name,
                manifest,
                "" if file is None else str(file),
                proof and str(proof),
                values,
                used=runtime.weights,  # None without updatable weights: refused below anyway
            )
            if file is not None:
                version = runtime.update_weights(manifest, file=str(file))
                size = runtime.weights.size if runtime.weights is not None else 0
            else:
                if values is None:
                    raise RequestError(f"a weights update needs its data in input '{WEIGHTS_INPUT}'")
                size = values.nbytes
                version = runtime.update_weights(manifest, values)
        except UpdateDenied as e:  # for the operator: someone tried to change the weights without the key
            _log().log_warn(f"mslite: instance '{self.instance_name}': {e}")
            return _refusal(e)
        except BackendError as e:
            return _refusal(e)
        except Exception:
            _log().log_error(f"mslite: weights update failed:\n{traceback.format_exc()}")
            return _refusal(InferenceFailure("internal error while updating weights"))
        _log().log_info(
            f"mslite: instance '{self.instance_name}' published weights version {version} "
            f"({size / 2**20:.1f} MiB{' from a file' if file is not None else ''} in "
            f"{(time.perf_counter() - started) * 1000:.0f} ms)"
        )
        return pb_utils.InferenceResponse(output_tensors=[])

    @property
    def instance_name(self) -> str:
        """The Triton instance name of this worker."""
        return self.instance.name if self.instance else ""

    def finalize(self) -> None:
        """Flush the metrics, leave the weights store and drop the session (safe to call twice)."""
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None
        if self.runtime is not None:
            self.runtime.close()
        self.runtime = None
        self._version_metric = None  # a Metric must go before its MetricFamily
        self._version_family = None


def _refusal(error: BackendError) -> pb_utils.InferenceResponse:
    """The error response of one request: Triton's code for the error's class, a message safe for a client."""
    code = getattr(pb_utils.TritonError, _ERROR_CODES.get(type(error), "INTERNAL"))
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(client_message(str(error)), code))


def _samples(feeds: list[dict[str, Any]]) -> int:
    """Rows of a batch of requests of a batched model (every input of a request has the same batch size)."""
    rows = 0
    for f in feeds:
        for array in f.values():
            rows += len(array) if array.ndim else 1
            break
    return rows


def _neutral_file_name(cls: type, name: str = "mslite/model.py") -> None:
    """Name this file `name` in the tracebacks of Triton's entry points into `cls`.

    Triton's python stub appends a traceback of the entry point's frame to the error of a failed load
    ("At: /<backend directory>/mslite/model.py(116): auto_complete_config"), and Triton returns it to
    the client that asked for the load, with or without a gateway; a neutral name keeps the server's
    directories out of it. (The worker's own log loses the source line of those frames, not the line
    number.)
    """
    for attr in ("auto_complete_config", "initialize", "execute", "finalize"):
        entry = vars(cls)[attr]
        func = entry.__func__ if isinstance(entry, staticmethod) else entry
        func.__code__ = func.__code__.replace(co_filename=name)


_neutral_file_name(TritonPythonModel)
_faster_bytes_wire()
