"""MindSpore Lite's Python inference API, served by Triton Inference Server.

`import mslite_triton as mslite` and keep the rest of the MindSpore Lite code unchanged.
"""

import logging as _logging

from mslite_backend import settings as _settings

from .context import Context
from .converter import Converter, FmkType, LiteInfer
from .model import Model
from .model_group import ModelGroup, ModelGroupFlag
from .runner import ModelParallelRunner
from .tensor import DataType, Format, ModelType, Tensor, TensorMeta

# A level in `settings.LOG_ENV` (info) shows what the library does for you: the embedded server it starts, the
# models it loads.
if _level := _settings.log_level():
    _handler = _logging.StreamHandler()
    _handler.setFormatter(_logging.Formatter("mslite_triton: %(message)s"))
    _logging.getLogger(__name__).addHandler(_handler)
    _logging.getLogger(__name__).setLevel(_level)

# One name per line, in MindSpore Lite's order where it has one, so exports are added without churn.
__all__ = [
    "Context",
    "Model",
    "ModelParallelRunner",
    "ModelGroup",
    "ModelGroupFlag",
    "ModelType",
    "Tensor",
    "TensorMeta",
    "DataType",
    "Format",
    "Converter",
    "FmkType",
    "LiteInfer",
]
