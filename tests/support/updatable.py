"""A model with one updatable weight whose value shows in every answer: y = x @ w, w = I (4 x 4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import mslite_triton as mslite


def linear_model() -> bytes:
    """y = x @ w, w = I (4 x 4): an updatable weight whose value shows in every answer."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        initializer=[numpy_helper.from_array(np.eye(4, dtype=np.float32), name="w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def build_updated(url: str | None, root: Path, scale: float = 10.0) -> mslite.ModelParallelRunner:
    """The linear model uploaded with 2 workers, its weight updated to `scale` x I (`url` None: the program's own
    server)."""
    (root / "linear.onnx").write_bytes(linear_model())
    (root / "names.txt").write_text("w\n")
    (root / "config.ini").write_text('[ascend_context]\nvariable_weights_file="names.txt"\n')
    ctx = mslite.Context()
    if url is not None:
        ctx.server_url = url
    ctx.cpu.thread_num = 1
    ctx.parallel.workers_num = 2
    ctx.parallel.config_path = str(root / "config.ini")
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(str(root / "linear.onnx"), ctx)
    weight = mslite.Tensor(scale * np.eye(4, dtype=np.float32))
    weight.name = "w"
    runner.update_weights([[weight]])
    return runner
