"""MindSpore Lite's multi-card / multi-core sample flow and batch splitting on CPU, against the real server."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import mslite_triton as mslite
from mslite_contract import settings
from mslite_triton.parallel_predict import ParallelPredictUtils
from tests.support.model_zoo import no_batch, run_reference
from tests.support.repository import GEN

pytestmark = pytest.mark.integration


def static_batch_model(batch: int) -> onnx.ModelProto:
    """The tiny MLP with a fixed batch (as converted for multi-card inference): x [b, 4] -> y [b, 4]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.arange(16, dtype=np.float32) / 16)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "static", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_multicard_sample_master_worker_flow_on_two_cpu_workers(server, tmp_path, monkeypatch):
    monkeypatch.setenv(settings.URL_ENV, server.grpc_url)
    path = tmp_path / "static_bs1.onnx"
    model = static_batch_model(1)
    path.write_bytes(model.SerializeToString())
    utils = ParallelPredictUtils(str(path), device_num=2, target="cpu")
    utils.build_model()
    try:
        batch = np.random.default_rng(0).standard_normal((2, 4), dtype=np.float32)
        (y,) = utils.predict_batch([batch])
        expected = np.concatenate([run_reference(model, {"x": batch[i : i + 1]})[0] for i in range(2)])
        np.testing.assert_array_equal(y, expected)
    finally:
        utils.finalize()
    assert all(not p.is_alive() for p in utils.process)


def test_runner_splits_a_batch_across_workers_in_order(server, tmp_path):
    path = tmp_path / "mobilenet_bs1.onnx"
    model = GEN.build_mobilenetv2()
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_value = 1  # batch fixed to 1, as the multi-card sample converts
    path.write_bytes(model.SerializeToString())
    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    ctx.parallel.workers_num = 2
    ctx.cpu.thread_num = 1
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(str(path), ctx)
    assert runner.get_inputs()[0].shape == [1, 3, 224, 224]
    x = np.random.default_rng(1).standard_normal((4, 3, 224, 224), dtype=np.float32)
    (y,) = runner.predict([mslite.Tensor(x)])
    expected = np.concatenate([run_reference(model, {"input": x[i : i + 1]})[0] for i in range(4)])
    assert y.shape == [4, 1000]
    np.testing.assert_array_equal(y.get_data_to_numpy(), expected)  # bit-exact on CPU


def test_no_split_when_the_leading_dims_are_not_a_batch(server, tmp_path):
    path = tmp_path / "no_batch.onnx"
    path.write_bytes(no_batch().SerializeToString())
    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(str(path), ctx)
    # [6, 4] is not two [3, 4] samples: never split. A runner serves a new shape as MindSpore Lite's workers
    # resize, so the whole [6, 4] is transposed at once ([4, 6]; split, it would be two [4, 3] stacked: [8, 3]).
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    (y,) = runner.predict([mslite.Tensor(x)])
    np.testing.assert_array_equal(y.get_data_to_numpy(), x.T)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        # no CANN provider in this ONNX Runtime build: the load fails naming it and what to install
        ("ascend", "CANNExecutionProvider is not available.*install onnxruntime-cann"),
        # no GPU on this host: Triton itself refuses the KIND_GPU instance (no silent CPU run either), in the
        # words every client of this library uses (test_cpp.py and test_java_shapes.py check theirs)
        ("gpu", r"build from file failed! Error is kLiteNotSupport: GPU 0 is not available on the server \(the GPUs "),
    ],
)
def test_missing_accelerator_fails_the_load_clearly(server, tmp_path, target, message):
    path = tmp_path / "tiny.onnx"
    path.write_bytes(GEN.build_tiny().SerializeToString())
    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    ctx.target = [target]
    ctx.parallel.workers_num = 1
    with pytest.raises(RuntimeError, match=message):
        mslite.ModelParallelRunner().build_from_file(str(path), ctx)
