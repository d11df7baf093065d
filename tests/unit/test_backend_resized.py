"""resized.py with graph.py and runtime.py: inputs resized to shapes the ONNX file fixes (no server)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from mslite_backend.config import BackendConfig, InstanceInfo, declared_resized_inputs
from mslite_backend.errors import ConfigError, ModelLoadError
from mslite_backend.graph import plan_auto_complete, read_graph_io
from mslite_backend.loading import load_runtime
from mslite_backend.resized import parse_resized
from mslite_backend.runtime import ModelRuntime
from tests.support import model_zoo as zoo

CPU = InstanceInfo(name="t_0", kind="CPU", device_id=0)


def _load(tmp_path: Path, model: onnx.ModelProto, resized: dict[str, list[int]]) -> ModelRuntime:
    """Save `model` and load it as auto-complete and a worker would, with `resized_inputs` set."""
    version_dir = tmp_path / "1"
    version_dir.mkdir(exist_ok=True)
    onnx.save(model, str(version_dir / "model.onnx"))
    config = {"name": "m", "parameters": {"resized_inputs": {"string_value": json.dumps(resized)}}}
    io = read_graph_io(str(version_dir / "model.onnx"), declared_resized_inputs(config), "m")
    plan = plan_auto_complete(config, io)
    config.update(max_batch_size=plan.max_batch_size or 0, input=list(plan.inputs), output=list(plan.outputs))
    return load_runtime(str(version_dir), BackendConfig.from_model_config(config, cores=2), CPU)


def test_a_fixed_dim_model_runs_at_the_new_shape_and_the_old(tmp_path: Path) -> None:
    runtime = _load(tmp_path, zoo.fixed_image(), {"x": [1, 4, 6, 3]})
    for shape in ([1, 4, 6, 3], [1, 8, 8, 3], [1, 5, 5, 3]):
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        out = runtime.execute([{"x": x}])[0]
        assert isinstance(out, dict), out
        np.testing.assert_allclose(out["y"], x.mean(axis=(1, 2)), rtol=1e-5)


def test_only_the_resized_dims_become_symbolic(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    onnx.save(zoo.fixed_image(), str(path))
    io = read_graph_io(str(path), parse_resized('{"x": [1, 4, 8, 3]}'), "m")
    assert io.inputs[0].dims == (1, -1, 8, 3)
    assert io.outputs[0].dims == (1, 3)  # inferred again, not left stale or unknown


def test_a_graph_that_cannot_run_the_new_shape_fails_the_load_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError) as e:
        _load(tmp_path, zoo.fixed_image(reshape=True), {"x": [1, 4, 4, 3]})
    text = str(e.value)
    assert "the graph cannot run input 'x' at shape [1, 4, 4, 3]" in text
    assert "Reshape" in text and str(tmp_path) not in text


@pytest.mark.parametrize(
    ("resized", "expected"),
    [
        ({"x": [1, 4, 3]}, "input 'x' has 4 dims, the new shape [1, 4, 3] has 3"),
        ({"nope": [1]}, "cannot resize input 'nope'"),
    ],
)
def test_a_resize_the_graph_cannot_take_is_named(tmp_path: Path, resized: dict, expected: str) -> None:
    with pytest.raises(ModelLoadError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        _load(tmp_path, zoo.fixed_image(), resized)


@pytest.mark.parametrize("raw", ["[1, 2]", '{"x": [0, 2]}', '{"x": "1,2"}', "{"])
def test_bad_parameter_values_are_refused(raw: str) -> None:
    config = {"name": "m", "parameters": {"resized_inputs": {"string_value": raw}}}
    with pytest.raises(ConfigError, match="parameter 'resized_inputs' has a bad value"):
        declared_resized_inputs(config)
