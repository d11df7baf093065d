"""MindSpore Lite's Python inference API, served by Triton Inference Server.

`import mslite_triton as mslite` and keep the rest of the MindSpore Lite code unchanged.
"""

import logging as _logging
import os as _os

from .context import Context
from .converter import Converter, FmkType
from .lite_infer import LiteInfer
from .model import Model, ModelGroup, ModelGroupFlag, ModelParallelRunner, ModelType
from .tensor import DataType, Format, Tensor, TensorMeta

# MSLITE_TRITON_LOG=info shows what the library does for you: the embedded server it starts, the models it loads.
if _os.environ.get("MSLITE_TRITON_LOG"):
    _handler = _logging.StreamHandler()
    _handler.setFormatter(_logging.Formatter("mslite_triton: %(message)s"))
    _logging.getLogger(__name__).addHandler(_handler)
    _logging.getLogger(__name__).setLevel(_os.environ["MSLITE_TRITON_LOG"].upper())

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
