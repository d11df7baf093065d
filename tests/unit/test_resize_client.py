"""The client's side of resizing fixed dims, without a server: which dims changed, and a bound model's refusal."""

from __future__ import annotations

import pytest

from mslite_triton._build import resized_remote
from mslite_triton._remote import RemoteModel
from mslite_triton._transport import ModelInfo, TensorInfo

INFO = ModelInfo("fixed_1234", (TensorInfo("x", "FP32", (1, 224, 224, 3)), TensorInfo("ids", "INT64", (-1, 8))), (), 0)


def _remote() -> RemoteModel:
    return RemoteModel(None, INFO, display_name="bound")  # type: ignore[arg-type]  # no call reaches a server


def test_only_fixed_dims_of_the_same_rank_count_as_changed() -> None:
    remote = _remote()
    assert remote.fixed_dims_changed([(1, 112, 112, 3), (5, 8)]) == {"x": (1, 2)}
    assert remote.fixed_dims_changed([(1, 224, 224, 3), (9, 8)]) == {}  # the -1 dim takes any size
    assert remote.fixed_dims_changed([(1, 112, 3), (1, 8)]) == {}  # another rank: no resize makes it fit


def test_a_model_bound_by_name_keeps_its_server_shapes() -> None:
    with pytest.raises(RuntimeError, match=r"^resize failed! Error is kLiteNotSupport: a model bound with triton://"):
        resized_remote(_remote(), {"x": [1, 112, 112, 3]}, "resize failed")
