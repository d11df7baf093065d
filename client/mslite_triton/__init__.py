"""MindSpore Lite's Python inference API, served by Triton Inference Server.

`import mslite_triton as mslite` and keep the rest of the MindSpore Lite code unchanged.
"""

from . import _library_log
from .context import Context
from .converter import Converter, FmkType
from .lite_infer import LiteInfer
from .model import Model, ModelGroup, ModelGroupFlag, ModelParallelRunner, ModelType
from .tensor import DataType, Format, Tensor, TensorMeta

_library_log.install()

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
