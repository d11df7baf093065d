"""What format `get_inputs()` reports: the layout the ONNX graph implies, read from its wire format (no server)."""

from __future__ import annotations

from mslite_triton import Format
from mslite_triton._onnx_io import input_layouts
from mslite_triton._remote import _template
from mslite_triton._transport import TensorInfo
from tests.support import model_zoo as zoo


def test_the_graph_tells_nhwc_and_nchw() -> None:
    assert input_layouts(zoo.image_conv(nhwc=True).SerializeToString()) == {"image": "NHWC"}
    assert input_layouts(zoo.image_conv(nhwc=False).SerializeToString()) == {"image": "NCHW"}


def test_inputs_the_graph_does_not_tell_are_left_out() -> None:
    assert input_layouts(zoo.fixed_image().SerializeToString()) == {}  # 4-D, but only a ReduceMean reads it
    assert input_layouts(zoo.multi_io().SerializeToString()) == {}  # 2-D
    assert input_layouts(b"not onnx") == {}


def test_get_inputs_reports_the_told_layout_and_else_nchw() -> None:
    info = TensorInfo("image", "FP32", (1, 8, 8, 3))
    assert _template(info, False, "NHWC").format == Format.NHWC
    assert _template(info, False, None).format == Format.NCHW  # MindSpore Lite's default for a new tensor
