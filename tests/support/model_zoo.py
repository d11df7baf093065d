"""Small ONNX models for tests of a general-purpose serving backend.

Every builder returns an ``onnx.ModelProto`` (opset 17, IR version 8) built with
``onnx.helper`` only; each docstring says which backend behaviour it exercises.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
BIG_DIM = 1024
#: Size of one ``BIG_DIM x BIG_DIM`` fp32 layer of :func:`big_weights`, in MiB.
BIG_LAYER_MB = BIG_DIM * BIG_DIM * 4 / 2**20


def _model(
    name: str,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: list[TensorProto] | None = None,
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers or [])
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name="mslite-triton model_zoo",
    )


def _vi(name: str, elem_type: int, shape: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, shape)


def multi_io() -> onnx.ModelProto:
    """Two inputs and two outputs: ``sum = a + b`` and ``prod = a * b``.

    Exercises mapping several named inputs/outputs and output ordering.
    Inputs ``a``, ``b``: ``[N, 3]`` float32; outputs ``sum``, ``prod``: ``[N, 3]`` float32.
    """
    return _model(
        "multi_io",
        [
            helper.make_node("Add", ["a", "b"], ["sum"]),
            helper.make_node("Mul", ["a", "b"], ["prod"]),
        ],
        [_vi("a", TensorProto.FLOAT, ["N", 3]), _vi("b", TensorProto.FLOAT, ["N", 3])],
        [_vi("sum", TensorProto.FLOAT, ["N", 3]), _vi("prod", TensorProto.FLOAT, ["N", 3])],
    )


def difference() -> onnx.ModelProto:
    """``d = a - b`` on two ``[N, T]`` float32 inputs: swapped or shifted inputs change the answer.

    Exercises two large inputs per request (the gateway's staging and request-size checks).
    """
    return _model(
        "pair",
        [helper.make_node("Sub", ["a", "b"], ["d"])],
        [_vi(n, TensorProto.FLOAT, ["N", "T"]) for n in ("a", "b")],
        [_vi("d", TensorProto.FLOAT, ["N", "T"])],
    )


def mixed_dtypes() -> onnx.ModelProto:
    """Non-float32 tensors: int64, bool and float16 in and out.

    Exercises dtype mapping (ONNX <-> Triton <-> NumPy), including BOOL and FP16.
    Inputs ``ids`` ``[N, 5]`` int64, ``mask`` ``[N, 5]`` bool, ``h`` ``[N, 5]`` float16;
    outputs ``ids_out = ids + 1`` (int64), ``mask_out = not mask`` (bool),
    ``h_out = h * 2`` (float16).
    """
    return _model(
        "mixed_dtypes",
        [
            helper.make_node("Add", ["ids", "one_i64"], ["ids_out"]),
            helper.make_node("Not", ["mask"], ["mask_out"]),
            helper.make_node("Mul", ["h", "two_f16"], ["h_out"]),
        ],
        [
            _vi("ids", TensorProto.INT64, ["N", 5]),
            _vi("mask", TensorProto.BOOL, ["N", 5]),
            _vi("h", TensorProto.FLOAT16, ["N", 5]),
        ],
        [
            _vi("ids_out", TensorProto.INT64, ["N", 5]),
            _vi("mask_out", TensorProto.BOOL, ["N", 5]),
            _vi("h_out", TensorProto.FLOAT16, ["N", 5]),
        ],
        [
            numpy_helper.from_array(np.array(1, dtype=np.int64), name="one_i64"),
            numpy_helper.from_array(np.array(2, dtype=np.float16), name="two_f16"),
        ],
    )


def odd_names() -> onnx.ModelProto:
    """Tensor names with ``:`` and ``/`` (as TensorFlow exports produce).

    Exercises name handling in configs, URLs and file paths.
    Input ``input:0/x`` ``[N, 2]`` float32; output ``out/y:0 = Relu(input)``.
    """
    return _model(
        "odd_names",
        [helper.make_node("Relu", ["input:0/x"], ["out/y:0"])],
        [_vi("input:0/x", TensorProto.FLOAT, ["N", 2])],
        [_vi("out/y:0", TensorProto.FLOAT, ["N", 2])],
    )


def no_batch() -> onnx.ModelProto:
    """A fully static model without a batch dimension.

    Exercises ``max_batch_size: 0`` handling (no dynamic batching possible).
    Input ``x`` ``[3, 4]`` float32; output ``y = x.T`` ``[4, 3]`` float32.
    """
    return _model(
        "no_batch",
        [helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])],
        [_vi("x", TensorProto.FLOAT, [3, 4])],
        [_vi("y", TensorProto.FLOAT, [4, 3])],
    )


def fixed_image(*, reshape: bool = False) -> onnx.ModelProto:
    """An image model whose input dims are all fixed, as many exported models are: ``[1, 8, 8, 3]`` (NHWC).

    Exercises `Model.resize` to sizes the file does not declare. Output ``y`` ``[1, 3]``: the mean over
    height and width, which any image size can run; with ``reshape``, a Reshape to the constant shape
    ``[1, 192]`` first, which only 8 x 8 images can run.
    """
    nodes = [helper.make_node("ReduceMean", ["x"], ["y"], axes=[1, 2], keepdims=0)]
    initializers = []
    if reshape:
        nodes = [
            helper.make_node("Reshape", ["x", "flat_shape"], ["flat"]),
            helper.make_node("Reshape", ["flat", "image_shape"], ["image"]),
            helper.make_node("ReduceMean", ["image"], ["y"], axes=[1, 2], keepdims=0),
        ]
        initializers = [
            numpy_helper.from_array(np.array([1, 192], dtype=np.int64), name="flat_shape"),
            numpy_helper.from_array(np.array([1, 8, 8, 3], dtype=np.int64), name="image_shape"),
        ]
    return _model(
        "fixed_image_reshape" if reshape else "fixed_image",
        nodes,
        [_vi("x", TensorProto.FLOAT, [1, 8, 8, 3])],
        [_vi("y", TensorProto.FLOAT, [1, 3])],
        initializers,
    )


def image_conv(*, nhwc: bool) -> onnx.ModelProto:
    """A 3x3 convolution of an 8 x 8 image given NHWC (a Transpose first, as exporters write it) or NCHW.

    Exercises the format `get_inputs()` reports. Input ``image``; output ``y`` ``[1, 4, 6, 6]``.
    """
    shape = [1, 8, 8, 3] if nhwc else [1, 3, 8, 8]
    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), name="w")
    nodes = [helper.make_node("Conv", ["nchw" if nhwc else "image", "w"], ["y"])]
    if nhwc:
        nodes.insert(0, helper.make_node("Transpose", ["image"], ["nchw"], perm=[0, 3, 1, 2]))
    graph = helper.make_graph(
        nodes,
        "image",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
        initializer=[weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def fixed_classifier(*, free_batch: bool = False) -> onnx.ModelProto:
    """An image classifier exported with every dim fixed, ``input`` ``[1, 224, 224, 3]`` (NHWC), no constant Reshape.

    Transpose, Conv (3 -> 8, 3x3, stride 2), Relu, GlobalAveragePool, Flatten, Gemm (8 -> 10): output ``logits``
    ``[1, 10]``. Exercises a resize to another batch in every client, as MindSpore Lite's flows do. With
    ``free_batch`` the same graph and weights with a symbolic batch: ONNX Runtime's reference at any batch.
    """
    rng = np.random.default_rng(224)
    batch: int | str = "N" if free_batch else 1
    nodes = [
        helper.make_node("Transpose", ["input"], ["nchw"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["nchw", "conv_w", "conv_b"], ["conv"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("GlobalAveragePool", ["relu"], ["pool"]),
        helper.make_node("Flatten", ["pool"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
    ]
    initializers = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), name="conv_w"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), name="conv_b"),
        numpy_helper.from_array(rng.standard_normal((10, 8)).astype(np.float32), name="fc_w"),
        numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), name="fc_b"),
    ]
    return _model(
        "fixed_classifier",
        nodes,
        [_vi("input", TensorProto.FLOAT, [batch, 224, 224, 3])],
        [_vi("logits", TensorProto.FLOAT, [batch, 10])],
        initializers,
    )


def variable_seq() -> onnx.ModelProto:
    """Two dynamic dimensions (batch and sequence length).

    Exercises ``-1`` dims beyond the batch dimension and requests of different shapes.
    Input ``tokens`` ``[N, T]`` float32; outputs ``cumsum`` ``[N, T]`` (cumulative sum
    along axis 1) and ``total`` ``[N, 1]`` (sum along axis 1, keepdims).
    """
    return _model(
        "variable_seq",
        [
            helper.make_node("CumSum", ["tokens", "axis"], ["cumsum"]),
            helper.make_node("ReduceSum", ["tokens", "axes"], ["total"], keepdims=1),
        ],
        [_vi("tokens", TensorProto.FLOAT, ["N", "T"])],
        [_vi("cumsum", TensorProto.FLOAT, ["N", "T"]), _vi("total", TensorProto.FLOAT, ["N", 1])],
        [
            numpy_helper.from_array(np.array(1, dtype=np.int64), name="axis"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), name="axes"),
        ],
    )


def string_identity() -> onnx.ModelProto:
    """Strings in, the same strings out (Triton's ``simple_identity``).

    Input ``INPUT0`` ``[N, T]`` string; output ``OUTPUT0`` ``[N, T]`` string. Exercises BYTES tensors
    both ways: every byte of every element must come back.
    """
    return _model(
        "string_identity",
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        [_vi("INPUT0", TensorProto.STRING, ["N", "T"])],
        [_vi("OUTPUT0", TensorProto.STRING, ["N", "T"])],
    )


def string_to_int() -> onnx.ModelProto:
    """Decimal strings in, their values out (Triton's ``simple_string`` parses its strings likewise).

    Input ``INPUT0`` ``[N, 4]`` string; output ``OUTPUT0`` ``[N, 4]`` int32 (a Cast from string).
    """
    return _model(
        "string_to_int",
        [helper.make_node("Cast", ["INPUT0"], ["OUTPUT0"], to=TensorProto.INT32)],
        [_vi("INPUT0", TensorProto.STRING, ["N", 4])],
        [_vi("OUTPUT0", TensorProto.INT32, ["N", 4])],
    )


#: The outputs of :func:`six_outputs`, in graph order (not name order); ``x + i`` for the i-th.
SIX_OUTPUTS = ("OUTPUT3", "out_b", "OUTPUT0", "Zeta", "alpha", "OUTPUT10")


def six_outputs() -> onnx.ModelProto:
    """One input, six outputs named out of order (graph order is neither sorted nor reversed).

    Input ``INPUT0`` ``[N, 4]`` float32; output ``SIX_OUTPUTS[i]`` is ``INPUT0 + i``. Exercises the
    order of the outputs in a response.
    """
    return _model(
        "six_outputs",
        [helper.make_node("Add", ["INPUT0", f"c{i}"], [name]) for i, name in enumerate(SIX_OUTPUTS)],
        [_vi("INPUT0", TensorProto.FLOAT, ["N", 4])],
        [_vi(name, TensorProto.FLOAT, ["N", 4]) for name in SIX_OUTPUTS],
        [numpy_helper.from_array(np.array([i], dtype=np.float32), name=f"c{i}") for i in range(len(SIX_OUTPUTS))],
    )


def small_classifier(seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2's inputs and outputs (names, dtypes, shapes) in 12 KB: uploads under the HTTP limit.

    Input ``input`` ``[N, 3, 224, 224]`` float32; output ``shape1`` ``[N, 1000]``: the per-channel means
    times a ``[3, 1000]`` matrix, plus a bias. ``seed`` picks the weights (a different file, a different model).
    """
    rng = np.random.default_rng(seed)
    return _model(
        "small_classifier",
        [
            helper.make_node("GlobalAveragePool", ["input"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["features"]),
            helper.make_node("Gemm", ["features", "w", "b"], ["shape1"]),
        ],
        [_vi("input", TensorProto.FLOAT, ["N", 3, 224, 224])],
        [_vi("shape1", TensorProto.FLOAT, ["N", 1000])],
        [
            numpy_helper.from_array(rng.standard_normal((3, 1000), dtype=np.float32), name="w"),
            numpy_helper.from_array(rng.standard_normal(1000, dtype=np.float32), name="b"),
        ],
    )


def control_flow() -> onnx.ModelProto:
    """y = x, through an If whose branch is chosen by a constant: control flow a CUDA graph cannot record."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["out"])],
        "branch",
        [],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 3])],
    )
    nodes = [
        helper.make_node("Constant", [], ["cond"], value=helper.make_tensor("c", TensorProto.BOOL, [], [True])),
        helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch),
    ]
    graph = helper.make_graph(nodes, "control_flow", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def noisy() -> onnx.ModelProto:
    """y = x + uniform noise drawn on every run: no two runs agree, so no bound run can equal a plain one."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    nodes = [helper.make_node("RandomUniformLike", ["x"], ["noise"]), helper.make_node("Add", ["x", "noise"], ["y"])]
    graph = helper.make_graph(nodes, "noisy", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def slow(rounds: int = 8, size: int = 1024) -> onnx.ModelProto:
    """A model that keeps one core busy: ``rounds`` chained ``size x size`` MatMul + Tanh
    (~5 ms each on a quiet 2-core machine with one thread free, many times that under load).

    Input ``x`` ``[N, 1]`` float32, batch 1 only (it is broadcast to a square); output ``y`` ``[N, 1]``, the mean.
    For tests that need a request to be really running on the server: timeouts, a full queue.
    """
    nodes = [helper.make_node("Expand", ["x", "square"], ["m0"])]
    for i in range(rounds):
        nodes.append(helper.make_node("MatMul", [f"m{i}", f"m{i}"], [f"p{i}"]))
        nodes.append(helper.make_node("Tanh", [f"p{i}"], [f"m{i + 1}"]))
    nodes.append(helper.make_node("ReduceMean", [f"m{rounds}"], ["y"], axes=[0, 1], keepdims=1))
    return _model(
        "slow",
        nodes,
        [_vi("x", TensorProto.FLOAT, ["N", 1])],
        [_vi("y", TensorProto.FLOAT, ["N", 1])],
        [numpy_helper.from_array(np.array([size, size], dtype=np.int64), name="square")],
    )


def spin() -> onnx.ModelProto:
    """A model that runs as long as it is asked: a ``Loop`` of ``n`` additions of 1.

    Input ``n`` ``[1]`` int64 (the trip count); output ``count`` ``[1]`` float32 (``n``, for small ``n``).
    ``n`` = 2**40 keeps a worker inside ``execute`` for good, at 100 % of a core: for tests of workers
    that never finish (unloads, deadlines).
    """
    one = numpy_helper.from_array(np.array([1.0], dtype=np.float32), name="one")
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["acc_in", "one"], ["acc_out"]),
        ],
        "spin_body",
        [
            _vi("i", TensorProto.INT64, []),
            _vi("cond_in", TensorProto.BOOL, []),
            _vi("acc_in", TensorProto.FLOAT, [1]),
        ],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("acc_out", TensorProto.FLOAT, [1])],
        [one],
    )
    nodes = [
        helper.make_node("Squeeze", ["n"], ["trips"]),
        helper.make_node("Loop", ["trips", "go", "zero"], ["count"], body=body),
    ]
    return _model(
        "spin",
        nodes,
        [_vi("n", TensorProto.INT64, [1])],
        [_vi("count", TensorProto.FLOAT, [1])],
        [
            numpy_helper.from_array(np.array(True), name="go"),
            numpy_helper.from_array(np.array([0.0], dtype=np.float32), name="zero"),
        ],
    )


def spin_strings() -> onnx.ModelProto:
    """`spin` with a string ``s`` ``[1]`` passed through to ``s_out``: a CPU worker runs it through ONNX Runtime's
    C API (`ort_c_strings`), for tests of the execute deadline stopping a run there.
    """
    model = spin()
    model.graph.input.append(_vi("s", TensorProto.STRING, [1]))
    model.graph.output.append(_vi("s_out", TensorProto.STRING, [1]))
    model.graph.node.append(helper.make_node("Identity", ["s"], ["s_out"]))
    return model


def big_weights(mb: int = 200, seed: int = 0) -> onnx.ModelProto:
    """An MLP of square fp32 layers whose weights total about ``mb`` MiB.

    Exercises loading large models and models stored with external data
    (see :func:`save_with_external_data`). Layers are ``1024 x 1024`` (4 MiB each) and
    alternate ``MatMul`` and ``Gemm(transB=1)`` (with a zero bias), each followed by
    ``Relu``; the layer count is ``max(1, round(mb / 4))``. Weights are He-normal so the
    activations keep their scale through the depth.

    Args:
        mb: Approximate total weight size in MiB.
        seed: Seed for ``numpy.random.default_rng``.

    Returns:
        The model: input ``x`` ``[N, 1024]`` float32, output ``y`` ``[N, 1024]`` float32.
    """
    rng = np.random.default_rng(seed)
    n_layers = max(1, round(mb / BIG_LAYER_MB))
    std = np.float32(np.sqrt(2.0 / BIG_DIM))
    nodes: list[onnx.NodeProto] = []
    inits: list[TensorProto] = []
    x = "x"
    for i in range(n_layers):
        w = rng.standard_normal((BIG_DIM, BIG_DIM), dtype=np.float32)
        w *= std
        inits.append(numpy_helper.from_array(w, name=f"w{i}"))
        pre = f"h{i}"
        if i % 2 == 0:
            nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [pre], name=f"matmul{i}"))
        else:
            inits.append(numpy_helper.from_array(np.zeros(BIG_DIM, dtype=np.float32), name=f"b{i}"))
            nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [pre], name=f"gemm{i}", transB=1))
        x = "y" if i == n_layers - 1 else f"a{i}"
        nodes.append(helper.make_node("Relu", [pre], [x], name=f"relu{i}"))
    return _model(
        "big_weights",
        nodes,
        [_vi("x", TensorProto.FLOAT, ["N", BIG_DIM])],
        [_vi("y", TensorProto.FLOAT, ["N", BIG_DIM])],
        inits,
    )


def save_with_external_data(model: onnx.ModelProto, path: str | os.PathLike[str]) -> None:
    """Saves ``model`` as ``path`` plus ``path + ".data"`` holding its weights.

    Tensors of at least 1024 bytes go to the one data file, referenced by its basename.
    Both files are first written to a temporary directory next to ``path`` and then
    moved in with ``os.replace``, data file first, so a reader never sees a new
    ``.onnx`` with an old or partial data file. ``model`` itself is not modified.

    Args:
        model: Model to save.
        path: Destination ``.onnx`` file; missing parent directories are created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    location = path.name + ".data"
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # onnx.save_model moves the tensors' bytes out of the proto it is given
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        onnx.save_model(
            copy,
            str(tmp_dir / path.name),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=location,
            size_threshold=1024,
        )
        if (tmp_dir / location).exists():
            os.replace(tmp_dir / location, path.parent / location)
        os.replace(tmp_dir / path.name, path)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def broken_bytes() -> bytes:
    """Bytes that are not a valid ONNX model, for "corrupt model file" tests.

    The first byte is a protobuf tag with the invalid wire type 6, so parsing fails
    immediately rather than yielding an empty-but-parsable model.
    """
    return b"NOT AN ONNX MODEL \x00\xff\xfe garbage\n"


def run_reference(model: onnx.ModelProto, feeds: dict[str, Any], intra_op_threads: int = 1) -> list[np.ndarray]:
    """Runs ``model`` in-process with ONNX Runtime's CPU provider.

    Args:
        model: Model with inline weights.
        feeds: Input name to array.
        intra_op_threads: ``intra_op_num_threads``; inter-op threads are 1 and
            execution is sequential.

    Returns:
        The outputs, in the graph's output order.
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = intra_op_threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)
