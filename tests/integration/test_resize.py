"""Shapes as MindSpore Lite takes them: resize of any model, a runner at new shapes, predict failures worded as its."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import mslite_triton as mslite
from mslite_triton.errors import InvalidInputError
from tests.support.model_zoo import fixed_image, image_conv, multi_io
from tests.support.other_clients import write_fixed_case

pytestmark = pytest.mark.integration
RNG = np.random.default_rng(7)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("resize_files")
    (d / "fixed_image.onnx").write_bytes(fixed_image().SerializeToString())
    (d / "fixed_reshape.onnx").write_bytes(fixed_image(reshape=True).SerializeToString())
    (d / "multi_io.onnx").write_bytes(multi_io().SerializeToString())
    return d


def _context(server) -> mslite.Context:
    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    ctx.cpu.thread_num = 1
    ctx.parallel.workers_num = 1
    return ctx


def _image(shape: list[int]) -> np.ndarray:
    return RNG.random(shape, dtype=np.float32)


def test_model_resize_of_a_fixed_dim_model_serves_the_new_shape(server, files):
    model = mslite.Model()
    model.build_from_file(str(files / "fixed_image.onnx"), mslite.ModelType.MINDIR, _context(server))
    inputs = model.get_inputs()
    assert inputs[0].shape == [1, 8, 8, 3]
    model.resize(inputs, [[1, 4, 6, 3]])  # MindSpore Lite's docs resize MobileNetV2 from 224 to 112 this way
    assert model.get_inputs()[0].shape == [1, 4, 6, 3]
    for shape in ([1, 4, 6, 3], [1, 8, 8, 3]):  # the resized dims are now free: the old size still runs
        x = _image(shape)
        inputs[0].shape = shape
        inputs[0].set_data_from_numpy(x)
        (y,) = model.predict(inputs)
        np.testing.assert_allclose(y.get_data_to_numpy(), x.mean(axis=(1, 2)), rtol=1e-5)


def test_resize_that_the_graph_cannot_run_fails_with_the_reason_and_keeps_the_model(server, files):
    model = mslite.Model()
    model.build_from_file(str(files / "fixed_reshape.onnx"), mslite.ModelType.MINDIR, _context(server))
    inputs = model.get_inputs()
    with pytest.raises(RuntimeError) as info:
        model.resize(inputs, [[1, 4, 4, 3]])
    text = str(info.value)
    assert text.startswith("resize failed! Error is ")
    assert "the graph cannot run input 'x' at shape [1, 4, 4, 3]" in text and "Reshape" in text
    assert "fixed_reshape_" not in text and "At:" not in text and "/" not in text.split("Reshape", 1)[0]
    assert inputs[0].shape == [1, 8, 8, 3]  # unchanged, and the model built before still serves
    x = _image([1, 8, 8, 3])
    inputs[0].set_data_from_numpy(x)
    np.testing.assert_allclose(model.predict(inputs)[0].get_data_to_numpy(), x.mean(axis=(1, 2)), rtol=1e-5)
    with pytest.raises(RuntimeError, match=r"resize failed! Error is kLiteInputParamInvalid: input 'x' has 4 dims"):
        model.resize(inputs, [[1, 4, 4]])


def test_runner_predict_at_a_new_shape_of_a_fixed_dim_model_is_served(server, files):
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(str(files / "fixed_image.onnx"), _context(server))
    before, rebuilt = set(server.loaded_models()), set()
    for shape in ([1, 4, 4, 3], [1, 5, 7, 3], [1, 8, 8, 3]):  # no resize call: MindSpore Lite's workers resize
        x = _image(shape)
        inputs = runner.get_inputs()
        inputs[0].shape = shape
        inputs[0].set_data_from_numpy(x)
        np.testing.assert_allclose(runner.predict(inputs)[0].get_data_to_numpy(), x.mean(axis=(1, 2)), rtol=1e-5)
        rebuilt = rebuilt or set(server.loaded_models()) - before
    # one rebuild for dims 1 and 2 (none when an earlier test loaded the same one), reused by the later sizes
    assert len(rebuilt) <= 1 and set(server.loaded_models()) - before == rebuilt, (rebuilt, server.loaded_models())

    fixed = mslite.ModelParallelRunner()
    fixed.build_from_file(str(files / "fixed_reshape.onnx"), _context(server))
    inputs = fixed.get_inputs()
    inputs[0] = mslite.Tensor(_image([1, 4, 4, 3]))
    with pytest.raises(RuntimeError, match=r"^predict failed! Error is .*cannot run input 'x' at shape .*Reshape"):
        fixed.predict(inputs)


def test_predict_failures_carry_mindspore_lites_prefix(server, files):
    model = mslite.Model()
    model.build_from_file(str(files / "multi_io.onnx"), mslite.ModelType.MINDIR, _context(server))
    b = mslite.Tensor(np.ones((1, 3), np.float32))
    copied = mslite.Tensor(model.get_inputs()[0])  # a copy of a tensor without data has none either
    copied.name = "copied"
    with pytest.raises(RuntimeError, match=r"^predict failed! Error is kLiteError: Tensor 'copied' has no data"):
        model.predict([copied, b])
    made = mslite.Tensor(shape=[1, 3], dtype=mslite.DataType.FLOAT32)  # a shape and a type: no data yet
    with pytest.raises(RuntimeError, match=r"^predict failed! Error is kLiteError: Tensor '' has no data: call "):
        model.predict([b, made])
    # and the copy gave the tensor it was made from no data either
    with pytest.raises(RuntimeError, match=r"^predict failed! Error is kLiteError: Tensor 'a' has no data"):
        model.predict(model.get_inputs())
    # outputs: named tensors on the host, over the answer's memory
    total, product = model.predict([b, b])
    assert (total.name, total.dtype, total.shape, total.format, total.device) == (
        "sum",
        mslite.DataType.FLOAT32,
        [1, 3],
        mslite.Format.NCHW,
        "None:-1",
    )
    assert product.name == "prod" and product.get_data_to_numpy().tolist() == [[1.0, 1.0, 1.0]]
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(str(files / "multi_io.onnx"), _context(server))
    with pytest.raises(RuntimeError, match=r"^predict failed! Error is kLiteError: Tensor 'a' has no data"):
        runner.predict(runner.get_inputs())
    a = mslite.Tensor(np.ones((1, 3), np.float32))
    # MindSpore Lite's runner has no input-count check of its own: its native run fails, naming both counts
    with pytest.raises(InvalidInputError, match=r"^predict failed! Error is kLiteInputParamInvalid: .*2 input.*3$"):
        runner.predict([a, a, a])
    with pytest.raises(InvalidInputError, match=r"^predict failed! Error is kLiteInputParamInvalid: .*INT32"):
        runner.predict([mslite.Tensor(np.ones((1, 3), np.int32))] * 2)


def test_batch_size_through_get_inputs_as_mindspore_lite_takes_it(server, files):
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(str(files / "multi_io.onnx"), _context(server))
    a, b = runner.get_inputs()
    assert a.shape == [1, 3]  # the dynamic batch dim shows as 1, as MindSpore Lite's get_inputs does
    with pytest.raises(RuntimeError, match="data size not equal!"):  # MindSpore Lite refuses it too
        a.set_data_from_numpy(np.ones((4, 3), np.float32))
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    for t in (a, b):
        t.shape = [4, 3]  # the fix docs/clients.md shows
        t.set_data_from_numpy(x)
    total, product = runner.predict([a, b])
    np.testing.assert_array_equal(total.get_data_to_numpy(), x + x)
    total, _ = runner.predict([mslite.Tensor(x), mslite.Tensor(x)])  # or a Tensor made from the array
    np.testing.assert_array_equal(total.get_data_to_numpy(), x + x)


def test_server_messages_name_the_users_file_and_where_the_batch_limit_comes_from(server, files):
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(str(files / "multi_io.onnx"), _context(server))
    too_many = mslite.Tensor(np.ones((65, 3), np.float32))
    with pytest.raises(InvalidInputError) as info:
        runner.predict([too_many, too_many])
    text = str(info.value)
    assert "batch-size must be <= 64 for 'multi_io.onnx'" in text and "[dynamic_batching] max_batch_size=N" in text
    wrong = mslite.Tensor(np.ones((2, 3, 1), np.float32))  # another rank: no resize makes it fit
    with pytest.raises(InvalidInputError) as info:
        runner.predict([wrong, wrong])
    text = str(info.value)
    assert "'multi_io.onnx'" in text and "multi_io_" not in text and "NOTE" not in text, text


def test_get_inputs_reports_the_layout_the_graph_implies(server, tmp_path):
    (tmp_path / "nhwc.onnx").write_bytes(image_conv(nhwc=True).SerializeToString())
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(str(tmp_path / "nhwc.onnx"), _context(server))
    (image,) = runner.get_inputs()
    assert image.format == mslite.Format.NHWC and image.shape == [1, 8, 8, 3]


def test_mobilenetv2_resized_from_224_to_112_as_mindspore_lites_docs_do(server, tmp_path):
    from mslite_backend.resized import free_dims
    from tests.support.model_zoo import run_reference
    from tests.support.repository import GEN

    graph = GEN.build_mobilenetv2()  # input [N, 3, 224, 224]: the image size is fixed in the file
    (tmp_path / "mobilenetv2.onnx").write_bytes(graph.SerializeToString())
    model = mslite.Model()
    model.build_from_file(str(tmp_path / "mobilenetv2.onnx"), mslite.ModelType.MINDIR, _context(server))
    inputs = model.get_inputs()
    model.resize(inputs, [[1, 3, 112, 112]])
    x = _image([1, 3, 112, 112])
    inputs[0].set_data_from_numpy(x)
    (scores,) = model.predict(inputs)
    free_dims(graph, (("input", (1, 3, 112, 112)),), "reference")
    (expected,) = run_reference(graph, {"input": x})
    assert scores.shape == [1, 1000]
    np.testing.assert_allclose(scores.get_data_to_numpy(), expected, rtol=1e-4, atol=1e-6)


def test_fixed_classifier_resized_to_batch_2_as_in_cpp_and_java(server, tmp_path):
    """The flow tests/integration/test_cpp.py and test_java_shapes.py run: every dim fixed, resized to batch 2."""
    case = write_fixed_case(tmp_path)
    x = np.fromfile(case.input, dtype="<f4").reshape(2, 224, 224, 3)
    model = mslite.Model()
    model.build_from_file(str(case.model), mslite.ModelType.MINDIR, _context(server))
    inputs = model.get_inputs()
    assert inputs[0].shape == [1, 224, 224, 3]
    model.resize(inputs, [[2, 224, 224, 3]])
    inputs[0].set_data_from_numpy(x)
    (y,) = model.predict(inputs)
    np.testing.assert_allclose(y.get_data_to_numpy(), case.expected, rtol=1e-5, atol=1e-6)
    runner = mslite.ModelParallelRunner()  # no resize in its API: MindSpore Lite's workers resize at predict
    runner.build_from_file(str(case.model), _context(server))
    (y,) = runner.predict([mslite.Tensor(x)])
    np.testing.assert_allclose(y.get_data_to_numpy(), case.expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match=r"^resize failed! Error is .*cannot run input 'input' at shape \[2, 224"):
        model.resize(inputs, [[2, 224, 224, 4]])
