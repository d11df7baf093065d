"""The client's minimal ONNX reader and the batching defaults it drives."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import mslite_triton as mslite
from mslite_triton._model_config import WorkerPlan, build_model_config
from mslite_triton._onnx_io import has_dynamic_batch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "model_repository"))
import generate_models  # noqa: E402

from tests.support import model_zoo  # noqa: E402


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


def _context(target: str) -> mslite.Context:
    ctx = mslite.Context()
    ctx.target = [target]
    return ctx


def test_cpu_workers_take_two_requests_at_a_time_gpu_batches_freely():
    cpu = build_model_config("m", _context("cpu"), WorkerPlan(2, 1, 1), batchable=True)
    assert cpu["max_batch_size"] == 64 and cpu["dynamic_batching"]["preferred_batch_size"] == [2]
    one = build_model_config("m", _context("cpu"), WorkerPlan(1, 1, 1), batchable=True)
    assert one["dynamic_batching"]["preferred_batch_size"] == [2]
    assert "default_queue_policy" not in one["dynamic_batching"]  # no queue policy by default
    assert "default_queue_policy" not in cpu["dynamic_batching"]
    gpu = build_model_config("m", _context("gpu"), WorkerPlan(2, 1, 1), batchable=True)
    assert gpu["max_batch_size"] == 64 and "preferred_batch_size" not in gpu["dynamic_batching"]
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
