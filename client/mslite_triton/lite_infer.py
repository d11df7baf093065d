"""`LiteInfer`: a MindSpore network served as a `Model` (MindSpore Lite's `lite_infer` module)."""

from __future__ import annotations

import inspect
import os
import sys
import tempfile
from typing import Any

from mslite_contract import mindir

from ._checkparam import check_isinstance
from .context import Context
from .model import Model
from .tensor import ModelType

__all__ = ["LiteInfer"]


class LiteInfer(Model):
    """MindSpore Lite's `LiteInfer`: a MindSpore network, exported to ONNX here and served as a `Model`.

    Needs MindSpore in this process (the `[mindir]` extra), imported before
    `mslite_triton`: MindSpore's generated protobuf code needs the pure-Python protobuf, which it can only
    choose before anything has loaded protobuf. Every input of rank >= 1 gets a dynamic batch axis.
    """

    def __init__(self, train_model: Any, *net_inputs: Any, context: Context | None = None) -> None:
        """Export `train_model`'s predict network with `net_inputs`' shapes and dtypes, and build it.

        Args:
            train_model: a `mindspore.train.Model` (its predict network is exported), or a `mindspore.nn.Cell`.
            net_inputs: example inputs (MindSpore Tensors or numpy arrays), one per network input.
            context: where and how to serve it, as for `Model.build_from_file`.

        Raises:
            ImportError: MindSpore is not installed, or could not be imported (with the reason).
            ValueError: `train_model` is neither a MindSpore Model nor a Cell.
            RuntimeError: the export or the build failed.
        """
        super().__init__()
        ms = _import_mindspore()
        if isinstance(train_model, ms.train.Model):
            network = train_model.predict_network
        elif isinstance(train_model, ms.nn.Cell):
            network = train_model
        else:
            raise ValueError("For LiteInfer, input train model is not ms.train.Model.")
        context = Context() if context is None else check_isinstance("context", context, Context)
        tensors = [t if isinstance(t, ms.Tensor) else ms.Tensor(t) for t in net_inputs]
        names = _input_names(network, len(tensors))
        specs = [(n, t.dtype, list(t.shape)) for n, t in zip(names, tensors)]
        with tempfile.TemporaryDirectory(prefix="mslite-liteinfer-") as scratch:
            path = os.path.join(scratch, f"{type(network).__name__}.onnx")
            try:
                mindir.export_onnx(lambda: network, specs, path)
            except Exception as e:  # MindSpore raises RuntimeError/ValueError/TypeError by operator
                message = f"build_from_file failed! Error is kLiteError: MindSpore could not export the network: {e}"
                raise RuntimeError(message) from None
            self.build_from_file(path, ModelType.MINDIR, context)


def _import_mindspore() -> Any:
    if "mindspore" in sys.modules:
        return sys.modules["mindspore"]
    if not mindir.mindspore_available():
        raise ImportError(f"For 'LiteInfer', import mindspore fail: it is not installed ({mindir.EXTRA_INSTALL})")
    try:
        import mindspore  # type: ignore[import-not-found,unused-ignore]
    except Exception as e:  # the protobuf clash raises TypeError, not ImportError
        raise ImportError(
            f"For 'LiteInfer', import mindspore fail ({type(e).__name__}); import mindspore before mslite_triton"
        ) from e
    return mindspore


def _input_names(network: Any, count: int) -> list[str]:
    """The network's `construct` parameter names, as MindSpore names the inputs of an exported graph."""
    try:
        params = [
            p.name
            for p in inspect.signature(network.construct).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    return params[:count] if len(params) >= count else [f"input_{i}" for i in range(count)]
