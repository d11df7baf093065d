"""What format `get_inputs()` reports: the layout the ONNX graph implies, read from its wire format (no server)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mslite_triton import Format
from mslite_triton._onnx_io import input_layouts
from mslite_triton._remote import _template
from mslite_triton._transport import TensorInfo
from tests.support import model_zoo as zoo


def _image_model(nhwc: bool) -> onnx.ModelProto:
    """A 3x3 convolution of an image given NHWC (a Transpose first, as exporters write it) or NCHW."""
    shape = [1, 8, 8, 3] if nhwc else [1, 3, 8, 8]
    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), name="w")
    nodes = [helper.make_node("Conv", ["nchw" if nhwc else "image", "w"], ["y"])]
    if nhwc:
        nodes.insert(0, helper.make_node("Transpose", ["image"], ["nchw"], perm=[0, 3, 1, 2]))
    graph = helper.make_graph(
        nodes,
        "image",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_graph_tells_nhwc_and_nchw() -> None:
    assert input_layouts(_image_model(nhwc=True).SerializeToString()) == {"image": "NHWC"}
    assert input_layouts(_image_model(nhwc=False).SerializeToString()) == {"image": "NCHW"}


def test_inputs_the_graph_does_not_tell_are_left_out() -> None:
    assert input_layouts(zoo.fixed_image().SerializeToString()) == {}  # 4-D, but only a ReduceMean reads it
    assert input_layouts(zoo.multi_io().SerializeToString()) == {}  # 2-D
    assert input_layouts(b"not onnx") == {}


def test_get_inputs_reports_the_told_layout_and_else_nchw() -> None:
    info = TensorInfo("image", "FP32", (1, 8, 8, 3))
    assert _template(info, False, "NHWC").format == Format.NHWC
    assert _template(info, False, None).format == Format.NCHW  # MindSpore Lite's default for a new tensor
