"""MindSpore Lite's Python inference API, served by Triton Inference Server.

`import mslite_triton as mslite` and keep the rest of the MindSpore Lite code unchanged.
"""

from .context import Context
from .converter import Converter, FmkType, LiteInfer
from .model import Model
from .model_group import ModelGroup, ModelGroupFlag
from .runner import ModelParallelRunner
from .tensor import DataType, Format, ModelType, Tensor, TensorMeta

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
