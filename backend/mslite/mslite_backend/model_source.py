"""The ONNX file a worker loads: the model file itself, or the cached conversion of a MindIR one."""

from __future__ import annotations

from dataclasses import replace

from mslite_contract import mindir

from .config import BackendConfig
from .errors import ModelLoadError


def onnx_source(version_dir: str, filename: str) -> tuple[str, str]:
    """`mindir.onnx_source`, its refusal raised as the load error the worker reports.

    Raises:
        ModelLoadError: a `.ms` file, a MindIR file without MindSpore, or one MindSpore could not convert.
    """
    try:
        return mindir.onnx_source(version_dir, filename)
    except mindir.ModelFileError as e:
        raise ModelLoadError(str(e)) from e


def resolve(version_dir: str, cfg: BackendConfig) -> tuple[str, BackendConfig]:
    """The directory to load from and the config naming the file there.

    Raises:
        ModelLoadError: as `onnx_source`.
    """
    directory, filename = onnx_source(version_dir, cfg.model_filename)
    if directory == version_dir and filename == cfg.model_filename:
        return version_dir, cfg
    return directory, replace(cfg, model_filename=filename)
