"""Unit tests for the test model zoo and the model repository generators (no server)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


zoo = _load("model_zoo", ROOT / "tests" / "support" / "model_zoo.py")
gm = _load("generate_models", ROOT / "model_repository" / "generate_models.py")

RNG = np.random.default_rng(123)


def _check(model: onnx.ModelProto) -> None:
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == 8
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]


# ---------------------------------------------------------------------------- zoo


def test_multi_io() -> None:
    m = zoo.multi_io()
    _check(m)
    a = RNG.standard_normal((4, 3)).astype(np.float32)
    b = RNG.standard_normal((4, 3)).astype(np.float32)
    s, p = zoo.run_reference(m, {"a": a, "b": b})
    np.testing.assert_array_equal(s, a + b)
    np.testing.assert_array_equal(p, a * b)


def test_mixed_dtypes() -> None:
    m = zoo.mixed_dtypes()
    _check(m)
    ids = RNG.integers(-(2**40), 2**40, size=(2, 5), dtype=np.int64)
    mask = RNG.random((2, 5)) > 0.5
    h = RNG.standard_normal((2, 5)).astype(np.float16)
    ids_out, mask_out, h_out = zoo.run_reference(m, {"ids": ids, "mask": mask, "h": h})
    assert (ids_out.dtype, mask_out.dtype, h_out.dtype) == (np.int64, np.bool_, np.float16)
    np.testing.assert_array_equal(ids_out, ids + 1)
    np.testing.assert_array_equal(mask_out, ~mask)
    np.testing.assert_array_equal(h_out, h * np.float16(2))


def test_odd_names() -> None:
    m = zoo.odd_names()
    _check(m)
    assert [i.name for i in m.graph.input] == ["input:0/x"]
    assert [o.name for o in m.graph.output] == ["out/y:0"]
    x = RNG.standard_normal((3, 2)).astype(np.float32)
    (y,) = zoo.run_reference(m, {"input:0/x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_no_batch() -> None:
    m = zoo.no_batch()
    _check(m)
    dims = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [3, 4]
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    (y,) = zoo.run_reference(m, {"x": x})
    np.testing.assert_array_equal(y, x.T)


@pytest.mark.parametrize("shape", [(1, 1), (2, 7), (5, 33)])
def test_variable_seq(shape: tuple[int, int]) -> None:
    m = zoo.variable_seq()
    _check(m)
    tokens = RNG.standard_normal(shape).astype(np.float32)
    cumsum, total = zoo.run_reference(m, {"tokens": tokens})
    assert cumsum.shape == shape and total.shape == (shape[0], 1)
    np.testing.assert_allclose(cumsum, np.cumsum(tokens, axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(total, tokens.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)


def _big_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    h = x.astype(np.float64)
    for node in model.graph.node:
        if node.op_type == "MatMul":
            h = h @ weights[node.input[1]]
        elif node.op_type == "Gemm":
            h = h @ weights[node.input[1]].T + weights[node.input[2]]
        elif node.op_type == "Relu":
            h = np.maximum(h, 0)
    return h


def test_big_weights_external_data(tmp_path: Path) -> None:
    m = zoo.big_weights(mb=8)
    _check(m)
    ops = [n.op_type for n in m.graph.node]
    assert ops == ["MatMul", "Relu", "Gemm", "Relu"]
    x = RNG.standard_normal((3, 1024)).astype(np.float32)
    (y_inline,) = zoo.run_reference(m, {"x": x})
    assert np.isfinite(y_inline).all()
    np.testing.assert_allclose(y_inline, _big_reference(m, x), rtol=1e-3, atol=1e-3)

    path = tmp_path / "sub" / "model.onnx"
    zoo.save_with_external_data(m, path)
    assert m.graph.initializer[0].HasField("raw_data")  # caller's model untouched
    data = path.with_name("model.onnx.data")
    weight_bytes = 2 * 1024 * 1024 * 4
    assert weight_bytes <= data.stat().st_size <= weight_bytes + 64 * 1024
    assert path.stat().st_size < 16 * 1024
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.onnx", "model.onnx.data"]

    onnx.checker.check_model(str(path))
    light = onnx.load(str(path), load_external_data=False)
    locations = {e.value for t in light.graph.initializer for e in t.external_data if e.key == "location"}
    assert locations == {"model.onnx.data"}

    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (y_ext,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y_ext, y_inline)
    (y_loaded,) = zoo.run_reference(onnx.load(str(path)), {"x": x})
    np.testing.assert_array_equal(y_loaded, y_inline)


def test_big_weights_layer_count() -> None:
    # Count layers from the graph only; mb=4 gives one 4 MiB layer.
    m = zoo.big_weights(mb=4)
    assert [n.op_type for n in m.graph.node] == ["MatMul", "Relu"]
    assert m.graph.output[0].name == "y"


def test_broken_bytes() -> None:
    import onnxruntime as ort
    from google.protobuf.message import DecodeError

    data = zoo.broken_bytes()
    with pytest.raises(DecodeError):
        onnx.load_from_string(data)
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidProtobuf):
        ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def test_zoo_deterministic() -> None:
    for build in (zoo.multi_io, zoo.mixed_dtypes, zoo.odd_names, zoo.no_batch, zoo.variable_seq):
        assert build().SerializeToString() == build().SerializeToString()
    assert zoo.big_weights(mb=4).SerializeToString() == zoo.big_weights(mb=4).SerializeToString()


# ----------------------------------------------------------------- model repository


@pytest.fixture(scope="module")
def mobilenet() -> onnx.ModelProto:
    return gm.build_mobilenetv2()


@pytest.fixture(scope="module")
def mobilenet_session(mobilenet: onnx.ModelProto):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(mobilenet.SerializeToString(), so, providers=["CPUExecutionProvider"])


def test_mobilenetv2_structure(mobilenet: onnx.ModelProto) -> None:
    _check(mobilenet)
    n_params = sum(int(np.prod(t.dims)) for t in mobilenet.graph.initializer)
    assert 3.4e6 <= n_params <= 3.6e6
    (inp,) = mobilenet.graph.input
    (out,) = mobilenet.graph.output
    assert inp.name == "input" and out.name == "shape1"
    in_dims = [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim]
    out_dims = [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim]
    assert in_dims == ["N", 3, 224, 224] and out_dims == ["N", 1000]
    ops = [n.op_type for n in mobilenet.graph.node]
    assert ops.count("Add") == 10  # residual connections of the 17 blocks
    assert ops.count("Conv") == 52
    assert sum(1 for n in mobilenet.graph.node if n.op_type == "Conv" and _group(n) > 1) == 17


def _group(node: onnx.NodeProto) -> int:
    return next((a.i for a in node.attribute if a.name == "group"), 1)


def test_mobilenetv2_outputs(mobilenet_session) -> None:
    x1 = gm.make_input_bin()
    assert x1.shape == (1, 3, 224, 224) and x1.dtype == np.float32
    assert -1.0 <= x1.min() and x1.max() <= 1.0
    (p1,) = mobilenet_session.run(None, {"input": x1})
    assert p1.shape == (1, 1000) and np.isfinite(p1).all()
    assert p1.max() < 0.5
    np.testing.assert_allclose(p1.sum(axis=1), 1.0, atol=1e-5)

    xs = [x1, gm.make_input_bin(seed=2), gm.make_input_bin(seed=3)]
    (p3,) = mobilenet_session.run(None, {"input": np.concatenate(xs)})
    np.testing.assert_allclose(p3.sum(axis=1), 1.0, atol=1e-5)
    singles = np.concatenate([mobilenet_session.run(None, {"input": x})[0] for x in xs])
    assert np.array_equal(p3, singles)


def test_tiny() -> None:
    m = gm.build_tiny()
    _check(m)
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    (y,) = zoo.run_reference(m, {"x": x})
    np.testing.assert_array_equal(y, x * np.float32(2) + np.float32(1))


def test_generation_deterministic(mobilenet: onnx.ModelProto) -> None:
    assert gm.build_mobilenetv2().SerializeToString() == mobilenet.SerializeToString()
    assert gm.build_mobilenetv2(seed=1).SerializeToString() != mobilenet.SerializeToString()
    assert gm.build_tiny().SerializeToString() == gm.build_tiny().SerializeToString()
    assert np.array_equal(gm.make_input_bin(), gm.make_input_bin())


def test_cli_writes_and_skips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gm.main(["--repo", str(tmp_path)]) == 0
    files = [
        tmp_path / "mobilenetv2" / "1" / "model.onnx",
        tmp_path / "tiny" / "1" / "model.onnx",
        tmp_path / "mobilenetv2" / "input.bin",
    ]
    mtimes = [f.stat().st_mtime_ns for f in files]
    assert files[2].stat().st_size == 1 * 3 * 224 * 224 * 4
    x = np.fromfile(files[2], dtype="<f4").reshape(1, 3, 224, 224)
    assert np.array_equal(x, gm.make_input_bin())
    onnx.checker.check_model(str(files[0]))
    capsys.readouterr()

    assert gm.main(["--repo", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count("unchanged") == 3
    assert [f.stat().st_mtime_ns for f in files] == mtimes
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file() and p not in files]
    assert leftovers == []
