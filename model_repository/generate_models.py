"""Deterministic generators for the models served from this model repository.

Everything is built with ``onnx.helper`` from seeded NumPy random numbers: nothing is
downloaded and no training framework is needed. Run as a script to (re)write the
repository files::

    python model_repository/generate_models.py [--repo DIR]

which writes ``<repo>/mobilenetv2/1/model.onnx``, ``<repo>/tiny/1/model.onnx`` and
``<repo>/mobilenetv2/input.bin``. A file whose content is already identical is left
untouched, so repeated runs are cheap.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
IMAGE_SHAPE = (1, 3, 224, 224)

# MobileNetV2 inverted-residual settings: (expansion t, output channels c, repeats n, first stride s).
_MOBILENETV2_SETTINGS: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


class _GraphBuilder:
    """Accumulates nodes and initializers of a CNN graph with seeded weights."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self._count = 0

    def _name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}_{self._count}"

    def add_initializer(self, name: str, array: np.ndarray) -> str:
        """Registers ``array`` as an initializer and returns its name."""
        self.initializers.append(numpy_helper.from_array(array, name=name))
        return name

    def conv(self, x: str, c_in: int, c_out: int, kernel: int, stride: int, groups: int = 1, gain: float = 2.0) -> str:
        """Adds a Conv with bias (BatchNorm folded) and He-normal weights.

        Args:
            x: Input tensor name.
            c_in: Input channels.
            c_out: Output channels.
            kernel: Square kernel size.
            stride: Spatial stride.
            groups: Convolution groups (``c_in`` for a depthwise conv).
            gain: Variance gain, 2 for a conv followed by ReLU6, 1 for a linear one.

        Returns:
            The output tensor name.
        """
        name = self._name("conv")
        fan_in = (c_in // groups) * kernel * kernel
        std = np.sqrt(gain / fan_in)
        w = (self.rng.standard_normal((c_out, c_in // groups, kernel, kernel)) * std).astype(np.float32)
        b = (self.rng.standard_normal(c_out) * 0.01).astype(np.float32)
        pad = kernel // 2
        self.nodes.append(
            helper.make_node(
                "Conv",
                [x, self.add_initializer(f"{name}.weight", w), self.add_initializer(f"{name}.bias", b)],
                [f"{name}.out"],
                name=name,
                kernel_shape=[kernel, kernel],
                strides=[stride, stride],
                pads=[pad, pad, pad, pad],
                group=groups,
            )
        )
        return f"{name}.out"

    def relu6(self, x: str) -> str:
        """Adds ReLU6 as ``Clip(x, 0, 6)`` with min/max given as initializer inputs."""
        name = self._name("relu6")
        self.nodes.append(helper.make_node("Clip", [x, "relu6_min", "relu6_max"], [f"{name}.out"], name=name))
        return f"{name}.out"

    def add(self, a: str, b: str) -> str:
        """Adds an elementwise Add (residual connection)."""
        name = self._name("add")
        self.nodes.append(helper.make_node("Add", [a, b], [f"{name}.out"], name=name))
        return f"{name}.out"


def build_mobilenetv2(seed: int = 0) -> onnx.ModelProto:
    """Builds a MobileNetV2 (1.0, 224) classifier with random, deterministic weights.

    The architecture follows the paper: a 3x3 stride-2 stem conv to 32 channels, 17
    inverted-residual blocks, a 1x1 conv to 1280 channels, global average pooling and a
    fully connected layer to 1000 classes followed by Softmax. BatchNorm is folded into
    the conv biases and ReLU6 is ``Clip(0, 6)``. Weights are He-normal so that the
    activations keep a stable scale and the output distribution is far from one-hot.

    Args:
        seed: Seed for ``numpy.random.default_rng``.

    Returns:
        The model (opset 17, IR version 8): input ``input`` ``[N, 3, 224, 224]`` float32,
        output ``shape1`` ``[N, 1000]`` float32 probabilities.
    """
    g = _GraphBuilder(seed)
    g.add_initializer("relu6_min", np.array(0.0, dtype=np.float32))
    g.add_initializer("relu6_max", np.array(6.0, dtype=np.float32))

    x = g.relu6(g.conv("input", 3, 32, 3, 2))
    c_in = 32
    for t, c, n, s in _MOBILENETV2_SETTINGS:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = c_in * t
            h = x
            if t != 1:
                h = g.relu6(g.conv(h, c_in, hidden, 1, 1))
            h = g.relu6(g.conv(h, hidden, hidden, 3, stride, groups=hidden))
            # The projection is linear; halve its variance in residual blocks so the
            # residual stream grows slowly instead of doubling at every Add.
            residual = stride == 1 and c_in == c
            h = g.conv(h, hidden, c, 1, 1, gain=0.5 if residual else 1.0)
            x = g.add(x, h) if residual else h
            c_in = c
    x = g.relu6(g.conv(x, c_in, 1280, 1, 1))

    g.nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"], name="pool"))
    g.nodes.append(helper.make_node("Flatten", ["pool"], ["flatten"], name="flatten", axis=1))
    fc_w = (g.rng.standard_normal((1000, 1280)) * np.sqrt(1.0 / 1280)).astype(np.float32)
    fc_b = (g.rng.standard_normal(1000) * 0.01).astype(np.float32)
    g.add_initializer("fc.weight", fc_w)
    g.add_initializer("fc.bias", fc_b)
    g.nodes.append(helper.make_node("Gemm", ["flatten", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1))
    g.nodes.append(helper.make_node("Softmax", ["logits"], ["shape1"], name="softmax", axis=-1))

    graph = helper.make_graph(
        g.nodes,
        "mobilenetv2",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])],
        [helper.make_tensor_value_info("shape1", TensorProto.FLOAT, ["N", 1000])],
        initializer=g.initializers,
    )
    return _make_model(graph, "mslite-triton generate_models")


def build_tiny() -> onnx.ModelProto:
    """Builds a minimal model ``y = x * 2 + 1``.

    Returns:
        The model (opset 17, IR version 8): input ``x`` ``[N, 4]`` float32, output ``y``
        ``[N, 4]`` float32.
    """
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "two"], ["x2"], name="mul"),
            helper.make_node("Add", ["x2", "one"], ["y"], name="add"),
        ],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        initializer=[
            numpy_helper.from_array(np.array(2.0, dtype=np.float32), name="two"),
            numpy_helper.from_array(np.array(1.0, dtype=np.float32), name="one"),
        ],
    )
    return _make_model(graph, "mslite-triton generate_models")


def make_input_bin(seed: int = 1) -> np.ndarray:
    """Makes the deterministic sample input for MobileNetV2.

    Args:
        seed: Seed for ``numpy.random.default_rng``.

    Returns:
        A float32 array of shape ``(1, 3, 224, 224)`` uniform in ``[-1, 1)``, like a
        normalized image. ``arr.tobytes()`` is the content of ``input.bin``.
    """
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.0, 1.0, size=IMAGE_SHAPE).astype(np.float32)


def _make_model(graph: onnx.GraphProto, producer: str) -> onnx.ModelProto:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name=producer,
    )
    return model


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, skip_identical: bool = False) -> bool:
    """Writes ``data`` to ``path`` through a temporary file and ``os.replace``.

    Args:
        path: Destination file; missing parent directories are created.
        data: Content to write.
        skip_identical: If true and ``path`` already holds exactly ``data``, do nothing.

    Returns:
        True if the file was written, False if it was skipped.
    """
    path = Path(path)
    if skip_identical and path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp creates 0600; the server may run as another user
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True


def save_model(model: onnx.ModelProto, path: str | os.PathLike[str], skip_identical: bool = False) -> bool:
    """Checks ``model`` and saves it atomically with its weights inline.

    Args:
        model: Model to save (must be under the 2 GB protobuf limit).
        path: Destination ``.onnx`` file; missing parent directories are created.
        skip_identical: If true, leave an existing identical file untouched.

    Returns:
        True if the file was written, False if it was skipped.

    Raises:
        onnx.checker.ValidationError: If the model is invalid.
    """
    onnx.checker.check_model(model)
    return write_bytes_atomic(path, model.SerializeToString(), skip_identical=skip_identical)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: writes the repository's models and sample input."""
    parser = argparse.ArgumentParser(description="Write the model repository's ONNX models and sample input.")
    parser.add_argument(
        "--repo",
        type=Path,
        default=Path(__file__).resolve().parent,
        help="model repository directory (default: the directory of this script)",
    )
    args = parser.parse_args(argv)
    repo: Path = args.repo

    mobilenet_path = repo / "mobilenetv2" / "1" / "model.onnx"
    tiny_path = repo / "tiny" / "1" / "model.onnx"
    input_path = repo / "mobilenetv2" / "input.bin"
    results = [
        (mobilenet_path, save_model(build_mobilenetv2(), mobilenet_path, skip_identical=True)),
        (tiny_path, save_model(build_tiny(), tiny_path, skip_identical=True)),
        (input_path, write_bytes_atomic(input_path, make_input_bin().astype("<f4").tobytes(), True)),
    ]
    for path, written in results:
        print(f"{'wrote' if written else 'unchanged'} {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
