"""MindSpore Lite's Python inference API, served by Triton Inference Server.

`import mslite_triton as mslite` and keep the rest of the MindSpore Lite code unchanged.
"""

from .context import Context
from .model import Model
from .runner import ModelParallelRunner
from .tensor import DataType, Format, ModelType, Tensor, TensorMeta

__all__ = ["Context", "DataType", "Format", "Model", "ModelParallelRunner", "ModelType", "Tensor", "TensorMeta"]
