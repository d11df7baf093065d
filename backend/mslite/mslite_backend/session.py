"""One ONNX Runtime session per worker: providers, threads and the checks ORT does not do itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mslite_contract.scrub import client_message

from .config import BackendConfig, InstanceInfo
from .errors import ConfigError, InferenceFailure, ModelLoadError, RequestError
from .providers import ProviderChoice, check_available, choose


def providers_for(instance: InstanceInfo, cfg: BackendConfig, *, cuda_graph: bool = False) -> ProviderChoice:
    """The provider of this worker: KIND_CPU -> CPU, KIND_GPU -> CUDA, KIND_MODEL + Ascend devices -> CANN."""
    if instance.kind not in ("CPU", "GPU", "MODEL"):
        raise ConfigError(f"instance '{instance.name}': unsupported instance kind '{instance.kind}'")
    return choose(
        instance.kind,
        instance.device_id,
        instance.index,
        dict(cfg.device_params),
        gpu_precision=cfg.precision_mode,
        cuda_graph=cuda_graph,
    )


@dataclass(frozen=True)
class SessionSettings:
    """What a session is opened with, whichever of ONNX Runtime's APIs opens it (Python, or C: `ort_c_strings`)."""

    intra_op_threads: int
    inter_op_threads: int
    parallel: bool  # ORT's parallel execution mode, else sequential
    mem_arena: bool
    optimization_level: int  # a GraphOptimizationLevel value (0: none ... 99: all)
    config_entries: tuple[tuple[str, str], ...]


def session_settings(
    cfg: BackendConfig, *, preoptimized: bool = False, config_entries: tuple[tuple[str, str], ...] = ()
) -> SessionSettings:
    """The settings of a session of this config.

    Args:
        cfg: the typed config (threads, execution mode, arena, optimization level, spinning).
        preoptimized: the model was saved already optimized (and prepacked): do not optimize again.
        config_entries: extra session config entries (e.g. where a serialized model's external data is).
    """
    entries = tuple(config_entries)
    if not cfg.allow_spinning:
        # Workers x threads exceed the cores: spinning threads would steal time from other workers.
        entries = (("session.intra_op.allow_spinning", "0"), ("session.inter_op.allow_spinning", "0"), *entries)
    return SessionSettings(
        intra_op_threads=cfg.intra_op_threads,
        inter_op_threads=cfg.inter_op_threads,
        parallel=cfg.execution_mode == "parallel",
        mem_arena=cfg.enable_mem_arena,
        optimization_level=0 if preoptimized else cfg.graph_optimization_level,
        config_entries=entries,
    )


def session_options(
    cfg: BackendConfig, *, preoptimized: bool = False, config_entries: tuple[tuple[str, str], ...] = ()
) -> Any:
    """ONNX Runtime's Python `SessionOptions` of `session_settings`."""
    import onnxruntime as ort

    settings = session_settings(cfg, preoptimized=preoptimized, config_entries=config_entries)
    so = ort.SessionOptions()
    so.intra_op_num_threads = settings.intra_op_threads
    so.inter_op_num_threads = settings.inter_op_threads
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL if settings.parallel else ort.ExecutionMode.ORT_SEQUENTIAL
    so.enable_cpu_mem_arena = settings.mem_arena
    so.graph_optimization_level = ort.GraphOptimizationLevel(settings.optimization_level)
    for key, value in settings.config_entries:
        so.add_session_config_entry(key, value)
    return so


class OrtSession:
    """An `InferenceSession` whose providers were verified, with errors mapped to backend errors."""

    def __init__(
        self,
        path: str | bytes,
        cfg: BackendConfig,
        instance: InstanceInfo,
        *,
        preoptimized: bool = False,
        config_entries: tuple[tuple[str, str], ...] = (),
        cuda_graph: bool = False,
    ) -> None:
        """Create the session.

        Args:
            path: the model file, or a serialized model.
            cfg: the typed config.
            instance: which worker, and its kind.
            preoptimized: the model was saved already optimized (and prepacked): do not optimize again.
            config_entries: extra session config entries (e.g. where a serialized model's external data is).
            cuda_graph: a CUDA session that captures a graph and replays it (runs only through `run_bound`).

        Raises:
            ModelLoadError: the file cannot be loaded, or the requested provider is not active
                (ONNX Runtime silently falls back to CPU; we do not).
        """
        import onnxruntime as ort

        choice = providers_for(instance, cfg, cuda_graph=cuda_graph)
        wanted = choice.name
        providers = choice.providers()
        where = f"model '{cfg.model_name}', instance '{instance.name}'"
        check_available(choice, ort.get_available_providers(), where)
        so = session_options(cfg, preoptimized=preoptimized, config_entries=config_entries)
        try:
            self._session = ort.InferenceSession(path, so, providers=providers)
        except Exception as e:
            raise ModelLoadError(f"{where}: ONNX Runtime could not load the model: {client_message(str(e))}") from e
        active = self._session.get_providers()
        if not active or active[0] != wanted:
            raise ModelLoadError(f"{where}: asked for {wanted} but ONNX Runtime runs {active}")
        self.providers = tuple(active)
        # On CPU, ORT's own run without the Python wrapper's checks on every call (required inputs, which
        # RequestChecks.validate checks already; graph capture; OrtValue ownership; and its EP-failure
        # fallback, which on CPU has nowhere else to go): a few us per request, as much as a tiny model's run.
        inner: Any = getattr(self._session, "_sess", None)
        # ORT's run(output_names, feeds, run_options), or None; its exceptions go through `failure`
        self.direct = inner.run if wanted == "CPUExecutionProvider" and hasattr(inner, "run") else None
        self.run_options: Any = None  # ORT `RunOptions` of every run, when set (`use_run_options`)

    def use_run_options(self, options: Any) -> None:
        """Make every later run with ORT `options` (the execute deadline stops runs through them: `deadline`)."""
        self.run_options = options
        direct = self.direct
        if direct is not None:  # its callers pass None for the options
            self.direct = lambda names, feeds, _none: direct(names, feeds, options)

    def run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run once.

        Raises:
            RequestError: ONNX Runtime rejected the inputs (shape or value problems).
            InferenceFailure: any other runtime failure.
        """
        try:
            if self.direct is not None:
                return self.direct(output_names, feeds, None)  # type: ignore[no-any-return]
            return self._session.run(output_names, feeds, self.run_options)  # type: ignore[no-any-return]
        except Exception as e:
            raise failure(e) from e

    def release(self) -> None:
        """Drop ONNX Runtime's session (its model and buffers); only `providers` stays, for the log.

        For a model whose runs all go elsewhere (a string model on its C API session, `ort_c_strings`).
        """
        self._session = None
        self.direct = None

    def io_binding(self) -> Any:
        """A new ONNX Runtime IOBinding of this session (`bound.BoundBucket` binds its buffers to it)."""
        return self._session.io_binding()

    def run_bound(self, binding: Any, options: Any = None) -> None:
        """Run on the buffers bound to `binding` (its outputs are written in place), with ORT `RunOptions`.

        Raises:
            RequestError, InferenceFailure: as `run`.
        """
        try:
            self._session.run_with_iobinding(binding, self.run_options if options is None else options)
        except Exception as e:
            raise failure(e) from e


def failure(e: Exception) -> RequestError | InferenceFailure:
    """The backend error of an exception ONNX Runtime raised while running (`OrtSession.run`)."""
    if isinstance(e, UnicodeDecodeError):  # ONNX Runtime decodes string outputs as UTF-8 (see `strings`)
        return InferenceFailure(
            "inference failed: the model returned a string that is not valid UTF-8, which this backend cannot "
            "take from ONNX Runtime"
        )
    kind = type(e).__name__
    msg = client_message(str(e))
    if kind in ("InvalidArgument", "InvalidProtobuf") or "INVALID_ARGUMENT" in str(e):
        return RequestError(msg)
    return InferenceFailure(f"inference failed: {msg}")
