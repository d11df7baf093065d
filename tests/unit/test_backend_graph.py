"""graph.py: reading an ONNX file's I/O, planning auto-complete, and checking a config against it (no server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mslite_backend.config import BackendConfig
from mslite_backend.errors import ConfigError, ModelLoadError
from mslite_backend.graph import (
    DEFAULT_MAX_BATCH_SIZE,
    GraphIO,
    GraphTensor,
    batcher_defaults,
    check_config_against_graph,
    is_light,
    plan_auto_complete,
    read_graph_io,
)
from mslite_contract.protocol import GPU_MAX_QUEUE_DELAY_US
from tests.support import model_zoo as zoo


def _save(tmp_path: Path, model: onnx.ModelProto, name: str = "model.onnx") -> str:
    path = tmp_path / name
    onnx.save(model, str(path))
    return str(path)


def _io(model: onnx.ModelProto, tmp_path: Path) -> GraphIO:
    return read_graph_io(_save(tmp_path, model))


def _cfg(max_batch_size: int, inputs: list[tuple], outputs: list[tuple] = ()) -> BackendConfig:
    def tensors(items: list[tuple]) -> list[dict[str, Any]]:
        return [{"name": n, "data_type": t, "dims": list(d)} for n, t, d in items]

    config = {"name": "m", "max_batch_size": max_batch_size, "input": tensors(inputs), "output": tensors(outputs)}
    return BackendConfig.from_model_config(config, cores=2)


# --- read_graph_io ----------------------------------------------------------------------------


def test_missing_file_is_a_load_error_without_the_absolute_path(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError) as exc:
        read_graph_io(str(tmp_path / "1" / "model.onnx"))
    message = str(exc.value)
    assert "'model.onnx'" in message and "not found" in message
    assert str(tmp_path) not in message


def test_corrupt_file_is_a_load_error_without_the_absolute_path(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(zoo.broken_bytes())
    with pytest.raises(ModelLoadError) as exc:
        read_graph_io(str(path))
    message = str(exc.value)
    assert "'model.onnx'" in message and "not a valid ONNX model" in message
    assert str(tmp_path) not in message


def test_symbolic_and_fixed_dims(tmp_path: Path) -> None:
    io = _io(zoo.variable_seq(), tmp_path)
    assert io.inputs == (GraphTensor("tokens", "TYPE_FP32", (-1, -1)),)
    assert io.outputs == (GraphTensor("cumsum", "TYPE_FP32", (-1, -1)), GraphTensor("total", "TYPE_FP32", (-1, 1)))
    assert all(t.batchable for t in io.inputs + io.outputs)


def test_dtypes_and_order(tmp_path: Path) -> None:
    io = _io(zoo.mixed_dtypes(), tmp_path)
    assert [(t.name, t.data_type) for t in io.inputs] == [
        ("ids", "TYPE_INT64"),
        ("mask", "TYPE_BOOL"),
        ("h", "TYPE_FP16"),
    ]
    assert [t.name for t in io.outputs] == ["ids_out", "mask_out", "h_out"]
    # The initializers (one_i64, two_f16) are not inputs.
    assert {t.name for t in io.inputs}.isdisjoint({"one_i64", "two_f16"})


def test_fully_static_model(tmp_path: Path) -> None:
    io = _io(zoo.no_batch(), tmp_path)
    assert io.inputs == (GraphTensor("x", "TYPE_FP32", (3, 4)),)
    assert io.outputs == (GraphTensor("y", "TYPE_FP32", (4, 3)),)
    assert not io.inputs[0].batchable


def test_unnamed_dynamic_dim_is_minus_one(tmp_path: Path) -> None:
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
        ir_version=8,
    )
    assert _io(model, tmp_path).inputs == (GraphTensor("x", "TYPE_FP32", (-1, 2)),)


def test_initializers_listed_as_graph_inputs_are_excluded(tmp_path: Path) -> None:
    # Older exporters list every weight in graph.input too; those are not for clients to feed.
    w = numpy_helper.from_array(np.ones((2, 2), dtype=np.float32), name="w")
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])],
            "g",
            [
                helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2]),
                helper.make_tensor_value_info("w", TensorProto.FLOAT, [2, 2]),
            ],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
            initializer=[w],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
        ir_version=8,
    )
    io = _io(model, tmp_path)
    assert [t.name for t in io.inputs] == ["x"]


def test_external_data_is_not_loaded(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    zoo.save_with_external_data(zoo.big_weights(mb=1), path)
    (tmp_path / "model.onnx.data").unlink()  # reading the I/O must not need the weights
    assert read_graph_io(str(path)).inputs == (GraphTensor("x", "TYPE_FP32", (-1, zoo.BIG_DIM)),)


# --- plan_auto_complete -----------------------------------------------------------------------


def test_minimal_config_of_a_batchable_model_turns_batching_on(tmp_path: Path) -> None:
    plan = plan_auto_complete({"name": "m", "backend": "mslite"}, _io(zoo.multi_io(), tmp_path))
    assert plan.max_batch_size == DEFAULT_MAX_BATCH_SIZE
    assert plan.dynamic_batching is True
    assert plan.inputs == (
        {"name": "a", "data_type": "TYPE_FP32", "dims": [3]},
        {"name": "b", "data_type": "TYPE_FP32", "dims": [3]},
    )
    assert plan.outputs == (
        {"name": "sum", "data_type": "TYPE_FP32", "dims": [3]},
        {"name": "prod", "data_type": "TYPE_FP32", "dims": [3]},
    )


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"instance_group": [{"kind": "KIND_CPU", "count": 2}]}, {"preferred_batch_size": [2]}),
        ({"instance_group": [{"kind": "KIND_CPU"}]}, {"preferred_batch_size": [2]}),  # one worker: the same rule
        ({}, {"preferred_batch_size": [2]}),  # no groups: Triton makes one CPU instance
        ({"instance_group": [{"kind": "KIND_CPU"}, {"kind": "KIND_CPU"}],
          "dynamic_batching": {"default_queue_policy": {"timeout_action": "DELAY"}}},
         {"preferred_batch_size": [2]}),  # a policy the user wrote is kept, and given no bound
        ({"instance_group": [{"kind": "KIND_CPU", "count": 2}],
          "dynamic_batching": {"preferred_batch_size": [4], "default_queue_policy": {"max_queue_size": 7}}},
         {}),
        ({"instance_group": [{"kind": "KIND_CPU", "count": 2}, {"kind": "KIND_GPU"}]}, {}),
        # GPU workers: the buckets above 1 (up to max_batch_size) and the GPU queue delay
        ({"instance_group": [{"kind": "KIND_GPU", "count": 1, "gpus": [0, 1]}]},
         {"preferred_batch_size": [2, 4, 8, 16, 32, 64], "max_queue_delay_microseconds": GPU_MAX_QUEUE_DELAY_US}),
    ],
)  # fmt: skip
def test_batcher_defaults_fill_only_what_the_config_leaves_out(config: dict, expected: dict) -> None:
    fill = batcher_defaults({"name": "m", **config}, 64)
    assert fill == expected
    assert "default_queue_policy" not in fill  # no queue bound by default: it turns off Triton's prefetching


def _gpu(**params: str) -> dict:
    return {
        "name": "m",
        "instance_group": [{"kind": "KIND_GPU", "count": 2}],
        "parameters": {k: {"string_value": v} for k, v in params.items()},
    }


def test_gpu_auto_complete_prefers_the_buckets_above_one(tmp_path: Path) -> None:
    io = _io(zoo.small_classifier(), tmp_path)
    plan = plan_auto_complete(_gpu(), io)
    assert plan.max_batch_size == 64
    assert plan.batcher_defaults == {
        "preferred_batch_size": [2, 4, 8, 16, 32, 64],  # 1 is left out: listing it would cancel the delay
        "max_queue_delay_microseconds": GPU_MAX_QUEUE_DELAY_US,
    }
    # the workers' own buckets, capped as the workers cap them (max_batch_size is a bucket too)
    assert batcher_defaults(_gpu(batch_buckets="1,4,16,128"), 32)["preferred_batch_size"] == [4, 16, 32]
    assert batcher_defaults(_gpu(batch_buckets="1"), 1) == {"max_queue_delay_microseconds": GPU_MAX_QUEUE_DELAY_US}


def test_gpu_auto_complete_keeps_what_the_config_sets(tmp_path: Path) -> None:
    config = {**_gpu(), "dynamic_batching": {"preferred_batch_size": [8], "max_queue_delay_microseconds": 0}}
    assert batcher_defaults(config, 64) == {}
    with pytest.raises(ConfigError, match="batch_buckets"):
        batcher_defaults(_gpu(batch_buckets="0,x"), 64)


def test_cpu_auto_complete_is_unchanged_by_the_gpu_defaults(tmp_path: Path) -> None:
    io = _io(zoo.small_classifier(), tmp_path)
    for config in ({"name": "m"}, {"name": "m", "instance_group": [{"kind": "KIND_CPU", "count": 2}]}):
        assert plan_auto_complete(config, io).batcher_defaults == {"preferred_batch_size": [2]}


def test_batcher_defaults_keep_preferred_sizes_within_max_batch_size() -> None:
    assert batcher_defaults({"name": "m", "instance_group": [{"kind": "KIND_CPU", "count": 2}]}, 1) == {}


def test_a_light_model_on_cpu_takes_every_queued_request(tmp_path: Path) -> None:
    io = _io(zoo.multi_io(), tmp_path)  # two elementwise ops on three values a sample
    assert (io.nodes, io.weight_bytes) == (2, 0) and is_light(io, batched=True)
    cpu = {"name": "m", "instance_group": [{"kind": "KIND_CPU", "count": 2}]}
    assert plan_auto_complete(cpu, io).batcher_defaults == {}  # Triton's own sizes, as on accelerators
    assert batcher_defaults(cpu, 64, light=True) == {}
    chosen = {**cpu, "dynamic_batching": {"preferred_batch_size": [4]}}
    assert plan_auto_complete(chosen, io).batcher_defaults == {}  # what the user wrote stays


@pytest.mark.parametrize(
    ("build", "why"),
    [
        (zoo.variable_seq, "a dynamic dim besides the batch: unknown size"),
        (zoo.small_classifier, "150,528 values a sample"),
        (zoo.slow, "18 operators"),
    ],
)
def test_other_models_on_cpu_take_two_requests_at_a_time(tmp_path: Path, build: Any, why: str) -> None:
    io = _io(build(), tmp_path)
    assert not is_light(io, batched=True), why
    plan = plan_auto_complete({"name": "m", "instance_group": [{"kind": "KIND_CPU"}]}, io)
    assert plan.batcher_defaults == {"preferred_batch_size": [2]}


def test_weights_make_a_model_heavy_even_when_external(tmp_path: Path) -> None:
    model = zoo.big_weights(1)
    zoo.save_with_external_data(model, tmp_path / "model.onnx")
    io = read_graph_io(str(tmp_path / "model.onnx"))
    assert io.weight_bytes >= 2**20 and not is_light(io, batched=True)
    assert not is_light(GraphIO(inputs=io.inputs, outputs=io.outputs), batched=True)  # size unknown


def test_minimal_config_keeps_dynamic_non_batch_dims(tmp_path: Path) -> None:
    plan = plan_auto_complete({"name": "m"}, _io(zoo.variable_seq(), tmp_path))
    assert plan.max_batch_size == DEFAULT_MAX_BATCH_SIZE
    assert plan.inputs == ({"name": "tokens", "data_type": "TYPE_FP32", "dims": [-1]},)
    assert [o["dims"] for o in plan.outputs] == [[-1], [1]]


def test_no_batch_model_stays_unbatched(tmp_path: Path) -> None:
    plan = plan_auto_complete({"name": "m", "max_batch_size": 0}, _io(zoo.no_batch(), tmp_path))
    assert plan.max_batch_size is None
    assert plan.dynamic_batching is False
    assert plan.inputs == ({"name": "x", "data_type": "TYPE_FP32", "dims": [3, 4]},)
    assert plan.outputs == ({"name": "y", "data_type": "TYPE_FP32", "dims": [4, 3]},)


def test_one_fixed_first_dim_keeps_batching_off(tmp_path: Path) -> None:
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("ReduceSum", ["x"], ["y"], keepdims=1)],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
        ir_version=8,
    )
    plan = plan_auto_complete({"name": "m"}, _io(model, tmp_path))
    assert plan.max_batch_size is None and plan.dynamic_batching is False
    assert plan.inputs[0]["dims"] == [-1, 2]


def test_declared_tensors_keep_batching_off(tmp_path: Path) -> None:
    config = {"name": "m", "input": [{"name": "a", "data_type": "TYPE_FP32", "dims": [-1, 3]}]}
    plan = plan_auto_complete(config, _io(zoo.multi_io(), tmp_path))
    assert plan.max_batch_size is None
    assert plan.dynamic_batching is False
    # Only the missing tensors are added, with the full (unbatched) dims.
    assert plan.inputs == ({"name": "b", "data_type": "TYPE_FP32", "dims": [-1, 3]},)
    assert [o["name"] for o in plan.outputs] == ["sum", "prod"]


def test_existing_config_tensors_are_not_duplicated(tmp_path: Path) -> None:
    config = {
        "name": "m",
        "max_batch_size": 4,
        "input": [{"name": "a", "data_type": "TYPE_FP32", "dims": [3]}],
        "output": [{"name": "prod", "data_type": "TYPE_FP32", "dims": [3]}],
    }
    plan = plan_auto_complete(config, _io(zoo.multi_io(), tmp_path))
    assert plan.max_batch_size is None  # the user's value stays
    assert plan.dynamic_batching is True
    assert plan.inputs == ({"name": "b", "data_type": "TYPE_FP32", "dims": [3]},)
    assert plan.outputs == ({"name": "sum", "data_type": "TYPE_FP32", "dims": [3]},)


def test_complete_config_adds_nothing(tmp_path: Path) -> None:
    config = {
        "name": "m",
        "max_batch_size": 0,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [3, 4]}],
        "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [4, 3]}],
    }
    plan = plan_auto_complete(config, _io(zoo.no_batch(), tmp_path))
    assert (plan.max_batch_size, plan.dynamic_batching, plan.inputs, plan.outputs) == (None, False, (), ())


def test_sequence_batching_keeps_dynamic_batching_off(tmp_path: Path) -> None:
    plan = plan_auto_complete({"name": "m", "sequence_batching": {}}, _io(zoo.multi_io(), tmp_path))
    assert plan.max_batch_size == DEFAULT_MAX_BATCH_SIZE
    assert plan.dynamic_batching is False


# --- check_config_against_graph ---------------------------------------------------------------


MULTI_IO_OK = ([("a", "TYPE_FP32", [3]), ("b", "TYPE_FP32", [3])], [("sum", "TYPE_FP32", [3])])


def test_matching_configs_pass(tmp_path: Path) -> None:
    io = _io(zoo.multi_io(), tmp_path)
    check_config_against_graph(_cfg(8, *MULTI_IO_OK), io)
    check_config_against_graph(_cfg(0, [("a", "TYPE_FP32", [-1, 3]), ("b", "TYPE_FP32", [2, -1])]), io)
    check_config_against_graph(
        _cfg(0, [("x", "TYPE_FP32", [3, 4])], [("y", "TYPE_FP32", [4, 3])]),
        GraphIO(inputs=(GraphTensor("x", "TYPE_FP32", (3, 4)),), outputs=(GraphTensor("y", "TYPE_FP32", (4, 3)),)),
    )


def _check_error(cfg: BackendConfig, io: GraphIO) -> str:
    with pytest.raises(ModelLoadError) as exc:
        check_config_against_graph(cfg, io)
    return str(exc.value)


def test_wrong_dtype(tmp_path: Path) -> None:
    cfg = _cfg(8, [("a", "TYPE_FP32", [3]), ("b", "TYPE_INT32", [3])])
    message = _check_error(cfg, _io(zoo.multi_io(), tmp_path))
    assert "model 'm'" in message and "input 'b'" in message
    assert "expected TYPE_FP32" in message and "config says TYPE_INT32" in message


def test_wrong_output_dtype(tmp_path: Path) -> None:
    cfg = _cfg(
        8,
        [("ids", "TYPE_INT64", [5]), ("mask", "TYPE_BOOL", [5]), ("h", "TYPE_FP16", [5])],
        [("h_out", "TYPE_FP32", [5])],
    )
    message = _check_error(cfg, _io(zoo.mixed_dtypes(), tmp_path))
    assert "model 'm'" in message and "output 'h_out'" in message
    assert "expected TYPE_FP16" in message and "config says TYPE_FP32" in message


@pytest.mark.parametrize("dims", [[4], [3, 1], []])
def test_wrong_dims(tmp_path: Path, dims: list[int]) -> None:
    cfg = _cfg(8, [("a", "TYPE_FP32", dims), ("b", "TYPE_FP32", [3])])
    message = _check_error(cfg, _io(zoo.multi_io(), tmp_path))
    assert "model 'm'" in message and "input 'a'" in message
    assert "dims expected [3]" in message and f"config says {dims}" in message


def test_wrong_dims_unbatched(tmp_path: Path) -> None:
    message = _check_error(_cfg(0, [("x", "TYPE_FP32", [4, 3])]), _io(zoo.no_batch(), tmp_path))
    assert "model 'm'" in message and "input 'x'" in message
    assert "dims expected [3, 4]" in message and "config says [4, 3]" in message


def test_unknown_tensor(tmp_path: Path) -> None:
    cfg = _cfg(8, [("a", "TYPE_FP32", [3]), ("b", "TYPE_FP32", [3]), ("c", "TYPE_FP32", [3])])
    message = _check_error(cfg, _io(zoo.multi_io(), tmp_path))
    assert "model 'm'" in message and "input 'c'" in message and "['a', 'b']" in message


def test_unknown_output(tmp_path: Path) -> None:
    cfg = _cfg(8, MULTI_IO_OK[0], [("diff", "TYPE_FP32", [3])])
    message = _check_error(cfg, _io(zoo.multi_io(), tmp_path))
    assert "model 'm'" in message and "output 'diff'" in message and "['prod', 'sum']" in message


def test_missing_graph_input(tmp_path: Path) -> None:
    message = _check_error(_cfg(8, [("a", "TYPE_FP32", [3])]), _io(zoo.multi_io(), tmp_path))
    assert "model 'm'" in message and "['b']" in message and "missing" in message


def test_batched_config_needs_a_dynamic_first_dim(tmp_path: Path) -> None:
    message = _check_error(_cfg(4, [("x", "TYPE_FP32", [4])]), _io(zoo.no_batch(), tmp_path))
    assert "model 'm'" in message and "input 'x'" in message
    assert "max_batch_size > 0" in message and "[3, 4]" in message


def test_odd_names_pass(tmp_path: Path) -> None:
    cfg = _cfg(8, [("input:0/x", "TYPE_FP32", [2])], [("out/y:0", "TYPE_FP32", [2])])
    check_config_against_graph(cfg, _io(zoo.odd_names(), tmp_path))
