"""Which model a worker serves, from what its command line names (no server)."""

from __future__ import annotations

import pytest

from mslite_server.workers import model_of


@pytest.mark.parametrize(
    ("model_dir", "instance", "model"),
    [
        ("/srv/repo/tiny", "tiny_0_1", "tiny"),
        ("/srv/repo/tiny_naive", "tiny_naive_0_0", "tiny_naive"),  # not `tiny`, whose name it starts with
        ("/srv/repo/tiny_0", "fast_1", "tiny_0"),  # a named group: the directory still says it
        ("/tmp/folderAb12Cd", "mobilenetv2_1x1_1_0", "mobilenetv2_1x1"),  # an upload: Triton's instance name
        ("/tmp/folderAb12Cd", "fast_1", ""),  # an upload with a named group: not known
        ("", "", ""),  # a zombie
    ],
)
def test_model_of(model_dir: str, instance: str, model: str) -> None:
    assert model_of(model_dir, instance) == model
