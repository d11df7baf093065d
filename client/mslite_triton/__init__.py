"""MindSpore Lite's Python inference API, served by Triton Inference Server.

`import mslite_triton as mslite` and keep the rest of the MindSpore Lite code unchanged.
"""

import logging as _logging

from mslite_contract import settings as _settings

from .context import Context
from .converter import Converter, FmkType
from .lite_infer import LiteInfer
from .model import Model, ModelGroup, ModelGroupFlag, ModelParallelRunner, ModelType
from .tensor import DataType, Format, Tensor, TensorMeta


class _Prefixed(_logging.StreamHandler):  # type: ignore[type-arg]
    """Python's last-resort output (stderr, WARNING and up) with the library's name in front of each message.

    Only while the application has configured no logging of its own; then its handlers show the records.
    """

    def emit(self, record: _logging.LogRecord) -> None:
        if not _logging.getLogger().handlers or self.level < _logging.WARNING:
            super().emit(record)


# A level in `settings.LOG_ENV` (info) shows what the library does for you: the local server it starts, the
# models it loads; without one, its warnings still reach stderr with the library's name.
_level = _settings.log_level()
_handler = _Prefixed()
_handler.setFormatter(_logging.Formatter("mslite_triton: %(message)s"))
_handler.setLevel(_level or "WARNING")
_logging.getLogger(__name__).addHandler(_handler)
if _level:
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
