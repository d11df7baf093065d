"""Inputs resized to shapes the ONNX file fixes: which dims become symbolic, and the graph rewrite.

MindSpore Lite resizes any model (its docs take MobileNetV2 from 224 to 112). ONNX Runtime refuses a
shape that contradicts a fixed dim of a graph input, so a model built with `RESIZED_INPUTS_PARAMETER`
is loaded with those dims made symbolic. The graph's inner shape annotations (`value_info`) and the
outputs' shapes were computed for the old sizes: they are dropped, and the outputs' shapes inferred
again (a dim that cannot be inferred stays symbolic). Whether the graph really runs at the new shape
(a Reshape to a constant shape does not) is for a run to tell: `loading.probe_resized` probes it.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import ConfigError, ModelLoadError

Shapes = tuple[tuple[str, tuple[int, ...]], ...]  # (input name, full shape asked for), in the order given


def parse_resized(raw: str) -> Shapes:
    """The parameter's value: a JSON object {input name: [int, ...]}.

    Raises:
        ValueError: not such an object, or a size below 1.
    """
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object {input name: [sizes]}")
    shapes = []
    for name, shape in value.items():
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            raise ValueError(f"input '{name}': expected a list of ints, got {shape!r}")
        if any(d < 1 for d in shape):
            raise ValueError(f"input '{name}': sizes must be >= 1, got {shape}")
        shapes.append((str(name), tuple(shape)))
    return tuple(shapes)


def declared_resized(model_name: str, raw: str | None) -> Shapes:
    """`parse_resized` for a raw parameter (None: not set), errors naming the model.

    Raises:
        ConfigError: a bad value.
    """
    if raw is None:
        return ()
    try:
        return parse_resized(raw)
    except ValueError as e:  # json.JSONDecodeError is a ValueError
        raise ConfigError(f"model '{model_name}': parameter 'resized_inputs' has a bad value: {e}") from None


def free_dims(model: Any, shapes: Shapes, model_name: str) -> None:
    """Make each fixed input dim that differs from the asked size symbolic, in place (an `onnx.ModelProto`).

    Raises:
        ModelLoadError: an input that is not in the graph, or a shape of another rank than the input's.
    """
    from onnx import shape_inference

    graph = model.graph
    inputs = {v.name: v for v in graph.input}
    initializers = {t.name for t in graph.initializer}
    for name, shape in shapes:
        if name not in inputs or name in initializers:
            known = [v.name for v in graph.input if v.name not in initializers]
            raise ModelLoadError(f"model '{model_name}': cannot resize input '{name}': the model's inputs are {known}")
        dims = inputs[name].type.tensor_type.shape.dim
        if len(dims) != len(shape):
            raise ModelLoadError(
                f"model '{model_name}': input '{name}' has {len(dims)} dims, the new shape {list(shape)} has "
                f"{len(shape)}: a resize keeps the rank"
            )
        for i, (dim, size) in enumerate(zip(dims, shape)):
            if dim.HasField("dim_value") and dim.dim_value != size:
                dim.dim_param = f"{name}_resized_{i}"  # replaces dim_value (one of)
    ranks = [len(v.type.tensor_type.shape.dim) for v in graph.output]
    del graph.value_info[:]
    for output in graph.output:
        output.type.tensor_type.ClearField("shape")
    inferred = shape_inference.infer_shapes(model)
    for output, found, rank in zip(graph.output, inferred.graph.output, ranks):
        dims = found.type.tensor_type.shape.dim
        shape = output.type.tensor_type.shape
        if found.type.tensor_type.HasField("shape") and len(dims) == rank:
            shape.CopyFrom(found.type.tensor_type.shape)
        else:  # not inferable: the old rank, every dim symbolic
            for i in range(rank):
                shape.dim.add().dim_param = f"{output.name}_resized_{i}"
