"""`triton_process.exit_stalled`: when Triton's exit countdown shows it waits on models that never unload."""

from __future__ import annotations

from pathlib import Path

import pytest

from mslite_server.triton_process import exit_stalled


def _countdown(live: list[int], inflight: int = 0) -> str:
    lines = ['I1127 server.cc:336] "All models are stopped, unloading models"']
    for i, n in enumerate(live):
        lines.append(
            f'I1127 server.cc:345] "Timeout {30 - i}: Found {n} live models and {inflight} in-flight '
            'non-inference requests"'
        )
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "stalled"),
    [
        (_countdown([1, 1, 1]), True),
        (_countdown([2, 1, 1, 1]), True),
        (_countdown([1, 1]), False),  # not long enough to tell
        (_countdown([2, 2, 1]), False),  # still unloading
        (_countdown([0, 0, 0]), False),  # nothing live: Triton is about to exit by itself
        (_countdown([1, 1, 1], inflight=1), False),  # a request still runs
        ("I1127 model loaded\n", False),
    ],
)
def test_exit_stalled_reads_the_countdown(tmp_path: Path, text: str, stalled: bool) -> None:
    log = tmp_path / "tritonserver.log"
    log.write_text("x" * 10_000 + "\n" + text)  # only the log's tail is read
    assert exit_stalled(log) is stalled


def test_exit_stalled_without_a_log(tmp_path: Path) -> None:
    assert exit_stalled(tmp_path / "missing.log") is False
