"""What `benchmarks.venv_sizes` counts for an extra: its own dependencies as installed, not the others'."""

from __future__ import annotations

from benchmarks.venv_sizes import EXTRAS, PROJECT, closure, mib


def test_the_server_extra_brings_the_server_and_not_the_test_tools() -> None:
    server = closure(PROJECT, ("server",))
    assert {"nvidia-pytriton", "onnxruntime", "onnx", "hpack", "tritonclient", "numpy"} <= server
    assert not {"pytest", "mindspore", "triton-model-analyzer"} & server


def test_an_extra_alone_is_what_no_other_extra_needs() -> None:
    every = closure(PROJECT, EXTRAS)
    alone = every - closure(PROJECT, ("server", "mindir", "tune"))
    assert {"pytest", "ruff", "mypy"} <= alone and "numpy" not in alone
    assert 10 < mib(alone) < mib(every)
