"""MindSpore Lite parity on the real server: the pending-predict bound, messages, weights, model info, groups."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mslite_triton as mslite
from mslite_server.workers import workers_of
from mslite_triton.errors import InvalidInputError, ModelLoadError, ServiceDenyError
from tests.support.eventually import eventually
from tests.support.repository import GEN

pytestmark = pytest.mark.integration


def _scaled() -> onnx.ModelProto:
    """y = x * alpha + b, with a 0-d weight `alpha` and a dynamic batch; metadata for user_info."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "alpha"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])],
        "scaled",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        initializer=[
            numpy_helper.from_array(np.array(2.0, np.float32), "alpha"),
            numpy_helper.from_array(np.ones(4, np.float32), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, {"author": "parity test", "labels": "a,b"})
    return model


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("parity")
    onnx.save(_scaled(), d / "scaled.onnx")
    (d / "tiny.onnx").write_bytes(GEN.build_tiny().SerializeToString())
    # the tiny model with a mark of this module's own: its server model (and workers) are private to these tests
    private = GEN.build_tiny()
    helper.set_model_props(private, {"test": "pending bound"})
    (d / "private.onnx").write_bytes(private.SerializeToString())
    (d / "names.txt").write_text("alpha\n")
    (d / "weights.ini").write_text('[ascend_context]\nvariable_weights_file="names.txt"\n')
    (d / "net.ms").write_bytes(b"\x1c\x00\x00\x00MSL2" + bytes(64))
    return {p.stem: p for p in d.iterdir()}


def _context(server, workers: int = 1) -> mslite.Context:
    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    ctx.cpu.thread_num = 1
    ctx.parallel.workers_num = workers
    return ctx


def test_runner_refuses_predicts_beyond_its_bound_without_asking_the_server(server, files) -> None:
    ctx = _context(server)
    ctx.parallel.config_info = {"runner": {"max_pending_predicts": "2"}}
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(str(files["private"]), ctx)
    x = np.ones((1, 4), np.float32)
    assert runner.predict([mslite.Tensor(x)])[0].get_data_to_numpy().tolist() == [[3.0] * 4]

    name = runner.served_name
    (worker,) = [w.pid for w in workers_of(server.process.pid) if w.model == name]
    results: list[object] = []

    def held_predict() -> None:
        try:
            results.append(runner.predict([mslite.Tensor(x)])[0].get_data_to_numpy().tolist())
        except Exception as e:  # noqa: BLE001 -- reported by the assertion below
            results.append(e)

    model = mslite.Model()  # the same server model: a Model has its own count, from config_dict
    model.build_from_file(
        str(files["private"]), mslite.ModelType.MINDIR, _context(server), "", {"runner": {"max_pending_predicts": "1"}}
    )
    assert model.served_name == name

    def held_model_predict() -> None:
        try:
            results.append(model.predict([x])[0].get_data_to_numpy().tolist())
        except Exception as e:  # noqa: BLE001 -- reported by the assertion below
            results.append(e)

    os.kill(worker, signal.SIGSTOP)  # the worker holds every request it gets until SIGCONT
    threads = [threading.Thread(target=held_predict) for _ in range(2)] + [threading.Thread(target=held_model_predict)]
    try:
        for t in threads:
            t.start()
        eventually(lambda: runner._pending.in_flight == 2 and model._pending.in_flight == 1, "three predicts in flight")
        with pytest.raises(ServiceDenyError, match=r"kLiteServiceDeny.*max_pending_predicts=2") as info:
            runner.predict([mslite.Tensor(x)])
        assert isinstance(info.value, RuntimeError) and info.value.code == -11
        with pytest.raises(ServiceDenyError, match=r"max_pending_predicts=1"):
            model.predict([x])
        assert not results  # refused at once: the held ones still wait
    finally:
        os.kill(worker, signal.SIGCONT)
        for t in threads:
            t.join(timeout=120)
    assert results == [[[3.0] * 4]] * 3
    assert runner.predict([mslite.Tensor(x)])[0].get_data_to_numpy().tolist() == [[3.0] * 4]


def test_build_failures_and_bad_inputs_read_as_in_mindspore_lite(server, files, tmp_path) -> None:
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x08" + b"\xff" * 64)
    with pytest.raises(ModelLoadError) as built:
        mslite.Model().build_from_file(str(corrupt), mslite.ModelType.MINDIR, _context(server))
    assert str(built.value).startswith("build_from_file failed! Error is kLiteError: ")
    assert "load failed for model" not in str(built.value) and "/" not in str(built.value)
    with pytest.raises(RuntimeError, match=r"^ModelParallelRunner's build from file failed! Error is kLiteError: "):
        mslite.ModelParallelRunner().build_from_file(str(corrupt), _context(server))
    for runner_or_model in (mslite.ModelParallelRunner(), mslite.Model()):
        with pytest.raises(RuntimeError, match="kLiteNotSupport.*'net.ms'"):
            if isinstance(runner_or_model, mslite.Model):
                runner_or_model.build_from_file(str(files["net"]), mslite.ModelType.MINDIR_LITE, _context(server))
            else:
                runner_or_model.build_from_file(str(files["net"]), _context(server))

    model = mslite.Model()
    model.build_from_file(str(files["tiny"]), mslite.ModelType.MINDIR, _context(server))
    with pytest.raises(RuntimeError) as shape:  # what MindSpore Lite code catches
        model.predict([np.ones((2, 5), np.float32)])
    assert isinstance(shape.value, InvalidInputError) and isinstance(shape.value, ValueError)
    assert "Expected [-1,4], got [2,5]" in str(shape.value)
    assert "max_batch_size" not in str(shape.value)


def test_scalar_weights_update_and_ge_names(server, files) -> None:
    ctx = _context(server)
    ctx.ascend.provider = "ge"
    model = mslite.Model()
    model.build_from_file(str(files["scaled"]), mslite.ModelType.MINDIR, ctx, str(files["weights"]))
    x = np.ones((1, 4), np.float32)
    assert model.predict([x])[0].get_data_to_numpy().tolist() == [[3.0] * 4]
    scalar = mslite.Tensor(np.array(5.0, np.float32))
    scalar.name = "alpha"
    model.update_weights([[scalar]])
    assert model.predict([x])[0].get_data_to_numpy().tolist() == [[6.0] * 4]
    bias = mslite.Tensor(np.zeros(4, np.float32))
    bias.name = "b"  # not a name MindSpore Lite's GE rename takes
    with pytest.raises(RuntimeError, match=r"^variable is not norm name, now only support \*\*weight$"):
        model.update_weights([[bias]])
    wrong = mslite.Tensor(np.array([5.0], np.float32))
    wrong.name = "alpha"
    with pytest.raises(RuntimeError, match="^update weight failed! Error is ") as refused:
        model.update_weights([[wrong]])
    assert isinstance(refused.value, InvalidInputError)


def test_model_info_from_the_models_metadata_and_graph(server, files) -> None:
    model = mslite.Model()
    model.build_from_file(str(files["scaled"]), mslite.ModelType.MINDIR, _context(server))
    assert model.get_model_info("user_info") == '{"author": "parity test", "labels": "a,b"}'
    assert model.get_model_info("dynamic_dims") == "x:-1,4"
    assert model.get_model_info("input_shape") == "x:1,4"
    handle = model.get_model_info("shareable_weight_mem_handle")  # names the server model: "" before a build
    assert int(handle) > 0 and handle == model.get_model_info("shareable_weight_mem_handle")
    for built in (model, mslite.ModelParallelRunner()):
        if isinstance(built, mslite.ModelParallelRunner):
            built.build_from_file(str(files["scaled"]), _context(server))
        with pytest.raises(RuntimeError, match="no weights given"):
            built.update_weights([[]])
    fixed = mslite.Model()
    fixed.build_from_file("triton://no_batch", mslite.ModelType.MINDIR, _context(server))
    assert fixed.get_model_info("dynamic_dims") == "" and fixed.get_model_info("user_info") == ""


def test_share_weight_group_serves_its_models_from_one_server_model(server, files) -> None:
    def build(threads: int, group: mslite.ModelGroup | None) -> mslite.Model:
        ctx = _context(server)
        ctx.cpu.thread_num = threads
        model = mslite.Model()
        if group is not None:
            group.add_model([model])
        model.build_from_file(str(files["tiny"]), mslite.ModelType.MINDIR, ctx)
        return model

    shared = mslite.ModelGroup(mslite.ModelGroupFlag.SHARE_WEIGHT)
    first, second = build(1, shared), build(2, shared)
    assert first.served_name == second.served_name
    assert second.predict([np.ones((1, 4), np.float32)])[0].get_data_to_numpy().tolist() == [[3.0] * 4]
    assert build(1, None).served_name != build(2, None).served_name  # outside a group: one server model each
    built = build(1, None)
    with pytest.raises(RuntimeError, match=r"^ModelGroup's add model failed\. Error is kLiteParamInvalid: add models"):
        shared.add_model([built])
