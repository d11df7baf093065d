"""A stand-in for `triton_python_backend_utils`, the module Triton's python stub gives a backend's model.py.

The part model.py uses (typings/triton_python_backend_utils.pyi lists it), as plain Python objects that keep
what they were given, so unit tests can call `TritonPythonModel.initialize`/`execute` without a server and
look at the responses. `install()` puts it in `sys.modules` and loads backend/mslite/model.py against it.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np

MODEL_PY = Path(__file__).resolve().parents[2] / "backend" / "mslite" / "model.py"


class TritonModelException(Exception):
    pass


class TritonError:
    INTERNAL = 13
    INVALID_ARG = 3

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message, self._code = message, code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class Tensor:
    def __init__(self, name: str, data: np.ndarray) -> None:
        if not isinstance(data, np.ndarray):  # the real one refuses anything else too
            raise TypeError(f"Tensor '{name}' needs a numpy array, got {type(data).__name__}")
        self._name, self._data = name, data

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._data


TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1


class InferenceResponseSender:
    """Keeps each (response, flags) sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[InferenceResponse | None, int]] = []

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        self.sent.append((response, flags))


class InferenceRequest:
    """A request as Triton hands it to `execute`: input tensors, the JSON of its parameters, requested outputs."""

    def __init__(self, inputs: dict[str, np.ndarray], parameters: str = "{}", requested: tuple[str, ...] = ()) -> None:
        self._inputs = [Tensor(name, array) for name, array in inputs.items()]
        self._parameters = parameters
        self._requested = list(requested)
        self.sender = InferenceResponseSender()

    def get_response_sender(self) -> InferenceResponseSender:
        return self.sender

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def parameters(self) -> str:
        return self._parameters

    def requested_output_names(self) -> list[str]:
        return self._requested


class InferenceResponse:
    def __init__(self, output_tensors: list[Tensor] | None = None, error: TritonError | None = None) -> None:
        self._tensors = list(output_tensors or [])
        self._error = error

    def output_tensors(self) -> list[Tensor]:
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error


class Logger:
    """Keeps every line, by level, so a test can read what the worker logged."""

    lines: list[tuple[str, str]] = []

    @staticmethod
    def log_info(message: str) -> None:
        Logger.lines.append(("info", message))

    @staticmethod
    def log_warn(message: str) -> None:
        Logger.lines.append(("warn", message))

    @staticmethod
    def log_error(message: str) -> None:
        Logger.lines.append(("error", message))


class Metric:
    def __init__(self, labels: dict[str, str] | None) -> None:
        self.labels, self.value = dict(labels or {}), 0.0

    def set(self, value: float) -> None:
        self.value = value

    def increment(self, value: float) -> None:
        self.value += value


class MetricFamily:
    COUNTER = 0
    GAUGE = 1

    def __init__(self, name: str, description: str, kind: int) -> None:
        self.name, self.description, self.kind = name, description, kind

    def Metric(self, labels: dict[str, str] | None = None) -> Metric:  # noqa: N802 (Triton's name)
        return Metric(labels)


def get_model_dir() -> str:
    raise TritonModelException("no model directory outside Triton")


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    for tensor in request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def install() -> types.ModuleType:
    """This module as `triton_python_backend_utils`, and backend/mslite/model.py loaded against it (once)."""
    sys.modules["triton_python_backend_utils"] = sys.modules[__name__]
    loaded = sys.modules.get("mslite_model")
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location("mslite_model", MODEL_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mslite_model"] = module
    spec.loader.exec_module(module)
    return module


def outputs(response: Any) -> dict[str, np.ndarray]:
    """A response's tensors by name, in the order the response holds them (dicts keep it)."""
    return {t.name(): t.as_numpy() for t in response.output_tensors()}
