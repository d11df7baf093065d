"""The client's minimal ONNX reader and the batching defaults it drives."""

from __future__ import annotations

import numpy as np
import pytest

import mslite_triton as mslite
from mslite_backend.graph import is_light, read_graph_io
from mslite_contract import protocol
from mslite_contract.onnx_wire import graph_size
from mslite_triton._model_config import WorkerPlan, build_model_config
from mslite_triton._onnx_io import has_dynamic_batch, is_light_model
from tests.support import model_zoo
from tests.support.repository import GEN as generate_models


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (generate_models.build_mobilenetv2, True),
        (generate_models.build_tiny, True),
        (model_zoo.multi_io, True),
        (model_zoo.mixed_dtypes, True),
        (model_zoo.odd_names, True),
        (model_zoo.variable_seq, True),
        (model_zoo.no_batch, False),
    ],
)
def test_dynamic_batch_is_read_from_the_wire_format(build, expected):
    assert has_dynamic_batch(build().SerializeToString()) is expected


def test_external_data_model_and_garbage():
    assert has_dynamic_batch(model_zoo.big_weights(8).SerializeToString())
    assert not has_dynamic_batch(b"\x08\x08" + bytes(range(256)))
    assert not has_dynamic_batch(b"")


@pytest.mark.parametrize(
    "build",
    [
        generate_models.build_tiny,
        generate_models.build_mobilenetv2,
        model_zoo.multi_io,
        model_zoo.mixed_dtypes,
        model_zoo.variable_seq,
        model_zoo.no_batch,
        model_zoo.small_classifier,
        model_zoo.slow,
        lambda: model_zoo.big_weights(1),
    ],
)
def test_the_client_judges_light_models_as_the_backend_does(build, tmp_path):
    """One rule (`protocol.is_light`): the client's wire-format reading agrees with the backend's onnx one."""
    model = build()
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    batched = has_dynamic_batch(path.read_bytes())
    assert is_light_model(path.read_bytes(), batched=batched) is is_light(read_graph_io(str(path)), batched)


def test_only_the_tiny_model_is_light_and_garbage_is_not():
    assert is_light_model(generate_models.build_tiny().SerializeToString(), batched=True)
    assert not is_light_model(model_zoo.variable_seq().SerializeToString(), batched=True)  # a dynamic dim
    assert not is_light_model(model_zoo.big_weights(1).SerializeToString(), batched=True)  # 1 MiB of weights
    assert not is_light_model(b"\x08\x08" + bytes(range(256)), batched=True)


def _context(target: str) -> mslite.Context:
    ctx = mslite.Context()
    ctx.target = [target]
    return ctx


def test_cpu_workers_take_two_requests_at_a_time_gpu_workers_fill_buckets():
    cpu = build_model_config("m", _context("cpu"), WorkerPlan(2, 1, 1), batchable=True)
    assert cpu["max_batch_size"] == 64 and cpu["dynamic_batching"]["preferred_batch_size"] == [2]
    one = build_model_config("m", _context("cpu"), WorkerPlan(1, 1, 1), batchable=True)
    assert one["dynamic_batching"]["preferred_batch_size"] == [2]
    assert "default_queue_policy" not in one["dynamic_batching"]  # no queue policy by default
    assert "default_queue_policy" not in cpu["dynamic_batching"]
    gpu = build_model_config("m", _context("gpu"), WorkerPlan(2, 1, 1), batchable=True)
    # a GPU worker runs fixed buckets: Triton sends a batch as soon as it fills one above 1, or after a short delay
    assert gpu["max_batch_size"] == 64 and gpu["dynamic_batching"] == {
        "preferred_batch_size": [b for b in protocol.DEFAULT_GPU_BUCKETS if b > 1],
        "max_queue_delay_microseconds": protocol.GPU_MAX_QUEUE_DELAY_US,
    }
    light = build_model_config("m", _context("cpu"), WorkerPlan(2, 1, 1), batchable=True, light=True)
    assert "preferred_batch_size" not in light["dynamic_batching"]  # every queued request, as auto-complete
    fixed = build_model_config("m", _context("cpu"), WorkerPlan(2, 1, 1), batchable=False)
    assert "max_batch_size" not in fixed and "preferred_batch_size" not in fixed["dynamic_batching"]


def test_preferred_sizes_need_a_batch_dimension():
    with pytest.raises(ValueError, match="dynamic batch dimension"):
        build_model_config(
            "m",
            _context("cpu"),
            WorkerPlan(1, 1, 1),
            sections={"dynamic_batching": {"preferred_batch_size": "2"}},
            batchable=False,
        )


def test_a_models_size_is_its_operators_and_the_bytes_of_its_initializers_and_constants():
    """`onnx_wire.graph_size`, which both the client and the backend judge a model by, against onnx's own arrays."""
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((3, 5), np.float32), name="w")  # 60 bytes
    half = numpy_helper.from_array(np.ones((2, 2), np.float16), name="h")  # 8 bytes
    constant = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.arange(7), name="c"))  # 56
    graph = helper.make_graph(
        [constant, helper.make_node("MatMul", ["x", "w"], ["y"])],
        "sized",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        initializer=[weight, half],
    )
    data = helper.make_model(graph).SerializeToString()
    expected = sum(numpy_helper.to_array(t).nbytes for t in (weight, half, constant.attribute[0].t))
    assert graph_size(data) == (2, expected) == (2, 124)
    with pytest.raises(ValueError):
        graph_size(b"")  # no graph
