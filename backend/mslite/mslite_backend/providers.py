"""Which ONNX Runtime execution provider a worker runs on, with options, and why it may not be available.

KIND_CPU -> CPU. KIND_GPU -> CUDA on the instance's device. KIND_MODEL with `ascend_device_ids` ->
CANN (onnxruntime-cann) on the worker's Ascend device: Triton has no Ascend kind, so the client
lists one device per worker and worker i takes entry i. A provider that is not in this ONNX Runtime
build fails the load, naming the provider and what to install; nothing silently runs on CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from mslite_contract.protocol import ASCEND_DEVICE_IDS_PARAMETER, ASCEND_PRECISION_MODE_PARAMETER

from .errors import ConfigError, ModelLoadError

# MindSpore Lite's Ascend precision modes -> the CANN provider's `precision_mode` values
ASCEND_PRECISION = {
    "enforce_fp32": "force_fp32",
    "preferred_fp32": "allow_fp32_to_fp16",
    "enforce_fp16": "force_fp16",
    "enforce_origin": "must_keep_origin_dtype",
    "preferred_optimal": "allow_mix_precision",
}
_INSTALL = {
    "CUDAExecutionProvider": "install onnxruntime-gpu built for the CUDA libraries of the worker's environment",
    "CANNExecutionProvider": "install onnxruntime-cann with the Ascend CANN toolkit, on a host with an Ascend device",
}


@dataclass(frozen=True)
class ProviderChoice:
    """The provider list for InferenceSession and what the worker must set before importing ORT."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def providers(self) -> list[Any]:
        """The `providers=` argument of InferenceSession."""
        return [(self.name, self.options)] if self.options else [self.name]


def choose(
    kind: str,
    device_id: int,
    index: int,
    params: dict[str, str],
    *,
    gpu_precision: str = "enforce_fp32",
    cuda_graph: bool = False,
) -> ProviderChoice:
    """Pick the provider of worker `index` of an instance of `kind` on `device_id`.

    `cuda_graph`: a GPU session that captures its first runs as a CUDA graph and replays it (bound buckets).

    Raises:
        ConfigError: an Ascend worker without a device, or an unknown precision mode.
    """
    if kind == "GPU":
        # enforce_fp32 (the default) keeps FP32 arithmetic: the CUDA provider's default TF32 convolutions and
        # matmuls change results by ~1e-3 relative, and differently at each batch size (measured on an H200)
        cuda: dict[str, Any] = {"device_id": device_id, "use_tf32": 0 if gpu_precision == "enforce_fp32" else 1}
        if cuda_graph:
            cuda["enable_cuda_graph"] = "1"
        return ProviderChoice("CUDAExecutionProvider", cuda)
    if kind == "MODEL" and params.get(ASCEND_DEVICE_IDS_PARAMETER):
        devices = [int(d) for d in params[ASCEND_DEVICE_IDS_PARAMETER].split(",") if d.strip()]
        if index >= len(devices):
            raise ConfigError(f"{ASCEND_DEVICE_IDS_PARAMETER} lists {len(devices)} devices, worker {index} has none")
        options: dict[str, Any] = {"device_id": devices[index]}
        mode = params.get(ASCEND_PRECISION_MODE_PARAMETER, "")
        if mode:
            if mode not in ASCEND_PRECISION:
                raise ConfigError(
                    f"{ASCEND_PRECISION_MODE_PARAMETER} must be one of {sorted(ASCEND_PRECISION)}, got '{mode}'"
                )
            options["precision_mode"] = ASCEND_PRECISION[mode]
        # the worker's device, for CANN's own runtime, set before onnxruntime is imported
        return ProviderChoice("CANNExecutionProvider", options, {"ASCEND_DEVICE_ID": str(devices[index])})
    return ProviderChoice("CPUExecutionProvider")


def check_available(choice: ProviderChoice, available: list[str], where: str) -> None:
    """Fail the load when the provider is not in this ONNX Runtime build.

    Raises:
        ModelLoadError: naming the provider, what is available, and what to install.
    """
    if choice.name not in available:
        raise ModelLoadError(
            f"{where}: {choice.name} is not available in this ONNX Runtime build (available: {available}); "
            f"{_INSTALL.get(choice.name, '')}".rstrip("; ")
        )


def apply_env(choice: ProviderChoice) -> None:
    """Set the device environment of the chosen provider (before onnxruntime is imported)."""
    os.environ.update(choice.env)
